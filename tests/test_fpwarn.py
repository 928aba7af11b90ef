"""A RuntimeWarning that NumPy raises while bytegrad computes a gradient (division by zero in sqrt's
derivative at 0, log of 0 in the primal) points at the user's line, not at a rule's or a hook's
(issue 16); the user's own np.errstate / np.seterr settings keep their meaning. The same under
tiers numpy and numba: a compiled program names the same lines, with the same words, as the general
path (runtime/fpwarn.py `_program_site`), and a capture's call reports its warnings once."""
from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

import bytegrad

TIERS = ("general", "numpy", "numba")


def sqrt_at_zero(x):
    y = np.log(x)
    return np.sum(np.sqrt(x)) + 0.0 * np.sum(np.where(np.isfinite(y), y, 0.0))


def _line(fn, text):
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _record(f, x, tier="general"):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bytegrad.differentiate(f, tier=tier).grad(x)
    return [w for w in caught if issubclass(w.category, RuntimeWarning)]


def _calls(d, x, n, how="grad"):
    """The RuntimeWarnings of each of `n` gradients of `d` at `x`, as (file, line, message) lists."""
    out = []
    for _ in range(n):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            getattr(d, how)(x)
        out.append([(w.filename, w.lineno, str(w.message)) for w in caught if issubclass(w.category, RuntimeWarning)])
    return out


@pytest.mark.parametrize("tier", TIERS)
def test_warnings_name_the_users_lines_forward_and_reverse(tier):
    d = bytegrad.differentiate(sqrt_at_zero, tier=tier)
    calls = _calls(d, np.array([0.0, 1.0]), 3)
    if tier != "general":  # the calls after the capture ran a program
        assert d.stats()["compiled"]["compiled_calls"] >= 2, d.stats()["compiled"]
    general = _calls(bytegrad.differentiate(sqrt_at_zero, tier="general"), np.array([0.0, 1.0]), 1)[0]
    for caught in calls:  # each call: the general path's warnings, once each (none from a program's check)
        assert caught == general, (caught, general)
    where = set(calls[-1])
    assert (__file__, _line(sqrt_at_zero, "np.log(x)"), "divide by zero encountered in numpy.log") in where
    assert (__file__, _line(sqrt_at_zero, "np.sqrt(x)"),
            "divide by zero encountered in the derivative of numpy.sqrt") in where
    assert all(w[0] == __file__ for w in calls[-1]), calls[-1]
    assert np.geterrcall() is None


def fused_log_overflow(x):
    return np.sum(np.tanh(np.exp(x) * 2.0 + 1.0)) + np.sum(np.log(x) * 2.0 + x)


def test_a_fused_sites_forward_warnings_name_the_users_line(monkeypatch):
    """A fused site (runtime/fused.py) runs its NumPy tier in generated code: NumPy's warnings there were
    filed under that code's pseudo-file and lost (`exp`'s overflow, `log`'s division by zero), where plain
    NumPy and the unfused general path report them. They now name the user's line, and
    `np.errstate(over="raise")` raises as in plain NumPy. (The site's Numba kernel tier reports what the
    hardware flags say, which is not always what NumPy says: docs/compiled.md, "Not yet".)"""
    from bytegrad.runtime import fused

    monkeypatch.setattr(fused, "POLICY", "never")
    x = np.array([1000.0, 0.0, 1.0])
    line = _line(fused_log_overflow, "np.tanh(np.exp(x)")
    d = bytegrad.differentiate(fused_log_overflow, tier="general")
    for caught in _calls(d, x, 3):
        messages = [m for f, n, m in caught if (f, n) == (__file__, line) and "derivative" not in m]
        assert "overflow encountered in numpy.exp" in messages, caught  # (as the unfused general path says)
        assert "divide by zero encountered in numpy.log" in messages, caught
    with np.errstate(over="raise", divide="ignore", invalid="ignore"), pytest.raises(FloatingPointError):
        d.grad(x)


def _in_a_callee(x):
    return np.sum(_callee_log(x) * x)


def _callee_log(x):
    return np.log(x)


@pytest.mark.parametrize("tier", ("numpy", "numba"))
def test_a_programs_warnings_name_the_line_of_each_step(tier):
    """Several steps on one line, a callee's line, a pullback program's `back`: each warning names the
    step's own operation (forward, or the derivative of one) at its own file and line. (`value_and_grad`:
    `grad`'s program skips the steps only the output's value reads, and so their warnings.)"""
    def many(x):
        return np.sum(np.sqrt(x) + np.log(x) * np.arcsin(x * 2.0))

    x = np.array([0.0, 0.75])
    for f in (many, _in_a_callee):
        general = _calls(bytegrad.differentiate(f, tier="general"), x, 1, "value_and_grad")[0]
        d = bytegrad.differentiate(f, tier=tier)
        calls = _calls(d, x, 3, "value_and_grad")
        assert d.stats()["compiled"]["compiled_calls"] >= 2, d.stats()["compiled"]
        assert len(general) >= 3 and all(c == general for c in calls), (calls, general)
    assert (__file__, _line(_callee_log, "np.log(x)"), "divide by zero encountered in numpy.log") in general
    d = bytegrad.differentiate(sqrt_at_zero, tier=tier)
    for _ in range(3):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _, back = d.pullback(np.array([0.0, 1.0]))
            back(1.0)
        where = {(w.filename, w.lineno, str(w.message)) for w in caught}
        assert (__file__, _line(sqrt_at_zero, "np.sqrt(x)"),
                "divide by zero encountered in the derivative of numpy.sqrt") in where, where
        assert all(w.filename == __file__ for w in caught), where


def _decides(x):
    y = np.log(x)
    if np.sum(x) > 1.5:  # a decision on data, after the warning
        return np.sum(y * 2.0)
    return np.sum(y * 3.0)


@pytest.mark.parametrize("tier", ("numpy", "numba"))
def test_a_program_whose_decision_comes_out_otherwise_reports_nothing(tier):
    """A program that computed a warning's step, then found a decision otherwise (DECIDED: the general
    path computes the call again, and reports it): its warnings are dropped, not reported twice."""
    d = bytegrad.differentiate(_decides, tier=tier)
    general = bytegrad.differentiate(_decides, tier="general")
    for x in ([0.0, 2.0], [0.0, 2.0], [0.0, 1.0], [0.0, 1.0], [0.0, 2.0]):
        want = _calls(general, np.array(x), 1, "value_and_grad")[0]
        assert _calls(d, np.array(x), 1, "value_and_grad")[0] == want and len(want) == 2, (x, want)
    assert d.stats()["compiled"]["compiled_calls"] >= 3 and len(d.stats()["compiled"]["programs"]) == 2


@pytest.mark.parametrize("tier", TIERS)
def test_the_users_errstate_and_seterr_are_kept(tier):
    def quiet(x):
        with np.errstate(divide="ignore"):
            y = np.log(x)  # noqa: F841 - computed, never used: the point of the test
        return np.sum(x * 2.0)  # (y gets no cotangent: its derivative is never computed)

    d = bytegrad.differentiate(quiet, tier=tier)
    assert [_record_with(d, np.array([0.0, 1.0])) for _ in range(3)] == [[]] * 3
    g = bytegrad.differentiate(lambda x: np.sum(np.log(x)), tier=tier)
    g.grad(np.array([1.0, 2.0]))
    g.grad(np.array([1.0, 2.0]))  # (a program, where the tier compiles)
    old = np.seterr(divide="raise")
    try:
        with pytest.raises(FloatingPointError):
            g.grad(np.array([0.0, 1.0]))
    finally:
        np.seterr(**old)


def _record_with(d, x):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        d.grad(x)
    return [w for w in caught if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("tier", TIERS)
def test_the_error_state_is_read_on_every_gradient(tier):
    """bytegrad keeps the redirected error state it makes per state the user sets: a later
    np.seterr, and a state set back, are each honoured on the next gradient of the same function."""
    g = bytegrad.differentiate(lambda x: np.sum(np.log(x)), tier=tier).grad
    x = np.array([0.0, 1.0])
    old = np.seterr()
    try:
        for setting in ("warn", "ignore", "raise", "warn", "raise", "ignore"):
            np.seterr(divide=setting)
            if setting == "raise":
                with pytest.raises(FloatingPointError):
                    g(x)
                continue
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                g(x)
            messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
            assert bool(messages) == (setting == "warn"), (setting, messages)
            assert np.geterr()["divide"] == setting and np.geterrcall() is None
    finally:
        np.seterr(**old)


def test_a_numba_kernels_warnings():
    pytest.importorskip("numba")

    def f(x):
        return np.sum(np.sqrt(x))

    d = bytegrad.differentiate(f, tier="numba")
    x = np.array([0.0, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the capture's call: the general path's warnings)
        d.grad(x)
    if [p["backend"] for p in d.stats()["compiled"]["programs"]] != ["numba"]:
        pytest.skip("no Numba program here (BYTEGRAD_DISABLE_NUMBA?)")
    general = _calls(bytegrad.differentiate(f, tier="general"), x, 1)[0]
    assert general and _calls(d, x, 1)[0] == general
