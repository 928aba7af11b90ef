"""cumsum, cumprod, diff and ediff1d against finite differences (cumprod also where the input has zeros)."""
from __future__ import annotations

import numpy as np
import pytest

from bytegrad.rules._apply import as_rrule
from bytegrad.rules.registry import lookup

from ..cases import Arr, Gen, Num, case, params

X = Arr((2, 3, 4), 0.5, 1.5, signed=True)


def _with_zeros(rng, dtype):
    x = rng.uniform(0.5, 1.5, (3, 5)) * rng.choice([-1.0, 1.0], (3, 5))
    x[0, 2] = 0.0            # one zero
    x[1, 0] = x[1, 3] = 0.0  # a zero first, and a second one later
    x[2, 4] = 0.0            # a zero last
    return x.astype(dtype)


CUMSUM = [
    case(np.cumsum, X), case(np.cumsum, X, -1), case(np.cumsum, Arr((4,)), 0),
    case(np.ndarray.cumsum, X, 1), case(np.ndarray.cumsum, X, name="x.cumsum()"),
]
CUMPROD = [
    case(np.cumprod, X), case(np.cumprod, X, 1, name="cumprod-axis"), case(np.cumprod, X, -1, name="cumprod-last"),
    case(np.cumprod, Gen(_with_zeros), 1, name="cumprod-zeros"), case(np.cumprod, Gen(_with_zeros), 0, name="cumprod-zeros-axis0"),
    case(np.cumprod, Gen(_with_zeros), name="cumprod-zeros-flat"),
    case(np.cumprod, X, 2, np.float64, name="cumprod-dtype"),
    case(np.ndarray.cumprod, X, 0), case(np.ndarray.cumprod, Gen(_with_zeros), name="x.cumprod()-zeros"),
]
DIFF = [
    case(np.diff, Arr((5,))), case(np.diff, Arr((3, 5)), 2, name="diff-n2"), case(np.diff, Arr((4, 3)), 1, 0, name="diff-axis0"),
    case(np.diff, Arr((4, 3)), 0, name="diff-n0"),
    case(np.diff, Arr((3, 4)), 1, -1, Num(), name="diff-prepend-scalar"),
    case(np.diff, Arr((3, 4)), 2, 1, Arr((3, 2)), Arr((3, 1)), name="diff-prepend-append-arrays"),
    case(np.diff, Arr((3, 4)), prepend=0.5, append=-1.0, name="diff-keywords"),
    case(np.ediff1d, Arr((2, 3))), case(np.ediff1d, Arr((4,)), Arr((2,)), Num(), name="ediff1d-ends"),
    case(np.ediff1d, Arr((4,)), None, [Num(), Num()], name="ediff1d-to_begin-list"),
    case(np.ediff1d, Arr((4,)), to_begin=2.0, name="ediff1d-keyword"),
    case(np.ediff1d, Arr((1,)), Num(), name="ediff1d-one-element"),
]
TABLES = [CUMSUM, CUMPROD, DIFF]


@pytest.mark.parametrize("case,dtype", params(CUMSUM + CUMPROD + DIFF))
def test_cumulative_rule(case, dtype):
    case.check(dtype)


def test_cumprod_cotangent_at_zeros_is_exact():
    x = np.array([2.0, 0.0, 3.0, 0.0, 5.0])
    _, pullback = as_rrule(lookup(np.cumprod))(x)
    (x_bar,) = pullback(np.ones(5))
    # d/dx0 = 1 (out0) + 0 ...; d/dx1 = x0 + x0*x2 + 0 + 0; after the first zero: 0
    assert x_bar.tolist() == [1.0, 2.0 + 6.0, 0.0, 0.0, 0.0]
    assert np.all(np.isfinite(x_bar))
