"""Non-differentiable NumPy functions: check_rule verifies their value and that they are flat here."""
from __future__ import annotations

import numpy as np
import pytest

from bytegrad.rules._apply import as_frule, as_rrule
from bytegrad.rules.registry import NO_TANGENT, ZERO, RuleKind, lookup

from ..cases import Arr, case, params

X = Arr((3, 4), distinct=True)
Y = Arr((3, 4), distinct=True)

NONDIFF = [
    case(np.argmax, X), case(np.argmin, X, 1), case(np.argsort, X), case(np.argwhere, X), case(np.nonzero, X),
    case(np.flatnonzero, X), case(np.count_nonzero, X), case(np.searchsorted, Arr((5,), distinct=True, lo=-1, hi=1), X),
    case(np.floor, X), case(np.ceil, X), case(np.rint, X), case(np.round, X, 1), case(np.around, X),
    case(np.trunc, X), case(np.sign, X), case(np.signbit, X), case(np.heaviside, X, 0.5),
    case(np.floor_divide, X, Arr((3, 4), 0.5, 2)),
    case(np.isfinite, X), case(np.isnan, X), case(np.isinf, X), case(np.isclose, X, Y), case(np.allclose, X, Y),
    case(np.array_equal, X, Y), case(np.any, X), case(np.all, X, 0),
    case(np.greater, X, Y), case(np.greater_equal, X, Y), case(np.less, X, Y), case(np.less_equal, X, Y),
    case(np.equal, X, Y), case(np.not_equal, X, Y), case(np.logical_and, X, Y), case(np.logical_or, X, Y),
    case(np.logical_not, X), case(np.logical_xor, X, Y),
    case(np.shape, X), case(np.ndim, X), case(np.size, X),
    case(np.zeros_like, X), case(np.ones_like, X),
    case(np.zeros, (2, 3)), case(np.ones, 3), case(np.arange, 5), case(np.arange, 1, 7, 2, name="arange-ints"),
    case(np.eye, 3), case(np.identity, 2), case(np.tri, 3),
    case(np.ndarray.argmax, X), case(np.ndarray.argmin, X, 0), case(np.ndarray.argsort, X),
    case(np.ndarray.nonzero, X), case(np.ndarray.any, X), case(np.ndarray.all, X), case(np.ndarray.round, X, 2),
]
TABLES = [NONDIFF]


@pytest.mark.parametrize("case,dtype", params(NONDIFF))
def test_nondiff(case, dtype):
    case.check(dtype)


def test_the_sign_of_real_input_carries_a_zero_cotangent():
    """np.sign has a rule (a complex sign, z / |z|, moves: tests/rules/numpy/test_complex.py); a real
    one is piecewise constant."""
    x = np.linspace(-1.0, 1.0, 4)
    _, pullback = as_rrule(lookup(np.sign))(x)
    assert pullback(np.ones(4)) == (ZERO,)
    assert as_frule(lookup(np.sign))((np.ones(4),), x)[1] is ZERO


@pytest.mark.parametrize("fn", [np.floor, np.argmax, np.ndarray.argmax])
def test_nondiff_rules_carry_no_tangent(fn):
    rule = lookup(fn)
    assert rule.kind is RuleKind.NONDIFF
    x = np.linspace(-1.0, 1.0, 4)
    _, pullback = as_rrule(rule)(x)
    assert pullback(1.0) == (NO_TANGENT,)
    assert as_frule(rule)((np.ones(4),), x)[1] is ZERO
