"""Elementwise math that LLVM vectorises: exp, expm1, log, log1p, tanh, sin and cos for Numba program kernels.

Numba calls libm for `math.exp` and `np.tanh` on a float: one scalar call per element (exp 9.5 ns,
tanh 23 ns here), and a loop holding such a call is never vectorised. These functions are range
reduction and polynomials in plain float arithmetic, with every special case (NaN, infinities,
signed zeros, overflow, underflow, subnormals) a branch-free select, so a kernel's element loop
that calls them (Numba inlines them) becomes SIMD code. Each is float64 in, float64 out. Accuracy
against NumPy (tests/test_vmath.py measures it over wide ranges and the special values): exp 1 ulp,
log 2, expm1 and log1p 2, tanh 3, sin and cos 2. Each has a float32 twin (`exp_f32`, `FLOAT32`) in
float32 arithmetic, with shorter polynomials, for float32 kernels: twice the SIMD lanes of float64.

sin and cos reduce their argument by pi/2 in exact steps (Cody-Waite, pi/2 in four parts), which is
good to TRIG_MAX (1e7); the float32 twins reduce in float64 (three operations) and evaluate in
float32. Beyond TRIG_MAX an exact reduction needs hundreds of bits of 2/pi (Payne-Hanek: a table
look-up per element, slow in SIMD), so there they give NaN instead, never a wrong number, and what
calls them makes sure no such NaN is used: a kernel's element loop adds `trig_guard(x)` (0.0, or NaN
beyond TRIG_MAX) of each argument to its sum, so that the loss is NaN and the program's wrapper
sends the call to the general path, as it does with any inf or NaN loss (compiled/lower_numba.py's
`vector_calls`, `_finish`); their `*_array` loops recompute such elements with Numba's libm call.
Ordinary arguments pay one compare, select and add per call, and the loop stays vectorised.

The functions are plain Python (they run as such, slowly, which the tests use too); runtime/kernels.py
compiles them for kernels with `_bits` and `_float` as bit casts, inlined where they are called.
"""
from __future__ import annotations

import math
import struct

import numpy as np

__all__ = ["exp", "expm1", "log", "log1p", "tanh", "sin", "cos", "exp_f32", "expm1_f32", "log_f32", "log1p_f32",
           "tanh_f32", "sin_f32", "cos_f32", "trig_guard", "trig_guard_f32", "FUNCTIONS", "GUARDS", "HELPERS", "TRIG"]


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


def _tanh_ratio(s, e, big, one):
    """tanh(a) = (1 - w) / (1 + w) from w = exp(-2a) = s (1 + e), s a power of two (s e is exact) and
    e = expm1(r), in the type of `one`. One division for both forms: 1 - 2w / (1 + w) where a is
    `big` (t near 1: within an ulp there, where (1 - w) / (1 + w) was 2.5 ulp off), else the ratio."""
    se = s * e
    d = (one + s) + se   # 1 + s is exact
    w = s + se
    q = (w + w if big else (one - s) - se) / d
    return one - q if big else q


_ABS = 0x7FFFFFFFFFFFFFFF
_SIGN = -0x8000000000000000


def tanh(x):
    """Through exp(-2|x|) on [-40, 0], with no special case of its own: one power of two (normal there),
    from the shifted float's bits; NaN flows through (the clamp keeps it), infinities are clamped to
    20 (tanh 1), a tiny or subnormal |x| comes out exactly (e = -2|x|, s = 1); x's sign bit is copied."""
    a = abs(x)
    m = 20.0 if a > 20.0 else a
    t = m * -2.8853900817779268 + _SHIFT    # -2 log2(e): n = round(-2m / ln 2) in t's low bits
    n = t - _SHIFT
    r = (-2.0 * m - n * _LN2_HI) - n * _LN2_LO
    s = _float(((_bits(t) + 1023) & 0x7FF) << 52)  # 2^n (the mask: NaN in plain Python)
    y = _tanh_ratio(s, _expm1_poly(r), a > 0.625, 1.0)
    return _float((_bits(y) & _ABS) | (_bits(x) & _SIGN))


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


# ---- float32: float32 arithmetic, float32-sized polynomials (8 lanes of AVX2 where float64 has 4) ----
# Every constant is an np.float32, so that Numba keeps the arithmetic in float32 (a Python float would
# promote it to float64). Accuracy against NumPy's float32 ufuncs (tests/test_vmath.py): exp 1 ulp,
# expm1 2, log 1, log1p 2, tanh 3.


def _bits32(x):
    """The IEEE bits of a float32 as an int (in a kernel: an LLVM bit cast to int32)."""
    return struct.unpack("<i", struct.pack("<f", x))[0]


def _float32(i):
    """The float32 whose IEEE bits are the low 32 bits of the int `i`."""
    return np.float32(struct.unpack("<f", struct.pack("<I", i & 0xFFFFFFFF))[0])


_F0 = np.float32(0.0)
_F1 = np.float32(1.0)
_F2 = np.float32(2.0)
_FHALF = np.float32(0.5)
_FINF = np.float32(np.inf)
_FNAN = np.float32(np.nan)
_FLOG2E = np.float32(1.4426950408889634)
_FLN2_HI = np.float32(0.693359375)          # ln 2 in 9 bits: n * _FLN2_HI is exact for |n| < 2^15
_FLN2_LO = np.float32(-2.12194440e-4)       # ln 2 - _FLN2_HI
_FSHIFT = np.float32(12582912.0)            # 1.5 * 2^23: adding it rounds a float32 below 2^22 to an integer
_FTINY = np.float32(1e-30)                  # below it expm1, log1p and tanh give x itself
_FC = tuple(np.float32(1.0 / math.factorial(n)) for n in range(2, 9))
_FL = tuple(np.float32(1.0 / n) for n in (3, 5, 7, 9, 11))


def _reduce_f32(x):
    """(k, n, r): n = round(x / ln 2) as a float32 and k as an int, r = x - n ln 2 (x within +-150)."""
    t = x * _FLOG2E + _FSHIFT
    n = t - _FSHIFT
    return _bits32(t) - 0x4B400000, n, (x - n * _FLN2_HI) - n * _FLN2_LO


def _expm1_poly_f32(r):
    """exp(r) - 1 for |r| <= 0.35: Taylor to degree 8 (relative error below 2^-27)."""
    r2 = r * r
    r4 = r2 * r2
    s0 = (_FC[0] + r * _FC[1]) + r2 * (_FC[2] + r * _FC[3])
    s1 = (_FC[4] + r * _FC[5]) + r2 * _FC[6]
    return r + r2 * (s0 + r4 * s1)


def exp_f32(x):
    xc = min(max(x if x == x else _F0, np.float32(-104.0)), np.float32(89.0))
    k, n, r = _reduce_f32(xc)
    h = k >> 1  # 2^k as 2^h * 2^(k - h): each factor a normal float32
    y = (_F1 + _expm1_poly_f32(r)) * _float32((h + 127) << 23) * _float32((k - h + 127) << 23)
    return x if x != x else y


def expm1_f32(x):
    xc = min(max(x if x == x else _F0, np.float32(-30.0)), np.float32(89.0))
    k, n, r = _reduce_f32(xc)
    e = _expm1_poly_f32(r)
    h = k >> 1
    s1 = _float32((h + 127) << 23)
    s2 = _float32((k - h + 127) << 23)
    s = s1 * s2  # 2^k, exact for k in [-44, 30]
    y = (s - _F1) + s * e
    y = (_F1 + e) * s1 * s2 if n > np.float32(24.0) else y  # the 1 is below rounding; inf past 88.72
    y = e if n == _F0 else y
    return x if abs(x) < _FTINY or x != x else y


def tanh_f32(x):
    """As tanh, in float32: |x| clamped to 10."""
    a = abs(x)
    k, n, r = _reduce_f32(np.float32(-2.0) * (np.float32(10.0) if a > np.float32(10.0) else a))
    y = _tanh_ratio(_float32((k + 127) << 23), _expm1_poly_f32(r), a > np.float32(0.625), _F1)
    return _float32((_bits32(y) & 0x7FFFFFFF) | (_bits32(x) & -0x80000000))


def _log_parts_f32(x):
    """(k, f) with x = 2^k (1 + f), 1 + f in [sqrt(1/2), sqrt(2)), for a positive finite float32 x."""
    small = x < np.float32(1.1754944e-38)
    xs = x * np.float32(33554432.0) if small else x   # subnormals: times 2^25 first
    bits = _bits32(xs)
    m = _float32((bits & 0x7FFFFF) | 0x3F800000)  # in [1, 2)
    big = m > np.float32(1.4142135)
    k = ((bits >> 23) & 0xFF) - (126 if big else 127) - (25 if small else 0)
    m = m * _FHALF if big else m
    return np.float32(k), m - _F1


def _log1p_f_f32(f):
    """log(1 + f) for 1 + f in [sqrt(1/2), sqrt(2)): 2 atanh(s), s = f / (2 + f), |s| < 0.1716."""
    s = f / (_F2 + f)
    z = s * s
    p = ((_FL[4] * z + _FL[3]) * z + _FL[2]) * z
    p = (p + _FL[1]) * z + _FL[0]
    hf = _FHALF * f * f
    return f - hf + s * (hf + _F2 * z * p)


def log_f32(x):
    k, f = _log_parts_f32(x if x > _F0 else _F1)
    y = k * _FLN2_LO + _log1p_f_f32(f) + k * _FLN2_HI
    y = -_FINF if x == _F0 else y
    y = _FINF if x == _FINF else y
    return x if x != x else (y if x >= _F0 else _FNAN)


def log1p_f32(x):
    u = _F1 + x
    u = u if u > _F0 and u < _FINF else _F1  # (the others are selected at the end)
    k, f = _log_parts_f32(u)
    c = (x - (u - _F1)) / u  # what rounding 1 + x lost, relative to it
    y = k * _FLN2_LO + (_log1p_f_f32(f) + c) + k * _FLN2_HI
    y = x if abs(x) < _FTINY else y
    y = -_FINF if x == -_F1 else y
    y = _FINF if x == _FINF else y
    return x if x != x else (y if x >= -_F1 else _FNAN)


# ---- sin and cos: reduction by pi/2 in exact steps (Cody-Waite), Taylor polynomials, quadrant selects ----
# pi/2 in four parts: the first three of 30 bits, so that n * part is exact for every n below 2^23, and
# x - n pi/2 is good to about 2^-145 of pi/2 (the worst cancellation of a double below 1e7 loses about
# 60 bits). Beyond TRIG_MAX (and for inf and NaN) the functions give NaN; a kernel that calls them adds
# `trig_guard` of their argument to its sum, so that such an argument makes its loss NaN, and the
# program's wrapper sends the call to the general path (compiled/lower_numba.py); `*_array` recompute
# those elements with Numba's libm call.
TRIG_MAX = 1e7
_TWO_OVER_PI = 0.6366197723675814
_PIO2 = (1.570796325802803, 9.920935791635221e-10, 5.17018297889025e-19, 2.9038559739793605e-28)
_PIO2_1T = 9.920935796805404e-10       # pi/2 - _PIO2[0], to 53 bits (float32: pi/2 to 83 bits in two parts)
_SIN = tuple((-1.0) ** k / math.factorial(2 * k + 1) for k in range(1, 9))   # x^3 ... x^17 (|x| <= pi/4:
_COS = tuple((-1.0) ** k / math.factorial(2 * k) for k in range(2, 9))       # x^4 ... x^16 below 2^-60)


def _trig_reduce(x):
    """(q, r): x = n pi/2 + r with |r| <= pi/4 (a little more where x / (pi/2) rounds the other way),
    q = n mod 4, for |x| <= TRIG_MAX."""
    t = x * _TWO_OVER_PI + _SHIFT
    n = t - _SHIFT
    r = ((x - n * _PIO2[0]) - n * _PIO2[1]) - n * _PIO2[2]
    return _bits(t) & 3, r - n * _PIO2[3]


def _sin_cos_poly(r):
    """(sin r, cos r) for |r| <= pi/4 + 1e-9: Taylor to degree 17 and 16, in Estrin's scheme; cos as
    (1 - r^2/2) plus what rounding that lost plus the tail."""
    z = r * r
    z2 = z * z
    z4 = z2 * z2
    s = (_SIN[0] + z * _SIN[1]) + z2 * (_SIN[2] + z * _SIN[3])
    s = s + z4 * ((_SIN[4] + z * _SIN[5]) + z2 * (_SIN[6] + z * _SIN[7]))
    c = ((_COS[0] + z * _COS[1]) + z2 * (_COS[2] + z * _COS[3])) + z4 * ((_COS[4] + z * _COS[5]) + z2 * _COS[6])
    h = 0.5 * z
    w = 1.0 - h
    return r + (r * z) * s, w + (((1.0 - w) - h) + z2 * c)


def _quadrant(q, s, c):
    """sin(n pi/2 + r) from q = n mod 4 (cos: from q + 1), s = sin r and c = cos r."""
    y = c if q & 1 else s
    return -y if q & 2 else y


def sin(x):
    ok = abs(x) <= TRIG_MAX
    q, r = _trig_reduce(x)
    s, c = _sin_cos_poly(r)
    y = _quadrant(q, s, c)
    y = x if abs(x) < 1e-9 else y  # sin x rounds to x there: -0.0 kept (the polynomial gives +0.0)
    return y if ok else _NAN


def cos(x):
    ok = abs(x) <= TRIG_MAX  # (tested before the rest, and the call apart from the select: else
    q, r = _trig_reduce(x)   # LLVM leaves a branch, and the loop that calls it is not vectorised)
    s, c = _sin_cos_poly(r)
    y = _quadrant(q + 1, s, c)
    return y if ok else _NAN


def trig_guard(x):
    """0.0 where sin and cos are exact to a few ulp at x, NaN elsewhere (a kernel adds it to its sum)."""
    return 0.0 if abs(x) <= TRIG_MAX else _NAN


_FTRIG_MAX = np.float32(TRIG_MAX)
_FSIN = tuple(np.float32(c) for c in _SIN[:4])   # x^3 ... x^9, x^4 ... x^10: below 2^-28 for |x| <= pi/4
_FCOS = tuple(np.float32(c) for c in _COS[:4])


def trig_guard_f32(x):
    return _F0 if abs(x) <= _FTRIG_MAX else _FNAN


def _trig_reduce_f32(x):
    """(q, r) of `_trig_reduce` for a float32 x, r a float32: the reduction in float64 arithmetic
    (three operations; pi/2 to 83 bits), the polynomials after it in float32."""
    d = float(x)
    t = d * _TWO_OVER_PI + _SHIFT
    n = t - _SHIFT
    return _bits(t) & 3, np.float32((d - n * _PIO2[0]) - n * _PIO2_1T)


def _sin_cos_poly_f32(r):
    z = r * r
    z2 = z * z
    s = (_FSIN[0] + z * _FSIN[1]) + z2 * (_FSIN[2] + z * _FSIN[3])
    c = (_FCOS[0] + z * _FCOS[1]) + z2 * (_FCOS[2] + z * _FCOS[3])
    return r + (r * z) * s, (_F1 - _FHALF * z) + z2 * c


def cos_f32(x):
    ok = abs(x) <= _FTRIG_MAX
    q, r = _trig_reduce_f32(x)
    s, c = _sin_cos_poly_f32(r)
    y = _quadrant(q + 1, s, c)
    return y if ok else _FNAN


def sin_f32(x):
    ok = abs(x) <= _FTRIG_MAX
    q, r = _trig_reduce_f32(x)
    s, c = _sin_cos_poly_f32(r)
    y = _quadrant(q, s, c)
    y = x if abs(x) < np.float32(1e-4) else y
    return y if ok else _FNAN


#: what a kernel may call, by the NumPy ufunc or `math` function it stands for (in kernels.vector_math)
FUNCTIONS = ("exp", "expm1", "log", "log1p", "tanh", "sin", "cos")
#: those a kernel's element loop calls only with `trig_guard` (`trig_guard_f32`) of their argument in its sum
TRIG = ("sin", "cos")
#: compiled on their own, with fused multiply-adds, for LLVM to inline (runtime/kernels.py)
FUSED = ("exp", "expm1", "tanh", "exp_f32", "expm1_f32", "tanh_f32", "sin_f32", "cos_f32")
HELPERS = ("_reduce", "_pow2", "_expm1_poly", "_tanh_ratio", "_log_parts", "_log1p_f", "_reduce_f32",
           "_expm1_poly_f32", "_log_parts_f32", "_log1p_f_f32", "_trig_reduce", "_sin_cos_poly", "_quadrant",
           "_trig_reduce_f32", "_sin_cos_poly_f32")
GUARDS = ("trig_guard", "trig_guard_f32")
#: each function's float32 twin, for kernels whose elements are float32
FLOAT32 = {name: f"{name}_f32" for name in FUNCTIONS}
