"""A Numba program reports floating-point errors as the general path does (compiled/numba_fpflag.py).

Each test runs a function under tier="numba" and tier="general", call by call, with new values on
every call (some finite throughout, some that meet an error), and compares the results (or the
exception's type), the gradients and the warnings (message, file, line, each one counted). Each also
checks that the Numba program served the calls that met no error: a test in which the general
path answered every call would show nothing.
"""
from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

import bytegrad

pytest.importorskip("numba")


def _outcome(d, args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = ("ok", d.value_and_grad(*args))
        except Exception as exc:  # noqa: BLE001 - compared by type with the general path's
            result = ("raised", type(exc).__name__)
    return result, [(str(w.message), w.filename, w.lineno) for w in caught]


def _same(got, want):
    if got[0] != want[0]:
        return False
    if got[0] == "raised":
        return got[1] == want[1]
    (v1, g1), (v2, g2) = got[1], want[1]
    return np.allclose(v1, v2, rtol=1e-12, atol=0, equal_nan=True) and \
        all(np.allclose(a, b, rtol=1e-12, atol=0, equal_nan=True) for a, b in zip(np.atleast_1d(g1), np.atleast_1d(g2)))


def _compare(fn, calls, state=None, served=2):
    """Run `calls` (functions that make each call's arguments, fresh for each side) through tier numba
    and general; `state(i)`: a context manager call i runs under. Returns the Numba function, whose
    program must have served `served` calls or more."""
    fast = bytegrad.differentiate(fn, tier="numba")
    general = bytegrad.differentiate(fn, tier="general")
    for i, make in enumerate(calls):
        seen = []
        for d in (fast, general):
            if state is None:
                seen.append(_outcome(d, make()))
            else:
                with state(i):
                    seen.append(_outcome(d, make()))
        (got, got_w), (want, want_w) = seen
        assert _same(got, want), f"call {i}: {got} != general {want}"
        assert got_w == want_w, f"call {i}: warnings {got_w} != general {want_w}"
    programs = fast.stats()["compiled"]["programs"]
    if [p["backend"] for p in programs] != ["numba"]:
        pytest.skip(f"no Numba program here (BYTEGRAD_DISABLE_NUMBA?): {fast.stats()['compiled']}")
    assert programs[0]["calls"] >= served, "the Numba program served no call: the test shows nothing"
    return fast


def _xs(*rows):
    return [lambda r=r: (np.array(r, dtype=float),) for r in rows]


def sigmoid(x):
    return np.sum(1.0 / (1.0 + np.exp(-x)))  # exp overflows where x < -709; the value stays finite


def test_sigmoid_overflow_warns_as_the_general_path():
    fast = _compare(sigmoid, _xs([1.0, 2.0], [0.5, -1.0], [-800.0, 1.0], [3.0, 1.0], [-750.0, -900.0], [0.1, 0.2]))
    info = fast.stats()["compiled"]
    assert info["general_calls"] == 2 and len(info["programs"]) == 1  # (the two calls that overflowed; no capture)


def ratio(x, y):
    return np.sum(x / y)


def test_zero_over_zero_is_invalid_as_on_the_general_path():
    calls = [lambda a=a, b=b: (np.array(a), np.array(b)) for a, b in
             [([1.0, 2.0], [3.0, 4.0]), ([2.0, 1.0], [1.0, 5.0]), ([0.0, 1.0], [0.0, 2.0]), ([1.0, 1.0], [2.0, 0.0]),
              ([4.0, 3.0], [2.0, 1.0])]]
    _compare(ratio, calls)


def logsum(x):
    return np.sum(np.log(x) * x)


def test_log_of_zero_divides_as_on_the_general_path():
    _compare(logsum, _xs([1.0, 2.0], [3.0, 0.5], [0.0, 1.0], [2.0, 2.0], [1.0, 0.0], [4.0, 1.5]))


def root(x):
    return np.sum(np.sqrt(x) * x)  # its derivative divides by zero at 0


class _Seterr:
    def __init__(self, **kw):
        self.kw = kw

    def __enter__(self):
        self.old = np.seterr(**self.kw)

    def __exit__(self, *exc):
        np.seterr(**self.old)


_ROOTS = _xs([1.0, 2.0], [3.0, 4.0], [0.0, 1.0], [2.0, 5.0], [0.0, 0.0], [1.5, 0.5])


def test_seterr_raise_raises_as_on_the_general_path():
    # (all="raise" asks for underflow too: no kernel runs under it, and the calls from the third on are general)
    _compare(root, _ROOTS, lambda i: _Seterr(all="raise") if i >= 2 else _Seterr(), served=1)
    _compare(root, _ROOTS, lambda i: _Seterr(divide="raise", over="raise", invalid="raise") if i >= 2 else _Seterr(),
             served=3)


def test_seterr_divide_ignore_keeps_the_other_warnings():
    _compare(root, _ROOTS, lambda i: _Seterr(divide="ignore") if i >= 2 else _Seterr())


def test_errstate_blocks_around_the_call():
    modes = [{}, {}, {"divide": "raise"}, {"all": "ignore"}, {"invalid": "ignore"}, {"over": "raise"}]
    _compare(root, _ROOTS, lambda i: np.errstate(**modes[i]))
    _compare(sigmoid, _xs([1.0, 2.0], [0.5, -1.0], [-800.0, 1.0], [-800.0, 1.0], [-800.0, 1.0], [-800.0, 1.0]),
             lambda i: np.errstate(**modes[i]))


def test_a_call_handler_is_called_as_on_the_general_path():
    calls: list = []

    def handler(kind, flag):
        calls.append(kind)

    fast_calls, general_calls = [], []
    fast = bytegrad.differentiate(root, tier="numba")
    general = bytegrad.differentiate(root, tier="general")
    for make in _ROOTS:
        for d, into in ((fast, fast_calls), (general, general_calls)):
            calls.clear()
            with np.errstate(divide="call", invalid="call", over="ignore", call=handler):  # (none left at "warn")
                d.value_and_grad(*make())
            into.append(list(calls))
    assert fast_calls == general_calls and any(general_calls)


def tiny(x):
    return np.sum(np.exp(-x) * 2.0)  # exp(-800) underflows to 0.0: a finite value


def test_underflow_that_raises_declines_the_kernel():
    """A kernel cannot see underflow (its value is finite): with `under` other than "ignore" the
    call goes to the general path, which raises or warns."""
    xs = _xs([1.0, 2.0], [3.0, 4.0], [800.0, 1.0], [2.0, 900.0], [1.0, 1.0])
    _compare(tiny, xs, lambda i: _Seterr(under="raise") if i in (2, 3) else _Seterr())
    _compare(tiny, xs, lambda i: _Seterr(under="warn") if i in (2, 3) else _Seterr())


def test_the_tiers_own_checks_keep_a_kernel_of_an_argument_that_overflows():
    """The capture's own call overflows: the program's check (under all="ignore") still keeps the
    kernel, and the next calls report as the general path does."""
    _compare(sigmoid, _xs([-800.0, 1.0], [0.5, -1.0], [-800.0, 2.0], [3.0, 1.0]))


def effects(x, log, rng):
    log.append(float(x[0]))
    noise = rng.random() if rng is not None else random.random()
    return np.sum(np.sqrt(x) * x) + noise


def test_effects_happen_once_when_a_call_meets_an_error():
    """A function with effects stays on the general path (compiled/effects.py): a call that meets a
    floating-point error appends and draws once, as the general path's call does."""
    seen = []
    for tier in ("numba", "general"):
        log: list = []
        rng = np.random.default_rng(5)
        d = bytegrad.differentiate(effects, tier=tier, wrt=0)
        for make in _ROOTS:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                d.value_and_grad(*make(), log, rng)
            log.append(len(caught))
        seen.append((log, rng.random()))
    assert seen[0] == seen[1]


def shifted(x):
    y = np.exp2(x)  # (on 300 elements: NumPy's exp2 between two kernel parts, compiled/lower_numba.py HYBRID_MIN)
    return np.sum(y[1:] * y[:-1]) + np.sum(y)


def test_an_array_kernel_with_a_numpy_step_reports_each_warning_once():
    rng = np.random.default_rng(0)

    def make(scale, at=None):
        x = rng.standard_normal(300) * scale
        if at is not None:
            x[at] = 1100.0  # exp2 overflows there
        return lambda: (x.copy(),)
    fast = _compare(shifted, [make(1.0), make(0.5), make(1.0, 7), make(1.0), make(2.0, 299), make(0.1)])
    assert fast.stats()["compiled"]["general_calls"] == 2


def pairs(x):
    return np.sum(np.sin(np.exp(x)[1:] * np.exp(x)[:-1]))  # a loop over the product, in one kernel


def test_a_fused_kernel_reports_as_the_general_path():
    rng = np.random.default_rng(1)

    def make(at=None):
        x = rng.standard_normal(200)
        if at is not None:
            x[at] = 800.0
        return lambda: (x.copy(),)
    _compare(pairs, [make(), make(), make(3), make(), make(0), make()])


def absorbed(x):
    y = 1.0 / (1.0 + np.exp(-x))  # exp overflows where x < -709, and the division absorbs the inf
    return np.sum(y[1:] * y[:-1])  # (an index: an array kernel, not an element loop)


def test_an_array_kernel_checks_a_value_that_a_later_step_absorbs():
    def make(at=None):
        x = np.linspace(-2.0, 2.0, 40)
        if at is not None:
            x[at] = -800.0
        return lambda: (x.copy(),)
    fast = _compare(absorbed, [make(), make(), make(5), make(), make(0), make()])
    assert fast.stats()["compiled"]["general_calls"] == 2


def weighted(x, w):
    return np.sum(w[1:] * np.exp(-np.exp(x)[1:]))  # exp overflows where x > 709, exp(-inf) is 0: all finite


def test_a_value_off_the_gradients_path_is_checked():
    """exp(x) is computed (as on the general path) but no cotangent reaches it: only its own check sees
    the overflow."""
    def make(at=None):
        x, w = np.linspace(-2.0, 2.0, 40), np.linspace(1.0, 2.0, 40)
        if at is not None:
            x[at] = 800.0
        return lambda: (x.copy(), w.copy())
    fast = bytegrad.differentiate(weighted, tier="numba", wrt=1)
    general = bytegrad.differentiate(weighted, tier="general", wrt=1)
    for i, call in enumerate([make(), make(), make(5), make(), make(30), make()]):
        (got, got_w), (want, want_w) = _outcome(fast, call()), _outcome(general, call())
        assert _same(got, want) and got_w == want_w, f"call {i}: {got, got_w} != general {want, want_w}"
    info = fast.stats()["compiled"]
    if [p["backend"] for p in info["programs"]] != ["numba"]:
        pytest.skip("no Numba program here")
    assert info["general_calls"] == 2  # (the calls whose exp overflowed went to the general path)


def weighted_loop(x, w):
    return np.sum(w * np.exp(-np.exp(x)))  # one element loop: each element's exp checked in it


def test_every_element_of_a_loop_is_checked():
    def make(at=None):
        x, w = np.linspace(-2.0, 2.0, 40), np.linspace(1.0, 2.0, 40)
        if at is not None:
            x[at] = 800.0
        return lambda: (x.copy(), w.copy())
    fast = bytegrad.differentiate(weighted_loop, tier="numba", wrt=1)
    general = bytegrad.differentiate(weighted_loop, tier="general", wrt=1)
    for i, call in enumerate([make(), make(), make(5), make(), make(0), make(39), make()]):
        (got, got_w), (want, want_w) = _outcome(fast, call()), _outcome(general, call())
        assert _same(got, want) and got_w == want_w, f"call {i}: {got, got_w} != general {want, want_w}"
    info = fast.stats()["compiled"]
    if [p["backend"] for p in info["programs"]] != ["numba"]:
        pytest.skip("no Numba program here")
    assert info["general_calls"] == 3  # (the calls whose exp overflowed, at the first, last or any element)
