"""Elementwise math that LLVM vectorises: exp, expm1, log, log1p and tanh for Numba program kernels.

Numba calls libm for `math.exp` and `np.tanh` on a float: one scalar call per element (exp 9.5 ns,
tanh 23 ns here), and a loop holding such a call is never vectorised. These functions are range
reduction and polynomials in plain float arithmetic, with every special case (NaN, infinities,
signed zeros, overflow, underflow, subnormals) a branch-free select, so a kernel's element loop
that calls them (Numba inlines them) becomes SIMD code. Each is float64 in, float64 out; a float32
kernel computes in float64 and rounds what it stores. Accuracy against NumPy (tests/test_vmath.py
measures it over wide ranges and the special values): exp 1 ulp, log 2, expm1 and log1p 2, tanh 3.

The functions are plain Python (they run as such, slowly, which the tests use too); runtime/kernels.py
compiles them for kernels with `_bits` and `_float` as bit casts, inlined where they are called.
"""
from __future__ import annotations

import struct

__all__ = ["exp", "expm1", "log", "log1p", "tanh", "FUNCTIONS", "HELPERS"]


def _bits(x: float) -> int:
    """The IEEE bits of a float64 as an int64 (in a kernel: an LLVM bit cast, runtime/kernels.py)."""
    return struct.unpack("<q", struct.pack("<d", x))[0]


def _float(i: int) -> float:
    """The float64 whose IEEE bits are the int64 `i`."""
    return struct.unpack("<d", struct.pack("<q", i))[0]


_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01   # ln 2, its first 32 bits (n * _LN2_HI is exact for |n| < 2^20)
_LN2_LO = 1.90821492927058770002e-10   # ln 2 - _LN2_HI
_SHIFT = 6755399441055744.0            # 1.5 * 2^52: adding it rounds a float below 2^51 to an integer
_INF = float("inf")
_NAN = float("nan")


def _reduce(x):
    """(n, r): n = round(x / ln 2) as a float, r = x - n ln 2 with |r| <= ln 2 / 2 (x within +-750)."""
    n = (x * _LOG2E + _SHIFT) - _SHIFT
    return n, (x - n * _LN2_HI) - n * _LN2_LO


def _pow2(n):
    """2^n for an integral float n in [-1022, 1023]."""
    return _float((int(n) + 1023) << 52)


def _expm1_poly(r):
    """exp(r) - 1 for |r| <= 0.35: Taylor to degree 13 (relative error below 2^-60 plus rounding),
    its tail in Estrin's scheme: short chains of dependent operations, which SIMD code runs faster."""
    r2 = r * r
    r4 = r2 * r2
    s0 = (0.5 + r * (1.0 / 6.0)) + r2 * (1.0 / 24.0 + r * (1.0 / 120.0))
    s1 = (1.0 / 720.0 + r * (1.0 / 5040.0)) + r2 * (1.0 / 40320.0 + r * (1.0 / 362880.0))
    s2 = (1.0 / 3628800.0 + r * (1.0 / 39916800.0)) + r2 * (1.0 / 479001600.0 + r * (1.0 / 6227020800.0))
    return r + r2 * ((s0 + r4 * s1) + (r4 * r4) * s2)


def exp(x):
    xc = min(max(x if x == x else 0.0, -750.0), 750.0)  # (NaN: selected back at the end)
    n, r = _reduce(xc)
    h = (n * 0.5 + _SHIFT) - _SHIFT  # 2^n as 2^h * 2^(n - h): each factor stays a normal float
    y = (1.0 + _expm1_poly(r)) * _pow2(h) * _pow2(n - h)
    return x if x != x else y


def expm1(x):
    xc = min(max(x if x == x else 0.0, -60.0), 750.0)
    n, r = _reduce(xc)
    e = _expm1_poly(r)
    h = (n * 0.5 + _SHIFT) - _SHIFT
    s1 = _pow2(h)
    s2 = _pow2(n - h)
    s = s1 * s2  # 2^n, exact for n in [-87, 60]
    y = (s - 1.0) + s * e
    y = (1.0 + e) * s1 * s2 if n > 60.0 else y  # the 1 is below rounding; inf past 709.78
    y = e if n == 0.0 else y
    y = x if abs(x) < 1e-300 or x != x else y  # +-0 and subnormals, NaN
    return y


def tanh(x):
    a = abs(x)
    u = expm1(-2.0 * min(a, 40.0))   # in (-1, 0]
    t = -u / (2.0 + u)
    t = -t if x < 0.0 else t
    return x if a < 1e-300 or x != x else t


_SQRT_HALF = 0.7071067811865476


def _log_parts(x):
    """(k, f) with x = 2^k (1 + f), 1 + f in [sqrt(1/2), sqrt(2)), for a positive finite x."""
    small = x < 2.2250738585072014e-308
    xs = x * 18014398509481984.0 if small else x   # subnormals: times 2^54 first
    bits = _bits(xs)
    k = ((bits >> 52) & 0x7FF) - 1023
    m = _float((bits & 0xFFFFFFFFFFFFF) | 0x3FF0000000000000)  # in [1, 2)
    big = m > 1.4142135623730951
    m = m * 0.5 if big else m
    k = k + 1 if big else k
    return float(k) - (54.0 if small else 0.0), m - 1.0


def _log1p_f(f):
    """log(1 + f) for 1 + f in [sqrt(1/2), sqrt(2)): 2 atanh(s), s = f / (2 + f), |s| < 0.1716."""
    s = f / (2.0 + f)
    z = s * s
    p = 1.0 / 23.0
    p = p * z + 1.0 / 21.0
    p = p * z + 1.0 / 19.0
    p = p * z + 1.0 / 17.0
    p = p * z + 1.0 / 15.0
    p = p * z + 1.0 / 13.0
    p = p * z + 1.0 / 11.0
    p = p * z + 1.0 / 9.0
    p = p * z + 1.0 / 7.0
    p = p * z + 1.0 / 5.0
    p = p * z + 1.0 / 3.0
    hf = 0.5 * f * f
    return f - hf + s * (hf + 2.0 * z * p)


def log(x):
    k, f = _log_parts(x if x > 0.0 else 1.0)
    y = k * _LN2_LO + _log1p_f(f) + k * _LN2_HI
    y = -_INF if x == 0.0 else y
    y = _INF if x == _INF else y
    return x if x != x else (y if x >= 0.0 else _NAN)


def log1p(x):
    u = 1.0 + x
    u = u if u > 0.0 and u < _INF else 1.0  # (the others are selected at the end)
    k, f = _log_parts(u)
    c = (x - (u - 1.0)) / u  # what rounding 1 + x lost, relative to it
    y = k * _LN2_LO + (_log1p_f(f) + c) + k * _LN2_HI
    y = x if abs(x) < 1e-300 else y
    y = -_INF if x == -1.0 else y
    y = _INF if x == _INF else y
    return x if x != x else (y if x >= -1.0 else _NAN)


#: what a kernel may call, by the NumPy ufunc or `math` function it stands for (in kernels.vector_math)
FUNCTIONS = ("exp", "expm1", "log", "log1p", "tanh")
#: compiled on their own, with fused multiply-adds, for LLVM to inline (runtime/kernels.py)
FUSED = ("exp", "expm1", "tanh")
HELPERS = ("_reduce", "_pow2", "_expm1_poly", "_log_parts", "_log1p_f")
