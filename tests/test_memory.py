"""Memory (issue 6): many gradients keep memory flat, tapes die with the call, caches do not grow,
and gradients that raise leak nothing.

The model is the digits MLP of examples/train_mlp_digits.py (64-64-10, tanh, softmax cross-entropy)
on random data of the same shapes, so the test needs no scikit-learn and runs in seconds.
"""
from __future__ import annotations

import gc
import os
import sys
import time
import tracemalloc
import weakref
from typing import Any, Callable

import numpy as np
import pytest

import bytegrad
from bytegrad import transform
from bytegrad.runtime.tape import current_tape
from bytegrad.transform import cache

MIB = 1024 * 1024


def mlp_loss(params, x, y):
    """Mean softmax cross-entropy of the 64-64-10 MLP on a batch: x (n, 64), y one-hot (n, 10)."""
    h = np.tanh(x @ params["W1"] + params["b1"])
    z = h @ params["W2"] + params["b2"]
    z = z - np.max(z, axis=1, keepdims=True)
    log_p = z - np.log(np.sum(np.exp(z), axis=1, keepdims=True))
    return -np.sum(y * log_p) / x.shape[0]


def mlp_data(seed: int = 0, batch: int = 32) -> tuple[dict, np.ndarray, np.ndarray]:
    r = np.random.default_rng(seed)
    params = {"W1": r.normal(size=(64, 64)) / 8.0, "b1": np.zeros(64),
              "W2": r.normal(size=(64, 10)) / 8.0, "b2": np.zeros(10)}
    x = r.uniform(0.0, 1.0, (batch, 64))
    y = np.eye(10)[r.integers(0, 10, batch)]
    return params, x, y


def rss_bytes() -> int:
    """Resident set size of this process, from /proc (Linux) or getrusage's peak elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # pragma: no cover - not Linux: the peak can only grow, which still shows a leak
        import resource
        scale = 1 if sys.platform == "darwin" else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def traced_growth(call: Callable[[], Any], n: int, warm_up: int = 20) -> int:
    """Bytes still allocated (tracemalloc) after `n` more calls, the smaller of two such windows.

    A leak grows in both windows; a one-time cost (compiling a fused kernel once the function is
    hot) falls in at most one of them.
    """
    for _ in range(warm_up):
        call()
    gc.collect()
    tracemalloc.start()
    try:
        windows = []
        for _ in range(2):
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(n):
                call()
            gc.collect()
            windows.append(tracemalloc.get_traced_memory()[0] - before)
    finally:
        tracemalloc.stop()
    return min(windows)


def test_ten_thousand_mlp_gradients_keep_resident_memory_flat():
    """RSS is sampled every 1,000 gradients. One step is allowed (the one-time cost of compiling
    fused kernels once the function is hot); apart from it memory must stay flat."""
    params, x, y = mlp_data()
    f = bytegrad.differentiate(mlp_loss)
    lr = 1e-3
    for _ in range(300):  # warm-up: rewrite, caches, allocator pools
        g = f.grad(params, x, y)
    gc.collect()
    samples = [rss_bytes()]
    caches_before = (len(cache._CACHES), len(transform._FN_CACHE))
    t0 = time.perf_counter()
    n = 10_000
    for i in range(1, n + 1):
        g = f.grad(params, x, y)
        params = {k: v - lr * g[k] for k, v in params.items()}  # new arrays each step, as in training
        if i % 1000 == 0:
            samples.append(rss_bytes())
    per_call_us = (time.perf_counter() - t0) / n * 1e6
    steps = [b - a for a, b in zip(samples, samples[1:])]
    one_time = max(steps)
    rest = sum(steps) - one_time
    print(f"\n{n} MLP gradients: {per_call_us:.0f} us per call (with the update); RSS growth per 1,000 "
          f"calls (MiB): {' '.join(f'{d / MIB:.1f}' for d in steps)}")
    # A leaked tape is >100 KiB per call (the activations alone), ~900 MiB over nine windows; even
    # 1 KiB per call would be 9 MiB.
    assert rest < 8 * MIB, f"resident memory grew by {rest / MIB:.1f} MiB (besides one step) over {n} gradients"
    assert one_time < 256 * MIB, f"a one-time growth of {one_time / MIB:.1f} MiB"
    s = f.stats()
    captured = int(bool(s.get("compiled", {}).get("programs")))  # a capture rewrites for every argument
    assert s["entries"] == s["misses"] and 1 <= s["entries"] <= 1 + captured, s
    assert (len(cache._CACHES), len(transform._FN_CACHE)) == caches_before
    assert current_tape() is None


def test_mlp_gradient_allocations_do_not_accumulate():
    """tracemalloc sees NumPy's buffers too: 500 more gradients leave almost nothing held."""
    params, x, y = mlp_data(1)
    f = bytegrad.differentiate(mlp_loss)
    growth = traced_growth(lambda: f.grad(params, x, y), 500, warm_up=300)
    assert growth < 64 * 1024, f"{growth} bytes still allocated after 500 gradients"


# ---- tapes die with the call ----------------------------------------------------------------------

_SEEN: dict[str, Any] = {}


def spy(v):
    return v * 1.0


@bytegrad.rrule(spy)
def _spy_rrule(v):
    """Keeps weak references to the current tape and to the value the pullback saves."""
    _SEEN["tape"] = weakref.ref(current_tape())
    _SEEN["saved"] = weakref.ref(v)

    def spy_pullback(out_bar):
        return (out_bar * 1.0,)

    return v * 1.0, spy_pullback


def spied(x):
    h = np.tanh(x) * 2.0  # h is saved by spy's rule
    return np.sum(spy(h) ** 2)


@pytest.mark.parametrize("api", ["grad", "value_and_grad"])
def test_tape_and_saved_values_are_freed_after_the_call(api):
    d = bytegrad.differentiate(spied)
    x = np.random.default_rng(2).normal(size=5)
    for _ in range(2):  # first call (rewrite) and cached code
        (d.grad if api == "grad" else d.value_and_grad)(x)
        # freed by reference counting alone, at once: no reference cycle keeps a tape alive
        assert _SEEN["tape"]() is None, "the tape outlived the gradient call"
        assert _SEEN["saved"]() is None, "a value saved for the reverse pass outlived the call"


def test_vjp_tape_lives_exactly_as_long_as_its_pullback():
    x = np.random.default_rng(3).normal(size=5)
    value, back = bytegrad.vjp(spied, x)
    assert _SEEN["tape"]() is not None
    back(1.0)
    back(2.0)
    assert _SEEN["tape"]() is not None
    del back
    assert _SEEN["tape"]() is None and _SEEN["saved"]() is None


class _Boom(Exception):
    pass


def spied_then_raises(x):
    h = np.tanh(x) * 2.0
    s = spy(h)
    if np.sum(s) < 1e9:
        raise _Boom("after recording")
    return np.sum(s)


def test_tape_of_a_failed_gradient_is_freed_once_the_exception_is():
    x = np.random.default_rng(4).normal(size=5)
    try:
        bytegrad.grad(spied_then_raises)(x)
    except _Boom:
        pass
    assert _SEEN["tape"]() is None and _SEEN["saved"]() is None
    assert current_tape() is None


# ---- gradients that raise leak nothing ------------------------------------------------------------


def _no_rule(x):
    return np.sum(np.frexp(np.sin(x))[0])


def _mutates(x):
    x += 1.0
    return np.sum(x)


def _user_error(x):
    h = np.exp(x) * 2.0
    if h[0] > -1.0:
        raise _Boom("user")
    return np.sum(h)


def _not_scalar(x):
    return np.sin(x) * 2.0


FAILING = [(_no_rule, bytegrad.NoRuleError), (_mutates, bytegrad.MutationError), (_user_error, _Boom),
           (_not_scalar, bytegrad.NonScalarOutputError)]


@pytest.mark.parametrize("fn, error", FAILING, ids=[c[0].__name__ for c in FAILING])
def test_gradient_that_raises_leaks_nothing(fn, error):
    d = bytegrad.differentiate(fn)
    x = np.random.default_rng(5).normal(size=64)

    def failing_call():
        try:
            d.grad(x)
        except error:
            return
        raise AssertionError(f"{fn.__name__} did not raise {error.__name__}")

    failing_call()  # the first call rewrites the function: one cache entry, kept and reused
    entries = (len(cache._CACHES), len(transform._FN_CACHE))
    growth = traced_growth(failing_call, 300)
    assert growth < 32 * 1024, f"{growth} bytes still allocated after 300 failing gradients"
    assert (len(cache._CACHES), len(transform._FN_CACHE)) == entries
    assert d.stats()["entries"] <= 2  # (the general path's rewrite, and a capture's variant of it)
    assert current_tape() is None


def test_reverse_steps_scale_only_their_own_temporaries_in_place():
    """A reverse step multiplies its partial by the cotangent in the partial's memory only when
    nothing else holds it: tanh's `1 - out**2` is fresh (scaled in place), exp's partial is its
    output, which the tape keeps (a pullback sweeps twice) and must come out unchanged."""
    x = np.linspace(-1.0, 1.0, 5000)
    ct = np.linspace(0.5, 2.0, 5000)
    for fn, d in ((lambda x: np.exp(x), np.exp), (lambda x: np.tanh(x), lambda x: 1 - np.tanh(x) ** 2)):
        y, pb = bytegrad.vjp(fn, x)
        kept = y.copy()
        (first,), (second,) = pb(ct), pb(ct)
        np.testing.assert_allclose(first, ct * d(x), rtol=1e-14)
        np.testing.assert_array_equal(second, first)
        np.testing.assert_array_equal(y, kept)


def test_a_fresh_partial_is_scaled_in_place(monkeypatch):
    """The in-place path is taken (on every supported CPython: it rests on reference counts)."""
    from bytegrad.runtime import backward
    into = []
    real = backward._multiply
    monkeypatch.setattr(backward, "_multiply", lambda a, b, out: (into.append(out is b), real(a, b, out=out))[1])
    w = np.linspace(0.0, 1.0, 5000)
    x = np.linspace(-1.0, 1.0, 5000)
    g = bytegrad.grad(lambda x: np.sum(np.tanh(x) * w))(x)
    np.testing.assert_allclose(g, w * (1 - np.tanh(x) ** 2), rtol=1e-14)
    assert into == [True]
