"""Reduction rules (function and method forms) against finite differences."""
from __future__ import annotations

import numpy as np
import pytest

from bytegrad.rules._apply import as_rrule
from bytegrad.rules.registry import NO_TANGENT, lookup

from ..cases import Arr, Gen, Num, case, params

X = Arr((2, 3, 4))
DISTINCT = Arr((2, 3, 4), distinct=True)


def _with_zeros(rng, dtype):
    x = rng.uniform(0.5, 1.5, (2, 3, 4)) * rng.choice([-1.0, 1.0], (2, 3, 4))
    x[0, 1, 2] = 0.0
    x[1, 2, 0] = x[1, 2, 3] = 0.0  # two zeros in one reduced row: its others-product is zero too
    return x.astype(dtype)


def _ties(rng, dtype):
    x = rng.uniform(-1.0, 1.0, (3, 4))
    x[:, 1] = x[:, 3] = 2.0  # tied maxima in every row
    return x.astype(dtype)


AXES = [None, 0, -1, (0, 2)]
SUM = [case(fn, X, axis=axis, keepdims=keep, name=f"{fn.__name__}-axis={axis}-keepdims={keep}")
       for fn in (np.sum, np.mean) for axis in AXES for keep in (False, True)]
METHODS = [
    case(np.ndarray.sum, X), case(np.ndarray.sum, X, 0, name="x.sum(0)"),
    case(np.ndarray.sum, X, (0, 1), None, None, True, name="x.sum(axes, None, None, True)"),
    case(np.ndarray.mean, X, -1), case(np.ndarray.mean, X, axis=(1, 2), keepdims=True, name="x.mean(keepdims)"),
    case(np.ndarray.prod, Arr((2, 3, 4), 0.5, 1.5, signed=True), 1),
    case(np.ndarray.max, DISTINCT, 2), case(np.ndarray.min, DISTINCT), case(np.ndarray.min, DISTINCT, (0, 1), name="x.min(axes)"),
    case(np.ndarray.std, X, 0), case(np.ndarray.std, X, None, None, None, 1, name="x.std(ddof=1 positional)"),
    case(np.ndarray.var, X, 1, ddof=1), case(np.ndarray.var, X, keepdims=True, name="x.var(keepdims)"),
]
FUNCTIONS = [
    case(np.sum, X, 1, None, None, False, 0.5, name="sum-initial"),
    case(np.sum, X, 1, where=np.array([True, False, True, True]), name="sum-where"),
    case(np.sum, [Arr((3,)), Arr((3,))], 0, name="sum-of-list"),
    case(np.sum, Arr(()), name="sum-0d"),
    case(np.mean, X, (0, 2), where=np.array([True, True, False, True]), name="mean-where"),
    case(np.mean, X, dtype=np.float64, name="mean-dtype"),
    case(np.prod, Arr((2, 3, 4), 0.5, 1.5, signed=True)),
    case(np.prod, Arr((2, 3, 4), 0.5, 1.5, signed=True), (0, 2), keepdims=True, name="prod-axes-keepdims"),
    case(np.prod, Gen(_with_zeros), -1, name="prod-with-zeros"),
    case(np.prod, Gen(_with_zeros), name="prod-with-zeros-all"),
    case(np.prod, Gen(_with_zeros), (0, 2), name="prod-with-zeros-axes"),
    case(np.prod, Arr((3, 4), 0.5, 1.5), 1, initial=2.0, name="prod-initial"),
    case(np.max, DISTINCT), case(np.max, DISTINCT, 1), case(np.amax, DISTINCT, (0, 2), keepdims=True),
    case(np.min, DISTINCT, -1), case(np.amin, DISTINCT),
    case(np.max, Gen(_ties), 1, name="max-ties"),
    case(np.max, DISTINCT, 1, initial=10.0, name="max-initial-wins"),
    case(np.std, X), case(np.std, X, 1, ddof=1), case(np.std, X, (0, 2), keepdims=True),
    case(np.var, X), case(np.var, X, -1, ddof=2), case(np.var, X, 0, correction=1, name="var-correction"),
    case(np.var, Arr((3, 4)), 1, where=np.array([True, True, False, True]), name="var-where"),
]


def _with_nans(rng, dtype):
    x = rng.uniform(0.5, 1.5, (3, 4)) * rng.choice([-1.0, 1.0], (3, 4))
    x[0, 1] = x[2, 3] = x[2, 0] = np.nan
    x[1] = x[1] + np.arange(4)  # distinct values: no ties for nanmax
    return x.astype(dtype)


NANS = Gen(_with_nans)
NAN = [
    case(np.nansum, NANS), case(np.nansum, NANS, 1, name="nansum-axis"),
    case(np.nansum, NANS, 0, keepdims=True, name="nansum-keepdims"),
    case(np.nanmean, NANS), case(np.nanmean, NANS, 1, name="nanmean-axis"),
    case(np.nanmean, NANS, (0, 1), keepdims=True, name="nanmean-axes"),
    case(np.nanmean, NANS, 1, where=np.array([True, True, False, True]), name="nanmean-where"),
    case(np.nanprod, NANS), case(np.nanprod, NANS, 0, name="nanprod-axis"),
    case(np.nanmax, NANS), case(np.nanmax, NANS, 1, name="nanmax-axis"), case(np.nanmin, NANS, 0, name="nanmin-axis"),
    case(np.nanmin, NANS, -1, keepdims=True, name="nanmin-keepdims"),
    case(np.ptp, DISTINCT), case(np.ptp, DISTINCT, 1, name="ptp-axis"),
    case(np.ptp, DISTINCT, (0, 2), keepdims=True, name="ptp-axes"),
    case(np.ptp, [Num(), Num(lo=2.5, hi=3.0), Num(lo=-3.0, hi=-2.5)], name="ptp-list"),
]
TABLES = [SUM, METHODS, FUNCTIONS, NAN]


@pytest.mark.parametrize("case,dtype", params(SUM + METHODS + FUNCTIONS + NAN))
def test_reduction(case, dtype):
    case.check(dtype)


def test_full_sum_returns_the_uniform_cotangent():
    x = np.ones((3, 4))
    out, pullback = as_rrule(lookup(np.sum))(x)
    x_bar, = pullback(2.5)
    assert x_bar == 2.5 and np.ndim(x_bar) == 0


def test_full_mean_returns_a_scaled_uniform_cotangent_in_the_input_dtype():
    x = np.ones((2, 5), dtype=np.float32)
    out, pullback = as_rrule(lookup(np.mean))(x)
    x_bar, = pullback(np.float32(1.0))
    assert np.ndim(x_bar) == 0 and x_bar == pytest.approx(0.1) and x_bar.dtype == np.float32


def test_method_pullback_has_one_entry_per_positional_argument():
    out, pullback = as_rrule(lookup(np.ndarray.sum))(np.ones((2, 3)), 0, None)
    cotangents = pullback(np.ones(3))
    assert len(cotangents) == 3 and cotangents[1] is NO_TANGENT and cotangents[2] is NO_TANGENT


def test_max_splits_ties_evenly():
    x = np.array([[1.0, 3.0, 3.0, 0.0]])
    out, pullback = as_rrule(lookup(np.max))(x, 1)
    x_bar, _ = pullback(np.array([1.0]))
    assert x_bar.tolist() == [[0.0, 0.5, 0.5, 0.0]]


def test_std_of_constant_input_has_zero_subgradient():
    out, pullback = as_rrule(lookup(np.std))(np.full(4, 2.0))
    x_bar, = pullback(1.0)
    assert np.array_equal(x_bar, np.zeros(4))


def test_out_argument_is_rejected():
    with pytest.raises(TypeError, match="out="):
        as_rrule(lookup(np.sum))(np.ones(3), out=np.empty(()))


def test_large_cotangents_are_read_only_broadcast_views():
    x = np.ones((300, 300))
    out, pullback = as_rrule(lookup(np.mean))(x, 0)
    x_bar, _ = pullback(np.arange(300.0))
    assert x_bar.shape == x.shape and not x_bar.flags.writeable
    assert np.array_equal(x_bar[7], np.arange(300.0) / 300)


def test_nan_elements_get_no_cotangent():
    x = np.array([1.0, np.nan, 3.0])
    for fn, expected in ((np.nansum, [1.0, 0.0, 1.0]), (np.nanmean, [0.5, 0.0, 0.5]), (np.nanmax, [0.0, 0.0, 1.0]),
                         (np.nanprod, [3.0, 0.0, 1.0])):
        out, pullback = as_rrule(lookup(fn))(x)
        x_bar = np.broadcast_to(pullback(1.0)[0], x.shape)
        assert x_bar.tolist() == expected, fn
