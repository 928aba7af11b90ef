"""Functions that pick elements (choose, compress, insert, delete, block, unique, partition, putmask,
place, flat), np.apply_along_axis, np.broadcast_arrays, np.asfortranarray, np.divmod, np.var/np.std
about a given mean, and ndarray.base, against finite differences: in a table, and called by
differentiated code in reverse and forward mode."""
from __future__ import annotations

import numpy as np
import pytest

import bytegrad
from bytegrad.rules._apply import as_rrule
from bytegrad.rules.registry import lookup
from tests.gradcheck import check_grad_and_jvp

from ..cases import Arr, Gen, POINT, case, grad_params, params

X = Arr((3, 4), distinct=True)
MASK = Gen(lambda rng, dt: rng.random((3, 4)) > 0.4)

PICKING = [
    case(np.choose, [0, 2, 1, 0], [Arr((4,)), Arr((3, 4)), Arr((1, 4))], name="choose"),
    case(np.choose, Gen(lambda rng, dt: rng.integers(0, 3, (2, 3))), Arr((3, 2, 3)), name="choose-array-choices"),
    case(np.choose, [5, -1, 2], [Arr((3,)), Arr((3,)), Arr((3,))], mode="wrap", name="choose-wrap"),
    case(np.ndarray.choose, np.array([1, 0, 1]), [Arr((3,)), Arr((2, 3))], name="index.choose"),
    case(np.compress, [True, False, True], X, 0, name="compress-axis0"),
    case(np.compress, [False, True, True, False, True], X, name="compress-flat"),
    case(np.ndarray.compress, X, [True, False, True], 1, name="x.compress"),
    case(np.insert, Arr((5,)), 2, Arr(()), name="insert-scalar"),
    case(np.insert, X, [1, 1, 3], Arr((3,)), name="insert-flat"),
    case(np.insert, X, 1, Arr((3,)), 1, name="insert-axis1"),
    case(np.insert, X, [0, 2], 7.5, 0, name="insert-constant"),
    case(np.insert, X, slice(0, 2), Arr((3, 1)), 1, name="insert-slice-broadcast"),
    case(np.delete, X, [0, 2], 1, name="delete-axis1"), case(np.delete, X, 5, name="delete-flat"),
    case(np.delete, X, slice(None, None, 2), 0, name="delete-slice"),
    case(np.block, [[Arr((2, 2)), Arr((2, 1))], [Arr((1, 3))]], name="block-2d"),
    case(np.block, [Arr((2,)), Arr((3,))], name="block-1d"),
    case(np.unique, X, name="unique"), case(np.unique, X, True, True, True, name="unique-returns"),
    case(np.unique, Arr((3, 2), distinct=True), axis=0, name="unique-rows"),
]
# `x.flat` is given as a 1-D array (a flatiter would hide its elements from the tape): checked on its own
FLAT = [case(np.ndarray.flat, X, name="x.flat"), case(np.ndarray.flat, Arr((4, 3)), name="x.flat-c"),
        case(np.ndarray.flat, Gen(lambda rng, dt: rng.uniform(-2, 2, (4, 3)).astype(dt).T), name="x.flat-transposed")]
OTHERS = [
    case(np.broadcast_arrays, Arr((3, 1)), Arr((4,)), name="broadcast_arrays"),
    case(np.apply_along_axis, lambda r: r[::-1] * r[0], 1, X, name="apply_along_axis"),
    case(np.asfortranarray, X), case(np.divmod, X, 0.7, name="divmod"),
    case(np.putmask, X, MASK, Arr((5,)), name="putmask"), case(np.place, X, MASK, Arr((2,)), name="place"),
    # (mean= is keyword-only, so the table gives it as a constant; the tests below differentiate it)
    case(np.var, X, 1, mean=np.array([[0.1], [0.2], [-0.3]]), name="var-mean"),
    case(np.std, X, mean=np.array(0.2), name="std-mean"),
    case(np.var, X, 0, ddof=1, keepdims=True, mean=np.full((1, 4), 0.5), name="var-mean-ddof"),
]
TABLES = [PICKING, OTHERS, FLAT]


@pytest.mark.parametrize("case,dtype", params(PICKING + OTHERS))
def test_selection_rule(case, dtype):
    case.check(dtype)


@pytest.mark.parametrize("case,dtype", params(FLAT))
def test_flat_rule(case, dtype):
    (x,) = case.sample(dtype)
    out, pullback = as_rrule(lookup(np.ndarray.flat))(x)
    assert out.dtype == x.dtype and out.tolist() == list(x.flat)
    assert np.shares_memory(out, x) == x.flags.c_contiguous and out.flags.writeable == x.flags.c_contiguous
    out_bar = np.linspace(-1.0, 1.0, x.size).astype(dtype)
    (x_bar,) = pullback(out_bar)
    assert x_bar.shape == x.shape and list(x_bar.flat) == out_bar.tolist()  # the transpose of a gather


def _putmask(x):
    y = x * 1.0
    np.putmask(y, x > 0.5, x[:2] ** 2)
    return np.sum(y * np.arange(1.0, 6.0))


def _place(x):
    y = x ** 2
    np.place(y, x < 1.0, [x[4], 2.0 * x[0]])
    return np.sum(y * np.arange(1.0, 6.0))


def _flat_write(x):
    y = np.reshape(x[:4] * 1.0, (2, 2))
    y.flat[1] = x[4] ** 2
    y.flat[[0, 3]] = 3.0 * x[:2]
    return np.sum(y * np.array([[1.0, 2.0], [3.0, 4.0]]))


def _base(x):
    y = x * 2.0
    v = y[1:]
    if v.base is not y or y.base is not None:  # (no assert: pytest rewrites it to read locals())
        raise AssertionError("ndarray.base changed")
    return np.sum(v ** 2)


DIFFERENTIATED = {
    "partition": lambda x: np.sum(np.partition(x, 2) * np.arange(5.0)),
    "select": lambda x: np.sum(np.select([x > 0, x < 0], [x ** 2, x ** 3], 1.0)),
    "choose": lambda x: np.sum(np.choose([0, 1, 0, 1, 1], [x, x ** 2])),
    "compress": lambda x: np.sum(np.compress(x > 0, x) ** 2),
    "x.compress": lambda x: np.sum(x.compress(x > 0) ** 3),
    "insert": lambda x: np.sum(np.insert(x, 1, x[0] * 3) ** 2 * np.arange(6.0)),
    "delete": lambda x: np.sum(np.delete(x, [1, 2]) ** 2),
    "block": lambda x: np.sum(np.block([[x[:2], x[2:]], [x[::-1] ** 2]]) * np.arange(10.0).reshape(2, 5)),
    "apply_along_axis": lambda x: np.sum(np.apply_along_axis(lambda r: r ** 2 * r[0], 1, np.reshape(x[:4], (2, 2)))),
    "apply_along_axis-scalar": lambda x: np.sum(np.apply_along_axis(np.sum, 0, np.outer(x, x[:2])) ** 2),
    "broadcast_arrays": lambda x: np.sum(np.broadcast_arrays(x, x[:2, None])[1] * np.arange(10.0).reshape(2, 5)),
    "unique": lambda x: np.sum(np.unique(np.concatenate((x, x[:2]))) ** 2),  # the copies move together
    "unique-counts": lambda x: np.sum(np.unique(x, return_counts=True)[0] ** 3),
    "flat-read": lambda x: np.reshape(x[:4], (2, 2)).flat[3] * 2.0 + x.flat[0],
    "flat-iter": lambda x: sum(v * v for v in np.outer(x[:2], x[2:4]).flat),
    "flat-write": _flat_write,
    "asfortranarray": lambda x: np.sum(np.asfortranarray(np.outer(x, x)) * np.arange(25.0).reshape(5, 5)),
    "divmod": lambda x: np.sum(np.divmod(x, 0.45)[1] ** 2),
    "putmask": _putmask,
    "place": _place,
    "var-mean": lambda x: np.var(x, mean=np.mean(x, keepdims=True)),
    "var-mean-constant": lambda x: np.var(x, mean=np.array([0.25]), ddof=1),
    "std-mean": lambda x: np.std(x * x, mean=np.mean(x, keepdims=True)),
    "x.var-mean": lambda x: np.reshape(x[:4], (2, 2)).var(axis=1, mean=x[:2, None]).sum(),
    "base": _base,
}


@pytest.mark.parametrize("f,x", grad_params(DIFFERENTIATED, POINT))
def test_selection_in_differentiated_code(f, x):
    check_grad_and_jvp(f, x)


def test_reading_base_does_not_track_it():
    def f(x):
        y = x * 2.0
        return np.sum(y[1:] * (1.0 if y.base is None else 5.0))  # a decision on .base, no derivative

    assert bytegrad.grad(f)(POINT).tolist() == [0.0, 2.0, 2.0, 2.0, 2.0]


def test_flat_of_a_non_contiguous_array_is_read_only():
    def f(x):
        y = np.outer(x, x).T[::2]
        y.flat[0] = 1.0
        return np.sum(y)

    with pytest.raises(ValueError, match="read-only"):
        bytegrad.grad(f)(POINT)
