"""Differentiated functions written in a pytest test module: pytest rewrites their `assert`
statements, and the rewritten code tests `'x' in @py_builtins.locals()` for its message. That use
of locals() reads names only and is allowed; a locals() whose values are used is still refused.

The functions below are defined here, in a test module, so that pytest rewrites their asserts (the
first test checks that it did).
"""
from __future__ import annotations

import dis

import numpy as np
import pytest

import bytegrad


def checked_sum_of_squares(x):
    assert len(x) == 3
    assert np.all(x > 0)
    return np.sum(x ** 2)


def checked_with_message(x, limit):
    y = np.sin(x)
    assert np.max(y) < limit, "too large"
    return np.sum(y * x)


def values_through_locals(x):
    y = x * 2.0
    assert len(x) == 3
    return np.sum(locals()["y"] ** 2)  # the values themselves: refused


def membership_then_value(x):
    y = x * 3.0
    names = locals()
    assert "y" in names
    return np.sum(names["y"])  # the dictionary is kept and read: refused


def test_asserts_here_are_rewritten_by_pytest():
    calls = {i.argval for i in dis.get_instructions(checked_sum_of_squares) if i.opname.startswith("LOAD_")}
    assert "locals" in calls and "@py_builtins" in calls  # else this file tests nothing


def test_asserts_in_a_differentiated_function_from_a_test_module():
    x = np.array([0.5, 1.0, 2.0])
    for _ in range(2):
        np.testing.assert_array_equal(bytegrad.grad(checked_sum_of_squares)(x), 2 * x)
    v, g = bytegrad.value_and_grad(checked_with_message, wrt=0)(x, 10.0)
    assert v == pytest.approx(np.sum(np.sin(x) * x))
    np.testing.assert_allclose(g, np.cos(x) * x + np.sin(x), rtol=1e-12)


@pytest.mark.parametrize("tier", ["general", "numpy"])
def test_asserts_on_a_pinned_tier(tier):
    d = bytegrad.differentiate(checked_sum_of_squares, tier=tier)
    x = np.array([0.5, 1.0, 2.0])
    for _ in range(4):
        np.testing.assert_array_equal(d.grad(x), 2 * x)


def test_a_failing_assert_raises_pytests_message():
    with pytest.raises(AssertionError) as info:
        bytegrad.grad(checked_sum_of_squares)(np.array([0.5, 1.0]))
    assert "assert 2 == 3" in str(info.value)
    assert "len(array([0.5, 1. ]))" in str(info.value).replace("\n", "")  # 'x' in locals() held
    with pytest.raises(AssertionError) as info:
        bytegrad.grad(checked_sum_of_squares)(np.array([0.5, -1.0, 2.0]))
    assert "np.all" in str(info.value)
    with pytest.raises(AssertionError, match="too large"):
        bytegrad.grad(checked_with_message)(np.array([0.5, 1.0, 2.0]), 0.1)


@pytest.mark.parametrize("fn", [values_through_locals, membership_then_value], ids=lambda f: f.__name__)
def test_locals_whose_values_are_used_is_still_refused(fn):
    with pytest.raises(bytegrad.UnsupportedOpcodeError, match="locals"):
        bytegrad.grad(fn)(np.array([0.5, 1.0, 2.0]))
