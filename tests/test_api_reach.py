"""What the API accepts (issue 16): a NumPy function itself as the function to differentiate, and a
one-element array as the scalar output of `grad` (HIPS autograd's rule)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gradcheck import check_grad, numerical_grad  # noqa: E402

import bytegrad  # noqa: E402

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
