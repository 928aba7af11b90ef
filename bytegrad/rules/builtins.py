"""Rules for the operators (`operator.*`, which the runtime maps opcodes to), `math` and Python's builtins.

Array-specific operator rules live with their NumPy topic: `operator.matmul` in `numpy/linalg.py`,
`operator.getitem` in `numpy/indexing.py`.
"""
from __future__ import annotations

import builtins
import collections
import functools
import itertools
import math
import operator
import types
from typing import Any

import numpy as np

from bytegrad.rules import _impls
from bytegrad.rules._project import project, stand_in
from bytegrad.rules._shape import unbroadcast
from bytegrad.rules.numpy.ufuncs import (
    ADD_KERNEL, DIV_KERNEL, MUL_KERNEL, NEG_KERNEL, SUB_KERNEL, abs_partial, power_dx, power_dy, power_kernel,
)
from bytegrad.rules.registry import (
    NO_TANGENT, ZERO, differentiate_through, frule, non_differentiable, not_implemented, rrule, scalar_rule, transparent,
)

_LN2 = math.log(2.0)
_LN10 = math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _div(a: float, b: float) -> float:
    """a / b with NumPy's answer (+-inf, nan) where Python raises: partials at a domain's edge."""
    try:
        return a / b
    except ZeroDivisionError:
        return math.copysign(math.inf, a) if a else math.nan


def _sign(x: Any) -> Any:
    """The derivative of abs: sign(x), 0 at the kink; conj(z) / |z| for complex z (the convention of
    docs/plugins.md, as np.absolute)."""
    if type(x) is float or type(x) is int:
        return float((x > 0) - (x < 0))
    return abs_partial(x)


def abs_frule(args_dot: tuple[Any, ...], x: Any) -> tuple[Any, Any]:
    out = abs(x)
    x_dot = args_dot[0]
    if x_dot is None or x_dot is NO_TANGENT or x_dot is ZERO:
        return out, ZERO
    out_dot = _sign(x) * x_dot
    return out, (out_dot.real if np.iscomplexobj(out_dot) else out_dot)  # |z| is real


def _atan2_partial(x: float, y: float, numerator: float) -> float:
    r2 = x * x + y * y
    return numerator / r2 if r2 else 0.0


# ---- operators ------------------------------------------------------------------------------------

scalar_rule(operator.add, 1, 1, kernel=ADD_KERNEL)
scalar_rule(operator.sub, 1, -1, kernel=SUB_KERNEL)
scalar_rule(operator.mul, lambda x, y, out: y, lambda x, y, out: x, kernel=MUL_KERNEL)
scalar_rule(operator.truediv, lambda x, y, out: 1 / y, lambda x, y, out: -out / y, kernel=DIV_KERNEL)
scalar_rule(operator.pow, power_dx, power_dy, kernel=power_kernel)  # fused with a constant exponent only
scalar_rule(operator.mod, 1, lambda x, y, out: -(x // y))   # x % y == x - y * (x // y)
scalar_rule(operator.neg, -1, kernel=NEG_KERNEL)
scalar_rule(operator.pos, 1)
scalar_rule(operator.abs, lambda x, out: _sign(x))
frule(operator.abs)(abs_frule)

non_differentiable(
    operator.floordiv, operator.lt, operator.le, operator.eq, operator.ne, operator.ge, operator.gt,
    operator.not_, operator.truth, operator.is_, operator.is_not, operator.contains, operator.and_,
    operator.or_, operator.xor, operator.invert, operator.lshift, operator.rshift, operator.index,
    operator.length_hint, operator.countOf, operator.indexOf,
)

# ---- math -----------------------------------------------------------------------------------------

scalar_rule(math.sin, lambda x, out: math.cos(x))
scalar_rule(math.cos, lambda x, out: -math.sin(x))
scalar_rule(math.tan, lambda x, out: 1.0 + out * out)
scalar_rule(math.asin, lambda x, out: _div(1.0, math.sqrt(1.0 - x * x)))
scalar_rule(math.acos, lambda x, out: _div(-1.0, math.sqrt(1.0 - x * x)))
scalar_rule(math.atan, lambda x, out: 1.0 / (1.0 + x * x))
scalar_rule(math.atan2, lambda y, x, out: _atan2_partial(x, y, x), lambda y, x, out: _atan2_partial(x, y, -y))
scalar_rule(math.sinh, lambda x, out: math.cosh(x))
scalar_rule(math.cosh, lambda x, out: math.sinh(x))
scalar_rule(math.tanh, lambda x, out: 1.0 - out * out)
scalar_rule(math.asinh, lambda x, out: 1.0 / math.sqrt(x * x + 1.0))
scalar_rule(math.acosh, lambda x, out: _div(1.0, math.sqrt(x * x - 1.0)))
scalar_rule(math.atanh, lambda x, out: _div(1.0, 1.0 - x * x))
scalar_rule(math.exp, lambda x, out: out)
scalar_rule(math.expm1, lambda x, out: out + 1.0)
scalar_rule(math.log1p, lambda x, out: _div(1.0, 1.0 + x))
scalar_rule(math.log2, lambda x, out: _div(1.0, x * _LN2))
scalar_rule(math.log10, lambda x, out: _div(1.0, x * _LN10))
scalar_rule(math.sqrt, lambda x, out: _div(0.5, out))          # +inf at x == 0, matching NumPy
scalar_rule(math.pow, power_dx, power_dy)
scalar_rule(math.erf, lambda x, out: _TWO_OVER_SQRT_PI * math.exp(-x * x))
scalar_rule(math.erfc, lambda x, out: -_TWO_OVER_SQRT_PI * math.exp(-x * x))
scalar_rule(math.fabs, lambda x, out: _sign(x))
scalar_rule(math.copysign, lambda x, y, out: math.copysign(1.0, x) * math.copysign(1.0, y), 0)
scalar_rule(math.degrees, 180.0 / math.pi)
scalar_rule(math.radians, math.pi / 180.0)
scalar_rule(math.fmod, 1, lambda x, y, out: -float(math.trunc(x / y)))
scalar_rule(math.remainder, 1, lambda x, y, out: -float(round((x - out) / y)))
scalar_rule(math.ldexp, lambda x, i, out: math.ldexp(1.0, i), None)
if hasattr(math, "exp2"):
    scalar_rule(math.exp2, lambda x, out: out * _LN2)
if hasattr(math, "cbrt"):
    scalar_rule(math.cbrt, lambda x, out: _div(1.0, 3.0 * out * out))


# math.log(x[, base]) == ln(x) / ln(base): `*rest` is (out,) or (base, out).
def _log_dx(x: float, *rest: float) -> float:
    return _div(1.0, x) if len(rest) == 1 else _div(1.0, x * math.log(rest[0]))


def _log_dbase(x: float, base: float, out: float) -> float:
    return _div(-out, base * math.log(base))


scalar_rule(math.log, _log_dx, _log_dbase)


@rrule(math.hypot)
def hypot_rrule(*coordinates: float) -> tuple[float, Any]:
    out = math.hypot(*coordinates)

    def hypot_pullback(out_bar: float) -> tuple[Any, ...]:
        if out == 0.0:
            return tuple(0.0 for _ in coordinates)
        scale = out_bar / out
        return tuple(project(scale * x, x) for x in coordinates)

    return out, hypot_pullback


@rrule(math.dist)
def dist_rrule(p: Any, q: Any) -> tuple[float, Any]:
    out = math.dist(p, q)

    def dist_pullback(out_bar: float) -> tuple[Any, Any]:
        scale = out_bar / out if out else 0.0
        p_bar = [scale * (a - b) for a, b in zip(p, q)]
        q_bar = [-v for v in p_bar]
        return project(p_bar, p), project(q_bar, q)

    return out, dist_pullback


@rrule(_impls.fsum_list)
def fsum_list_rrule(items: list[Any]) -> tuple[float, Any]:
    out = math.fsum(items)
    likes = [stand_in(item) for item in items]

    def fsum_list_pullback(out_bar: float) -> tuple[Any]:
        return ([project(out_bar, like) for like in likes],)  # NO_TANGENT for ints

    return out, fsum_list_pullback


# math.fsum(x * x for x in xs): the items of any iterable are collected by rewritten code first.
differentiate_through(math.fsum, _impls.py_fsum)


not_implemented(math.gamma, "its derivative needs the digamma function; use scipy.special rules")
not_implemented(math.lgamma, "its derivative needs the digamma function; use scipy.special rules")
non_differentiable(
    math.floor, math.ceil, math.trunc, math.isfinite, math.isnan, math.isinf, math.isclose,
    math.factorial, math.gcd, math.comb, math.perm, math.isqrt, math.lcm,
)
differentiate_through(math.prod, _impls.py_prod)

# ---- builtins -------------------------------------------------------------------------------------

scalar_rule(builtins.abs, lambda x, out: _sign(x))
frule(builtins.abs)(abs_frule)
scalar_rule(builtins.pow, power_dx, power_dy)   # pow(x, y, mod) takes ints only


@rrule(builtins.float)
def float_rrule(*args: Any) -> tuple[float, Any]:
    out = float(*args)

    def float_pullback(out_bar: float) -> tuple[Any, ...]:
        return tuple(project(out_bar, x) for x in args)  # NO_TANGENT for strings and ints

    return out, float_pullback


@rrule(builtins.divmod)
def divmod_rrule(x: Any, y: Any) -> tuple[Any, Any]:
    out = divmod(x, y)
    q = out[0]

    def divmod_pullback(out_bar: Any) -> tuple[Any, Any]:
        r_bar = out_bar[1]  # the quotient is piecewise constant; the remainder is x - y * q
        if r_bar is ZERO:
            return ZERO, ZERO
        out_shape = np.shape(q)  # divmod of arrays broadcasts
        return (project(unbroadcast(r_bar, np.shape(x), out_shape), x),
                project(unbroadcast(-q * r_bar, np.shape(y), out_shape), y))

    return out, divmod_pullback


differentiate_through(builtins.sum, _impls.py_sum)
differentiate_through(builtins.min, _impls.py_min)
differentiate_through(builtins.max, _impls.py_max)
differentiate_through(builtins.iter, _impls.py_iter)
differentiate_through(builtins.zip, _impls.py_zip)
differentiate_through(builtins.enumerate, _impls.py_enumerate)
differentiate_through(builtins.map, _impls.py_map)
differentiate_through(builtins.reversed, _impls.py_reversed)
differentiate_through(builtins.sorted, _impls.py_sorted)
differentiate_through(functools.reduce, _impls.py_reduce)
# list(x)/tuple(x) of an array must yield recorded rows; on lists they keep the items' identity.
differentiate_through(builtins.list, _impls.py_list)
differentiate_through(builtins.tuple, _impls.py_tuple)
differentiate_through(builtins.filter, _impls.py_filter)
differentiate_through(itertools.pairwise, _impls.py_pairwise)
differentiate_through(itertools.chain, _impls.py_chain)
# a classmethod of a C type: the bound method compares equal on every access, so it is its own key
differentiate_through(itertools.chain.from_iterable, _impls.py_chain_from_iterable)
differentiate_through(itertools.islice, _impls.py_islice)
differentiate_through(itertools.accumulate, _impls.py_accumulate)
differentiate_through(itertools.starmap, _impls.py_starmap)
differentiate_through(collections.deque, _impls.py_deque)
transparent(collections.deque.append, collections.deque.appendleft, collections.deque.pop,
            collections.deque.popleft)
transparent(builtins.set, builtins.frozenset)  # containers: the items keep their identity
transparent(tuple.__new__)  # a namedtuple's generated `__new__` (run rewritten) builds its tuple with it
transparent(object.__setattr__)  # stores a reference (a user `__setattr__`, a frozen dataclass's `__init__`)
transparent(types.GeneratorType.close)  # `send` is the runtime's: it checks the generator was rewritten
differentiate_through(list.extend, _impls.py_list_extend)
differentiate_through(list.sort, _impls.py_list_sort)  # (in C it would compare unseen: a decision)

non_differentiable(
    builtins.len, builtins.int, builtins.bool, builtins.round, builtins.range, builtins.isinstance,
    builtins.issubclass, builtins.type, builtins.id, builtins.hash, builtins.repr, builtins.str,
    builtins.format, builtins.callable, builtins.hasattr, builtins.any, builtins.all,
    builtins.ord, builtins.chr, builtins.slice, list.index, list.count, str.format,
)
transparent(
    builtins.print, builtins.dict, builtins.getattr, builtins.setattr, builtins.next, functools.partial,
    list.append, list.insert, list.pop, list.copy, list.remove, list.clear, list.reverse,
    list.__getitem__, list.__setitem__, list.__reversed__, tuple.__getitem__,
    dict.get, dict.items, dict.keys, dict.values, dict.setdefault, dict.update, dict.pop, dict.popitem,
    dict.copy, dict.__getitem__, dict.__setitem__, dict.__reversed__,
)

