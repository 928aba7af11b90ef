"""`M.tolist()` of a matrix (or more dimensions) gives nested lists whose floats carry derivatives,
in reverse and forward mode, however the rows are walked: once zero beyond the first dimension."""
import itertools

import numpy as np
import pytest

from tests.gradcheck import check_grad, check_jvp


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


@pytest.mark.parametrize("mode", ["reverse-float64", "reverse-float32", "forward"])
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_tolist_of_a_matrix(fn, mode):
    if mode == "forward":
        check_jvp(fn, _matrix(np.float64), np.array([[1.0, -2.0, 0.5], [0.25, 3.0, -1.0]]))
    elif mode == "reverse-float64":
        check_grad(fn, [_matrix(np.float64)])
    else:
        check_grad(fn, [_matrix(np.float32)], rtol=2e-3, atol=2e-3)
