"""runtime/vmath.py's tanh and tanh_f32 (through exp(-2|x|) with no special case of their own: a clamp
that keeps NaN, x's sign bit copied, one division whose form depends on |x|): their special values bit
for bit and their accuracy where |x| is large, against a correctly rounded tanh (decimal), in plain
Python and compiled (kernels.vector_math). tests/test_vmath.py has their accuracy against NumPy."""
from __future__ import annotations

import decimal
import math

import numpy as np
import pytest

from bytegrad.runtime import kernels, vmath

HOWS = ["python", pytest.param("compiled", marks=pytest.mark.skipif(kernels.disabled(), reason="Numba disabled"))]
DTYPES = [np.float64, np.float32]
#: x itself, bit for bit (zeros with their sign, subnormals, tiny normals)
SAME = {np.float64: [0.0, -0.0, 5e-324, -5e-324, 1e-310, -1e-310, 2.2250738585072014e-308, -2.2250738585072014e-308,
                     1e-300, -1e-300, 1e-20, -1e-20],
        np.float32: [0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, 1.1754944e-38, -1.1754944e-38, 1e-30, -1e-30, 1e-20,
                     -1e-20]}
#: exactly +-1 (where tanh rounds to 1, the infinities, the largest floats)
ONES = {np.float64: [np.inf, -np.inf, 20.0, -20.0, 25.0, 710.0, 1e300, -1e300, 1.7976931348623157e308],
        np.float32: [np.inf, -np.inf, 10.0, -10.0, 12.0, 89.0, 1e30, -3.4028235e38, 3.4028235e38]}


def _tanh(dtype, how):
    """tanh or tanh_f32 on an array of `dtype`, run as plain Python or compiled."""
    name = "tanh" if dtype == np.float64 else "tanh_f32"
    if how == "compiled":
        return kernels.vector_math()[f"{name}_array"]
    f = getattr(vmath, name)
    return lambda x: np.array([f(v) for v in (x.tolist() if dtype == np.float64 else x)], dtype)


def _rounded_tanh(x: np.ndarray) -> np.ndarray:
    """tanh correctly rounded to x's dtype (50 digits, then one rounding; float32 through float64, whose
    double rounding is off only on ties closer than 2^-29 ulp)."""
    with decimal.localcontext() as ctx:
        ctx.prec = 50
        out = []
        for v in x.astype(np.float64).tolist():
            w = (decimal.Decimal(-2) * decimal.Decimal(abs(v))).exp()
            out.append(math.copysign(float((1 - w) / (1 + w)), v))
    return np.array(out).astype(x.dtype)


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_tanh_special_values_bit_for_bit(dtype, how):
    """Zeros keep their sign, subnormals and tiny x come out as x, NaN as NaN (either sign), the
    infinities and every |x| past the clamp as +-1, all exactly."""
    fn = _tanh(dtype, how)
    same = np.array(SAME[dtype], dtype)
    ints = np.int64 if dtype == np.float64 else np.int32
    np.testing.assert_array_equal(fn(same).view(ints), same.view(ints))
    ones = np.array(ONES[dtype], dtype)
    np.testing.assert_array_equal(fn(ones).view(ints), np.copysign(np.ones_like(ones), ones).view(ints))
    nans = np.array([np.nan, -np.nan], dtype)
    assert np.isnan(fn(nans)).all()
    rest = np.array([-0.3, 0.7, -2.0, 5.0, -19.0], dtype)
    assert (np.signbit(fn(rest)) == np.signbit(rest)).all()


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_tanh_is_within_an_ulp_of_the_rounded_value_where_x_is_large(dtype, how):
    """Past |x| = 0.625 (tanh above 0.55) the result is 1 - 2w / (1 + w): within 1 ulp of the correctly
    rounded tanh (the ratio (1 - w) / (1 + w) was 2.5 ulp off there in float64); 2 ulp below."""
    rng = np.random.default_rng(11)
    n = 2000 if how == "compiled" else 300
    sign = rng.choice([-1.0, 1.0], n)
    for lo, hi, most in [(0.63, 20.0, 1.0), (0.0, 0.625, 2.0)]:
        x = (sign * rng.uniform(lo, hi, n)).astype(dtype)
        want = _rounded_tanh(x)
        err = np.abs(_tanh(dtype, how)(x).astype(np.float64) - want) / np.spacing(np.abs(want)).astype(np.float64)
        assert err.max() <= most, (lo, hi, err.max(), x[np.argmax(err)])
