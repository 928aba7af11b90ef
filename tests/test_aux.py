"""`has_aux=True`: the function returns `(value, aux)`; only `value` is differentiated, and `aux`
comes back as returned, in JAX's shapes: `grad` -> `(g, aux)`, `value_and_grad` -> `((value, aux),
g)`, `vjp` / `.pullback` -> `(value, back, aux)`.
"""
from __future__ import annotations

import io
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gradcheck import numerical_grad

import bytegrad


def loss_with_stats(w, x):
    h = np.tanh(x @ w)
    loss = np.sum(h ** 2)
    return loss, {"h": h, "norm": float(np.linalg.norm(w)), "label": "tanh"}


def plain_loss(w, x):
    return loss_with_stats(w, x)[0]


def args(seed=0):
    r = np.random.default_rng(seed)
    return r.normal(size=3), r.normal(size=(4, 3))


def check_stats(aux, w, x):
    np.testing.assert_allclose(aux["h"], np.tanh(x @ w), rtol=1e-14)
    assert type(aux["h"]) is np.ndarray
    assert aux["norm"] == float(np.linalg.norm(w)) and aux["label"] == "tanh"


def test_grad_has_aux_returns_gradient_and_aux():
    w, x = args()
    g, aux = bytegrad.grad(loss_with_stats, has_aux=True)(w, x)
    np.testing.assert_allclose(g, numerical_grad(plain_loss, (w, x), 0), rtol=1e-6, atol=1e-8)
    check_stats(aux, w, x)


def test_value_and_grad_has_aux_returns_value_aux_pair_and_gradient():
    w, x = args(1)
    (value, aux), g = bytegrad.value_and_grad(loss_with_stats, has_aux=True)(w, x)
    assert value == pytest.approx(plain_loss(w, x), rel=1e-14)
    np.testing.assert_allclose(g, numerical_grad(plain_loss, (w, x), 0), rtol=1e-6, atol=1e-8)
    check_stats(aux, w, x)


def test_vjp_has_aux_returns_value_back_and_aux():
    w, x = args(2)
    value, back, aux = bytegrad.vjp(loss_with_stats, w, x, has_aux=True)
    assert value == pytest.approx(plain_loss(w, x), rel=1e-14)
    w_bar, x_bar = back(1.0)
    np.testing.assert_allclose(w_bar, numerical_grad(plain_loss, (w, x), 0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(x_bar, numerical_grad(plain_loss, (w, x), 1), rtol=1e-6, atol=1e-8)
    check_stats(aux, w, x)


def test_vjp_has_aux_of_a_vector_valued_function():
    x = np.array([0.5, -1.0, 2.0])
    value, back, aux = bytegrad.vjp(lambda x: (np.sin(x), np.cos(x)), x, has_aux=True)
    (x_bar,) = back(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(x_bar, np.cos(x) * [1.0, 2.0, 3.0], rtol=1e-14)
    np.testing.assert_allclose(aux, np.cos(x), rtol=1e-14)


def test_differentiate_has_aux_methods():
    f = bytegrad.differentiate(has_aux=True)(loss_with_stats)
    w, x = args(3)
    expected = numerical_grad(plain_loss, (w, x), 0)
    assert f(w, x)[0] == pytest.approx(plain_loss(w, x))  # a plain call is the original function
    g, aux = f.grad(w, x)
    np.testing.assert_allclose(g, expected, rtol=1e-6, atol=1e-8)
    check_stats(aux, w, x)
    (value, aux), g = f.value_and_grad(w, x)
    np.testing.assert_allclose(g, expected, rtol=1e-6, atol=1e-8)
    check_stats(aux, w, x)
    value, back, aux = f.pullback(w, x)
    np.testing.assert_allclose(back(1.0)[0], expected, rtol=1e-6, atol=1e-8)
    check_stats(aux, w, x)


def test_has_aux_with_a_tuple_wrt():
    w, x = args(4)
    (g_w, g_x), aux = bytegrad.grad(loss_with_stats, wrt=(0, 1), has_aux=True)(w, x)
    np.testing.assert_allclose(g_w, numerical_grad(plain_loss, (w, x), 0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(g_x, numerical_grad(plain_loss, (w, x), 1), rtol=1e-6, atol=1e-8)
    check_stats(aux, w, x)


def test_has_aux_on_a_method():
    class Model:
        def __init__(self, x):
            self.x = x

        @bytegrad.differentiate(has_aux=True)
        def loss(self, w):
            return loss_with_stats(w, self.x)

    w, x = args(5)
    g, aux = Model(x).loss.grad(w)
    np.testing.assert_allclose(g, numerical_grad(plain_loss, (w, x), 0), rtol=1e-6, atol=1e-8)
    check_stats(aux, w, x)


@pytest.mark.parametrize("n", [5, 10_000])
def test_aux_arrays_keep_their_values_through_the_reverse_pass(n):
    """The reverse pass reuses buffers only nothing else holds: intermediates returned as aux
    (large ones included, which the lean sweep slims and scales in place) keep their values."""

    def f(x):
        e = np.exp(x)
        t = np.tanh(x)
        s = np.sin(x) * 2.0
        return np.sum(e) + np.sum(t * 3.0) + np.sum(s), (e, t, s)

    x = np.linspace(-1.0, 1.0, n)
    g, (e, t, s) = bytegrad.grad(f, has_aux=True)(x)
    np.testing.assert_allclose(g, np.exp(x) + 3.0 * (1 - np.tanh(x) ** 2) + 2.0 * np.cos(x), rtol=1e-13)
    np.testing.assert_array_equal(e, np.exp(x))
    np.testing.assert_array_equal(t, np.tanh(x))
    np.testing.assert_array_equal(s, np.sin(x) * 2.0)


def test_aux_may_be_the_differentiated_argument_or_depend_on_it():
    x = np.array([1.0, 2.0])
    (value, aux), g = bytegrad.value_and_grad(lambda x: (np.sum(x ** 2), (x, x * 2.0)), has_aux=True)(x)
    np.testing.assert_array_equal(aux[0], x)
    np.testing.assert_array_equal(aux[1], x * 2.0)
    np.testing.assert_array_equal(g, 2.0 * x)


def test_has_aux_inside_a_derivative_composes():
    """grad of a function that calls grad(..., has_aux=True): aux is a value of the outer computation."""

    def inner(y, x):
        return x * y ** 3, y * x

    def outer(x):
        g, aux = bytegrad.grad(inner, has_aux=True)(x, x)  # 3 x y**2 at y = x: 3 x**3; aux = x**2
        return g + aux

    assert bytegrad.grad(outer)(1.5) == pytest.approx(9 * 1.5 ** 2 + 2 * 1.5, rel=1e-12)


def test_has_aux_false_keeps_refusing_a_tuple_output():
    with pytest.raises(bytegrad.NonScalarOutputError):
        bytegrad.grad(lambda x: (x * 2.0, x))(1.0)


def not_a_pair(x):
    return x * 2.0


def three_things(x):
    return x * 2.0, x, x


@pytest.mark.parametrize("fn, found, line", [(not_a_pair, "returned a float", "return x * 2.0"),
                                             (three_things, "returned a tuple of 3", "return x * 2.0, x, x")])
@pytest.mark.parametrize("api", ["grad", "value_and_grad", "vjp", "pullback"])
def test_has_aux_without_a_pair_is_a_clear_error(fn, found, line, api):
    with pytest.raises(bytegrad.AuxOutputError) as info:
        if api == "vjp":
            bytegrad.vjp(fn, 1.0, has_aux=True)
        elif api == "pullback":
            bytegrad.differentiate(fn, has_aux=True).pullback(1.0)
        else:
            getattr(bytegrad, api)(fn, has_aux=True)(1.0)
    message = str(info.value)
    assert isinstance(info.value, bytegrad.DifferentiationError)
    assert "has_aux=True" in message and found in message and line in message, message
    assert "test_aux.py" in message


def test_precompile_and_explain_take_a_has_aux_function():
    x = np.linspace(-1.0, 1.0, 5)
    scalar = bytegrad.differentiate(has_aux=True)(lambda x: (np.sum(np.tanh(x)), "aux"))
    vector = bytegrad.differentiate(has_aux=True)(lambda x: (np.tanh(x) * 2.0, "aux"))
    for d in (scalar, vector):
        assert bytegrad.precompile(d, x)["misses"] >= 0
    out = io.StringIO()
    bytegrad.explain(vector, x, file=out)  # (with file=, explain writes there and returns None)
    assert "tanh" in out.getvalue()
