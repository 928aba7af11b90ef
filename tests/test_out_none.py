"""An explicit `out=None` is no output buffer (NumPy's own Python code passes it on), and an in-place
sort of a view of an allocated array is a recorded write: both against finite differences."""
import numpy as np
import pytest

from tests.gradcheck import check_grad_and_jvp
from tests.rules.cases import POINT, grad_params



def _sort_view(x):
    y = x * 1.0
    y[1:].sort()
    return np.sum(y * np.arange(1.0, 6.0))


def _sort_view_2d(x):
    y = np.outer(x[:2], x[2:4] + 1.0)
    y[:, ::-1].sort(axis=1)
    return np.sum(y * np.array([[1.0, 2.0], [3.0, 4.0]]))


def _sort_view_of_reshape(x):
    y = np.reshape(x[:4] * 2.0, (2, 2))  # a view of the product, sorted through another view
    y[:, ::-1].sort(axis=1)
    return np.sum(y * np.array([[1.0, 2.0], [3.0, 4.0]]))


def _partition_in_place(x):
    y = x ** 2
    y[1:].partition(1)
    return np.sum(y * np.arange(1.0, 6.0))


CASES = {
    "sin-out-None": lambda x: np.sum(np.sin(x, out=None)),
    "sum-out-None": lambda x: np.sum(x ** 2, out=None),
    "multiply-out-None-tuple": lambda x: np.sum(np.multiply(x, x, out=(None,))),
    "true_divide-out-ellipsis": lambda x: np.sum(np.true_divide(x, 3.0, out=...)),
    "nanstd": lambda x: np.nanstd(x),
    "nanvar": lambda x: np.nanvar(x, ddof=1),
    "nanstd-nan": lambda x: np.nanstd(np.where(x > 1.8, np.nan, x)),
    "nancumsum": lambda x: np.sum(np.nancumsum(x) ** 2),
    "linalg.outer": lambda x: np.sum(np.linalg.outer(x, x[:3]) ** 2),
    "sort-view": _sort_view,
    "sort-view-2d": _sort_view_2d,
    "sort-view-of-reshape": _sort_view_of_reshape,
    "partition-in-place": _partition_in_place,
}


@pytest.mark.parametrize("f,x", grad_params(CASES, POINT))
def test_out_none_and_view_sort(f, x):
    check_grad_and_jvp(f, x)
