"""tensordot, kron, cross, multi_dot and matrix_power against finite differences."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from bytegrad.errors import RuleCaseError
from bytegrad.rules._apply import as_rrule
from bytegrad.rules.registry import ZERO, lookup
from bytegrad.rules.testing import check_rule

from ..cases import Arr, Gen, case, params


def _crosses_2_vectors() -> bool:
    """NumPy 2.0-2.4 take vectors of 2 components in np.cross (deprecated); NumPy 2.5 refuses them."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            np.cross(np.ones(2), np.ones(2))
    except ValueError:
        return False
    return True


CROSSES_2_VECTORS = _crosses_2_vectors()


def _square(*batch):
    def make(rng, dtype):
        return (rng.uniform(-0.5, 0.5, batch + (3, 3)) + 1.5 * np.eye(3)).astype(dtype)
    return Gen(make)


TENSORDOT = [
    case(np.tensordot, Arr((2, 3, 4)), Arr((3, 4, 5)), name="tensordot-default"),
    case(np.tensordot, Arr((2, 3)), Arr((3, 4)), 1, name="tensordot-int"),
    case(np.tensordot, Arr((2, 3)), Arr((4, 5)), 0, name="tensordot-outer"),
    case(np.tensordot, Arr((3, 2, 4)), Arr((4, 5, 3)), ([0, 2], [2, 0]), name="tensordot-pairs"),
    case(np.tensordot, Arr((3, 2, 4)), Arr((5, 3)), axes=(0, 1), name="tensordot-single-pair"),
    case(np.tensordot, Arr((3, 4)), Arr((4, 3)), ([1, 0], [0, 1]), name="tensordot-full"),
    case(np.tensordot, Arr((2, 3, 4)), Arr((4, 3, 2)), ((-1, -2), (0, 1)), name="tensordot-negative"),
]
KRON = [
    case(np.kron, Arr((2, 3)), Arr((3, 2))), case(np.kron, Arr((3,)), Arr((2,)), name="kron-1d"),
    case(np.kron, Arr((2,)), Arr((2, 3)), name="kron-mixed-ndim"), case(np.kron, Arr((2, 2, 1)), Arr((1, 3)), name="kron-3d"),
]
CROSS = [
    case(np.cross, Arr((3,)), Arr((3,))), case(np.cross, Arr((4, 3)), Arr((3,)), name="cross-broadcast"),
    case(np.cross, Arr((3, 4)), Arr((4, 3)), axisa=0, name="cross-axisa"),
    case(np.cross, Arr((3, 2)), Arr((3, 2)), axis=0, name="cross-axis"),
    *([case(np.cross, Arr((4, 2)), Arr((2,)), name="cross-2d"), case(np.cross, Arr((2,)), Arr((4, 3)), name="cross-2-3"),
       case(np.cross, Arr((2, 3)), Arr((3, 2)), axisb=0, axisc=0, name="cross-3-2-axes")] if CROSSES_2_VECTORS else []),
    case(np.cross, Arr((2, 3)), Arr((2, 3)), -1, -1, 0, name="cross-axisc"),
]
MULTI = [
    case(np.linalg.multi_dot, [Arr((2, 3)), Arr((3, 4)), Arr((4, 2))]),
    case(np.linalg.multi_dot, (Arr((3,)), Arr((3, 4)), Arr((4,))), name="multi_dot-vectors"),
    case(np.linalg.multi_dot, [Arr((2, 3)), Arr((3, 5)), Arr((5, 4)), Arr((4,))], name="multi_dot-four"),
    case(np.linalg.matrix_power, _square(), 3), case(np.linalg.matrix_power, _square(2), 2, name="matrix_power-batched"),
    case(np.linalg.matrix_power, _square(), 1, name="matrix_power-1"),
    case(np.linalg.matrix_power, _square(), 0, name="matrix_power-0"),
    case(np.linalg.matrix_power, _square(), -2, name="matrix_power-negative"),
]
TABLES = [TENSORDOT, KRON, CROSS, MULTI]


@pytest.mark.parametrize("case,dtype", params(TENSORDOT + KRON + CROSS + MULTI))
def test_product_rule(case, dtype):
    case.check(dtype)


def test_multi_dot_cotangent_mirrors_the_sequence_type():
    mats = [np.ones((2, 2)), np.ones((2, 3))]
    for seq in (mats, tuple(mats)):
        _, pullback = as_rrule(lookup(np.linalg.multi_dot))(seq)
        (bars,) = pullback(np.ones((2, 3)))
        assert type(bars) is type(seq) and bars[1].shape == (2, 3)


def test_cross_of_4_vectors_is_a_clear_error():
    with pytest.raises(RuleCaseError, match="2 or 3 components, not 4 and 4"):
        as_rrule(lookup(np.cross))(np.ones(4), np.ones(4))


def test_matrix_power_0_has_zero_cotangent():
    _, pullback = as_rrule(lookup(np.linalg.matrix_power))(np.eye(2), 0)
    assert pullback(np.ones((2, 2)))[0] is ZERO


@settings(max_examples=25, deadline=None)
@given(free_a=hnp.array_shapes(min_dims=0, max_dims=2, max_side=3), free_b=hnp.array_shapes(min_dims=0, max_dims=2, max_side=3),
       contracted=hnp.array_shapes(min_dims=0, max_dims=2, max_side=3), data=st.data(),
       dtype=st.sampled_from(["float64", "float32"]), seed=st.integers(0, 2**16))
def test_tensordot_over_random_shapes_and_axis_orders(free_a, free_b, contracted, data, dtype, seed):
    """a holds its free axes and the contracted ones interleaved at random, b likewise, in another order."""
    k = len(contracted)
    order_a = data.draw(st.permutations(range(len(free_a) + k)))
    order_b = data.draw(st.permutations(range(len(free_b) + k)))
    shape_a, shape_b = list(free_a) + list(contracted), list(free_b) + list(contracted)
    # the contracted axis j sits at position order.index(len(free) + j)
    axes_a = [order_a.index(len(free_a) + j) for j in range(k)]
    axes_b = [order_b.index(len(free_b) + j) for j in range(k)]
    rng = np.random.default_rng(seed)
    a = rng.uniform(-2, 2, [shape_a[i] for i in order_a]).astype(dtype)
    b = rng.uniform(-2, 2, [shape_b[i] for i in order_b]).astype(dtype)
    check_rule(np.tensordot, a, b, (axes_a, axes_b), seed=seed)
