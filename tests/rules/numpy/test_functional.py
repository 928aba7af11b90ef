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
    case(np.vectorize.__call__, np.vectorize(_piecewise, otypes=[np.float64]), Arr((4,), signed=True, lo=0.2),
         name="vectorize-otypes"),
]
TABLES = [VECTORIZE]


@pytest.mark.parametrize("case,dtype", params(VECTORIZE))
def test_functional_rule(case, dtype):
    case.check(dtype)
