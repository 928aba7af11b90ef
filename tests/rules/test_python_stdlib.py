"""The standard library beyond the builtins (rules/python_stdlib.py): rules against finite
differences, the Python implementations against the C functions they stand for, and gradients of
whole functions that use them."""
from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import math
import operator
import statistics

import numpy as np
import pytest

from bytegrad.rules import _stdlib_impls
from bytegrad.rules.registry import RuleKind, lookup

from .cases import Arr, Num, Sc, case, params

F64 = ("float64",)
FLOATS = [Num(), Num(), Num(), Num()]


@functools.lru_cache(maxsize=None)
def _cached_square(a):
    return a * a


_LRU_CALL = type(_cached_square).__call__
THROUGH = [case(fn, *args, dtypes=F64, name=name, **kw) for name, fn, args, kw in [
    ("product", itertools.product, (FLOATS, [Num(), Num()]), {}), ("product-repeat", itertools.product, (FLOATS,), {"repeat": 2}),
    ("product-empty", itertools.product, (FLOATS, []), {}), ("product-none", itertools.product, (), {}),
    ("combinations", itertools.combinations, (FLOATS, 2), {}), ("combinations-too-many", itertools.combinations, (FLOATS, 5), {}),
    ("combinations-0", itertools.combinations, (FLOATS, 0), {}),
    ("takewhile", itertools.takewhile, (lambda v: v < 1.0, [0.5, 0.7, 1.5, 0.2]), {}),
    ("dropwhile", itertools.dropwhile, (lambda v: v < 1.0, [0.5, 0.7, 1.5, 0.2]), {}),
    ("groupby-empty", itertools.groupby, ([],), {}),  # its groups are iterators: compared below
    ("itemgetter", operator.itemgetter.__call__, (operator.itemgetter(2), FLOATS), {}),
    ("itemgetter-many", operator.itemgetter.__call__, (operator.itemgetter(0, 3), FLOATS), {}),
    ("methodcaller", operator.methodcaller.__call__, (operator.methodcaller("sum"), Arr((3,))), {}),
    ("methodcaller-kwargs", operator.methodcaller.__call__, (operator.methodcaller("sum", axis=0), Arr((2, 3))), {}),
    ("lru_cache", _LRU_CALL, (_cached_square, Num()), {}),
]]
RULES = [
    case(complex, Num(), Num(), dtypes=F64), case(complex, Sc(), Sc(), name="complex-numpy-scalars"),
    case(complex, Num(), name="complex-one", dtypes=F64), case(complex, "1+2j", name="complex-str", dtypes=F64),
    case(complex.real, 1.5 - 2j, dtypes=F64), case(complex.imag, 1.5 - 2j, dtypes=F64),
    case(complex.conjugate, 1.5 - 2j, dtypes=F64), case(math.modf, Num(-3, 3), dtypes=F64), case(math.frexp, Num(-30, 30), dtypes=F64),
    case(statistics.mean, FLOATS, dtypes=F64), case(statistics.mean, Arr((5,)), name="mean-array"),
    case(statistics.fmean, FLOATS, dtypes=F64),
    case(statistics.pvariance, FLOATS, dtypes=F64), case(statistics.pvariance, FLOATS, Num(), name="pvariance-mu", dtypes=F64),
    case(statistics.pstdev, FLOATS, dtypes=F64), case(statistics.pstdev, Arr((5,)), name="pstdev-array"),
    case(statistics.variance, FLOATS, dtypes=F64), case(statistics.stdev, FLOATS, dtypes=F64),
    case(np.ndarray.__copy__, Arr()), case(np.ndarray.__deepcopy__, Arr(), {}, name="ndarray.__deepcopy__"),
    case(np.generic.__copy__, Sc()), case(np.generic.__deepcopy__, Sc(), {}, name="generic.__deepcopy__"),
]
TRANSPARENT = [case(fn, *args, dtypes=F64) for fn, *args in [
    (heapq.heappush, [1.0], 0.5), (heapq.heappop, [1.0, 2.0]), (heapq.heapify, [2.0, 1.0]),
    (bisect.insort_right, [1.0, 3.0], 2.0), (dict.fromkeys, "ab", 1.5),
]]
NONDIFF = [case(bisect.bisect_left, [1.0, 3.0], 2.0, dtypes=F64), case(bisect.bisect_right, [1.0, 3.0], 2.0, dtypes=F64)]
TABLES = [THROUGH, RULES, TRANSPARENT, NONDIFF]


@pytest.mark.parametrize("case,dtype", params(THROUGH + RULES + TRANSPARENT + NONDIFF))
def test_stdlib_rules(case, dtype):
    case.check(dtype)


def test_through_rules_point_at_the_python_implementations():
    for fn in (itertools.product, itertools.groupby, operator.itemgetter.__call__, _LRU_CALL):
        rule = lookup(fn)
        assert rule.kind is RuleKind.THROUGH and rule.impl.__module__ == _stdlib_impls.__name__


@pytest.mark.parametrize("items,key", [([1.0, 1.0, 2.0, 1.0], None), ([0.5, 1.5, 2.5, 0.1], lambda v: v > 1.0), ([], None)])
def test_groupby_groups_like_itertools(items, key):
    ours = [(k, list(g)) for k, g in _stdlib_impls.py_groupby(items, key)]
    assert ours == [(k, list(g)) for k, g in itertools.groupby(items, key)]
