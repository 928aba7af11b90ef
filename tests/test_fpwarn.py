"""A RuntimeWarning that NumPy raises while bytegrad computes a gradient (division by zero in sqrt's
derivative at 0, log of 0 in the primal) points at the user's line, not at a rule's or a hook's
(issue 16); the user's own np.errstate / np.seterr settings keep their meaning."""
from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

import bytegrad


def sqrt_at_zero(x):
    y = np.log(x)
    return np.sum(np.sqrt(x)) + 0.0 * np.sum(np.where(np.isfinite(y), y, 0.0))


def _line(fn, text):
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _record(f, x):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bytegrad.differentiate(f, tier="general").grad(x)  # (a compiled program's warnings: not yet the user's lines)
    return [w for w in caught if issubclass(w.category, RuntimeWarning)]


def test_warnings_name_the_users_lines_forward_and_reverse():
    caught = _record(sqrt_at_zero, np.array([0.0, 1.0]))
    where = {(w.filename, w.lineno, str(w.message)) for w in caught}
    assert (__file__, _line(sqrt_at_zero, "np.log(x)"), "divide by zero encountered in numpy.log") in where
    assert (__file__, _line(sqrt_at_zero, "np.sqrt(x)"),
            "divide by zero encountered in the derivative of numpy.sqrt") in where
    assert all(w.filename == __file__ for w in caught), [(w.filename, w.lineno) for w in caught]
    assert np.geterrcall() is None


def test_the_users_errstate_and_seterr_are_kept():
    def quiet(x):
        with np.errstate(divide="ignore"):
            y = np.log(x)  # noqa: F841 - computed, never used: the point of the test
        return np.sum(x * 2.0)  # (y gets no cotangent: its derivative is never computed)

    assert _record(quiet, np.array([0.0, 1.0])) == []
    old = np.seterr(divide="raise")
    try:
        with pytest.raises(FloatingPointError):
            bytegrad.grad(lambda x: np.sum(np.log(x)))(np.array([0.0, 1.0]))
    finally:
        np.seterr(**old)


def test_the_error_state_is_read_on_every_gradient():
    """bytegrad keeps the redirected error state it makes per state the user sets: a later
    np.seterr, and a state set back, are each honoured on the next gradient of the same function."""
    g = bytegrad.grad(lambda x: np.sum(np.log(x)))
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
