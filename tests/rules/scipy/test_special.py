"""scipy.special rules against finite differences (float64 and float32), arrays with broadcasting."""
from __future__ import annotations

import numpy as np
import pytest

sc = pytest.importorskip("scipy.special")

from ..cases import Arr, Gen, Num, case, params  # noqa: E402
from ..numpy.test_complex import COMPLEX_DTYPES  # noqa: E402

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


def Z(*shape):
    """Complex points right of the poles of gamma and digamma: Re in [0.5, 3], Im in [-1.5, 1.5]."""
    return Gen(lambda rng, dtype: (rng.uniform(0.5, 3.0, shape) + 1j * rng.uniform(-1.5, 1.5, shape)).astype(dtype))


#: holomorphic at complex points: their derivatives (and nested ones) need polygamma at complex z,
#: which SciPy has for real x only (bytegrad.rules.scipy.special.polygamma)
COMPLEX = [
    case(sc.gamma, Z(2, 3), dtypes=COMPLEX_DTYPES, name="gamma-complex"),
    case(sc.digamma, Z(2, 3), dtypes=COMPLEX_DTYPES, name="digamma-complex"),
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
TABLES = [ELEMENTWISE, COMPLEX, REDUCTIONS]


@pytest.mark.parametrize("case,dtype", params(ELEMENTWISE + COMPLEX + REDUCTIONS))
def test_special_rule(case, dtype):
    case.check(dtype)


def test_polygamma_at_complex_points():
    """bytegrad's complex polygamma (recurrence, then the asymptotic series) against what does not
    share its code: SciPy's real polygamma on the real axis, central differences of SciPy's complex
    digamma and of itself one order down, and the reflection formula psi'(1 - z) + psi'(z) =
    pi^2 / sin^2(pi z). Points on both sides of the poles, far left included (many shifts)."""
    from bytegrad.rules.scipy.special import polygamma

    rng = np.random.default_rng(0)
    x = rng.uniform(-30.0, 40.0, 200)
    x = x[np.abs(x - np.round(x)) > 0.05]
    for k in range(1, 6):
        np.testing.assert_allclose(polygamma(k, x + 0j), sc.polygamma(k, x), rtol=1e-13)
    z = rng.uniform(-10.0, 10.0, 100) + 1j * rng.uniform(-3.0, 3.0, 100)
    h = 1e-5
    for k in range(1, 5):
        below = sc.digamma if k == 1 else (lambda w, k=k: polygamma(k - 1, w))
        central = (below(z + h) - below(z - h)) / (2 * h)
        np.testing.assert_allclose(polygamma(k, z), central, rtol=1e-7)
    np.testing.assert_allclose(polygamma(1, 1 - z) + polygamma(1, z), np.pi ** 2 / np.sin(np.pi * z) ** 2,
                               rtol=1e-10, atol=1e-11)
    orders = polygamma(np.array([0, 1, 2]), np.array([[1 + 1j], [2 - 1j]]))
    assert orders.shape == (2, 3) and orders[0, 0] == sc.digamma(1 + 1j)
    assert orders[1, 2] == polygamma(2, 2 - 1j)
    assert not np.isfinite(polygamma(1, -2 + 0j))  # (a pole: SciPy's complex digamma gives nan there too)


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
