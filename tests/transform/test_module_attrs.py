"""An operation is hooked whenever any of its operands may be differentiated, and objects read from
another module's attributes (`np.r_`, `mod.table`) count as possibly differentiated, as globals do:
these sites once ran unrewritten and gave zero gradients."""
import numpy as np
import pytest

from tests.gradcheck import check_grad
from tests.transform import modattr_helper as helper


def r_twice(x):
    return np.sum(np.r_[x, x] ** 2)


def r_with_slice(x):
    return np.sum(np.r_[x, 0.0:3.0] * np.r_[1.0:4.0, x])


def c_columns(x):
    return np.sum(np.c_[x, 2 * x] ** 3)


def r_local_alias(x):
    r = np.r_
    return np.sum(r[x, x] ** 2)


def s_key(x):
    return np.sum(x[np.s_[1:]] ** 2)


def table_key(x):
    return np.sum(helper.table[x] ** 2)


def table_written(x):
    helper.table.w = x * 2.0
    return np.sum(helper.table[3.0] ** 2)


def state_written(x):
    helper.state.v = np.sin(x)
    return np.sum(helper.state.v * x)


def module_attr_written(x):
    helper.latest = x ** 2
    return np.sum(helper.latest * 3.0)


def module_array_written(x):
    helper.buffer[:] = x
    return np.sum(helper.buffer ** 2)


def local_import(x):
    from tests.transform import modattr_helper as h
    return np.sum(h.table[x] ** 2)


def slice_bounds(x):
    win = helper.Window()
    return np.sum(win[x[0]:x[1]] * x[2])


def setter_of_constant(x):
    obj = helper.Scaled(x)
    obj.scale = 3.0
    return np.sum(obj.scale ** 2)


CASES = [r_twice, r_with_slice, c_columns, r_local_alias, s_key, table_key, table_written,
         state_written, module_attr_written, module_array_written, local_import, slice_bounds, setter_of_constant]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_module_attribute_operands_are_differentiated(fn, dtype):
    x = np.array([0.5, -1.25, 2.0], dtype=dtype)
    tol = 1e-5 if dtype is np.float64 else 2e-3
    check_grad(fn, [x], rtol=tol, atol=tol)
