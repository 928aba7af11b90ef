"""ufunc methods (accumulate, outer, reduce, reduceat, at) against finite differences: the rules in a
table, and the same calls made by differentiated code, in reverse and forward mode."""
from __future__ import annotations

import numpy as np
import pytest

import bytegrad

from tests.gradcheck import check_grad_and_jvp
from ..cases import Arr, POINT, case, grad_params, params

X = Arr((3, 4), 0.5, 1.5, signed=True)
DISTINCT = Arr((3, 4), distinct=True)

REDUCE = [
    case(np.ufunc.reduce, np.add, X, name="add.reduce"),
    case(np.ufunc.reduce, np.add, X, 1, keepdims=True, name="add.reduce-axis"),
    case(np.ufunc.reduce, np.multiply, Arr((3, 4), 0.5, 1.5), axis=1, name="multiply.reduce-axis"),
    case(np.ufunc.reduce, np.maximum, DISTINCT, name="maximum.reduce"),
    case(np.ufunc.reduce, np.minimum, DISTINCT, axis=1, keepdims=True, name="minimum.reduce-axis"),
    case(np.ufunc.reduce, np.maximum, DISTINCT, None, name="maximum.reduce-all"),
    case(np.ufunc.reduce, np.logaddexp, X, name="logaddexp.reduce"),
    case(np.ufunc.reduce, np.logaddexp, X, (0, 1), name="logaddexp.reduce-all"),
    case(np.ufunc.reduce, np.logaddexp2, X, 1, keepdims=True, name="logaddexp2.reduce-axis"),
]
THROUGH = [
    case(np.ufunc.accumulate, np.add, X, name="add.accumulate"),
    case(np.ufunc.accumulate, np.multiply, X, 1, name="multiply.accumulate"),
    case(np.ufunc.accumulate, np.maximum, DISTINCT, 1, name="maximum.accumulate"),
    case(np.ufunc.accumulate, np.minimum, DISTINCT, name="minimum.accumulate"),
    case(np.ufunc.accumulate, np.subtract, X, 1, name="subtract.accumulate"),
    case(np.ufunc.outer, np.multiply, Arr((3,)), Arr((2, 2)), name="multiply.outer"),
    case(np.ufunc.outer, np.power, Arr((3,), 0.5, 1.5), Arr((2,)), name="power.outer"),
    case(np.ufunc.reduceat, np.add, Arr((6,)), [0, 2, 5, 1], name="add.reduceat"),
    case(np.ufunc.reduceat, np.maximum, Arr((3, 6), distinct=True), [0, 3], 1, name="maximum.reduceat"),
    case(np.ufunc.reduceat, np.add, Arr((6,)), [0, 7], name="add.reduceat-out-of-bounds"),
]
TABLES = [REDUCE, THROUGH]


@pytest.mark.parametrize("case,dtype", params(REDUCE + THROUGH))
def test_ufunc_method_rule(case, dtype):
    case.check(dtype)


def _multiply_at(x):
    y = x * 1.0
    np.multiply.at(y, [0, 2, 2, 4], x[:4] + 1.0)  # a repeated index multiplies twice
    return np.sum(y * np.arange(1.0, 6.0))


def _maximum_at_2d(x):
    y = np.zeros((2, 3), dtype=x.dtype) + x[0]
    np.maximum.at(y, (np.array([0, 1, 1]), np.array([2, 0, 0])), x[1:4])
    return np.sum(y ** 2)


def _negative_at(x):
    y = x ** 2
    np.negative.at(y, [1, 1, 3])
    return np.sum(y * np.arange(5.0))


DIFFERENTIATED = {
    "add.accumulate": lambda x: np.sum(np.add.accumulate(x) ** 2),
    "multiply.accumulate": lambda x: np.sum(np.multiply.accumulate(x)),
    "maximum.accumulate": lambda x: np.sum(np.maximum.accumulate(x) * np.arange(5.0)),
    "minimum.accumulate-2d": lambda x: np.sum(np.minimum.accumulate(np.reshape(x[:4], (2, 2)), axis=1) ** 2),
    "logaddexp.accumulate": lambda x: np.sum(np.logaddexp.accumulate(x)),
    "subtract.outer": lambda x: np.sum(np.subtract.outer(x, x[:3]) ** 2),
    "maximum.outer": lambda x: np.sum(np.maximum.outer(x, x[::-1] * 0.9) ** 2),
    "maximum.reduce": lambda x: np.maximum.reduce(x),
    "minimum.reduce": lambda x: np.minimum.reduce(x * x),
    "logaddexp.reduce": lambda x: np.logaddexp.reduce(x),
    "add.reduceat": lambda x: np.sum(np.add.reduceat(x, [0, 2, 3]) ** 2),
    "multiply.reduceat": lambda x: np.sum(np.multiply.reduceat(x, [0, 3, 1])),
    "multiply.at": _multiply_at,
    "maximum.at-2d": _maximum_at_2d,
    "negative.at": _negative_at,
}


@pytest.mark.parametrize("f,x", grad_params(DIFFERENTIATED, POINT))
def test_ufunc_method_in_differentiated_code(f, x):
    check_grad_and_jvp(f, x)


def test_multiply_at_keeps_numpy_value():
    x = POINT.copy()
    expected = x * 1.0
    np.multiply.at(expected, [0, 2, 2, 4], x[:4] + 1.0)
    value, _ = bytegrad.value_and_grad(_multiply_at)(x)
    assert value == pytest.approx(float(np.sum(expected * np.arange(1.0, 6.0))))


def test_unsupported_reduce_names_the_user_line():
    with pytest.raises(bytegrad.errors.RuleCaseError) as info:
        bytegrad.grad(lambda x: np.subtract.reduce(x))(POINT)
    assert "test_ufunc_methods.py" in str(info.value) and "subtract.reduce" in str(info.value)
