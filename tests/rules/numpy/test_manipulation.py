"""split and friends, pad and sliding_window_view against finite differences."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.lib.stride_tricks import sliding_window_view

from bytegrad.errors import RuleCaseError
from bytegrad.rules._apply import as_rrule
from bytegrad.rules.registry import ZERO, lookup
from bytegrad.rules.testing import check_rule

from ..cases import Arr, case, params

X = Arr((4, 6))

SPLIT = [
    case(np.split, X, 2), case(np.split, X, [1, 4], 1, name="split-indices-axis1"),
    case(np.split, X, 3, axis=-1, name="split-axis-keyword"),
    case(np.array_split, X, 3), case(np.array_split, Arr((7,)), 3, name="array_split-uneven"),
    case(np.hsplit, X, 2), case(np.hsplit, Arr((6,)), [2], name="hsplit-1d"), case(np.vsplit, X, [1]),
    case(np.dsplit, Arr((2, 2, 4)), 2),
]
PAD = [
    case(np.pad, X, 1), case(np.pad, X, ((1, 2), (0, 3)), name="pad-widths"),
    case(np.pad, X, 2, constant_values=1.5, name="pad-constant-values"),
    case(np.pad, X, (2, 3), "edge", name="pad-edge"), case(np.pad, X, 3, "reflect", name="pad-reflect"),
    case(np.pad, X, ((4, 1), (2, 7)), "symmetric", name="pad-symmetric"), case(np.pad, X, 5, mode="wrap", name="pad-wrap"),
    case(np.pad, Arr((5,)), (6, 2), "reflect", name="pad-reflect-wider-than-array"),
]
WINDOWS = [
    case(sliding_window_view, Arr((7,)), 3), case(sliding_window_view, X, (2, 3), name="windows-2d"),
    case(sliding_window_view, X, 3, 1, name="windows-axis"),
    case(sliding_window_view, Arr((3, 4, 5)), (2, 2), axis=(2, 0), name="windows-axes"),
]
TABLES = [SPLIT, PAD, WINDOWS]


@pytest.mark.parametrize("case,dtype", params(SPLIT + PAD + WINDOWS))
def test_manipulation_rule(case, dtype):
    case.check(dtype)


def test_split_fills_pieces_without_cotangent_with_zeros():
    _, pullback = as_rrule(lookup(np.split))(np.ones((4, 2)), 2)
    (x_bar,) = pullback([ZERO, np.full((2, 2), 3.0)])[:1]
    assert x_bar.tolist() == [[0.0, 0.0], [0.0, 0.0], [3.0, 3.0], [3.0, 3.0]]


@pytest.mark.parametrize("kwargs", [{"mode": "mean"}, {"mode": "linear_ramp"}, {"mode": "reflect", "reflect_type": "odd"}])
def test_pad_modes_that_compute_values_are_a_clear_error(kwargs):
    with pytest.raises(RuleCaseError, match="numpy.pad rule"):
        as_rrule(lookup(np.pad))(np.ones(3), 1, **kwargs)


def test_overlapping_windows_accumulate():
    _, pullback = as_rrule(lookup(sliding_window_view))(np.zeros(4), 2)
    (x_bar, _) = pullback(np.ones((3, 2)))
    assert x_bar.tolist() == [1.0, 2.0, 2.0, 1.0]


@settings(max_examples=25, deadline=None)
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4), data=st.data(),
       mode=st.sampled_from(["constant", "edge", "reflect", "symmetric", "wrap"]),
       dtype=st.sampled_from(["float64", "float32"]), seed=st.integers(0, 2**16))
def test_pad_over_random_shapes_widths_and_modes(shape, data, mode, dtype, seed):
    widths = data.draw(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=len(shape), max_size=len(shape)))
    x = np.random.default_rng(seed).uniform(-2, 2, shape).astype(dtype)
    check_rule(np.pad, x, widths, mode, seed=seed)
