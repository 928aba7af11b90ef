"""Rules for the standard library beyond the builtins: itertools, operator's callable objects,
functools.lru_cache, copy, statistics, heapq, bisect, complex/math.modf/math.frexp, SimpleNamespace."""
from __future__ import annotations

import bisect
import builtins
import functools
import heapq
import itertools
import math
import operator
import statistics
import types
from typing import Any

import numpy as np

from bytegrad.rules import _stdlib_impls as _impls
from bytegrad.rules._project import project, stand_in
from bytegrad.rules.registry import ZERO, differentiate_through, non_differentiable, rrule, transparent

# itertools (Python versions, so the items keep their identity) and callable objects of C types, whose
# rule is on the type's `__call__` (`operator.itemgetter(0)(x)`, a functools.lru_cache helper)
_THROUGH = (
    (itertools.product, _impls.py_product), (itertools.combinations, _impls.py_combinations),
    (itertools.takewhile, _impls.py_takewhile), (itertools.dropwhile, _impls.py_dropwhile),
    (itertools.groupby, _impls.py_groupby), (operator.itemgetter.__call__, _impls.py_itemgetter_call),
    (operator.methodcaller.__call__, _impls.py_methodcaller_call),
    (type(functools.lru_cache(None)(abs)).__call__, _impls.py_lru_cache_call),
)
for _fn, _impl in _THROUGH:
    differentiate_through(_fn, _impl)

# ---- copies: the same values in a new object ---------------------------------------------------------


def _copy_rrule(method: Any) -> Any:
    def copy_rrule(x: Any, *memo: Any) -> tuple[Any, Any]:
        out = method(x, *memo)
        like = stand_in(x)

        def copy_pullback(out_bar: Any) -> tuple[Any, ...]:
            return (project(out_bar, like),) + tuple(ZERO for _ in memo)  # the memo dict has no tangent

        return out, copy_pullback

    copy_rrule.__name__ = copy_rrule.__qualname__ = f"{method.__name__.strip('_')}_rrule"
    return copy_rrule


# `copy.copy(x)` and `copy.deepcopy(x)` are Python and run rewritten; for arrays and NumPy scalars
# they end in these methods (`dataclasses.astuple` and `asdict` deep-copy their fields too).
for _method in (np.ndarray.__copy__, np.ndarray.__deepcopy__, np.generic.__copy__, np.generic.__deepcopy__):
    rrule(_method)(_copy_rrule(_method))

# ---- numbers ---------------------------------------------------------------------------------------


@rrule(builtins.complex)
def complex_rrule(*args: Any, **kwargs: Any) -> tuple[complex, Any]:
    out = complex(*args, **kwargs)
    likes = tuple(stand_in(a) for a in args)

    def complex_pullback(out_bar: Any) -> tuple[Any, ...]:
        # complex(a, b) == a + 1j * b: the imaginary part's cotangent is that of a product by 1j
        return tuple(project(out_bar * (1j if i else 1.0), like) for i, like in enumerate(likes))

    return out, complex_pullback


@rrule(complex.real)
def complex_real_rrule(z: complex) -> tuple[float, Any]:
    def complex_real_pullback(out_bar: Any) -> tuple[Any]:
        return (complex(out_bar),)

    return z.real, complex_real_pullback


@rrule(complex.imag)
def complex_imag_rrule(z: complex) -> tuple[float, Any]:
    def complex_imag_pullback(out_bar: Any) -> tuple[Any]:
        return (complex(-1j * out_bar),)  # Re(-1j * out_bar * z_dot) == out_bar * Im(z_dot)

    return z.imag, complex_imag_pullback


@rrule(complex.conjugate)
def complex_conjugate_rrule(z: complex) -> tuple[complex, Any]:
    def complex_conjugate_pullback(out_bar: Any) -> tuple[Any]:
        return (complex(out_bar).conjugate(),)

    return z.conjugate(), complex_conjugate_pullback


@rrule(math.modf)
def modf_rrule(x: Any) -> tuple[tuple[float, float], Any]:
    out = math.modf(x)

    def modf_pullback(out_bar: Any) -> tuple[Any]:
        frac_bar = ZERO if out_bar is ZERO else out_bar[0]  # the integer part is piecewise constant
        return (ZERO if frac_bar is ZERO else project(frac_bar, x),)

    return out, modf_pullback


@rrule(math.frexp)
def frexp_rrule(x: Any) -> tuple[tuple[float, int], Any]:
    out = math.frexp(x)
    scale = math.ldexp(1.0, -out[1])  # x == m * 2**e: dm/dx == 2**-e where e is constant

    def frexp_pullback(out_bar: Any) -> tuple[Any]:
        m_bar = ZERO if out_bar is ZERO else out_bar[0]
        return (ZERO if m_bar is ZERO else project(m_bar * scale, x),)

    return out, frexp_pullback


# ---- statistics: exact values from the module, derivatives of the plain formulas ---------------------


def _floats(data: Any) -> list[Any]:
    return [item for item in data]


def _pullback_to(data: Any, items_bar: list[Any]) -> Any:
    if type(data) is np.ndarray:
        return project(np.asarray(items_bar), data)
    bars = [project(b, item) for b, item in zip(items_bar, data)]
    return tuple(bars) if type(data) is tuple else bars


def _mean_rrule(fn: Any) -> Any:
    def mean_rrule(data: Any) -> tuple[Any, Any]:
        items = _floats(data)
        out = fn(items)
        n = len(items)
        like = data if type(data) is not np.ndarray else stand_in(data)

        def mean_pullback(out_bar: Any) -> tuple[Any]:
            return (_pullback_to(like, [out_bar / n] * n),)

        return out, mean_pullback

    mean_rrule.__name__ = mean_rrule.__qualname__ = f"{fn.__name__}_rrule"
    return mean_rrule


def _variance_rrule(fn: Any, ddof: int, root: bool) -> Any:
    def variance_rrule(data: Any, *given: Any) -> tuple[Any, Any]:
        items = _floats(data)
        out = fn(items, *given)
        xbar = given[0] if given else None
        n = len(items)
        mean = math.fsum(float(v) for v in items) / n if xbar is None else float(xbar)
        centred = [float(v) - mean for v in items]
        like = data if type(data) is not np.ndarray else stand_in(data)

        def variance_pullback(out_bar: Any) -> tuple[Any, Any]:
            # var == sum((x - m)**2) / (n - ddof): with m the data's mean its own term vanishes,
            # with a given `xbar` the mean is an input too; stdev == sqrt(var), 0 at var == 0
            var_bar = out_bar
            if root:
                var_bar = out_bar / (2.0 * out) if out else 0.0 * out_bar
            scale = var_bar * 2.0 / (n - ddof)
            items_bar = [scale * c for c in centred]
            if not given:
                return (_pullback_to(like, items_bar),)
            return _pullback_to(like, items_bar), None if xbar is None else project(-sum(items_bar, 0.0), xbar)

        return out, variance_pullback

    variance_rrule.__name__ = variance_rrule.__qualname__ = f"{fn.__name__}_rrule"
    return variance_rrule


for _fn in (statistics.mean, statistics.fmean):
    rrule(_fn)(_mean_rrule(_fn))
for _fn, _ddof, _root in ((statistics.pvariance, 0, False), (statistics.pstdev, 0, True),
                          (statistics.variance, 1, False), (statistics.stdev, 1, True)):
    rrule(_fn)(_variance_rrule(_fn, _ddof, _root))

# ---- containers that only hold references ----------------------------------------------------------

transparent(types.SimpleNamespace, dict.fromkeys)
# heapq compares items and moves them about; the items keep their identity (nsmallest, nlargest and
# merge are Python and run rewritten on top of these)
transparent(*(getattr(heapq, name) for name in (
    "heappush", "heappop", "heapify", "heapreplace", "heappushpop", "_heapify_max", "_heappop_max",
    "_heapreplace_max", "heapify_max", "heappop_max", "heapreplace_max", "heappush_max", "heappushpop_max")
    if hasattr(heapq, name)))
transparent(bisect.insort_left, bisect.insort_right)
non_differentiable(bisect.bisect_left, bisect.bisect_right)
