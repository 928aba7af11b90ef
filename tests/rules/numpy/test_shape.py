"""Rules for reshaping, transposing, joining, tiling, copying and casting, against finite differences."""
from __future__ import annotations

import numpy as np
import pytest

from bytegrad.rules._apply import as_rrule
from bytegrad.rules.registry import ZERO, lookup

from ..cases import Arr, Gen, Num, Sc, case, params

X = Arr((2, 3, 4))
M = Arr((2, 3))


def _strided(rng, dtype):
    """A view that is neither C- nor F-contiguous, for ravel(order='K')."""
    base = rng.uniform(-2, 2, (4, 3, 6)).astype(dtype)
    return base.transpose(2, 0, 1)[::2, ::-1]


def _fortran(rng, dtype):
    return np.asfortranarray(rng.uniform(-2, 2, (3, 4)).astype(dtype))


RESHAPE = [
    case(np.reshape, X, (4, 6)), case(np.reshape, X, (-1,), name="reshape-minus-one"),
    case(np.reshape, X, (6, 4), "F", name="reshape-order-F"),
    case(np.reshape, [Num(), Num(), Num(), Num()], (2, 2), name="reshape-list"),
    case(np.ndarray.reshape, X, 4, 6, name="x.reshape(4, 6)"),
    case(np.ndarray.reshape, X, (3, -1), name="x.reshape((3, -1))"),
    case(np.ndarray.reshape, X, 24, order="F", name="x.reshape(order=F)"),
    case(np.ravel, X), case(np.ravel, Gen(_fortran), "A", name="ravel-A-fortran"),
    case(np.ravel, Gen(_strided), "K", name="ravel-K-strided"), case(np.ravel, Gen(_fortran), "K", name="ravel-K-fortran"),
    case(np.ndarray.ravel, X), case(np.ndarray.ravel, X, "F", name="x.ravel(F)"),
    case(np.ndarray.flatten, X), case(np.ndarray.flatten, Gen(_strided), order="K", name="x.flatten(K)"),
    case(np.squeeze, Arr((2, 1, 3, 1))), case(np.squeeze, Arr((2, 1, 3, 1)), 1, name="squeeze-axis"),
    case(np.ndarray.squeeze, Arr((1, 3, 1))), case(np.expand_dims, M, (0, 2)), case(np.expand_dims, M, -1),
]
TRANSPOSE = [
    case(np.transpose, X), case(np.transpose, X, (1, 2, 0)), case(np.transpose, X, axes=(-1, 0, 1), name="transpose-neg"),
    case(np.ndarray.transpose, X), case(np.ndarray.transpose, X, 2, 0, 1, name="x.transpose(2, 0, 1)"),
    case(np.ndarray.transpose, X, (1, 0, 2), name="x.transpose((1, 0, 2))"),
    case(np.ndarray.T, X), case(np.ndarray.T, Arr((3,)), name="T-vector"), case(np.ndarray.mT, X),
    case(np.ndarray.real, M), case(np.ndarray.imag, M),
    case(np.swapaxes, X, 0, 2), case(np.ndarray.swapaxes, X, -1, 1), case(np.moveaxis, X, 0, -1),
    case(np.moveaxis, X, (0, 1), (2, 0), name="moveaxis-many"),
    case(np.flip, X), case(np.flip, X, (0, 2), name="flip-axes"), case(np.roll, X, 2, 1),
    case(np.fliplr, X), case(np.flipud, M), case(np.rot90, X), case(np.rot90, X, 3, (2, 0), name="rot90-k-axes"),
    case(np.rot90, M, k=-1, name="rot90-negative"),
    case(np.roll, X, (1, -2), (0, 2), name="roll-many"), case(np.roll, X, 5, name="roll-flat"),
]
JOIN = [
    case(np.concatenate, [M, Arr((1, 3))]), case(np.concatenate, (M, M, Arr((2, 1))), 1, name="concatenate-tuple-axis1"),
    case(np.concatenate, [M, Arr((4,))], None, name="concatenate-flat"),
    case(np.concatenate, [M, np.ones((1, 3), dtype=np.int64)], name="concatenate-with-int-array"),
    case(np.stack, [M, M, M]), case(np.stack, (M, M), -1, name="stack-last"),
    case(np.hstack, [M, Arr((2, 1))]), case(np.hstack, (Arr((3,)), Arr((2,))), name="hstack-1d"),
    case(np.vstack, [M, Arr((3,))]), case(np.vstack, (Arr((3,)), Arr((3,))), name="vstack-1d"),
    case(np.atleast_1d, Num()), case(np.atleast_2d, Arr((3,))), case(np.atleast_3d, M),
    case(np.atleast_2d, Arr((3,)), M, name="atleast_2d-many"),
]
REPEAT = [
    case(np.broadcast_to, Arr((1, 3)), (4, 2, 3)), case(np.broadcast_to, Num(), (2, 2), name="broadcast_to-scalar"),
    case(np.tile, M, 2), case(np.tile, M, (2, 1, 3), name="tile-more-reps"), case(np.tile, X, (2, 1), name="tile-fewer-reps"),
    case(np.repeat, M, 3), case(np.repeat, M, 2, -1), case(np.repeat, M, [1, 0, 3], axis=1, name="repeat-counts"),
    case(np.ndarray.repeat, M, 2, 0),
]
ARRAYS = [
    case(np.array, [Num(), Num(), Sc()], name="array-of-floats"),
    case(np.array, [[Num(), Num()], [Num(), 1]], name="array-nested-with-int"),
    case(np.array, [Arr((3,)), Arr((3,))], name="array-of-arrays"),
    case(np.array, (Arr((2,)), [Num(), Num()]), name="array-of-tuple"),
    case(np.array, M, name="array-copy"), case(np.array, M, ndmin=4, name="array-ndmin"),
    case(np.array, [Num(), Num()], dtype=np.float32, name="array-to-float32", dtypes=("float64",)),
    case(np.asarray, M), case(np.asarray, [Num(), Num()], name="asarray-list"),
    case(np.asarray, M, dtype=np.float64, name="asarray-to-float64"),
    case(np.asanyarray, M), case(np.ascontiguousarray, Gen(_fortran)),
    case(np.copy, M), case(np.ndarray.copy, M), case(np.ndarray.copy, M, "F", name="x.copy(F)"),
    case(np.ndarray.view, M),
    case(np.ndarray.astype, M, np.float64), case(np.ndarray.astype, M, np.float32, name="astype-float32"),
    case(np.ndarray.astype, M, np.int64, name="astype-int"),
    case(np.float64, M), case(np.float64, Num(), name="float64-scalar"), case(np.float32, M),
    case(np.ndarray.tolist, M), case(np.ndarray.tolist, Arr(()), name="tolist-0d"),
    case(np.ndarray.item, Arr((1, 1))), case(np.ndarray.item, M, 4, name="item-flat"),
    case(np.ndarray.item, M, 1, 2, name="item-multi"), case(np.ndarray.item, M, (0, 1), name="item-tuple"),
    case(np.generic.item, Sc()), case(np.generic.item, Sc(), 0, name="scalar-item-index"), case(np.generic.tolist, Sc()),
]
CONSTRUCTORS = [
    case(np.full, (2, 3), Num()), case(np.full, (2, 3), Arr((3,)), name="full-array-fill"),
    case(np.full_like, M, Num()), case(np.full_like, M, Sc(), np.float64, name="full_like-dtype"),
    case(np.linspace, Num(), Num(), 5), case(np.linspace, Num(), Num(), 4, False, name="linspace-no-endpoint"),
    case(np.linspace, Arr((3,)), Num(), 5, axis=1, name="linspace-array-axis1"),
    case(np.linspace, Num(), Num(), 6, retstep=True, name="linspace-retstep"),
    case(np.linspace, 0, Num(), 3, name="linspace-int-start"),
]
TABLES = [RESHAPE, TRANSPOSE, JOIN, REPEAT, ARRAYS, CONSTRUCTORS]


@pytest.mark.parametrize("case,dtype", params(RESHAPE + TRANSPOSE + JOIN + REPEAT + ARRAYS + CONSTRUCTORS))
def test_shape_rule(case, dtype):
    case.check(dtype)


@pytest.mark.parametrize("fn", [np.asarray, np.asanyarray, np.ascontiguousarray, np.ndarray.T, np.ndarray.real,
                                np.ndarray.view])
def test_identity_results_are_fresh_views(fn):
    x = np.ones(3)
    out, _ = as_rrule(lookup(fn))(x)
    assert out is not x and out.base is x


def test_concatenate_cotangent_mirrors_the_sequence_type():
    a, b = np.ones((2, 2)), np.ones((1, 2))
    for seq in ([a, b], (a, b)):
        _, pullback = as_rrule(lookup(np.concatenate))(seq)
        (bars,) = pullback(np.arange(6.0).reshape(3, 2))
        assert type(bars) is type(seq)
        assert bars[1].tolist() == [[4.0, 5.0]]


def test_imag_of_real_array_has_zero_cotangent():
    _, pullback = as_rrule(lookup(np.ndarray.imag))(np.ones(3))
    assert pullback(np.ones(3)) == (ZERO,)


def test_array_of_python_floats_gives_python_float_cotangents():
    _, pullback = as_rrule(lookup(np.array))([1.0, 2.0])
    (bars,) = pullback(np.array([3.0, 4.0]))
    assert bars == [3.0, 4.0] and all(type(b) is float for b in bars)


def test_tolist_accepts_zero_entries_in_its_cotangent():
    _, pullback = as_rrule(lookup(np.ndarray.tolist))(np.ones((2, 2)))
    (x_bar,) = pullback([[1.0, ZERO], ZERO])
    assert x_bar.tolist() == [[1.0, 0.0], [0.0, 0.0]]
