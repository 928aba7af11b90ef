"""The Numba back end's forms for reductions along an axis (compiled/numba_reduce.py: a softmax's
`x.max(axis=1, keepdims=True)` and `x.sum(axis=1, keepdims=True)`), held to the general path and the
NumPy back end call by call: values and gradients, float64 and float32, ties in a max (the general
path splits the cotangent evenly; so must the kernel, bit for bit), NaN rows, and data that changes
between calls. No timing."""
from __future__ import annotations

import re
import types

import numpy as np
import pytest

import bytegrad
from bytegrad.compiled import numba_reduce
from bytegrad.runtime import kernels

pytestmark = pytest.mark.skipif(kernels.disabled(), reason="Numba disabled (BYTEGRAD_DISABLE_NUMBA)")


def fresh(fn):
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def backends(d) -> list:
    return [p["backend"] for p in d.stats()["compiled"]["programs"]]


def softmax_loss(x, w):
    s = x * w
    s = s - s.max(axis=1, keepdims=True)
    p = np.exp(s)
    p = p / p.sum(axis=1, keepdims=True)
    return np.sum(p * p * w)


def max_loss(x, w):
    return np.sum(np.max(x * w, axis=0) * np.sin(w[0]))


def min_loss(x, w):
    return np.sum((x * w).min(axis=-1) ** 2)


def sum_loss(x, w):
    return np.sum(np.tanh(np.sum(x * w, axis=1)) * w[:, 0])


def full_max_keep(x, w):
    return np.sum((x * w - (x * w).max(axis=None, keepdims=True)) ** 2)


def sum0_loss(x, w):
    y = x * w  # summed along axis 0, given by position, keepdims: one row after another
    return np.sum(np.sum(y * y, 0, keepdims=True) * w[0])


PROGRAMS = [softmax_loss, max_loss, min_loss, sum_loss, full_max_keep, sum0_loss]


def run_tiers(fn, calls, dtype):
    """The numba, numpy and general tiers called on each of `calls` (x, w) in turn: per call, their
    (value, gradients)."""
    tiers = {t: bytegrad.differentiate(fresh(fn), wrt=(0, 1), tier=t) for t in ("numba", "numpy", "general")}
    results = []
    for x, w in calls:
        x, w = x.astype(dtype), w.astype(dtype)
        results.append({t: d.value_and_grad(x, w) for t, d in tiers.items()})
    return tiers, results


def close(a, b, dtype):
    rtol, atol = (1e-12, 1e-14) if dtype == np.float64 else (2e-6, 2e-7)
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol * max(1.0, float(np.abs(b).max(initial=0.0))))


def inputs(seed, shape=(6, 5)):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape), rng.uniform(0.5, 1.5, shape)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_reductions_along_an_axis_run_in_the_kernel_and_match_the_general_path(fn, dtype):
    calls = [inputs(s) for s in range(4)]
    tiers, results = run_tiers(fn, calls, dtype)
    for got in results:
        for t in ("numba", "numpy"):
            close(got[t][0], got["general"][0], dtype)
            for a, b in zip(got[t][1], got["general"][1]):
                close(a, b, dtype)
    assert "numba" in backends(tiers["numba"]), tiers["numba"].stats()["compiled"]


def test_the_numba_gradient_matches_finite_differences():
    x, w = inputs(7)
    d = bytegrad.differentiate(fresh(softmax_loss), wrt=(0, 1), tier="numba")
    for _ in range(3):
        gx, gw = d.grad(x, w)
    assert "numba" in backends(d)
    eps = 1e-6
    for arr, g in ((x, gx), (w, gw)):
        for idx in [(0, 0), (2, 3), (5, 4)]:
            up, down = arr.copy(), arr.copy()
            up[idx] += eps
            down[idx] -= eps
            args_up = (up, w) if arr is x else (x, up)
            args_down = (down, w) if arr is x else (x, down)
            fd = (softmax_loss(*args_up) - softmax_loss(*args_down)) / (2 * eps)
            assert abs(fd - g[idx]) <= 1e-7 * max(1.0, abs(fd))


def tie_max_loss(x, w):
    m = (x * w).max(axis=1, keepdims=True)
    return np.sum(m * m * w[:, :1])


def tie_min_loss(x, w):
    return np.sum(np.min(x * w, axis=0) * w[0])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fn", [tie_max_loss, tie_min_loss], ids=lambda f: f.__name__)
def test_ties_split_the_cotangent_as_the_general_path_does_bit_for_bit(fn, dtype):
    w = np.ones((4, 3))
    ties = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [5.0, -1.0, 5.0], [0.0, 1.0, 2.0]])
    calls = [(np.arange(12.0).reshape(4, 3), w), (ties, w), (ties.T.copy().reshape(4, 3), w), (ties, w * 3.0),
             (np.arange(12.0).reshape(4, 3), w)]  # ties appear, change, and go between calls
    tiers, results = run_tiers(fn, calls, dtype)
    assert "numba" in backends(tiers["numba"])
    for got in results:
        for t in ("numba", "numpy"):
            assert got[t][0] == got["general"][0]
            for a, b in zip(got[t][1], got["general"][1]):
                assert a.dtype == b.dtype and np.array_equal(a, b), (t, a, b)
    gx = results[1]["general"][1][0]
    if fn is tie_max_loss:  # (the check has teeth: a tie shares the cotangent)
        assert gx[1, 0] == gx[1, 1] == gx[1, 2] != 0.0 and gx[0, 1] == gx[0, 2] and gx[0, 0] == 0.0


def test_a_nan_row_gives_the_general_paths_result():
    x, w = inputs(3)
    nan = x.copy()
    nan[2, 1] = np.nan
    tiers, results = run_tiers(softmax_loss, [(x, w), (x, w), (nan, w), (x, w)], np.float64)
    for got in results:
        np.testing.assert_allclose(got["numba"][0], got["general"][0], rtol=1e-12)  # (NaN where it is NaN)
        for a, b in zip(got["numba"][1], got["general"][1]):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    assert "numba" in backends(tiers["numba"])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_sum_loop_adds_in_numpys_order(dtype):
    """`axis_sum` gives np.sum's result bit for bit: pairwise along a contiguous axis (blocks of 8
    accumulators up to 128 elements, halves above), one row after another along another axis."""
    f = numba_reduce.helper("axis_sum")
    rng = np.random.default_rng(1)
    for n in [1, 2, 7, 8, 9, 15, 16, 17, 127, 128, 129, 136, 255, 257, 1000, 1031, 4100]:
        for shape, axis in (((3, n), 1), ((n, 5), 0), ((2, n, 3), 1), ((n,), 0)):
            x = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3, shape)).astype(dtype)
            pre, post = int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1:]))
            want = np.sum(x, axis=axis, keepdims=True)
            got = f(x.reshape(pre, n, post)).reshape(want.shape)
            assert got.dtype == want.dtype and np.array_equal(got, want), (shape, axis)


def test_options_the_forms_do_not_take_keep_the_numpy_back_end():
    def with_where(x, w):
        return np.sum(np.sum(x * w, axis=1, where=x > -10.0))

    def two_axes(x, w):
        return np.sum(np.max(x * w, axis=(0, 1), keepdims=True))

    for fn in (with_where, two_axes):
        tiers, results = run_tiers(fn, [inputs(s) for s in range(3)], np.float64)
        for got in results:
            close(got["numba"][0], got["general"][0], np.float64)
            for a, b in zip(got["numba"][1], got["general"][1]):
                close(a, b, np.float64)
        assert backends(tiers["numba"]) != ["numba"]


# ---- outlined elementwise statements (compiled/numba_outline.py) ---------------------------------


def rk4(A, k, y0):
    dt = 0.05

    def rhs(y):
        return np.tanh(A @ y) - k * y

    y = y0
    for _ in range(2):
        k1 = rhs(y)
        k2 = rhs(y + 0.5 * dt * k1)
        k3 = rhs(y + 0.5 * dt * k2)
        k4 = rhs(y + dt * k3)
        y = y + dt / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
    return np.sum(y ** 2)


def rk4_inputs(seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return tuple(a.astype(dtype) for a in (rng.standard_normal((8, 8)) / 3.0, rng.uniform(0.1, 0.5, 8),
                                           rng.standard_normal(8)))


def numba_program(d, own):
    from bytegrad.compiled import policy

    (prog,) = [p for t in policy._BY_FUNCTION[own].values() for p in t.programs]
    return prog


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_outlined_statements_give_the_inline_kernels_results_bit_for_bit(monkeypatch, dtype):
    from bytegrad.compiled import numba_outline

    results = {}
    for outline_min in (10, 10 ** 9):  # outlined, then as Numba's inline array expressions
        monkeypatch.setattr(numba_outline, "OUTLINE_MIN", outline_min)
        own = fresh(rk4)
        d = bytegrad.differentiate(own, wrt=(0, 1, 2), tier="numba")
        general = bytegrad.differentiate(rk4, wrt=(0, 1, 2), tier="general")
        results[outline_min] = []
        for seed in range(3):
            args = rk4_inputs(seed, dtype)
            got, want = d.value_and_grad(*args), general.value_and_grad(*args)
            close(got[0], want[0], dtype)
            for a, b in zip(got[1], want[1]):
                close(a, b, dtype)
            results[outline_min].append(got)
        prog = numba_program(d, own)
        assert prog.backend == "numba"
        assert bool(re.search(r"= ex\d+\(", prog.source)) == (outline_min == 10), prog.source
    for a, b in zip(results[10], results[10 ** 9]):
        assert a[0] == b[0] and all(np.array_equal(x, y) for x, y in zip(a[1], b[1]))


def test_a_kernel_over_the_array_statement_cap_keeps_the_numpy_back_end(monkeypatch):
    from bytegrad.compiled import numba_outline

    monkeypatch.setattr(numba_outline, "MAX_ARRAY_STATEMENTS", 20)
    d = bytegrad.differentiate(fresh(rk4), wrt=(0, 1, 2), tier="numba")
    general = bytegrad.differentiate(rk4, wrt=(0, 1, 2), tier="general")
    for seed in range(3):
        got, want = d.value_and_grad(*rk4_inputs(seed)), general.value_and_grad(*rk4_inputs(seed))
        close(got[0], want[0], np.float64)
    (program,) = d.stats()["compiled"]["programs"]
    assert program["backend"] == "numpy" and "elementwise statements, over the Numba back end's 20" in program["numba"]


@pytest.mark.parametrize("line, outlined", [
    ("v8 = x3 + v7", ("v8", "a0 + a1", ["x3", "v7"])),
    ("t28 = g45 * (1 - v45 ** 2)", ("t28", "a0 * (1 - a1 ** 2)", ["g45", "v45"])),
    ("t3 = -g4", ("t3", "-a0", ["g4"])),
    ("v9 = v7 * v7 + 0.5", ("v9", "a0 * a0 + 0.5", ["v7"])),
    ("v3 = (mv2(x1, x3))", None),          # a call: the kernel's own
    ("t5 = g2", None),                     # no operation
    ("s = f1 * 2.0", None),                # floats only: no array expression
    ("t5[0:3] = g2 + v7", None),           # a write into an array
    ("v4 = v7.sum() * x3", None),          # a method call
])
def test_which_statements_are_outlined(line, outlined):
    from bytegrad.compiled import numba_outline

    assert numba_outline._expression(line, {"x3", "v7", "g45", "v45", "g4", "g2", "x1"}) == outlined


def test_the_bench_mlps_softmax_runs_in_a_kernel():
    from bench import cases as bench_cases

    fast = bytegrad.differentiate(fresh(bench_cases.mlp_loss), tier="numba")
    general = bytegrad.differentiate(bench_cases.mlp_loss, tier="general")
    rng = np.random.default_rng(0)
    for _ in range(3):
        params, data = bench_cases.mlp_inputs((6, 5, 4, 3), batch=4)(rng)
        got, want = fast.value_and_grad(params, *data), general.value_and_grad(params, *data)
        close(got[0], want[0], np.float64)
        for key in want[1]:
            close(got[1][key], want[1][key], np.float64)
    assert backends(fast) == ["numba"]
