"""median, quantile, percentile and average against finite differences."""
from __future__ import annotations

import numpy as np
import pytest

from bytegrad.errors import RuleCaseError
from bytegrad.rules._apply import as_rrule
from bytegrad.rules.registry import lookup

from ..cases import Arr, Num, case, params

X = Arr((3, 4, 5), distinct=True)   # no ties between order statistics
E = Arr((4, 6), distinct=True)

ORDER = [
    case(np.median, X), case(np.median, X, 1, name="median-axis"), case(np.median, E, -1, name="median-even"),
    case(np.median, X, (0, 2), keepdims=True, name="median-axes-keepdims"),
    case(np.median, E, 0, None, True, name="median-overwrite_input"),
    case(np.quantile, X, 0.3), case(np.quantile, X, Num(0.05, 0.95), 1, name="quantile-float-q"),
    case(np.quantile, E, np.array([0.1, 0.5, 0.85]), -1, name="quantile-array-q"),
    case(np.quantile, E, Arr((2,), 0.05, 0.95), 0, name="quantile-differentiable-q"),
    case(np.quantile, X, 0.3, (0, 1), keepdims=True, name="quantile-axes-keepdims"),
    case(np.quantile, X, [0.2, 0.7], 2, method="midpoint", name="quantile-midpoint"),
    case(np.quantile, X, 0.35, 2, method="lower", name="quantile-lower"),
    case(np.quantile, X, 0.35, 2, method="higher", name="quantile-higher"),
    case(np.quantile, X, 0.35, 2, method="nearest", name="quantile-nearest"),
    case(np.quantile, E, 1, 1, name="quantile-max"), case(np.quantile, E, 0, 1, name="quantile-min"),
    case(np.percentile, X, 40), case(np.percentile, E, Num(5, 95), 1, name="percentile-float-q"),
    case(np.percentile, E, [10.0, 90.0], None, None, False, "linear", True, name="percentile-positional"),
]
AVERAGE = [
    case(np.average, X), case(np.average, X, 1, name="average-axis"),
    case(np.average, X, 1, Arr((4,), 0.5, 2), name="average-weights-1d"),
    case(np.average, X, None, Arr((3, 4, 5), 0.5, 2), name="average-weights-full"),
    case(np.average, X, (2, 0), Arr((5, 3), 0.5, 2), name="average-weights-axes"),
    case(np.average, X, 1, Arr((4,), 0.5, 2), True, name="average-returned"),
    case(np.average, X, 0, None, True, name="average-returned-no-weights"),
    case(np.average, X, 2, Arr((5,), 0.5, 2), keepdims=True, name="average-keepdims"),
]
TABLES = [ORDER, AVERAGE]


@pytest.mark.parametrize("case,dtype", params(ORDER + AVERAGE))
def test_statistics_rule(case, dtype):
    case.check(dtype)


def test_median_of_even_count_splits_between_the_middle_elements():
    _, pullback = as_rrule(lookup(np.median))(np.array([4.0, 1.0, 3.0, 2.0]))
    assert pullback(1.0)[0].tolist() == [0.0, 0.0, 0.5, 0.5]


def test_median_never_writes_into_its_input():
    x = np.array([3.0, 1.0, 2.0])
    as_rrule(lookup(np.median))(x, None, None, True)
    assert x.tolist() == [3.0, 1.0, 2.0]


def test_unsupported_quantile_method_is_a_clear_error():
    with pytest.raises(RuleCaseError, match="methods"):
        as_rrule(lookup(np.quantile))(np.ones(4), 0.5, method="weibull")
