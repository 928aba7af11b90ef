"""Explicit dunder calls run as the statement or expression they spell, on every tier.

`a.__setitem__(0, 5.0)` and `a[:].__iadd__(1.0)` wrote the caller's differentiated array and gave
a wrong gradient (`[1, 1, 1]` for `a[0]` overwritten, where `a[0] = 5.0` is a MutationError), and
`a.__add__(1.0)` dropped its derivative. Now a write into a differentiated input through a dunder
is a MutationError at the user's line, a write into an intermediate the function made is a
recorded write (as `out[i] = v` is), and an operator's dunder is recorded as the operator.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gradcheck import numerical_grad

import bytegrad

TIERS = ["general", "numpy", "numba", "auto"]


def set_input(a):
    a.__setitem__(0, 5.0)  # writes
    return np.sum(a)


def iadd_view(a):
    a[:].__iadd__(1.0)  # writes
    return np.sum(a * a)


def isub_input(a):
    a.__isub__(1.0)  # writes
    return np.sum(a * a)


def imul_input(a):
    a.__imul__(a)  # writes
    return np.sum(a)


def itruediv_view(a):
    a[1:].__itruediv__(2.0)  # writes
    return np.sum(a)


def ipow_input(a):
    a.__ipow__(2.0)  # writes
    return np.sum(a)


def set_view(a):
    a[:2].__setitem__(0, 5.0)  # writes
    return np.sum(a)


def set_flat(a):
    a.flat.__setitem__(0, 5.0)  # writes
    return np.sum(a)


def set_unbound(a):
    np.ndarray.__setitem__(a, 0, 5.0)  # writes
    return np.sum(a)


WRITES_INPUT = [set_input, iadd_view, isub_input, imul_input, itruediv_view, ipow_input, set_view, set_flat,
                set_unbound]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn", WRITES_INPUT, ids=lambda f: f.__name__)
def test_a_dunder_write_into_a_differentiated_input_is_a_mutation_error(fn, tier):
    d = bytegrad.differentiate(fn, tier=tier)
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1)
                if "# writes" in text and i > fn.__code__.co_firstlineno)
    for _ in range(4):  # (the compiled tiers capture after a few calls: never a program that writes)
        x = np.array([1.0, 2.0, 3.0])
        with pytest.raises(bytegrad.MutationError) as info:
            d.grad(x)
        np.testing.assert_array_equal(x, [1.0, 2.0, 3.0])  # the caller's data is not modified
        assert info.value.loc.filename == __file__ and info.value.loc.lineno == line, info.value


def made_then_written(a):
    out = a * 2.0
    out.__setitem__(0, 5.0)
    out.__imul__(a)
    out[1:].__iadd__(a[1:] ** 2)
    out.__itruediv__(a + 1.0)
    out[:2].__setitem__(1, a[2])
    return np.sum(out * out)


def made_then_written_statements(a):
    out = a * 2.0
    out[0] = 5.0
    out *= a
    out[1:] += a[1:] ** 2
    out /= a + 1.0
    out[:2][1] = a[2]
    return np.sum(out * out)


def operators_spelled_as_dunders(a):
    b = a.__add__(1.0).__mul__(a.__getitem__(slice(1, None)).__rsub__(4.0).__getitem__(0))
    c = a.__neg__().__mul__(a.__abs__()).__add__(a.__pos__())
    return np.sum(b.__pow__(2.0)) + a.__rmul__(3.0).__getitem__(2) + np.sum(c) * a[1].__float__()


def operators_spelled_as_statements(a):
    b = (a + 1.0) * (4.0 - a[1:])[0]
    c = -a * abs(a) + (+a)
    return np.sum(b ** 2.0) + (3.0 * a)[2] + np.sum(c) * float(a[1])


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn, ref", [(made_then_written, made_then_written_statements),
                                     (operators_spelled_as_dunders, operators_spelled_as_statements)],
                         ids=["writes-into-intermediates", "operators"])
def test_dunders_on_intermediates_give_the_statements_gradient(fn, ref, tier):
    d = bytegrad.differentiate(fn, tier=tier)
    for k in range(5):
        x = np.array([0.5, 1.5, -2.0]) + 0.1 * k
        x0 = x.copy()
        value, x_bar = d.value_and_grad(x)
        np.testing.assert_array_equal(x, x0)
        assert value == pytest.approx(ref(x0), rel=1e-12)
        np.testing.assert_allclose(x_bar, bytegrad.grad(ref)(x0), rtol=1e-12)
        np.testing.assert_allclose(x_bar, numerical_grad(ref, (x0,), 0), rtol=1e-6, atol=1e-8)


def test_a_dunder_the_operand_does_not_take_returns_not_implemented_as_python_does():
    def f(x):
        declined = x.__add__("text")  # float.__add__(str): NotImplemented, not an error
        return x * 2.0 if declined is NotImplemented else x

    assert bytegrad.grad(f)(1.5) == 2.0
