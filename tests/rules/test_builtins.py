"""Operators, `math` and builtins: scalar rules against finite differences, and the Python
implementations that bytegrad differentiates through against the builtins they stand for."""
from __future__ import annotations

import builtins
import collections
import itertools
import functools
import math
import operator
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bytegrad.rules import _impls
from bytegrad.rules._apply import as_rrule
from bytegrad.rules.registry import NO_TANGENT, RuleKind, lookup
from bytegrad.rules.testing import check_rule

from .cases import Arr, Gen, Num, Sc, case, params

F64 = ("float64",)
POS, NONZERO = Num(0.2, 2.0), Gen(lambda rng, dt: float(rng.uniform(0.3, 2.0) * rng.choice([-1, 1])))

OPERATORS = [
    case(operator.add, Num(), Num()), case(operator.add, Arr((2, 3)), Arr((3,)), name="add-arrays"),
    case(operator.sub, Num(), Num()), case(operator.sub, Arr((2, 3)), Num(), name="sub-array-float"),
    case(operator.mul, Num(), Num()), case(operator.mul, Arr((2, 1)), Arr((1, 3)), name="mul-broadcast"),
    case(operator.truediv, Num(), NONZERO), case(operator.truediv, Arr((2, 3)), Arr((3,), 0.5, 2), name="truediv-arrays"),
    case(operator.pow, POS, Num()), case(operator.pow, Num(), 2, name="pow-int-exponent"),
    case(operator.pow, Arr((2, 3), 0.2, 2), Arr((3,)), name="pow-arrays"), case(operator.pow, 2.0, Num(), name="pow-base-const"),
    case(operator.mod, Num(-3, 3), Num(0.5, 2)), case(operator.mod, Arr((2, 3), -3, 3), 0.7, name="mod-array"),
    case(operator.neg, Num()), case(operator.neg, Arr((2, 3)), name="neg-array"), case(operator.pos, Num()),
    case(operator.abs, NONZERO), case(operator.abs, Arr((2, 3), 0.1, 2, signed=True), name="abs-array"),
    case(operator.mul, Sc(), Arr((3,)), name="mul-numpy-scalar"),
]
MATH = [case(fn, *args, dtypes=F64, **kw) for fn, args, kw in [
    (math.sin, (Num(),), {}), (math.cos, (Num(),), {}), (math.tan, (Num(-1.2, 1.2),), {}),
    (math.asin, (Num(-0.9, 0.9),), {}), (math.acos, (Num(-0.9, 0.9),), {}), (math.atan, (Num(),), {}),
    (math.atan2, (Num(), Num()), {}), (math.sinh, (Num(),), {}), (math.cosh, (Num(),), {}), (math.tanh, (Num(),), {}),
    (math.asinh, (Num(),), {}), (math.acosh, (Num(1.1, 3),), {}), (math.atanh, (Num(-0.9, 0.9),), {}),
    (math.exp, (Num(),), {}), (math.expm1, (Num(),), {}), (math.log, (POS,), {}), (math.log, (POS, Num(1.5, 4)), {}),
    (math.log1p, (Num(-0.9, 3),), {}), (math.log2, (POS,), {}), (math.log10, (POS,), {}), (math.sqrt, (POS,), {}),
    (math.pow, (POS, Num()), {}), (math.erf, (Num(),), {}), (math.erfc, (Num(),), {}), (math.fabs, (NONZERO,), {}),
    (math.copysign, (NONZERO, NONZERO), {}), (math.degrees, (Num(),), {}), (math.radians, (Num(),), {}),
    (math.fmod, (Num(-3, 3), Num(0.5, 2)), {}), (math.remainder, (Num(-3, 3), Num(0.5, 2)), {}),
    (math.ldexp, (Num(), 3), {}), (math.hypot, (Num(), Num(), Num()), {}), (math.hypot, (Num(),), {}),
    (math.dist, ([Num(), Num()], [Num(), Num()]), {}), (math.dist, ((Num(), Num(), Num()), (Num(), Num(), Num())), {}),
    (math.exp2, (Num(),), {}), (math.cbrt, (NONZERO,), {}),
    (_impls.fsum_list, ([Num(), Num(), 2, Num()],), {}), (_impls.fsum_list, ([],), {}),
]] + [case(_impls.fsum_list, [Sc(), Arr(()), Sc()], name="fsum_list-numpy-scalars")]
BUILTINS = [
    case(builtins.abs, NONZERO, dtypes=F64), case(builtins.abs, Arr((3,), 0.1, 2, signed=True), name="abs-array"),
    case(builtins.pow, POS, Num(), dtypes=F64), case(builtins.pow, 2, 5, 7, name="pow-modular", dtypes=F64),
    case(builtins.float, Num(), dtypes=F64), case(builtins.float, Sc(), name="float-numpy-scalar"),
    case(builtins.float, Arr(()), name="float-0d-array"), case(builtins.float, "1.5", name="float-str", dtypes=F64),
    case(builtins.float, 3, name="float-int", dtypes=F64), case(builtins.float, name="float-no-argument", dtypes=F64),
    case(builtins.divmod, Num(-3, 3), Num(0.5, 2), dtypes=F64), case(builtins.divmod, 7, 2, name="divmod-ints", dtypes=F64),
    case(builtins.divmod, Arr((2, 3), -3, 3), Arr((3,), 0.5, 2), name="divmod-arrays"),
]


def _rows(rng, dtype):
    return rng.uniform(-1, 1, (3, 2)).astype(dtype)


def _started_echo():
    """A generator, started, that yields back what it is sent."""
    def echo():
        value = None
        while True:
            value = yield value
    g = echo()
    next(g)
    return g


FLOATS = [Num(), Num(), Num(), Num()]
THROUGH = [case(fn, *args, dtypes=F64, name=name, **kw) for name, fn, args, kw in [
    ("sum", builtins.sum, (FLOATS,), {}), ("sum-start", builtins.sum, (FLOATS, 1.5), {}),
    ("sum-rows", builtins.sum, (Gen(_rows),), {}), ("sum-lists", builtins.sum, ([[1.0], [2.0]], []), {}),
    ("min", builtins.min, (FLOATS,), {}), ("min-args", builtins.min, (Num(), Num(), Num()), {}),
    ("min-key", builtins.min, (FLOATS,), {"key": abs}), ("min-empty-default", builtins.min, ([],), {"default": 0.5}),
    ("min-empty", builtins.min, ([],), {}), ("min-no-args", builtins.min, (), {}),
    ("min-args-default", builtins.min, (1.0, 2.0), {"default": 0.0}),
    ("max", builtins.max, (FLOATS,), {}), ("max-ties-first", builtins.max, ([1.0, 3.0, 3.0, -3.0],), {"key": abs}),
    ("max-args", builtins.max, (Num(), Num()), {}),
    ("iter", builtins.iter, (FLOATS,), {}), ("iter-rows", builtins.iter, (Gen(_rows),), {}),
    ("iter-sentinel", builtins.iter, (iter([1.0, 2.0, 0.0, 3.0]).__next__, 0.0), {}), ("iter-int", builtins.iter, (3,), {}),
    ("zip", builtins.zip, (FLOATS, [Num(), Num()]), {}), ("zip-rows", builtins.zip, (Gen(_rows), "abc"), {}),
    ("zip-none", builtins.zip, (), {}), ("zip-strict", builtins.zip, ([1.0, 2.0], [3.0, 4.0]), {"strict": True}),
    ("zip-strict-short", builtins.zip, ([1.0, 2.0], [3.0]), {"strict": True}),
    ("zip-strict-long", builtins.zip, ([1.0], [3.0, 4.0]), {"strict": True}),
    ("enumerate", builtins.enumerate, (FLOATS,), {}), ("enumerate-start", builtins.enumerate, (Gen(_rows), 5), {}),
    ("map", builtins.map, (operator.mul, FLOATS, [Num(), Num()]), {}), ("map-none", builtins.map, (abs,), {}),
    ("reversed", builtins.reversed, (FLOATS,), {}), ("reversed-rows", builtins.reversed, (Gen(_rows),), {}),
    ("reversed-dict", builtins.reversed, ({"a": 1.0, "b": 2.0},), {}), ("reversed-set", builtins.reversed, ({1.0},), {}),
    ("sorted", builtins.sorted, (FLOATS,), {}), ("sorted-key-reverse", builtins.sorted, ([3.0, -1.0, 1.0, -3.0],),
                                                {"key": abs, "reverse": True}),
    ("sorted-rows", builtins.sorted, (Gen(lambda rng, dt: rng.uniform(-1, 1, 4)),), {}),
    ("reduce", functools.reduce, (operator.add, FLOATS), {}), ("reduce-initial", functools.reduce, (operator.mul, FLOATS, 2.0), {}),
    ("reduce-empty", functools.reduce, (operator.add, []), {}),
    ("list", builtins.list, (FLOATS,), {}), ("list-rows", builtins.list, (Gen(_rows),), {}), ("list-empty", builtins.list, (), {}),
    ("tuple", builtins.tuple, (FLOATS,), {}), ("tuple-rows", builtins.tuple, (Gen(_rows),), {}),
    ("list.extend", list.extend, ([1.0], FLOATS), {}), ("list.extend-rows", list.extend, ([], Gen(_rows)), {}),
    ("list.sort", list.sort, (FLOATS,), {}), ("list.sort-key-reverse", list.sort, ([3.0, -1.0, 1.0, -3.0],),
                                                  {"key": abs, "reverse": True}),
    ("math.fsum", math.fsum, (FLOATS,), {}), ("math.fsum-tuple", math.fsum, ((0.1, 0.2, 0.3),), {}),
    ("math.fsum-array", math.fsum, (Arr((5,)),), {}),
    ("math.prod", math.prod, (FLOATS,), {}), ("math.prod-start", math.prod, (FLOATS,), {"start": 2.0}),
    ("filter", builtins.filter, (None, [Num(), 0.0, Num()]), {}), ("filter-fn", builtins.filter, (bool, FLOATS), {}),
    ("pairwise", itertools.pairwise, (FLOATS,), {}), ("pairwise-rows", itertools.pairwise, (Gen(_rows),), {}),
    ("chain", itertools.chain, (FLOATS, [Num()]), {}), ("chain-rows", itertools.chain, (Gen(_rows), FLOATS), {}),
    # the registered bound classmethod itself: each attribute access makes an equal, new object
    ("chain.from_iterable", lookup(itertools.chain.from_iterable).fn, ([FLOATS, [Num()]],), {}),
    ("chain.from_iterable-rows", lookup(itertools.chain.from_iterable).fn, (Gen(_rows),), {}),
    ("islice", itertools.islice, (FLOATS, 2), {}), ("islice-step", itertools.islice, (FLOATS, 1, None, 2), {}),
    ("accumulate", itertools.accumulate, (FLOATS,), {}),
    ("accumulate-fn", itertools.accumulate, (FLOATS, operator.mul), {"initial": 2.0}),
    ("starmap", itertools.starmap, (operator.mul, [(Num(), Num()), (Num(), 2.0)]), {}),
    ("deque", collections.deque, (FLOATS,), {}), ("deque-maxlen", collections.deque, (FLOATS, 2), {}),
]]
TRANSPARENT = [case(fn, *args, dtypes=F64) for fn, *args in [
    (list.append, [1.0], 2.0), (list.insert, [1.0], 0, 2.0), (list.pop, [1.0, 2.0]), (list.copy, [1.0]),
    (dict.get, {"a": 1.0}, "a"), (dict.items, {"a": 1.0}), (dict.setdefault, {}, "a", 1.0), (dict.pop, {"a": 1.0}, "a"),
    (builtins.getattr, np.ones(2), "ndim"), (builtins.next, iter([1.0]), 0.0), (list.__getitem__, [1.0, 2.0], 1),
    (types.GeneratorType.close, _started_echo()),
]]
NONDIFF = [case(fn, *args, dtypes=F64) for fn, *args in [
    (builtins.len, [1.0, 2.0]), (builtins.int, 2.5), (builtins.round, 2.567, 1), (builtins.round, 2.5),
    (operator.floordiv, 7.5, 2.0), (operator.lt, 1.0, 2.0), (math.floor, 2.5), (math.isfinite, 2.0),
    (builtins.isinstance, 1.0, float),
]]
TABLES = [OPERATORS, MATH, BUILTINS, THROUGH, TRANSPARENT, NONDIFF]


@pytest.mark.parametrize("case,dtype", params(OPERATORS + MATH + BUILTINS))
def test_scalar_and_builtin_rules(case, dtype):
    case.check(dtype)


@pytest.mark.parametrize("case,dtype", params(THROUGH + TRANSPARENT + NONDIFF))
def test_python_implementations_and_plain_rules(case, dtype):
    case.check(dtype)


def test_through_rules_point_at_the_python_implementations():
    for fn in (builtins.sum, builtins.min, builtins.max, builtins.zip, builtins.sorted, functools.reduce):
        rule = lookup(fn)
        assert rule.kind is RuleKind.THROUGH and rule.impl.__module__ == _impls.__name__


def test_iter_of_an_iterator_is_the_iterator_itself():
    it = iter([1.0, 2.0])
    assert _impls.py_iter(it) is it


def test_sorted_is_stable_with_reverse():
    items = [(1.0, "a"), (2.0, "b"), (1.0, "c")]
    key = operator.itemgetter(0)
    assert _impls.py_sorted(items, key=key, reverse=True) == sorted(items, key=key, reverse=True)


def test_min_max_return_the_very_object():
    a, b = np.float64(1.0), np.float64(1.0)
    assert _impls.py_min([a, b]) is a and _impls.py_max(b, a) is b


@pytest.mark.parametrize("fn,x", [(math.sqrt, 0.0), (math.asin, 1.0), (math.atanh, 1.0), (math.acosh, 1.0)])
def test_math_partials_at_domain_edges_are_inf_not_errors(fn, x):
    try:
        out, pullback = as_rrule(lookup(fn))(x)
    except ValueError:  # math.atanh(1.0) itself raises: nothing to differentiate
        return
    (x_bar,) = pullback(1.0)
    assert math.isinf(x_bar)


def test_float_of_an_array_gives_a_cotangent_in_its_dtype():
    x = np.array(2.0, dtype=np.float32)
    out, pullback = as_rrule(lookup(builtins.float))(x)
    (x_bar,) = pullback(1.5)
    assert type(out) is float and x_bar.dtype == np.float32 and x_bar.shape == ()
    assert as_rrule(lookup(builtins.float))("2.5")[1](1.0) == (NO_TANGENT,)


def test_abs_partial_is_zero_at_the_kink():
    _, pullback = as_rrule(lookup(operator.abs))(0.0)
    assert pullback(1.0) == (0.0,)


def test_math_rules_are_checked_on_python_floats():
    check_rule(math.exp, 0.5)


@given(st.lists(st.lists(st.integers(), max_size=4), max_size=4), st.booleans())
@settings(max_examples=200, deadline=None)
def test_zip_matches_the_builtin(lists, strict):
    """bytegrad's zip (what differentiated code calls): the same items, and under strict=True the same
    ValueError, for any lengths; iterators are consumed as the builtin consumes them."""
    try:
        expected: object = list(zip(*lists, strict=strict))
    except ValueError as e:
        expected = ("ValueError", str(e))
    try:
        got: object = list(_impls.py_zip(*lists, strict=strict))
    except ValueError as e:
        got = ("ValueError", str(e))
    assert got == expected
    its, mine = [iter(x) for x in lists], [iter(x) for x in lists]
    list(zip(*its))
    list(_impls.py_zip(*mine))
    assert [list(i) for i in mine] == [list(i) for i in its]  # (what is left in each)
