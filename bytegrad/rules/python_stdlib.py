"""Rules for the standard library beyond the builtins: itertools, operator's callable objects,
functools.lru_cache, copy, complex/math.modf/math.frexp, SimpleNamespace.

The rules for statistics, heapq and bisect are in `bytegrad.rules.stdlib`: they load once the program
imports those modules (`registry.load_lazy_rules`), so that `import bytegrad` does not import them."""
from __future__ import annotations

import builtins
import functools
import itertools
import math
import operator
import types
from typing import Any

import numpy as np

from bytegrad.rules import _stdlib_impls as _impls
from bytegrad.rules._project import project, stand_in
from bytegrad.rules.registry import ZERO, differentiate_through, rrule, transparent

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


# ---- containers that only hold references ----------------------------------------------------------

transparent(types.SimpleNamespace, dict.fromkeys)
