"""Differentiated values through Python's own library (issue 16): operator's callable objects,
itertools, statistics, lru_cache helpers, copies, complex/modf/frexp, SimpleNamespace, dict.fromkeys,
heapq, bisect, generators fed with `send`, and classes defined inside the differentiated function.
Each gradient is checked against central differences in float64 and float32."""
from __future__ import annotations

import bisect
import copy
import dataclasses
import functools
import heapq
import itertools
import math
import operator
import os
import statistics
import sys
import types

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gradcheck import check_grad

import bytegrad

DTYPES = [np.float64, np.float32]


def _tol(dtype):
    return {"rtol": 1e-5, "atol": 1e-6} if dtype == np.float64 else {"rtol": 2e-3, "atol": 2e-3, "eps": 1e-3}


def itemgetter_fn(x):
    first, last = operator.itemgetter(0, 2)(x)
    return first * last + operator.itemgetter(1)([x[0], x[1] * 2.0])


def methodcaller_fn(x):
    return operator.methodcaller("sum")(x * x) + operator.methodcaller("sum", axis=0)(np.outer(x, x))[1]


def product_fn(x):
    return sum(a * b for a, b in itertools.product(x, x[:2]))


def combinations_fn(x):
    return sum(a * b * b for a, b in itertools.combinations(x, 2))


def takewhile_fn(x):
    return sum(itertools.takewhile(lambda v: v < 2.5, x * x)) + sum(itertools.dropwhile(lambda v: v < 1.5, x))


def groupby_fn(x):
    total = 0.0
    for key, group in itertools.groupby(list(x), key=lambda v: v > 1.2):
        total = total + (2.0 if key else 1.0) * sum(v * v for v in group)
    return total


def statistics_fn(x):
    items = [x[0], x[1] * 2.0, x[2]]
    return statistics.mean(items) * statistics.pstdev(items) + statistics.variance(x) + statistics.fmean(x)


@functools.lru_cache(maxsize=None)
def cached_cube(a):
    return a * a * a


@functools.cache
def cached_fib_scale(n, a):
    return a if n < 2 else cached_fib_scale(n - 1, a) + cached_fib_scale(n - 2, a)


def lru_fn(x):
    return cached_cube(x[0]) + cached_cube(x[0]) * x[1] + cached_cube(2.0) * x[2] + cached_fib_scale(6, x[1])


def copy_fn(x):
    ys = copy.deepcopy([x, x * 2.0, {"k": x[0]}])
    return np.sum(copy.copy(x) ** 2) + np.sum(ys[1] * ys[0]) + ys[2]["k"] * copy.copy(x[1])


@dataclasses.dataclass
class Pair:
    a: object
    b: object


def astuple_fn(x):
    a, b = dataclasses.astuple(Pair(x[0] * x[1], x))
    return a * np.sum(b) + dataclasses.asdict(Pair(x[2], 1.0))["a"] ** 2


def complex_fn(x):
    z = complex(x[0], x[1]) * complex(x[2])
    w = complex(x[1], x[0] * 2.0)
    return np.abs(z) + abs(w) + z.real * 0.5 + w.imag * z.imag + (w.conjugate() * z).real


def modf_frexp_fn(x):
    frac, whole = math.modf(x[0] * 1.5)
    mantissa, exponent = math.frexp(x[1] * 3.0)
    return frac * whole + mantissa * exponent


def namespace_fn(x):
    ns = types.SimpleNamespace(a=x[0], b=x[1] * 2.0)
    ns.c = ns.a * ns.b
    return ns.c + sum(dict.fromkeys("ab", x[2]).values())


def heapq_fn(x):
    heap = []
    for v in x:
        heapq.heappush(heap, v * v)
    smallest = heapq.heappop(heap)
    return smallest * 3.0 + sum(heapq.nsmallest(2, x)) + sum(heapq.nlargest(2, x * 2.0)) + heap[0]


def bisect_fn(x):
    items = sorted([x[0], x[1], x[2]])
    i = bisect.bisect(items, 1.5) + bisect.bisect_left(items, x[1])
    bisect.insort(items, x[0] * 2.0)
    return items[min(i, 3)] * items[-1]


FUNCTIONS = [itemgetter_fn, methodcaller_fn, product_fn, combinations_fn, takewhile_fn, groupby_fn, statistics_fn,
             lru_fn, copy_fn, astuple_fn, complex_fn, modf_frexp_fn, namespace_fn, heapq_fn, bisect_fn]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_gradient_through_the_standard_library(fn, dtype):
    x = np.array([1.1, 2.0, 0.7], dtype=dtype)
    check_grad(fn, (x,), **_tol(dtype))


def test_lru_cache_never_serves_a_value_cached_from_another_input():
    calls = []

    @functools.lru_cache(maxsize=None)
    def square(a):
        calls.append(a)
        return a * a

    x = np.array([3.0])
    assert square(3.0) == 9.0  # cached, as a constant, before the gradient
    g = bytegrad.grad(lambda x: square(x[0]) + square(3.0) * x[0])(x)  # the tracked call runs the body
    assert g[0] == 15.0
    g = bytegrad.grad(lambda x: square(x[0]) * 2.0)(x * 2.0)
    assert g[0] == 24.0
    assert square.cache_info().currsize == 1  # nothing computed from a tracked value was stored
    assert square(6.0) == 36.0 and calls[-1] == 6.0  # and the body runs for a plain call that missed


def test_python_abs_of_a_complex_value_follows_the_convention():
    # |z|**2 has the gradient 2 conj(z) in bytegrad's convention, like np.abs
    assert bytegrad.grad(lambda z: abs(z) ** 2)(1 + 2j) == pytest.approx(2 - 4j)
    assert bytegrad.grad(lambda z: operator.abs(z) ** 2)(3 - 1j) == pytest.approx(6 + 2j)
    _, z_dot = bytegrad.jvp(lambda z: abs(z), (1 + 2j,), (1 + 0j,))
    assert z_dot == pytest.approx(1 / math.sqrt(5))


def send_fn(x):
    def accumulate():
        total = 0.0
        while True:
            v = yield total
            total = total + v * v
    gen = accumulate()
    next(gen)
    gen.send(x[0])
    return gen.send(x[1] * 3.0) + x[2]


def running_sum(scale):
    total = 0.0
    while True:
        row = yield total
        if row is None:
            return
        total = total + scale * np.sum(row ** 2)


def send_rows_fn(x):
    gen = running_sum(2.0)
    next(gen)
    for row in (x, np.sin(x)):
        out = gen.send(row)
    return out


def local_class_fn(x):
    class V:
        def __init__(self, a):
            self.a = a

        def __add__(self, other):
            return V(self.a + other.a * other.a)

        def scaled(self):
            return V(self.a * x[2])

    return (V(x[0]) + V(x[1])).scaled().a


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("fn", [send_fn, send_rows_fn, local_class_fn], ids=lambda f: f.__name__)
def test_generators_fed_by_send_and_local_classes(fn, dtype):
    x = np.array([1.1, 2.0, 0.7], dtype=dtype)
    check_grad(fn, (x,), **_tol(dtype))


def test_a_class_body_that_reads_a_differentiated_value_is_still_refused():
    def f(x):
        class W:
            s = x[0] * 2.0
        return W.s

    with pytest.raises(bytegrad.UnsupportedOpcodeError, match="the body of class W reads x"):
        bytegrad.grad(f)(np.ones(2))
