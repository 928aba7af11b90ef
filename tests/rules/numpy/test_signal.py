"""convolve, correlate, interp, trapezoid and polyval against finite differences."""
from __future__ import annotations

import numpy as np
import pytest

from bytegrad.errors import RuleCaseError
from bytegrad.rules._apply import as_rrule
from bytegrad.rules.registry import lookup

from ..cases import Arr, Gen, Num, case, params

CONVOLUTION = [
    case(fn, Arr((n,)), Arr((m,)), mode, name=f"{fn.__name__}-{n}-{m}-{mode}")
    for fn in (np.convolve, np.correlate) for n, m in ((5, 3), (3, 5), (4, 4), (6, 1), (2, 5))
    for mode in ("full", "same", "valid")
] + [
    case(np.convolve, Arr((5,)), Arr((2,)), name="convolve-default"),
    case(np.correlate, Arr((5,)), Arr((2,)), name="correlate-default"),
    case(np.correlate, Arr((4,)), Arr((3,)), mode="same", name="correlate-keyword"),
]


def _grid(n, lo=-1.0, hi=1.0):
    def make(rng, dtype):
        return np.sort(rng.uniform(lo, hi, n) + np.linspace(0, 3 * n, n)).astype(dtype)  # well apart
    return Gen(make)


def _inside(shape):
    def make(rng, dtype):
        return rng.uniform(-5, 3 * 5 + 5, shape).astype(dtype)  # also left and right of the grid
    return Gen(make)


INTERP = [
    case(np.interp, _inside((7,)), _grid(5), Arr((5,))), case(np.interp, _inside((2, 3)), _grid(4), Arr((4,)), name="interp-2d-x"),
    case(np.interp, Num(2, 10), _grid(5), Arr((5,)), name="interp-scalar-x"),
    case(np._core.multiarray.interp, _inside((7,)), _grid(5), Arr((5,)), name="interp-compiled"),
    case(np.interp, _inside((8,)), _grid(4), Arr((4,)), Num(), Num(), name="interp-left-right"),
    case(np.interp, _inside((8,)), _grid(4), Arr((4,)), right=-3.0, name="interp-keyword-right"),
    case(np.interp, _inside((4,)), np.array([0.0, 5.0, 10.0]), Arr((3,)), name="interp-constant-xp"),
    case(np.interp, _inside((4,)), _grid(1), Arr((1,)), name="interp-one-point"),
]
TRAPEZOID = [
    case(np.trapezoid, Arr((5,))), case(np.trapezoid, Arr((3, 5)), _grid(5), name="trapezoid-x-1d"),
    case(np.trapezoid, Arr((5, 3)), None, Num(0.1, 2), 0, name="trapezoid-dx"),
    case(np.trapezoid, Arr((2, 5)), Arr((2, 5)), name="trapezoid-x-full"),
    case(np.trapezoid, Arr((4, 2)), _grid(4), axis=0, name="trapezoid-axis0"),
    case(np.trapezoid, Arr((2, 5)), dx=0.5, name="trapezoid-dx-keyword"),
]
POLYVAL = [
    case(np.polyval, Arr((4,)), Arr((2, 3))), case(np.polyval, [Num(), Num(), Num()], Num(), name="polyval-list-scalar"),
    case(np.polyval, Arr((3, 2)), Arr((2,)), name="polyval-array-coefficients"),
    case(np.polyval, Arr((1,)), Arr((3,)), name="polyval-constant"),
]
TABLES = [CONVOLUTION, INTERP, TRAPEZOID, POLYVAL]


@pytest.mark.parametrize("case,dtype", params(CONVOLUTION + INTERP + TRAPEZOID + POLYVAL))
def test_signal_rule(case, dtype):
    case.check(dtype)


def test_interp_outside_the_data_moves_the_end_values():
    _, pullback = as_rrule(lookup(np.interp))(np.array([-1.0, 0.5, 9.0]), np.array([0.0, 1.0]), np.array([2.0, 4.0]))
    x_bar, xp_bar, fp_bar = pullback(np.ones(3))
    assert x_bar.tolist() == [0.0, 2.0, 0.0] and fp_bar.tolist() == [1.5, 1.5]


def test_interp_with_period_is_a_clear_error():
    with pytest.raises(RuleCaseError, match="period"):
        as_rrule(lookup(np.interp))(np.ones(2), np.arange(3.0), np.ones(3), period=2.0)
