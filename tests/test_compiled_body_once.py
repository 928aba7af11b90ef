"""A capture run is the call's only run: an error only the capture raises never runs the body twice.

A capture run tracks every float argument; the general path only the differentiated ones. A blind call from C
(a ufunc of np.frompyfunc, np.vectorize, MINPACK, functools.cmp_to_key calling the user's Python) that meets a
value the call does not differentiate raised BlindCallError in the capture alone, and the call ran again on the
general path: each effect of the body before it (an append, an RNG draw in a callee) happened twice. Now the
capture lets such a call run, as the general path does, and refuses (runtime/monitor.py); a blind call that
meets a differentiated value raises once, as the general path's error. An error of the capture's own that still
reaches it (none is known: injected here) runs the body again only when the run showed no effect a program
replay would not redo, and is otherwise the call's error, raised once (compiled/abandon.py). A signature whose
capture raises the call's error is not captured after MAX_FAILED_CAPTURES of them (compiled/policy.py).

Each program is compared with tier general call by call: values, gradients, the callee's effects.
"""
from __future__ import annotations

import functools
import sys
import types

import numpy as np
import pytest

import bytegrad
from bytegrad.compiled import capture as capture_module, policy
from bytegrad.errors import DifferentiationError
from bytegrad.runtime import monitor

try:
    import scipy.integrate as integrate
except ImportError:  # (SciPy is optional)
    integrate = None

TIERS = ("numpy", "numba")
WATCH = pytest.mark.skipif(not (hasattr(sys, "monitoring") or monitor.CHECK),
                           reason="the frame watch needs sys.monitoring (3.12+) or BYTEGRAD_CHECK=1")

LOG: list = []


def tick(v):
    """The body's effect, in a callee (a static check sees the function only): an append and an RNG draw."""
    LOG.append(np.random.rand())
    return v


class Box:
    def __init__(self, v):
        self.v = v

    def total(self):
        return self.v * 3.0


def blind_method(x, c):  # np.frompyfunc's ufunc calls Box.total from C, on an object holding c[0]
    total = np.frompyfunc(Box.total, 1, 1)
    return np.sum(x) * total(Box(c[0]))


def blind_vectorize(x, c):  # np.vectorize's ufunc calls a lambda over c[0] from C
    k = c[0]
    return np.sum(x * np.vectorize(lambda t: t * k)(np.arange(3.0)))


def blind_frompyfunc(x, c):  # the C function np.frompyfunc is handed a lambda over c[0]
    k = c[0]
    return np.sum(x * np.frompyfunc(lambda t: t * k, 1, 1)(np.arange(3.0)).astype(float))


def blind_cmp(x, c):  # functools.cmp_to_key (C) is handed a lambda over c[0]
    k = c[0]
    return np.sum(x) * sorted([3.0, 1.0], key=functools.cmp_to_key(lambda a, b: (a - b) * k))[0]


def blind_caught(x, c):  # the capture's error was caught here: the call's value was the handler's
    k = c[0]
    try:
        r = np.vectorize(lambda t: t * k)(np.arange(3.0))
    except Exception:  # noqa: BLE001 - the user's handler, as written
        r = np.zeros(3)
    return np.sum(x * r)


def blind_leastsq(x, c):  # MINPACK's _lmdif is handed a lambda over c
    import scipy.optimize

    return np.sum(x) * scipy.optimize.leastsq(lambda t: t - c[0], 0.0)[0][0]


def blind_differentiated(x, c):  # the general path's own error: raised once
    total = np.frompyfunc(Box.total, 1, 1)
    return np.sum(x) * total(Box(x[0]))


def caller(fn):
    def f(x, c):
        x = tick(x)
        return fn(x, c)

    f.__qualname__ = f.__name__ = f"calls_{fn.__name__}"
    return f


def fresh(f):
    """A copy of `f`: a function's programs and signatures are its own (compiled/policy.py `tiers_for`)."""
    return types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)


def calls(f, tier, n=3, pullback=False):
    """Each call's (value, gradient, the effects it had, c after it), or the error it raised and its effects."""
    d = bytegrad.differentiate(fresh(f), tier=tier)
    out = []
    for k in range(n):
        x, c = np.array([0.5, 1.5, 2.5]) + k, np.array([0.25, 0.75, 1.25]) + k
        np.random.seed(k)
        before = len(LOG)
        try:
            if pullback:
                v, back = d.pullback(x, c)
                g = back(1.0)[0]
            else:
                v, g = d.value_and_grad(x, c)
            out.append((float(v), np.asarray(g).tolist(), LOG[before:], c.tolist()))
        except DifferentiationError as exc:
            out.append((type(exc).__name__, exc.problem, LOG[before:], c.tolist()))
    return out, d


def reason(d):
    stats = d.stats()
    return " ".join(r for key in ("compiled", "compiled_pullback") if key in stats
                    for r in stats[key]["not_compiled"].values())


@WATCH
@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn, words", [
    (blind_method, "Box.total is called from C code"),
    (blind_vectorize, "a rule that looks for the differentiated values a function it is given reads"),
    (blind_frompyfunc, "the C function numpy.frompyfunc is handed a Python callable"),
    (blind_cmp, "the C function _functools.cmp_to_key is handed a Python callable"),
    (blind_caught, "a rule that looks for the differentiated values a function it is given reads"),
    (blind_leastsq, "the C function scipy.optimize._minpack._lmdif is handed a Python callable"),
])
def test_a_blind_call_on_a_value_not_differentiated_runs_as_on_the_general_path(fn, words, tier):
    if fn is blind_leastsq:
        pytest.importorskip("scipy")
    f = caller(fn)
    want, _ = calls(f, "general")
    got, d = calls(f, tier)
    assert got == want  # values, gradients, one draw and one append per call, c unchanged
    assert all(len(call[2]) == 1 for call in got)
    assert words in reason(d)
    assert f"of {fn.__name__})" in reason(d)  # the user's line


@WATCH
@pytest.mark.parametrize("tier", TIERS)
def test_a_blind_call_on_a_value_not_differentiated_in_a_pullback(tier):
    f = caller(blind_vectorize)
    want, _ = calls(f, "general", pullback=True)
    got, _ = calls(f, tier, pullback=True)
    assert got == want and all(len(call[2]) == 1 for call in got)


@WATCH
@pytest.mark.parametrize("tier", TIERS)
def test_a_blind_call_on_a_differentiated_value_raises_once(tier):
    f = caller(blind_differentiated)
    want, _ = calls(f, "general", n=4)
    got, d = calls(f, tier, n=4)
    assert [(c[0], c[2]) for c in got] == [(c[0], c[2]) for c in want]
    assert all(c[0] == "BlindCallError" and len(c[2]) == 1 for c in got)  # the error, with its effects once
    assert "its capture run raised BlindCallError" in reason(d)  # not captured again (MAX_FAILED_CAPTURES)


def put_strided(x, c):  # np.put into a strided view of c: the capture's in-place rule takes contiguous arrays only
    np.put(c[::2], [0], 4.0)
    return np.sum(x * c)


@pytest.mark.parametrize("tier", TIERS)
def test_np_put_into_a_view_of_a_value_not_differentiated_runs_as_on_the_general_path(tier):
    f = caller(put_strided)
    want, _ = calls(f, "general")
    got, d = calls(f, tier)
    assert got == want and all(len(call[2]) == 1 for call in got)  # c written as there, the draw once
    assert "calls numpy.put on a value that depends on no differentiated argument" in reason(d)
    assert "(line " in reason(d) and "of put_strided)" in reason(d)


def write_through_real(x, c):  # a write through a complex array's `.real`: a layout the capture cannot map
    z = np.zeros(2, complex)
    z.real[:] = c[:2]
    return np.sum(x[:2] * z.real)


def write_through_f32_view(x, c):  # a write through a float32 view of c's memory
    c.view(np.float32)[0] = 1.0
    return np.sum(x * c)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn, words", [
    (write_through_real, "writes through a view in a memory layout bytegrad cannot map back to its array"),
    (write_through_f32_view, "calls ndarray.view on a value that depends on no differentiated argument"),
])
def test_a_write_through_an_unmappable_view_of_values_not_differentiated(fn, words, tier):
    f = caller(fn)
    want, _ = calls(f, "general")
    got, d = calls(f, tier)
    assert got == want and all(len(call[2]) == 1 for call in got)
    assert words in reason(d) and f"of {fn.__name__})" in reason(d)


class Holder:
    def __init__(self, w):
        self.w = w


def put_into_attribute(x, h):  # in a callee, the general path hooks a call on an object argument's attribute
    np.put(h.w[::2], [0], 4.0)
    return np.sum(x * h.w)


def put_strided_attribute(x, h):
    x = tick(x)
    return put_into_attribute(x, h)


@pytest.mark.parametrize("tier", ("general", *TIERS))
def test_np_put_into_a_strided_view_of_untracked_values_is_a_plain_store(tier):
    # (the general path raised MutationError here, where it hooked the call: np.put's rule takes contiguous arrays)
    d = bytegrad.differentiate(fresh(put_strided_attribute), tier=tier)
    for k in range(3):
        x, h = np.array([0.5, 1.5, 2.5]) + k, Holder(np.array([0.25, 0.75, 1.25]) + k)
        before = len(LOG)
        v, g = d.value_and_grad(x, h)
        assert (v, g.tolist(), h.w.tolist(), len(LOG)) == ([6.25, 18.25, 34.25][k], h.w.tolist(), h.w.tolist(), before + 1)
        assert h.w[0] == 4.0


def lotka_volterra(t, y, a, b):
    return np.array([a * y[0] - 0.4 * y[0] * y[1], -b * y[1] + 0.1 * y[0] * y[1]])


TIMES = np.linspace(0.0, 2.0, 5)  # a global array: the capture tracks it (a program reads it), the general path not


def ode_over_global_times(x, c):  # the ODE rule refused a tracked time: the capture's alone, before
    x = tick(x)
    return np.sum(integrate.odeint(lotka_volterra, [10.0, 5.0], TIMES, args=(x[0], x[1]), tfirst=True))


def ode_over_times_argument(x, c):  # the same with times the call does not differentiate (c)
    return np.sum(integrate.odeint(lotka_volterra, [10.0, 5.0], c, args=(x[0], x[1]), tfirst=True))


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn", [ode_over_global_times, ode_over_times_argument])
def test_a_solver_rule_given_values_not_differentiated_takes_them_as_constants(fn, tier):
    if integrate is None:
        pytest.skip("SciPy is not installed")
    f = fn if fn is ode_over_global_times else caller(fn)  # (a global the differentiated function reads)
    want, _ = calls(f, "general", n=2)
    got, d = calls(f, tier, n=2)
    assert all(len(call[2]) == 1 for call in got)
    for a, b in zip(got, want):  # (the solver's own tolerance: the same calls, so the same numbers)
        assert a[2:] == b[2:] and np.allclose(a[0], b[0], rtol=1e-12) and np.allclose(a[1], b[1], rtol=1e-9)
    assert "a rule that looks for the differentiated values a function it is given reads" in reason(d)
    assert f"of {fn.__name__})" in reason(d)


def writes_into_x(x, c):  # a write into the differentiated argument: the general path's MutationError
    y = np.sum(tick(x) * c)
    x *= 2.0
    return y


def writes_into_c(x, c):  # a pullback differentiates c too: the general path's MutationError, c unchanged
    y = np.sum(tick(x) * c)
    c += 1.0
    return y


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("f, pullback", [(writes_into_x, False), (writes_into_x, True), (writes_into_c, True)])
def test_a_write_into_a_differentiated_argument_raises_once(f, pullback, tier):
    want, _ = calls(f, "general", n=4, pullback=pullback)
    got, d = calls(f, tier, n=4, pullback=pullback)
    assert got == want
    assert all(c[0] == "MutationError" and len(c[2]) == 1 for c in got)  # once, with its effects once
    assert "its capture run raised MutationError (line " in reason(d)


def raises_on_positive(x, c):
    x = tick(x)
    if x[0] > 0.0:
        raise ValueError("positive")
    return np.sum(x * c)


@pytest.mark.parametrize("tier", TIERS)
def test_a_capture_that_raises_the_call_s_error_is_tried_a_bounded_number_of_times(tier, monkeypatch):
    runs = []
    real = capture_module.capture_run
    monkeypatch.setattr(capture_module, "capture_run", lambda *a, **k: runs.append(1) or real(*a, **k))
    d = bytegrad.differentiate(fresh(raises_on_positive), tier=tier)
    most = getattr(policy, "MAX_FAILED_CAPTURES", 3)  # (the parent commit had none: it captured on every call)
    for k in range(most + 2):
        before = len(LOG)
        with pytest.raises(ValueError, match="positive"):
            d.value_and_grad(np.array([1.0, 2.0]), np.array([3.0, 4.0]))
        assert len(LOG) == before + 1  # raised once, with its effect once
        if k < most - 1:
            assert reason(d) == ""
    assert len(runs) == most  # then the general path, with no capture
    assert "its capture run raised ValueError (line " in reason(d)
    assert "on 3 calls: it is not captured again" in reason(d)


# ---- an error of the capture's own that no source fix covers (injected) -------------------------------------


def decides_after_an_effect(x, c):
    x = tick(x)  # the effect, before the error
    if np.sum(x) > 0.0:  # the capture records a decision here (CaptureTape.check): the injected error
        return np.sum(x * c)
    return np.sum(x)


def show(v):
    print("shown", v[0])  # (refused at run time: no static check sees a print of a differentiated value)
    return v


def decides_after_a_print(x, c):
    x = show(x)
    if np.sum(x) > 0.0:
        return np.sum(x * c)
    return np.sum(x)


def decides_without_effects(x, c):
    y = x * 2.0
    if np.sum(y) > 0.0:
        return np.sum(y * c)
    return np.sum(y)


def inject(monkeypatch):
    def check(self, fn, args, kwargs, result, site):
        __bg_tape__ = None  # noqa: F841 (bytegrad's frame watch takes this hook for rewritten code, as the real one is)
        raise DifferentiationError("a capture-only error (injected by the test)", site.loc())

    monkeypatch.setattr(capture_module.CaptureTape, "check", check)


@pytest.mark.parametrize("pullback", [False, True])
@pytest.mark.parametrize("tier", TIERS)
def test_an_unknown_capture_only_error_after_an_effect_is_the_call_s_error_not_a_second_run(tier, pullback,
                                                                                            monkeypatch):
    inject(monkeypatch)
    want, _ = calls(decides_after_an_effect, "general", pullback=pullback)
    got, d = calls(decides_after_an_effect, tier, pullback=pullback)
    assert got[0][0] == "DifferentiationError" and "injected" in got[0][1]
    assert len(got[0][2]) == 1 and got[0][2] == want[0][2]  # the draw and the append happened once
    assert got[1:] == want[1:]  # then the general path, with no capture
    why = reason(d)
    assert "injected" in why and "draws from NumPy's global random generator" in why and "not run again" in why


@pytest.mark.parametrize("tier", TIERS)
def test_an_unknown_capture_only_error_after_an_effect_has_a_note(tier, monkeypatch):
    inject(monkeypatch)
    d = bytegrad.differentiate(fresh(decides_after_an_effect), tier=tier)
    with pytest.raises(DifferentiationError) as info:
        d.value_and_grad(np.ones(3), np.ones(3))
    assert any("not run again on the general path" in n for n in getattr(info.value, "__notes__", []))


@pytest.mark.parametrize("tier", TIERS)
def test_an_unknown_capture_only_error_without_effects_runs_the_general_path(tier, monkeypatch):
    inject(monkeypatch)
    want, _ = calls(decides_without_effects, "general")
    got, d = calls(decides_without_effects, tier)
    assert got == want
    assert "the capture run raised DifferentiationError" in reason(d) and "not run again" not in reason(d)


@pytest.mark.parametrize("tier", TIERS)
def test_an_unknown_capture_only_error_after_a_print_is_not_a_second_print(tier, monkeypatch, capsys):
    inject(monkeypatch)
    d = bytegrad.differentiate(fresh(decides_after_a_print), tier=tier)
    with pytest.raises(DifferentiationError, match="injected"):
        d.value_and_grad(np.ones(3), np.ones(3))
    assert capsys.readouterr().out.count("shown") == 1
    assert "passes a differentiated value through print" in reason(d)
