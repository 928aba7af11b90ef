"""scipy.special rules against finite differences (float64 and float32), arrays with broadcasting."""
from __future__ import annotations

import numpy as np
import pytest

sc = pytest.importorskip("scipy.special")

from ..cases import Arr, Num, case, params  # noqa: E402

POS = dict(lo=0.5, hi=3.0)
UNIT = dict(lo=0.1, hi=0.9)

ELEMENTWISE = [
    case(sc.expit, Arr(signed=True)), case(sc.logit, Arr(**UNIT)),
    case(sc.erf, Arr(lo=-1.5, hi=1.5)), case(sc.erfc, Arr(lo=-1.5, hi=1.5)),
    case(sc.erfinv, Arr(lo=-0.8, hi=0.8)),
    case(sc.ndtr, Arr(lo=-2.0, hi=2.0)), case(sc.log_ndtr, Arr(lo=-6.0, hi=3.0)),
    case(sc.ndtri, Arr(**UNIT)),
    case(sc.gamma, Arr(lo=0.5, hi=2.5)), case(sc.gammaln, Arr(**POS)),
    case(sc.digamma, Arr(**POS)), case(sc.psi, Arr(**POS), name="psi"),
    case(sc.polygamma, 1, Arr(**POS), name="polygamma-1"),
    case(sc.polygamma, np.array([0, 1, 2]), Arr((2, 3), **POS), name="polygamma-orders"),
    case(sc.beta, Arr(**POS), Arr((3,), **POS)), case(sc.betaln, Arr(**POS), Arr(**POS)),
    case(sc.multigammaln, Arr(lo=2.0, hi=4.0), 3), case(sc.multigammaln, Num(2.0, 4.0), 2, name="multigammaln-float"),
    case(sc.xlogy, Arr(signed=True), Arr(**POS)), case(sc.xlog1py, Arr(signed=True), Arr(**POS)),
    case(sc.xlogy, np.array([0.0, 1.5]), Arr((2,), **POS), name="xlogy-zero-x"),
    case(sc.entr, Arr(**POS)), case(sc.rel_entr, Arr(**POS), Arr(**POS)), case(sc.kl_div, Arr(**POS), Arr((3,), **POS)),
    case(sc.i0, Arr(signed=True)), case(sc.i1, Arr(signed=True)),
    case(sc.i0e, Arr(lo=0.2, hi=2.0, signed=True)), case(sc.i1e, Arr(lo=0.2, hi=2.0, signed=True)),
    case(sc.i1, np.array([0.0, 0.5]), name="i1-at-zero"),
]
REDUCTIONS = [
    case(sc.logsumexp, Arr((3, 4))), case(sc.logsumexp, Arr((3, 4)), 1, name="logsumexp-axis"),
    case(sc.logsumexp, Arr((3, 4)), -1, name="logsumexp-axis-neg"),
    case(sc.logsumexp, Arr((2, 3, 4)), (0, 2), None, True, name="logsumexp-axes-keepdims"),
    case(sc.logsumexp, Arr((3, 4)), axis=0, keepdims=True, name="logsumexp-kw"),
    case(sc.logsumexp, Arr((3, 4)), 1, Arr((3, 4), lo=0.5, hi=2.0), name="logsumexp-b"),
    case(sc.logsumexp, Arr((3, 4)), None, Arr((4,), lo=0.5, hi=2.0), name="logsumexp-b-broadcast"),
    case(sc.softmax, Arr((3, 4))), case(sc.softmax, Arr((3, 4)), 1, name="softmax-axis"),
    case(sc.softmax, Arr((2, 3, 4)), axis=(0, 2), name="softmax-axes"),
    case(sc.log_softmax, Arr((3, 4))), case(sc.log_softmax, Arr((3, 4)), axis=0, name="log_softmax-axis"),
]
TABLES = [ELEMENTWISE, REDUCTIONS]


@pytest.mark.parametrize("case,dtype", params(ELEMENTWISE + REDUCTIONS))
def test_special_rule(case, dtype):
    case.check(dtype)


def test_logsumexp_return_sign_is_refused():
    import bytegrad
    with pytest.raises(Exception, match="return_sign"):
        bytegrad.grad(lambda x: sc.logsumexp(x, return_sign=True)[0])(np.ones(3))


def test_a_scipy_function_without_a_rule_is_named_by_its_public_module():
    import bytegrad
    from bytegrad.errors import NoRuleError

    with pytest.raises(NoRuleError) as info:
        bytegrad.grad(lambda x: np.sum(sc.gammainc(2.0, x)))(np.ones(3))
    assert "scipy.special.gammainc" in str(info.value) and "numpy.gammainc" not in str(info.value)
