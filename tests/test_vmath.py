"""runtime/vmath.py, the vectorisable exp, expm1, log, log1p, tanh, sin and cos of Numba program kernels:
their accuracy against NumPy over wide ranges and every special value, in plain Python and as
compiled (kernels.vector_math), and the program kernels that call them (compiled/lower_numba.py)
against the general path."""
from __future__ import annotations

import math
import os
import re
import sys
import types

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from gradcheck import assert_trees_close

import bytegrad
from bytegrad.compiled import policy as compiled
from bytegrad.runtime import kernels, vmath

needs_numba = pytest.mark.skipif(kernels.disabled(), reason="Numba disabled (BYTEGRAD_DISABLE_NUMBA)")

#: the largest error measured (tests below, a million points each): exp 1 ulp, expm1 2, log 2, log1p 2, tanh 3,
#: sin 2, cos 2 (also on the doubles nearest multiples of pi/2 up to TRIG_MAX, where reduction cancels most)
MAX_ULP = {"exp": 1, "expm1": 2, "log": 2, "log1p": 2, "tanh": 3, "sin": 2, "cos": 2}
TINY = 2.2250738585072014e-308
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-310, -1e-310, TINY, -TINY, 1e-300, 1e-20,
           -1e-20, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 709.782712893384, 709.7827128933841, 710.0, -745.1332191019411,
           -745.1332191019412, -746.0, -708.4, 1e300, -1e300, 1.7976931348623157e308, -1.7976931348623157e308,
           0.34657359027997264, -0.34657359027997264, 19.06, -19.06, 22.0, 40.0, -40.0, -0.99999999, 1e16]


def _inputs(name: str, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    sign = rng.choice([-1.0, 1.0], n)
    parts = [rng.uniform(-1, 1, n), rng.uniform(-50, 50, n), sign * np.exp(rng.uniform(-745, 709, n)),
             rng.uniform(-1e-6, 1e-6, n), np.array(SPECIAL)]
    if name == "log1p":
        parts.append(np.expm1(rng.uniform(-40, 0, n)))  # near -1
    if name == "log":
        parts.append(rng.uniform(0.5, 2.0, n))  # around 1
    if name in vmath.TRIG:
        turns = np.pi / 2 * rng.integers(0, int(vmath.TRIG_MAX / (np.pi / 2)), n // 3)  # the doubles nearest
        parts += [rng.uniform(-vmath.TRIG_MAX, vmath.TRIG_MAX, n), turns, np.nextafter(turns, np.inf),
                  -np.nextafter(turns, -np.inf)]
    return np.concatenate(parts)


def _ulps(got: np.ndarray, want: np.ndarray, tiny: float = TINY) -> float:
    """The largest error in units of the last place of NumPy's result (NaN where NumPy gives NaN,
    the same infinities and the same signs of zero are 0 ulp; anything else is a failure: inf);
    `tiny`: the smallest normal of their dtype."""
    both_nan = np.isnan(got) & np.isnan(want)
    if np.any(np.isnan(got) != np.isnan(want)):
        return math.inf
    same = (got == want) & (np.signbit(got) == np.signbit(want))
    finite = np.isfinite(want) & ~same & ~both_nan
    if np.any(~same & ~both_nan & ~finite):
        return math.inf  # an infinity or a signed zero that differs
    w = want[finite]
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(got[finite].astype(np.float64) - w) / np.spacing(np.maximum(np.abs(w), w.dtype.type(tiny)))
    return float(err.max(initial=0.0))


def _numpy(name: str, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return getattr(np, name)(x)


def _plain(name: str, x: np.ndarray) -> np.ndarray:
    """NumPy's values where vmath's function gives them: sin and cos give NaN beyond TRIG_MAX (the
    kernels that call them, and their `*_array`, do not use those values)."""
    want = _numpy(name, x)
    return np.where(np.abs(x) <= vmath.TRIG_MAX, want, np.nan).astype(x.dtype) if name in vmath.TRIG else want


@pytest.mark.parametrize("name", vmath.FUNCTIONS)
def test_plain_python_functions_agree_with_numpy(name):
    """The functions as plain Python (how the tests read them, no Numba): a sample of each range."""
    x = _inputs(name, 300, seed=1)
    f = getattr(vmath, name)
    got = np.array([f(float(v)) for v in x])
    assert _ulps(got, _plain(name, x)) <= MAX_ULP[name]


@needs_numba
@pytest.mark.parametrize("name", vmath.FUNCTIONS)
def test_compiled_functions_agree_with_numpy_to_a_few_ulp(name):
    x = _inputs(name, 200_000)
    got = kernels.vector_math()[f"{name}_array"](x)
    assert got.dtype == np.float64
    assert _ulps(got, _numpy(name, x)) <= MAX_ULP[name]


@needs_numba
@pytest.mark.parametrize("name", vmath.FUNCTIONS)
def test_array_functions_take_float32_and_any_layout(name):
    """On float32 (computed in float64, rounded once: within 2 float32 ulp of NumPy's float32, itself
    not correctly rounded) and
    on a transposed, strided view (its shape kept)."""
    rng = np.random.default_rng(2)
    x = rng.uniform({"log": 0.01, "log1p": -0.99}.get(name, -3.0), 3, (40, 30))
    fn = kernels.vector_math()[f"{name}_array"]
    got32 = fn(x.astype(np.float32))
    assert got32.dtype == np.float32
    want32 = _numpy(name, x.astype(np.float32))
    np.testing.assert_array_max_ulp(got32, want32, maxulp=2)
    view = x.T[::2]
    np.testing.assert_array_max_ulp(fn(view), _numpy(name, view), maxulp=MAX_ULP[name])


@needs_numba
def test_sums_along_an_axis():
    rng = np.random.default_rng(3)
    vm = kernels.vector_math()
    arrays = rng.standard_normal((7, 300)), rng.standard_normal((300, 7)).T, rng.standard_normal((5, 9)).astype(np.float32)
    for a in arrays:
        rows, cols = vm["sum_rows"](a), vm["sum_cols"](a)
        assert rows.dtype == cols.dtype == a.dtype and rows.shape == (a.shape[0],) and cols.shape == (a.shape[1],)
        rtol = 1e-6 if a.dtype == np.float32 else 1e-13
        np.testing.assert_allclose(rows, a.sum(axis=1), rtol=rtol)
        np.testing.assert_allclose(cols, a.sum(axis=0), rtol=rtol)


@needs_numba
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_small_matmul_agrees_with_matmul_on_every_layout(dtype):
    """kernels.small_matmul takes either loop order by the right operand's strides (a dot product
    along a transposed operand's contiguous columns, else rows): every pair of layouts (C, F, a
    strided view), empty inner dimensions and one column, in the operands' dtype."""
    rng = np.random.default_rng(7)
    mm = kernels.small_matmul()

    def layouts(m, n):
        a = rng.standard_normal((m, n)).astype(dtype)
        yield a
        yield np.asfortranarray(a)
        yield rng.standard_normal((n, m)).astype(dtype).T
        yield rng.standard_normal((2 * m, n)).astype(dtype)[::2]

    rtol = 1e-5 if dtype is np.float32 else 1e-13
    for m, k, n in [(2, 128, 2), (3, 5, 1), (1, 7, 4), (4, 0, 3), (2, 2, 128)]:
        for a in layouts(m, k):
            for b in layouts(k, n):
                got = mm(a, b)
                assert got.dtype == dtype and got.shape == (m, n)
                np.testing.assert_allclose(got, a @ b, rtol=rtol, atol=rtol * max(k, 1) ** 0.5)


# ---- the float32 functions ----------------------------------------------------------------------

#: against NumPy's float32 ufuncs (a million points each; NumPy's own float32 log is up to 3 ulp from
#: float64 math rounded, expm1 3); against float64 math rounded to float32: 2 for all (exp, expm1, log 1)
MAX_ULP_F32 = {"exp": 2, "expm1": 2, "log": 4, "log1p": 2, "tanh": 3, "sin": 2, "cos": 2}
TINY32 = float(np.finfo(np.float32).tiny)
SPECIAL32 = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, -1e-40, TINY32, -TINY32, 1e-30, -1e-30, 1e-7,
             -1e-7, 1.0, -1.0, 0.5, -0.5, 88.72283, 88.72284, 89.0, 100.0, -87.33654, -103.27893, -103.97208,
             -104.0, -120.0, 3.4028235e38, -3.4028235e38, 0.34657359, -0.34657359, 9.0, -9.0, 9.1, 10.0, -10.0,
             24.0, -0.99999994, 1.6777216e7]


def _inputs32(name: str, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    sign = rng.choice([-1.0, 1.0], n)
    parts = [rng.uniform(-1, 1, n), rng.uniform(-12, 12, n), rng.uniform(-110, 95, n),
             sign * np.exp(rng.uniform(-103, 88.7, n)), rng.uniform(-1e-4, 1e-4, n), np.array(SPECIAL32)]
    if name == "log1p":
        parts.append(np.expm1(rng.uniform(-17, 0, n)))  # near -1
    if name == "log":
        parts.append(rng.uniform(0.5, 2.0, n))  # around 1
    if name in vmath.TRIG:  # and the float32 values nearest multiples of pi/2
        turns = (np.pi / 2 * rng.integers(0, int(vmath.TRIG_MAX / (np.pi / 2)), n // 3)).astype(np.float32)
        parts += [rng.uniform(-vmath.TRIG_MAX, vmath.TRIG_MAX, n), turns, np.nextafter(turns, np.float32(np.inf)),
                  -np.nextafter(turns, np.float32(-np.inf))]
    return np.concatenate(parts).astype(np.float32)


def _rounded(name: str, x: np.ndarray) -> np.ndarray:
    """float64 math on float32 `x`, rounded to float32."""
    with np.errstate(all="ignore"):
        return _numpy(name, x.astype(np.float64)).astype(np.float32)


def _ulps32(got: np.ndarray, want: np.ndarray) -> float:
    assert got.dtype == want.dtype == np.float32
    return _ulps(got, want, TINY32)


@pytest.mark.parametrize("name", vmath.FUNCTIONS)
def test_plain_python_float32_functions_agree_with_numpy(name):
    """The float32 functions as plain Python (np.float32 arithmetic): a sample of each range, against
    NumPy's float32 ufunc and against float64 math rounded to float32."""
    x = _inputs32(name, 200, seed=1)
    f = getattr(vmath, vmath.FLOAT32[name])
    with np.errstate(all="ignore"):  # (float32 scalar arithmetic overflows to inf where it should)
        got = np.array([f(v) for v in x], np.float32)
    assert _ulps32(got, _plain(name, x)) <= MAX_ULP_F32[name]
    assert _ulps32(got, np.where(np.isnan(_plain(name, x)), np.float32(np.nan), _rounded(name, x))) <= 2


@needs_numba
@pytest.mark.parametrize("name", vmath.FUNCTIONS)
def test_compiled_float32_functions_agree_with_numpy_to_a_few_ulp(name):
    """Compiled, on float32 arrays: float32 out, a few float32 ulp from NumPy's float32 ufunc and at
    most 2 from float64 math rounded (so computed to float32's precision, not to float64's)."""
    x = _inputs32(name, 200_000)
    got = kernels.vector_math()[f"{vmath.FLOAT32[name]}_array"](x)
    assert got.dtype == np.float32
    assert _ulps32(got, _numpy(name, x)) <= MAX_ULP_F32[name]
    assert _ulps32(got, _rounded(name, x)) <= 2
    view = x[:4000].reshape(40, 100).T[::3]  # any layout, its shape kept
    assert _ulps32(kernels.vector_math()[f"{vmath.FLOAT32[name]}_array"](view), _numpy(name, view)) <= MAX_ULP_F32[name]


@needs_numba
def test_float32_functions_compute_in_float32():
    """Numba types them on float32 throughout (a Python float constant would promote to float64):
    float32 in, float32 out."""
    import numba

    vm = kernels.vector_math()
    for name in vmath.FUNCTIONS:
        f = vm[vmath.FLOAT32[name]]
        f(np.float32(0.75))
        (sig,) = [s for s in f.nopython_signatures if s.args == (numba.float32,)]
        assert sig.return_type == numba.float32, (name, sig)


@needs_numba
@pytest.mark.parametrize("name", ["sin", "cos", "sin_f32", "cos_f32"])
def test_a_loop_calling_sin_or_cos_is_vectorised(name):
    """A loop that calls sin or cos is vectorised: its IR holds vectors of floats (a branch left
    around a call, as cos once had, or a call LLVM does not inline, as the float64 ones compiled on
    their own were on Python 3.12, leaves it scalar: 3.7 times slower)."""
    import numba

    fn = kernels.vector_math()[name]

    @numba.njit(error_model="numpy")
    def loop(a, out):
        for i in range(a.size):
            out[i] = fn(a[i])
    a = np.linspace(-2, 2, 16).astype(np.float32 if name.endswith("_f32") else np.float64)
    loop(a, a.copy())
    assert re.search(r"<\d+ x (double|float)>", loop.inspect_llvm(loop.signatures[0])), name


# ---- program kernels that call them -------------------------------------------------------------


def _fresh(fn):
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _chain(x):
    return np.sum(np.tanh(x) * np.exp(-x * x) + np.log1p(x * x) - np.expm1(0.1 * x) + np.log(2.0 + np.sin(x)))


def _row_bias(x, b):  # (n, m) + (n, 1): the bias's cotangent sums along axis 1
    return np.sum(np.tanh(x + b) * x)


def _col_bias(x, b):  # (n, m) + (m,): along axis 0
    return np.sum(np.exp(0.1 * (x + b)))


def _outer(u, v):  # (n, 1) + (1, m): both reduced
    return np.sum(np.tanh(u + v))


def _dense(W, b, x):
    return np.sum(np.tanh(W @ x + b[:, None]))


def _both_sides(W, x):  # x before the loop (in W @ x) and in it; a float operand
    z = W @ x
    return np.sum(np.exp(-0.5 * z * z) * x + 2.0)


def _make(fn, rng, dtype):
    shapes = {_chain: [(500,)], _row_bias: [(6, 150), (6, 1)], _col_bias: [(150, 6), (6,)], _outer: [(30, 1), (1, 20)],
              _dense: [(5, 5), (5,), (5, 130)], _both_sides: [(4, 4), (4, 70)]}[fn]
    return tuple(rng.standard_normal(s).astype(dtype) for s in shapes)


@needs_numba
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fn", [_chain, _row_bias, _col_bias, _outer, _dense, _both_sides],
                         ids=lambda f: f.__name__.strip("_"))
def test_kernels_with_vector_math_agree_with_the_general_path(fn, dtype):
    """Each program runs as a Numba kernel calling vmath (its source says so), and its value and
    gradients are the general path's over calls with new values: to 1e-12 in float64, within float32
    rounding in float32; a broadcast operand's cotangent is summed along the right axis."""
    rng = np.random.default_rng(5)
    own = _fresh(fn)
    n = fn.__code__.co_argcount
    fast = bytegrad.differentiate(own, wrt=tuple(range(n)), tier="numba")
    general = bytegrad.differentiate(fn, wrt=tuple(range(n)), tier="general")
    for _ in range(3):
        args = _make(fn, rng, dtype)
        got, want = fast.value_and_grad(*args), general.value_and_grad(*args)
        rtol = 1e-12 if dtype == np.float64 else 2e-5
        assert_trees_close(got, want, rtol=rtol, atol=rtol * 10)
        for g, a in zip(got[1], args):
            assert g.shape == a.shape and g.dtype == a.dtype
    (prog,) = [p for t in compiled._BY_FUNCTION[own].values() for p in t.programs]
    assert prog.backend == "numba" and "vm" in prog.source, prog.source
    if dtype == np.float32 and fn is _chain:  # the float32 functions, on their argument rounded to float32
        assert re.search(r"vm\d+\(f32\d+\(", prog.source), prog.source
    elif dtype == np.float32:  # a float32 loop (elements read as they are), float32 partial sums
        assert "float(" not in prog.source and re.search(r"part = f32\d+\(0\.0\)", prog.source), prog.source
    if fn is not _chain:  # one loop nest over the broadcast shape (compiled/numba_fused.py)
        assert re.search(r"for i in range\(\d+\):\n(.*\n)*\s+for j in range", prog.source), prog.source
    assert fast.stats()["compiled"]["disagreements"] == 0


def _float_scale(x, b, s):  # a differentiated float in the loop: its cotangent summed over all elements
    return np.sum(np.tanh(x + b) * s)


@needs_numba
def test_a_float_argument_of_the_loop_gets_the_sum_of_its_elements():
    rng = np.random.default_rng(6)
    own = _fresh(_float_scale)
    fast = bytegrad.differentiate(own, wrt=(0, 1, 2), tier="numba")
    general = bytegrad.differentiate(_float_scale, wrt=(0, 1, 2), tier="general")
    for _ in range(3):
        args = rng.standard_normal((4, 50)), rng.standard_normal((4, 1)), float(rng.uniform(0.5, 2))
        assert_trees_close(fast.value_and_grad(*args), general.value_and_grad(*args), rtol=1e-12, atol=1e-12)
    (prog,) = [p for t in compiled._BY_FUNCTION[own].values() for p in t.programs]
    assert prog.backend == "numba" and "for j in range" in prog.source, prog.source


def _blocks(x, b):  # one dimension, a broadcast (1,) operand and a float constant: float32 sums in blocks
    return np.sum(np.exp(0.5 * np.tanh(x + b)) * x - 2)


@needs_numba
@pytest.mark.parametrize("n", [1000, 2500])
def test_a_float32_loop_sums_in_float32_blocks_into_a_float64_total(n):
    """A one-dimensional float32 loop computes in float32 and sums blocks of elements in float32: its
    value and gradients are the general path's within float32 rounding, for one block and for several
    (the last one short)."""
    rng = np.random.default_rng(7)
    own = _fresh(_blocks)
    fast = bytegrad.differentiate(own, wrt=(0, 1), tier="numba")
    general = bytegrad.differentiate(_blocks, wrt=(0, 1), tier="general")
    for _ in range(3):
        args = rng.standard_normal(n).astype(np.float32), rng.standard_normal(1).astype(np.float32)
        got, want = fast.value_and_grad(*args), general.value_and_grad(*args)
        assert_trees_close(got, want, rtol=2e-5, atol=2e-4)
        assert [g.dtype for g in got[1]] == [np.float32, np.float32]
    for prog in [p for t in compiled._BY_FUNCTION[own].values() for p in t.programs]:  # (one per rule registry)
        assert prog.backend == "numba" and "for i0 in range(0, " in prog.source and "float(" not in prog.source, \
            prog.source
    assert fast.stats()["compiled"]["disagreements"] == 0


# ---- sin and cos: beyond TRIG_MAX, and the kernels that call them -------------------------------

HUGE = [1e22, 2.0 ** 60, 1e300, -1e300, 1.7976931348623157e308, 10000000.000000002, -3e7]


@pytest.mark.parametrize("compiled_", [False, pytest.param(True, marks=needs_numba)], ids=["python", "compiled"])
def test_sin_and_cos_give_nan_beyond_trig_max_and_their_guards_say_so(compiled_):
    """Beyond TRIG_MAX (and at inf, NaN) the functions give NaN, not a wrong number, and `trig_guard`
    NaN (0.0 within, TRIG_MAX itself included); on whole arrays those elements are NumPy's values."""
    get = kernels.vector_math().__getitem__ if compiled_ else lambda name: getattr(vmath, name)
    for x in HUGE + [np.inf, -np.inf, np.nan]:
        for name in ("sin", "cos", "sin_f32", "cos_f32"):
            with np.errstate(over="ignore"):
                arg = np.float32(x) if name.endswith("_f32") else x
                if abs(arg) <= vmath.TRIG_MAX:  # (1e7 + 2e-9 is 1e7 in float32)
                    continue
                assert math.isnan(get(name)(arg)), (name, x)
                assert math.isnan(get("trig_guard_f32" if name.endswith("_f32") else "trig_guard")(arg))
    for x in (vmath.TRIG_MAX, -vmath.TRIG_MAX, 0.0, -0.0, 1e-310, 3.0):
        assert get("trig_guard")(x) == 0.0 and get("trig_guard_f32")(np.float32(x)) == 0.0
        assert not math.isnan(get("sin")(x)) and not math.isnan(get("cos_f32")(np.float32(x)))
    assert math.copysign(1.0, get("sin")(-0.0)) == -1.0 and math.copysign(1.0, get("sin_f32")(np.float32(-0.0))) == -1.0
    if compiled_:
        x = np.array(HUGE + [np.inf, 1.0, -2.0, np.nan])
        with np.errstate(all="ignore"):
            for name in ("sin", "cos"):
                assert _ulps(get(f"{name}_array")(x), _numpy(name, x)) <= 1
                x32 = x.astype(np.float32)
                assert _ulps32(get(f"{name}_f32_array")(x32), _numpy(name, x32)) <= 1


def _elem10(x):  # bench/cases.py's elem10
    return np.sum(np.tanh(x) * np.exp(-x * x) + np.sin(x) / (1.0 + x * x) - 0.5 * x)


def _loop_body(x):  # bench/cases.py's loop50, one step of it
    return np.sum(x * np.sin(x) + 0.1 * np.cos(x))


def _sin_chain(x):
    for _ in range(4):
        x = np.sin(x)
    return np.sum(x)


def _loop50(x):  # bench/cases.py's loop50
    for _ in range(50):
        x = x * np.sin(x) + 0.1 * np.cos(x)
    return np.sum(x)


def _sin100(x):  # bench/cases.py's sin100
    for _ in range(100):
        x = np.sin(x)
    return np.sum(x)


def _sin_bias(x, b):  # (n, m) + (n, 1): one loop nest (compiled/numba_fused.py)
    return np.sum(np.sin(x + b) * np.cos(x))


_TRIG_ARGS = {_elem10: [(1000, -2.0, 2.0)], _loop_body: [(1000, -30.0, 30.0)], _sin_chain: [(500, -3.0, 3.0)],
              _sin_bias: [((6, 150), -20.0, 20.0), ((6, 1), -1.0, 1.0)]}
_LIBM_ARGS = {_loop50: [(10, 0.5, 1.5)], _sin100: [(1, 0.5, 1.5)], (_loop50, 1000): [(1000, 0.5, 1.5)]}


def _trig_args(fn, rng, dtype):
    return tuple(rng.uniform(lo, hi, shape).astype(dtype) for shape, lo, hi in {**_TRIG_ARGS, **_LIBM_ARGS}[fn])


def _numba_and_general(fn):
    own = _fresh(fn)
    wrt = tuple(range(fn.__code__.co_argcount))
    return own, bytegrad.differentiate(own, wrt=wrt, tier="numba"), bytegrad.differentiate(fn, wrt=wrt, tier="general")


@needs_numba
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fn", list(_TRIG_ARGS), ids=lambda f: f.__name__.strip("_"))
def test_kernels_with_sin_and_cos_agree_with_the_general_path(fn, dtype):
    """elem10, loop50's body, a sin chain, a broadcast loop nest: Numba kernels whose element loops call
    vmath's sin and cos (float32 ones in float32 loops) and add their guards to the sum (the source
    says so), with the general path's value and gradients to 1e-12 (float32: within its rounding)."""
    prog = _kernel_agrees(fn, dtype, 2e-5)
    assert re.search(r"(total|part) = radd\d+\(\1, vm\d+\(", prog.source), prog.source
    assert "np.sin" not in prog.source and "np.cos" not in prog.source and "math." not in prog.source, prog.source
    assert not re.search(r"= f(?!32)\d+\(", prog.source), prog.source  # (a ufunc's call: Numba's libm; f32: float32)


def _kernel_agrees(fn, dtype, rtol32):
    """fn's Numba program (its source), which gave the general path's value and gradients on 3 calls."""
    rng = np.random.default_rng(11)
    own, fast, general = _numba_and_general(fn[0] if isinstance(fn, tuple) else fn)
    for _ in range(3):
        args = _trig_args(fn, rng, dtype)
        got, want = fast.value_and_grad(*args), general.value_and_grad(*args)
        rtol = 1e-12 if dtype == np.float64 else rtol32
        assert_trees_close(got, want, rtol=rtol, atol=rtol * 10)
    (prog,) = [p for t in compiled._BY_FUNCTION[own].values() for p in t.programs]
    assert prog.backend == "numba", prog.source
    assert fast.stats()["compiled"]["disagreements"] == 0 and fast.stats()["compiled"]["compiled_calls"] >= 2
    return prog


@needs_numba
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fn", list(_LIBM_ARGS), ids=["loop50", "sin100", "loop50-1000"])
def test_long_chains_of_sin_and_cos_and_short_loops_keep_numbas_sin_and_cos(fn, dtype):
    """loop50 (200 sin and cos an element, on 10 or 1000 elements) and 100 chained np.sin on array[1]:
    vmath's would be slower (latency on a few elements) or take long to compile (every call
    inlined), so the kernel keeps Numba's (program_numba.TRIG_MIN_SIZE, TRIG_MAX_CALLS). loop50
    multiplies 50 derivatives: bench/cases.py's float32 tolerance."""
    prog = _kernel_agrees(fn, dtype, 1e-3)
    assert "radd" in prog.source and not re.search(r"vm\d+\(", prog.source), prog.source


@needs_numba
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fn", [_elem10, _loop_body, _sin_bias], ids=lambda f: f.__name__.strip("_"))
def test_a_huge_argument_of_sin_or_cos_gets_the_general_paths_gradient(fn, dtype):
    """An argument beyond TRIG_MAX (1e22, 2^60, 1e300, float32's 3e38) in a kernel's element loop
    makes its loss NaN (the guard; sin's own NaN there would too, where the loss reads it), so the
    call runs on the general path and gives its value and gradients; the next ordinary call runs the
    kernel again."""
    rng = np.random.default_rng(12)
    own, fast, general = _numba_and_general(fn)
    huge = [1e22, 2.0 ** 60, 1e300 if dtype == np.float64 else 3e38]
    for big in [None] + huge + [None]:
        args = _trig_args(fn, rng, dtype)
        if big is not None:
            args[0].reshape(-1)[3] = big
        with np.errstate(all="ignore"):
            got, want = fast.value_and_grad(*args), general.value_and_grad(*args)
        rtol = 1e-12 if big is not None or dtype == np.float64 else 2e-5
        assert_trees_close(got, want, rtol=rtol, atol=rtol * 10)
        (run, *others) = [r for t in compiled._BY_FUNCTION[own].values() for r in t.runs]
        prog = run.program
        if big is None:  # the kernel's call
            calls = run.calls
            assert np.all(np.isfinite(got[1][0])), got
        else:  # not the kernel's (a program of the NumPy back end may have been captured from it)
            assert run.calls == calls and all(r.program.backend == "numpy" for r in others)
    assert prog.backend == "numba" and re.search(r"(total|part) = radd\d+\(\1, vm\d+\((f32\d+\()?x1", prog.source), prog.source
