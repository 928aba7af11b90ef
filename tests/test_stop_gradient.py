"""`bytegrad.stop_gradient`: the value, with no derivative through it, in reverse mode, forward
mode and at any order; arrays, floats and containers of them. Expected values are closed forms:
the derivative of `x * stop_gradient(x)` is `stop_gradient(x)`'s value, `x`.
"""
from __future__ import annotations

from collections import OrderedDict, defaultdict, namedtuple
from dataclasses import dataclass

import numpy as np
import pytest

import bytegrad
from bytegrad import stop_gradient

X = np.array([0.5, -1.25, 2.0])
V = np.array([1.0, 0.5, -2.0])


def times_itself(x):
    return np.sum(x * stop_gradient(x))


def cubic(x):
    return np.sum(x ** 2 * stop_gradient(x))  # d/dx = 2 x c; d2/dx2 = 2 c, with c = x


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_reverse_mode_treats_the_value_as_a_constant(dtype):
    x = X.astype(dtype)
    g = bytegrad.grad(times_itself)(x)
    assert g.dtype == dtype
    np.testing.assert_array_equal(g, x)


def test_a_float_and_a_numpy_scalar():
    assert bytegrad.grad(lambda x: x * stop_gradient(x))(3.0) == 3.0
    assert bytegrad.grad(lambda x: x * stop_gradient(x))(np.float64(-2.0)) == -2.0
    assert bytegrad.grad(lambda x: stop_gradient(x) * 5.0 + x)(1.5) == 1.0


def test_only_the_stopped_path_is_cut():
    def f(x):
        y = np.sin(x)
        return np.sum(y * stop_gradient(y ** 2)) + np.sum(stop_gradient(x) * 10.0)

    np.testing.assert_allclose(bytegrad.grad(f)(X), np.cos(X) * np.sin(X) ** 2, rtol=1e-14)


def test_stopping_everything_gives_zeros():
    g = bytegrad.grad(lambda x: np.sum(stop_gradient(np.exp(x))))(X)
    np.testing.assert_array_equal(g, np.zeros(3))


def test_forward_mode():
    out, out_dot = bytegrad.jvp(lambda x: x * stop_gradient(x), (X,), (V,))
    np.testing.assert_array_equal(out, X * X)
    np.testing.assert_array_equal(out_dot, X * V)
    out, out_dot = bytegrad.jvp(lambda x: stop_gradient(np.sin(x)), (X,), (V,))
    np.testing.assert_array_equal(out_dot, np.zeros(3))


@pytest.mark.parametrize("mode", ["rev", "fwd"])
def test_jacobian(mode):
    J = bytegrad.jacobian(lambda x: x * stop_gradient(x), mode=mode)(X)
    np.testing.assert_array_equal(J, np.diag(X))


def test_second_order():
    assert bytegrad.grad(bytegrad.grad(lambda x: x ** 2 * stop_gradient(x)))(1.5) == pytest.approx(3.0)
    np.testing.assert_allclose(bytegrad.hvp(cubic, (X,), (V,)), 2 * X * V, rtol=1e-14)
    for mode in ("fwd", "rev"):
        np.testing.assert_allclose(bytegrad.hessian(cubic, mode=mode)(X), np.diag(2 * X), rtol=1e-14)


def test_a_stopped_outer_value_inside_an_inner_derivative():
    """The inner gradient of y**2 * c at y = x is 2 x c; with c = stop_gradient(x) the outer
    derivative is 2 x (without it, d/dx 2 x**2 = 4 x)."""

    def outer(x):
        return bytegrad.grad(lambda y: y ** 2 * stop_gradient(x))(x)

    assert bytegrad.grad(outer)(1.5) == pytest.approx(3.0)


def test_third_order():
    d3 = bytegrad.grad(bytegrad.grad(bytegrad.grad(lambda x: x ** 3 * stop_gradient(x ** 2))))
    assert d3(2.0) == pytest.approx(6.0 * 4.0)


Pair = namedtuple("Pair", "a b")


@dataclass
class Params:
    w: np.ndarray
    n: int


@pytest.mark.parametrize("make, total", [
    (lambda x: (x, 2.0 * x), lambda t: np.sum(t[0]) + np.sum(t[1])),
    (lambda x: [x, x], lambda t: np.sum(t[0] * t[1])),
    (lambda x: {"a": x, "n": 3}, lambda t: np.sum(t["a"]) * t["n"]),
    (lambda x: Pair(x, np.sum(x)), lambda t: np.sum(t.a) + t.b),
    (lambda x: Params(x * 2.0, 3), lambda t: np.sum(t.w) * t.n),
], ids=["tuple", "list", "dict", "namedtuple", "dataclass"])
def test_containers_are_stopped_leaf_by_leaf(make, total):
    def f(x):
        return np.sum(x) + total(stop_gradient(make(x)))

    np.testing.assert_array_equal(bytegrad.grad(f)(X), np.ones(3))
    plain = make(X)
    stopped = stop_gradient(plain)
    assert type(stopped) is type(plain)
    assert total(stopped) == total(plain)


def test_the_value_is_unchanged_and_not_the_input_object():
    x = X.copy()
    out = stop_gradient(x)
    assert out is not x and np.shares_memory(out, x)
    np.testing.assert_array_equal(out, x)
    with pytest.raises(ValueError, match="read-only"):
        out[0] = 1.0
    assert stop_gradient(2.5) == 2.5 and stop_gradient(1 + 2j) == 1 + 2j
    assert stop_gradient(3) == 3 and stop_gradient(None) is None and stop_gradient("s") == "s"
    ints = np.arange(3)
    assert stop_gradient(ints) is ints
    for tree in (OrderedDict(a=x, b=1), defaultdict(list, a=x)):
        out = stop_gradient(tree)
        assert type(out) is type(tree) and list(out) == list(tree) and out["a"] is not x
        np.testing.assert_array_equal(out["a"], x)
    assert stop_gradient(defaultdict(list)).default_factory is list


def test_an_instance_of_a_plain_class_is_refused():
    class Model:
        def __init__(self, w):
            self.w = w

    with pytest.raises(TypeError, match="Model"):
        stop_gradient(Model(X))
