"""What the API accepts (issue 16): a NumPy function itself as the function to differentiate, and a
one-element array as the scalar output of `grad` (HIPS autograd's rule)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gradcheck import check_grad, numerical_grad

import bytegrad

DTYPES = [np.float64, np.float32]


def _tol(dtype):
    return {"rtol": 1e-5, "atol": 1e-6} if dtype == np.float64 else {"rtol": 2e-3, "atol": 2e-3, "eps": 1e-3}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("fn", [np.sum, np.prod, np.linalg.norm, np.mean, np.max], ids=lambda f: f.__name__)
def test_grad_of_a_numpy_function_itself(fn, dtype):
    x = np.array([1.5, -2.0, 0.7], dtype=dtype)
    check_grad(fn, (x,), **_tol(dtype))


def test_vjp_and_value_and_grad_of_numpy_functions():
    x, y = np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0])
    value, back = bytegrad.vjp(np.add, x, y)
    np.testing.assert_array_equal(value, x + y)
    x_bar, y_bar = back(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(x_bar, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(y_bar, [1.0, 2.0, 3.0])
    value, g = bytegrad.value_and_grad(np.linalg.norm)(x)
    assert value == pytest.approx(np.sqrt(14.0))
    np.testing.assert_allclose(g, x / np.sqrt(14.0))
    np.testing.assert_allclose(bytegrad.grad(np.dot, wrt=(0, 1))(x, y)[1], x)
    np.testing.assert_allclose(bytegrad.jacobian(np.sin)(x), np.diag(np.cos(x)))


@pytest.mark.parametrize("fn", [np.random.default_rng(0).random, 3, np.frompyfunc(abs, 1, 1)], ids=["rng", "int", "frompyfunc"])
def test_a_callable_with_neither_code_nor_rule_is_a_clear_error(fn):
    with pytest.raises(TypeError, match="neither"):
        bytegrad.grad(fn)


def keepdims_loss(x):
    return np.sum(x * x, keepdims=True)


def matrix_loss(x):
    return np.sum(np.outer(x, x), axis=(0, 1), keepdims=True) * 0.5


def loss_3d(x):
    return np.reshape(np.sum(np.sin(x)), (1, 1, 1))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("fn", [keepdims_loss, matrix_loss, loss_3d], ids=lambda f: f.__name__)
def test_a_one_element_array_is_a_scalar_output(fn, dtype):
    x = np.array([1.5, -2.0, 0.7], dtype=dtype)
    value, g = bytegrad.value_and_grad(fn)(x)
    tol = _tol(dtype)
    numeric = numerical_grad(lambda x: fn(x).item(), (x,), eps=tol.pop("eps", 1e-6))
    np.testing.assert_allclose(g, numeric, **tol)
    assert g.dtype == dtype
    assert value.shape == fn(x).shape  # the value comes back as the function returned it
    for _ in range(3):  # and again, where a compiled tier may take over
        np.testing.assert_allclose(bytegrad.grad(fn)(x), g)


def test_a_one_element_output_differentiates_twice():
    assert bytegrad.grad(bytegrad.grad(lambda x: np.sum(x ** 3, keepdims=True)))(2.0) == pytest.approx(12.0)
    np.testing.assert_allclose(bytegrad.hessian(keepdims_loss)(np.array([1.0, 2.0])), 2.0 * np.eye(2))


def test_a_larger_array_output_is_still_refused():
    with pytest.raises(bytegrad.NonScalarOutputError):
        bytegrad.grad(lambda x: x[:2])(np.ones(3))


def kw_loss(x, label, *, w, scale=1.0):
    if label != "run":  # (no assert: pytest rewrites asserts in test modules with locals())
        raise ValueError(label)
    return scale * np.sum(np.sin(x) * w ** 2)


def opts_loss(x, **opts):
    return np.sum(x * opts["w"] ** 3)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_wrt_names_a_keyword_only_parameter(dtype):
    x, w = np.array([1.0, 2.0, -0.5], dtype=dtype), np.array([0.5, -1.0, 1.5], dtype=dtype)
    tol = _tol(dtype)
    check_grad(kw_loss, (x, "run"), wrt="w", kwargs={"w": w, "scale": 2.0}, **tol)
    check_grad(kw_loss, (x, "run"), wrt=(0, "w"), kwargs={"w": w}, **tol)
    np.testing.assert_allclose(bytegrad.grad(opts_loss, wrt="w")(x, w=w), 3 * x * w ** 2, rtol=tol["rtol"])
    value, g = bytegrad.value_and_grad(kw_loss, wrt="w")(x, "run", w=w)
    assert value == pytest.approx(kw_loss(x, "run", w=w), rel=1e-6)
    np.testing.assert_allclose(g, 2.0 * np.sin(x) * w, rtol=tol["rtol"])
    np.testing.assert_allclose(bytegrad.jacobian(lambda x, *, w: np.sin(x) * w, wrt="w")(x, w=w), np.diag(np.sin(x)),
                               rtol=1e-6)
    np.testing.assert_allclose(bytegrad.hessian(kw_loss, wrt="w")(x, "run", w=w), np.diag(2 * np.sin(x)), rtol=1e-5)


def test_keyword_only_wrt_inside_a_derivative():
    x = np.array([1.0, 2.0])
    g = bytegrad.grad(lambda x: np.sum(bytegrad.grad(kw_loss, wrt="w")(x, "run", w=x * 2.0)))(x)
    np.testing.assert_allclose(g, 4 * np.sin(x) + 4 * x * np.cos(x))


def test_keyword_only_wrt_errors_name_the_parameter():
    with pytest.raises(bytegrad.WrtError, match="call did not pass it"):
        bytegrad.grad(kw_loss, wrt="w")(np.ones(2), "run")
    with pytest.raises(bytegrad.WrtError, match="its parameters are x, label, w, scale"):
        bytegrad.grad(kw_loss, wrt="q")(np.ones(2), "run", w=np.ones(2))


def power_loss(x, n, label, y):
    if label != "a":
        raise ValueError(label)
    return np.sum(x ** n * y)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_hvp_and_jacobian_with_arguments_that_are_not_differentiated(dtype):
    x, y, v = (np.array(a, dtype=dtype) for a in ([1.0, 2.0], [0.5, 1.5], [1.0, -1.0]))
    expected = 6.0 * x * y * v  # the Hessian in x is diag(n (n - 1) x**(n - 2) y) with n == 3
    rtol = 1e-6 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(bytegrad.hvp(power_loss, (x, 3, "a", y), (v,), wrt=0), expected, rtol=rtol)
    np.testing.assert_allclose(bytegrad.hvp(power_loss, (x, 3, "a", y), (v,), wrt="x"), expected, rtol=rtol)
    hx, hy = bytegrad.hvp(power_loss, (x, 3, "a", y), (v, np.zeros_like(y)), wrt=(0, "y"))
    np.testing.assert_allclose(hx, expected, rtol=rtol)
    np.testing.assert_allclose(hy, 3.0 * x ** 2 * v, rtol=rtol)
    J = bytegrad.jacobian(lambda x, n, label: x ** n, wrt=0)(x, 3, "a")
    np.testing.assert_allclose(J, np.diag(3.0 * x ** 2), rtol=rtol)
    with pytest.raises(bytegrad.WrtError, match="cannot be differentiated"):
        bytegrad.hvp(power_loss, (x, 3, "a", y), (v, 0, 0, v))  # without wrt: every primal, as before
