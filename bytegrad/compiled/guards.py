"""Guards: what a program assumes of a call, and the exact check of each assumption.

A guard has a kind (what is compared: a type, a shape, a value, a callable's state...), its
check (the condition as the program's source reads it: the arguments by path, a global, a module
attribute, a closure cell, a callee) and its description. Compiled/source.py's `Source.guard`
makes each; the program's code checks them in order (the Numba back end's programs start with the
same wrapper code), and `Guard.describe` is the line `explain` and `stats()` print. Comparisons are exact, never `==` alone:

- floats by value *and* sign, so `-0.0` and `0.0` differ (`np.arctan2(OFF, x)` depends on it) and a
  NaN matches a NaN (`==` never holds for one, which would recapture on every call);
- containers by type, length and, for dicts, key order (a loop over a dict follows it);
- callables by identity and the state that shapes their call: a function's `__code__`,
  `__defaults__` and `__kwdefaults__` by content (the latter is a mutable dict); a
  `functools.partial`'s function, arguments and keywords by content (its keywords too);
- objects (compiled/objects.py) by class, the class's own attributes by identity, and the
  instance's attribute names in order; their attributes as any other value;
- dtypes by identity, else by equality (a dtype of non-native byte order is a new object each
  time: `is` alone would never match it).
"""
from __future__ import annotations

import functools
import math
import types
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

__all__ = ["Guard", "KINDS", "callable_state", "decided", "number_condition", "same_state", "same_value"]

#: the kinds of guards a program checks (the decision and cotangent checks are compiled/source.py's)
KINDS = ("type", "shape", "dtype", "value", "global", "attr", "cell", "version", "code", "object")

_copysign = math.copysign
_ndarray = np.ndarray


@dataclass(frozen=True)
class Guard:
    """One assumption of a program: its `kind` (one of KINDS, or the decision and cotangent checks
    of compiled/source.py), `check` (the condition, as the program's source reads it in its own
    variables: the NumPy back end's code, which the Numba back end's wrapper runs too) and `what`
    (the line `explain` and `stats()` print)."""

    kind: str
    check: str
    what: str

    def describe(self) -> str:
        return self.what


def number_condition(read: str, value: Any, const: str) -> str:
    """The exact check that `read` is the number `value` (a program constant named `const`), as
    source: its type, then its value; a float's sign of zero and a NaN compared as such."""
    if type(value) is float:
        if value != value:
            return f"{read} != {read}"
        if value == 0.0:
            sign = _copysign(1.0, value)
            return f"{read} == 0.0 and _copysign(1.0, {read}) == {sign!r}"
        return f"{read} == {const}"
    if type(value) is complex:
        return f"_same_value({read}, {const})"
    return f"{read} == {const}"


def same_value(a: Any, b: Any) -> bool:
    """Whether two constants are the same for a program: the same type and value, floats (and the
    parts of complex numbers) by value and sign, NaN equal to NaN, tuples, lists and dicts item by
    item (dicts in order); anything else by identity."""
    t = type(a)
    if t is not type(b):
        return False
    if t is float:
        return (a == b and _copysign(1.0, a) == _copysign(1.0, b)) or (a != a and b != b)
    if t is complex:
        return same_value(a.real, b.real) and same_value(a.imag, b.imag)
    if t is int or t is str or t is bytes or t is bool or a is None:
        return a == b
    if t is tuple or t is list:
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if t is dict:
        return list(a) == list(b) and all(same_value(a[k], b[k]) for k in a)
    return a is b


def callable_state(f: Any) -> Optional[tuple]:
    """What shapes a call of `f` besides its arguments, for `same_state`: a Python function's code,
    defaults and keyword defaults (copied); a partial's function, arguments and keywords (copied,
    the function's own state within); None for anything else (compared by identity alone)."""
    if type(f) is types.FunctionType:
        kw = f.__kwdefaults__
        return (f.__code__, f.__defaults__, None if kw is None else dict(kw))
    if type(f) is functools.partial:
        return (f.func, callable_state(f.func), _copied(tuple(f.args)), _copied(dict(f.keywords)))
    return None


def _copied(value: Any) -> Any:
    """`value` with its lists, dicts and tuples copied all the way down (anything else as it is): a
    partial's `args` or `keywords` holding a list the caller writes into later (`partial(g, opts)`;
    `opts[0] = 3.0`) must compare unequal then, not be the same object as the guard's."""
    t = type(value)
    if t is list or t is tuple:
        return t(_copied(v) for v in value)
    if t is dict:
        return {k: _copied(v) for k, v in value.items()}
    return value


def same_state(f: Any, state: Optional[tuple]) -> bool:
    """Whether `f` still has the `state` that `callable_state` read from it."""
    if state is None:
        return True
    if type(f) is types.FunctionType:
        code, defaults, kw = state
        return f.__code__ is code and (f.__defaults__ is defaults or same_value(f.__defaults__, defaults)) \
            and (f.__kwdefaults__ is None if kw is None else (f.__kwdefaults__ is not None and
                                                            same_value(f.__kwdefaults__, kw)))
    if type(f) is functools.partial:
        func, inner, args, keywords = state
        return f.func is func and same_state(func, inner) and same_value(tuple(f.args), args) \
            and same_value(dict(f.keywords), keywords)
    return True


def decided(got: Any, captured: Any) -> bool:
    """Whether a decision on data came out as at capture (compiled/source.py's decision checks): the
    same type, and the same value (arrays: shape, dtype, every element and the sign of every zero;
    a NaN in an array never equals, so the call goes to the general path)."""
    t = type(captured)
    if type(got) is not t:
        return False
    if t is _ndarray:
        if got.shape != captured.shape or got.dtype != captured.dtype or not bool((got == captured).all()):
            return False
        # -0.0 == 0.0: a float decision's zeros must have their signs too
        return got.dtype.kind not in "fc" or bool((np.signbit(got) == np.signbit(captured)).all())
    if t is float or t is complex or isinstance(captured, (np.floating, np.complexfloating)):
        return same_value(complex(got), complex(captured)) if t is not float else same_value(got, captured)
    return bool(got == captured)
