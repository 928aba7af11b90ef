"""np.vectorize (its rule calls the user's function through rrule_via_ad) against finite differences."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ..cases import Arr, Num, case, params


def _piecewise(t):
    return t * t if t > 0 else math.sin(t)


def _scaled_exp(a, b):
    return a * math.exp(b)


VECTORIZE = [
    case(np.vectorize.__call__, np.vectorize(_piecewise), Arr((2, 3), signed=True, lo=0.2), name="vectorize"),
    case(np.vectorize.__call__, np.vectorize(_scaled_exp), [Num(), Num()], Arr((2,)), name="vectorize-list"),
    case(np.vectorize.__call__, np.vectorize(_scaled_exp), Arr((2, 3)), Arr((3,)), name="vectorize-broadcast"),
    case(np.vectorize.__call__, np.vectorize(_scaled_exp), Arr((2, 1)), 0.5, name="vectorize-constant"),
    case(np.vectorize.__call__, np.vectorize(lambda a, n: a ** n, excluded={1}), Arr((3,), lo=0.5), 3,
         name="vectorize-excluded"),
    # differentiated excluded arguments: the rule sums each element's share (they were a silent zero)
    case(np.vectorize.__call__, np.vectorize(lambda a, c: a * c * c, excluded={1}), Arr((3,)), Num(),
         name="vectorize-excluded-float"),
    case(np.vectorize.__call__, np.vectorize(lambda a, c: a * c[0] + math.sin(c[1]), excluded={1}), Arr((2, 2)),
         Arr((2,)), name="vectorize-excluded-array"),
    case(np.vectorize.__call__, np.vectorize(_piecewise, otypes=[np.float64]), Arr((4,), signed=True, lo=0.2),
         name="vectorize-otypes"),
]
TABLES = [VECTORIZE]


@pytest.mark.parametrize("case,dtype", params(VECTORIZE))
def test_functional_rule(case, dtype):
    case.check(dtype)


# ---- a differentiated value the vectorized function reads without receiving it -------------------


def _closure_program(a, x):
    return np.sum(np.vectorize(lambda v: v * a)(x))  # `a` reached through a closure cell


def _excluded_program(a, x):
    return np.sum(np.vectorize(lambda v, c: v * c * c, excluded={1})(x, a))


@pytest.mark.parametrize("tier", ["general", "numpy", "numba"])
def test_vectorize_refuses_a_closure_over_a_differentiated_value(tier):
    """The rule differentiates with respect to the call's arguments: a differentiated value read
    through the function's closure would get a zero derivative (it did, on every tier). It is an
    error naming this line, on every call (the capture's included)."""
    import bytegrad

    g = bytegrad.differentiate(_closure_program, argnums=(0, 1), tier=tier)
    for _ in range(3):
        with pytest.raises(bytegrad.DifferentiationError, match="closure variable") as info:
            g.grad(1.5, np.array([1.0, 2.0]))
        assert info.value.loc is not None and info.value.loc.filename == __file__


@pytest.mark.parametrize("tier", ["general", "numpy", "numba"])
def test_vectorize_differentiates_excluded_float_arguments(tier):
    """An excluded float argument is differentiated too (each element's share summed): d/da of
    sum(x * a * a) is 2 a sum(x), on every tier and every call."""
    import bytegrad

    g = bytegrad.differentiate(_excluded_program, argnums=(0, 1), tier=tier)
    x = np.array([1.0, 2.0, -0.5])
    for a in (1.5, 1.5, -0.25, 2.0):
        da, dx = g.grad(a, x)
        assert da == pytest.approx(2 * a * x.sum(), rel=1e-12)
        np.testing.assert_allclose(dx, np.full(3, a * a), rtol=1e-12)
