"""scipy.signal.convolve and correlate against finite differences: n-D, every mode and method."""
from __future__ import annotations

import pytest

ss = pytest.importorskip("scipy.signal")

from ..cases import Arr, case, params  # noqa: E402

SHAPES = [((5,), (3,)), ((3,), (5,)), ((4,), (4,)), ((4, 5), (2, 3)), ((2, 3), (4, 5)), ((3, 4, 2), (2, 2, 2))]
CONVOLUTIONS = [
    case(fn, Arr(a), Arr(v), mode, method, name=f"{fn.__name__}-{a}-{v}-{mode}-{method}")
    for fn in (ss.convolve, ss.correlate)
    for a, v in SHAPES
    for mode in ("full", "same", "valid")
    for method in ("direct", "fft", "auto")
] + [case(ss.convolve, Arr((6,)), Arr((3,)), mode="same", name="convolve-kw"),
     case(ss.correlate, Arr((6,)), Arr((3,)), name="correlate-default")]
TABLES = [CONVOLUTIONS]


@pytest.mark.parametrize("case,dtype", params(CONVOLUTIONS))
def test_convolution_rule(case, dtype):
    case.check(dtype)
