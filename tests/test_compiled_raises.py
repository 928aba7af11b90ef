"""Compiled programs raise what Python raises: a division of Python floats by zero, a `math` function
out of its domain or overflowing, a power of Python floats that overflows, `%` by zero raise
ZeroDivisionError, ValueError or OverflowError on the general path. A program (NumPy back end, or a
Numba kernel, whose float arithmetic gives inf or NaN instead) hands such a call back to the general
path, which raises the same exception at the user's line; an operation whose result no output reads
is still computed. On values that do not raise, every tier gives the general path's gradient."""
from __future__ import annotations

import inspect
import math
import traceback
import types

import numpy as np
import pytest

import bytegrad
from bytegrad.runtime import kernels

TIERS = ("general", "numpy", "numba", "auto")


def division(a):
    return 1.0 / (1.0 + 1.0 / a)  # raises here


def logistic(a):
    return 1.0 / (1.0 + math.exp(-a))  # raises here


def unread_division(a):
    _ = 1.0 / a  # raises here
    return a * 2.0


def unread_power(a):
    _ = a ** -1.0  # raises here
    return a * 3.0


def log_of_zero(a):
    return math.log(a * a) * 0.0 + a  # raises here


def log2_of_zero(a):
    return math.log2(a) * 0.0 + a  # raises here (a gradient alone must compute it too)


def sqrt_of_negative(a):
    return math.sqrt(a) * 0.0 + a  # raises here


def power_overflow(a):
    return 1.0 / (1.0 + a ** 400.0)  # raises here


def math_pow_overflow(a):
    return 1.0 / (1.0 + math.pow(a, 400.0))  # raises here


def modulo_zero(a):
    return a * (3.0 % (a - 2.0))  # raises here


def floor_division_zero(a):
    return a * (3.0 // (a - 2.0))  # raises here


def item_division(x):
    a = float(x[0])
    return np.sum(x) * (1.0 / (1.0 + 1.0 / a))  # raises here


def array_and_float(x, s):
    return np.sum(x * x) * (1.0 / (1.0 + 1.0 / s))  # raises here


def unread_log(x):
    _ = math.log(x[0])  # raises here
    return np.sum(x * 2.0)


X = np.linspace(-1.0, 1.0, 7)
X0 = np.concatenate([[0.0], X[1:]])

# (function, good arguments, raising arguments, exception, wrt, the `numba` tier runs a kernel)
CASES = [
    (division, (2.0,), (0.0,), ZeroDivisionError, 0, True),
    (logistic, (1.0,), (-1000.0,), OverflowError, 0, True),
    (unread_division, (2.0,), (0.0,), ZeroDivisionError, 0, True),
    (unread_power, (2.0,), (0.0,), ZeroDivisionError, 0, True),
    (array_and_float, (X, 2.0), (X, 0.0), ZeroDivisionError, (0, 1), True),
    (log_of_zero, (1.0,), (0.0,), ValueError, 0, False),
    (log2_of_zero, (1.0,), (0.0,), ValueError, 0, False),
    (sqrt_of_negative, (1.0,), (-1.0,), ValueError, 0, False),
    (power_overflow, (2.0,), (10.0,), OverflowError, 0, True),
    (math_pow_overflow, (2.0,), (10.0,), OverflowError, 0, True),
    (modulo_zero, (3.0,), (2.0,), ZeroDivisionError, 0, False),
    (floor_division_zero, (3.0,), (2.0,), ZeroDivisionError, 0, False),
    (item_division, (X + 2.0,), (X0,), ZeroDivisionError, 0, False),
    (unread_log, (X + 2.0,), (X0,), ValueError, 0, True),
]


def fresh(fn):
    """A copy of `fn`: programs are kept per function object, so a copy starts with none."""
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def raising_line(fn) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, ln in enumerate(lines) if "# raises here" in ln)


def warmed(fn, tier, good, wrt):
    """`differentiate(fn)` pinned to `tier`, its program made (where one can be) by gradients on `good`."""
    d = bytegrad.differentiate(fresh(fn), wrt=wrt, tier=tier)
    for _ in range(4):
        d.grad(*good)
    return d


def check_raised(exc_info, fn, exc_type):
    assert exc_info.type is exc_type
    frames = [fr for fr in traceback.extract_tb(exc_info.tb) if fr.filename == __file__]
    assert frames[-1].name == fn.__name__ and frames[-1].lineno == raising_line(fn), frames[-1]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0].__name__)
def test_a_program_raises_what_the_general_path_raises(case, tier):
    fn, good, bad, exc_type, wrt, kernel = case
    if tier == "numba" and kernels.disabled():
        pytest.skip("Numba disabled (BYTEGRAD_DISABLE_NUMBA)")
    d = warmed(fn, tier, good, wrt)
    st = d.stats().get("compiled", {})
    if tier != "general" and fn is not floor_division_zero:  # (`//` keeps the general path)
        backends = [p["backend"] for p in st["programs"]]
        assert backends == ["numba" if tier == "numba" and kernel else "numpy"], st
    for how in (d.grad, d.value_and_grad):
        with pytest.raises(exc_type) as exc_info:
            how(*bad)
        check_raised(exc_info, fn, exc_type)
    # the program still serves the arguments that do not raise, with the general path's gradient
    general = bytegrad.differentiate(fresh(fn), wrt=wrt, tier="general").value_and_grad(*good)
    got = d.value_and_grad(*good)
    np.testing.assert_allclose(got[0], general[0], rtol=1e-12)
    for a, b in zip(got[1] if isinstance(wrt, tuple) else (got[1],), general[1] if isinstance(wrt, tuple)
                    else (general[1],)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    if tier != "general" and fn is not floor_division_zero:
        assert d.stats()["compiled"]["compiled_calls"] > st["compiled_calls"]
