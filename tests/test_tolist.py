"""`M.tolist()` of a matrix (or more dimensions) gives nested lists whose floats carry derivatives,
in reverse and forward mode, however the rows are walked: once zero beyond the first dimension."""
import itertools

import numpy as np
import pytest

import bytegrad
from tests.gradcheck import check_grad, numerical_grad


def nested_loops(M):
    s = 0.0
    for row in M.tolist():
        for v in row:
            s = s + v * v
    return s


def chain_from_iterable(M):
    return sum(v ** 3 for v in itertools.chain.from_iterable(M.tolist()))


def back_to_array(M):
    return np.sum(np.array(M.tolist()) ** 2)


def indexed(M):
    rows = M.tolist()
    return rows[1][2] * rows[0][0] + rows[-1][0] ** 2


def comprehension(M):
    return sum(sum(np.sin(v) for v in row) * i for i, row in enumerate(M.tolist()))


def three_dims(M):
    cube = (M[None] * np.array([1.0, 2.0])[:, None, None]).tolist()
    return sum(v * w for plane in cube for row in plane for v, w in zip(row, row[1:]))


def zip_rows(M):
    a, b = M.tolist()
    return sum(p * q for p, q in zip(a, b))


CASES = [nested_loops, chain_from_iterable, back_to_array, indexed, comprehension, three_dims, zip_rows]


def _matrix(dtype):
    return np.array([[0.5, -1.25, 2.0], [1.5, 0.25, -0.75]], dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_tolist_reverse(fn, dtype):
    tol = 1e-5 if dtype is np.float64 else 2e-3
    check_grad(fn, [_matrix(dtype)], rtol=tol, atol=tol)


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_tolist_forward(fn):
    M = _matrix(np.float64)
    v = np.array([[1.0, -2.0, 0.5], [0.25, 3.0, -1.0]])
    _, out_dot = bytegrad.jvp(fn, (M,), (v,))
    np.testing.assert_allclose(out_dot, np.sum(numerical_grad(fn, [M]) * v), rtol=1e-6)
