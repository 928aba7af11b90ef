"""Indexing rules (getitem on arrays, take, sort) against finite differences."""
from __future__ import annotations

import operator

import numpy as np
import pytest

import bytegrad
from bytegrad.rules._apply import as_rrule
from bytegrad.rules.registry import NO_TANGENT, ZERO, lookup

from ..cases import Arr, Gen, Num, case, params

getitem = operator.getitem
X = Arr((3, 4, 5))


def _mask(rng, dtype):
    return rng.random((3, 4)) > 0.4


BASIC = [
    case(getitem, X, 1, name="int"), case(getitem, X, -1, name="negative-int"),
    case(getitem, X, (1, 2, 3), name="scalar-element"), case(getitem, X, slice(1, None), name="slice"),
    case(getitem, X, (slice(None), slice(None, None, -2)), name="reversed-step"),
    case(getitem, X, (Ellipsis, 0), name="ellipsis"), case(getitem, X, (None, 1, None), name="newaxis"),
    case(getitem, X, np.int64(2), name="numpy-int"), case(getitem, X, (), name="empty-tuple"),
    case(getitem, Arr(()), (), name="0d-empty-tuple"), case(getitem, Arr(()), Ellipsis, name="0d-ellipsis"),
]
FANCY = [
    case(getitem, X, [0, 2, 0], name="list-with-repeats"),
    case(getitem, X, np.array([[0, 1], [1, 1]]), name="int-array-2d-repeats"),
    case(getitem, X, (slice(None), [3, 0, 3]), name="slice-then-list"),
    case(getitem, X, ([0, 2, 2], [1, 1, 1]), name="paired-repeats"),
    case(getitem, X, (0, slice(1, 3), [4, 4]), name="mixed"),
    case(getitem, X, (Ellipsis, [1, 1]), name="ellipsis-list"),
    case(getitem, Arr((3, 4)), Gen(_mask), name="bool-mask"),
    case(getitem, X, (Gen(_mask), 2), name="bool-mask-then-int"),
    case(getitem, X, (slice(None), np.array([True, False, True, True])), name="bool-axis"),
    case(getitem, X, True, name="python-bool"),
]
OTHER = [
    case(np.take, X, [0, 2, 2], 1), case(np.take, X, [3, 17, 17], name="take-flat"),
    case(np.take, X, [-1, 5], 2, mode="wrap", name="take-wrap"),
    case(np.take, X, [7, -3, 1], 0, mode="clip", name="take-clip"),
    case(np.sort, Arr((3, 4), distinct=True)), case(np.sort, Arr((3, 4), distinct=True), 0, name="sort-axis0"),
    case(np.sort, Arr((3, 4), distinct=True), None, name="sort-flat"),
    case(np.partition, Arr((3, 5), distinct=True), 2), case(np.partition, Arr((4, 3), distinct=True), [0, 2], 0,
                                                             name="partition-axis0"),
    case(np.partition, Arr((3, 4), distinct=True), 5, None, name="partition-flat"),
    case(np.take_along_axis, X, np.array([[[0, 4, 4]]]), 2, name="take_along_axis-repeats"),
    case(np.take_along_axis, X, np.array([[[2]], [[0]], [[-1]]]), axis=1, name="take_along_axis-broadcast"),
    case(np.take_along_axis, X, np.array([59, 0, 0, 7]), None, name="take_along_axis-flat"),
    case(np.bincount, np.array([0, 2, 2, 5]), Arr((4,)), name="bincount-weights"),
    case(np.bincount, np.array([1, 1, 0]), Arr((3,)), 6, name="bincount-minlength"),
    case(np.diagonal, Arr((3, 4))), case(np.diagonal, X, 1, name="diagonal-offset"),
    case(np.diagonal, X, -1, 2, 0, name="diagonal-axes"), case(np.diagonal, X, axis1=-1, axis2=1, name="diagonal-keywords"),
    case(np.ndarray.diagonal, Arr((4, 3)), -2),
    case(getitem, [Num(), Num(), Num()], 1, name="list-int"),
    case(getitem, (Num(), Arr((2,)), Num()), slice(0, 2), name="tuple-slice"),
    case(getitem, {"w": Arr((2,)), "b": Num()}, "w", name="dict-key"),
]
TABLES = [BASIC, FANCY, OTHER]


@pytest.mark.parametrize("case,dtype", params(BASIC + FANCY + OTHER))
def test_indexing_rule(case, dtype):
    case.check(dtype)


def test_repeated_indices_accumulate():
    out, pullback = as_rrule(lookup(operator.getitem))(np.zeros(3), [0, 0, 2, 0])
    x_bar, index_bar = pullback(np.ones(4))
    assert x_bar.tolist() == [3.0, 0.0, 1.0] and index_bar is NO_TANGENT


def test_list_cotangent_is_structural():
    out, pullback = as_rrule(lookup(operator.getitem))([1.0, 2.0, 3.0], slice(1, None))
    x_bar, _ = pullback([5.0, ZERO])
    assert x_bar == [ZERO, 5.0, ZERO]


def test_unsupported_container_is_a_clear_error():
    out, pullback = as_rrule(lookup(operator.getitem))("abc", 1)
    with pytest.raises(TypeError, match="cannot form the cotangent of a str"):
        pullback(1.0)


def test_basic_index_result_is_a_fresh_object():
    x = np.ones((2, 2))
    out, _ = as_rrule(lookup(operator.getitem))(x, Ellipsis)
    assert out is not x


def test_bincount_weights_by_keyword_are_differentiated():
    """np.bincount is linear in its weights (it was declared non-differentiable: a zero gradient)."""
    x, idx = np.array([1.0, 2.0, 3.0]), np.array([0, 2, 2])
    g = bytegrad.grad(lambda x: np.sum(np.bincount(idx, weights=x ** 2) ** 2))(x)
    np.testing.assert_allclose(g, [4.0, 104.0, 156.0], rtol=1e-12)
