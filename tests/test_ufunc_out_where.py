"""A ufunc called with both `out=` and `where=` computes only the selected elements: the others keep
out's old value and its derivative. (It once ran without `out=` and copied the whole result, so the
masked-out slots held uninitialised memory and the gradient flowed through them: inf, NaN, or a
gradient where there is none.)"""
import numpy as np
import pytest

import bytegrad
from tests.gradcheck import check_grad, check_jvp

B = np.array([2.0, 0.0, 4.0, -1.0])


def safe_divide(a):
    return np.sum(np.divide(a, B, out=np.zeros_like(a), where=B != 0) ** 2)


def safe_log(p):
    out = np.zeros_like(p)
    np.log(p, out=out, where=p > 0)
    return np.sum(out * 2.0)


def masked_accumulate(x):
    y = x * 3.0
    np.add(y, x, out=y, where=x > 0)
    return np.sum(y ** 2)


def out_holds_a_derivative(x):
    out = np.sin(x)  # the masked-out slots keep sin(x), and its derivative
    np.multiply(x, x, out=out, where=[True, False, True, False])
    return np.sum(out * np.arange(1.0, 5.0))


def broadcast_mask_and_scalar(x):
    out = np.ones((2, 4), dtype=x.dtype)
    np.power(x, 2.0, out=out, where=np.array([[True], [False]]))
    return np.sum(out * x)


def out_tuple(x):
    out = np.full(x.shape, 0.5, dtype=x.dtype)
    np.exp(x, out=(out,), where=x < 1.0)
    return np.sum(out ** 2)


CASES = [safe_divide, safe_log, masked_accumulate, out_holds_a_derivative, broadcast_mask_and_scalar, out_tuple]


def _x(dtype):
    return np.array([0.5, -1.25, 2.0, 0.75], dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_gradient(fn, dtype):
    tol = 1e-5 if dtype is np.float64 else 2e-3
    check_grad(fn, [_x(dtype)], rtol=tol, atol=tol)


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_value_and_tangent(fn):
    x = _x(np.float64)
    value, _ = bytegrad.value_and_grad(fn)(x)
    assert value == fn(x)
    check_jvp(fn, x, np.array([1.0, -0.5, 2.0, 0.25]))


def test_the_safe_division_idiom():
    a = np.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(bytegrad.grad(safe_divide)(a), [0.5, 0.0, 0.375, 8.0])
