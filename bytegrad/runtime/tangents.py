"""Tangents: the helpers forward mode shares, and its general fallback, a pullback transposed.

A kind of record with no exact pushforward (runtime/records.py: a rule with only an rrule) gets
its output's tangent from its backward function by linear transposition: entry k of J v is
<pullback(e_k), v>, one pullback per output element, with one `PerformanceWarning` per function.
That is exact but costs `out.size` pullbacks: give hot functions an `@frule`.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np

from bytegrad.errors import NotImplementedRuleError, qualname
from bytegrad.rules.registry import NO_TANGENT, ZERO, NoTangent, Zero
from bytegrad.runtime.records import TupleOut

__all__ = ["PerformanceWarning", "TRANSPOSE_LIMIT", "fit_tangent", "pf_transpose"]

_ndarray = np.ndarray
_FunctionType = type(lambda: None)

#: the largest output (in elements) whose tangent is formed from pullbacks, one per element
TRANSPOSE_LIMIT = 1 << 16


class PerformanceWarning(UserWarning):
    """A derivative is computed correctly but slowly (for example, forward mode through a rule that
    has only a reverse form)."""


def fit_tangent(dot: Any, out: Any) -> Any:
    """`dot` as a tangent of `out`: its shape (undoing implicit broadcasting) and float dtype."""
    if dot is None or dot is ZERO or dot is NO_TANGENT:
        return None
    if np.iscomplexobj(dot) and not np.iscomplexobj(out) and _is_float(out):
        dot = np.real(dot)  # a real output's tangent is real: |z|'s is Re(conj(z)/|z| z_dot)
    if type(out) is _ndarray:
        if type(dot) is not _ndarray or dot.shape != out.shape:
            dot = np.broadcast_to(dot, out.shape).copy()
        if out.dtype.kind in "fc" and dot.dtype != out.dtype:
            dot = dot.astype(out.dtype)
    return dot


# ---- the general fallback: a pullback, transposed ---------------------------------------------------


_warned: set[Any] = set()


def _operation(node: tuple) -> Any:
    op = node[0].op(node)
    return op if op is not None else node[0].backward


def _warn_once(node: tuple) -> None:
    fn = _operation(node)
    try:
        key = fn if hash(fn) is not None else id(fn)
    except TypeError:
        key = id(fn)
    if key in _warned:
        return
    _warned.add(key)
    site = node[2]
    where = f" (first at {site.loc()})" if site is not None else ""
    warnings.warn(
        f"forward mode through {qualname(fn)}, which has no forward rule: its tangents are formed "
        f"from its pullback, one call per output element{where}. Give it an @bytegrad.frule to make "
        "this fast.", PerformanceWarning, stacklevel=2)


def _pairs(parents: Any, bars: Any, dots: Any, found: list[tuple[Any, Any]]) -> None:
    """(cotangent, tangent) pairs for every differentiated leaf of the parents."""
    for p, bar, dot in zip(parents, bars, dots):
        if p is None or dot is None or bar is None:
            continue
        if bar.__class__ is _FunctionType:
            bar = bar()
        if bar is None or isinstance(bar, (NoTangent, Zero)):
            continue
        if p.__class__ is int:
            found.append((bar, dot))
        elif type(p) is dict:
            keys = list(p)
            _pairs([p[k] for k in keys], [bar[k] for k in keys], [dot[k] for k in keys], found)
        else:
            _pairs(p, bar, dot, found)


def _contract(node: tuple, ct: Any, out: Any, parent_dots: Any) -> Any:
    """<pullback(ct), parent tangents>: one entry of J v."""
    bars = node[0].backward(ct, node, out)
    parents = node[1]
    if parents.__class__ is int:
        parents, bars = (parents,), (bars,)
    found: list[tuple[Any, Any]] = []
    _pairs(parents, bars, parent_dots, found)
    total = 0.0
    for bar, dot in found:
        total = total + np.sum(np.multiply(bar, dot))
    return total


def _entry(node: tuple, make_ct: Callable[[Any], Any], e: Any, out: Any, parent_dots: Any, complex_out: bool) -> Any:
    """One tangent entry from the basis cotangent `e`: <e, J v> = Re <pullback(e), v>; a complex
    entry's imaginary part is <-1j e, J v> (exact for functions that are not holomorphic too)."""
    value = np.real(_contract(node, make_ct(e), out, parent_dots))
    if complex_out:
        value = value + 1j * np.real(_contract(node, make_ct(-1j * e), out, parent_dots))
    return value


def _basis_tangent(node: tuple, out: Any, parent_dots: Any, make_ct: Callable[[Any], Any], like: Any) -> Any:
    """The tangent of one output array `like`: entry k is <pullback(e_k), parent tangents>."""
    if type(like) is not _ndarray:
        return _entry(node, make_ct, 1.0, out, parent_dots, np.iscomplexobj(like))
    dtype = like.dtype if like.dtype.kind in "fc" else np.dtype(np.float64)
    out_dot = np.zeros(like.shape, dtype)
    flat = out_dot.reshape(-1)
    for k in range(like.size):
        e = np.zeros(like.shape, dtype)
        e.reshape(-1)[k] = 1
        flat[k] = _entry(node, make_ct, e, out, parent_dots, dtype.kind == "c")
    return out_dot


def pf_transpose(node: tuple, out: Any, parent_dots: Any) -> Any:
    """J v from a node's backward function J^T: the pullback applied to each basis cotangent.

    Exact for any linear backward function (which every correct pullback is); slow for large
    outputs, hence the PerformanceWarning.
    """
    items = out.value if type(out) is TupleOut else (out,)
    size = sum(int(np.size(v)) for v in items)
    if size > TRANSPOSE_LIMIT:
        site = node[2]
        fn = _operation(node)
        raise NotImplementedRuleError(
            f"forward mode needs a forward rule for {qualname(fn)}: it has only a reverse rule and its "
            f"output has {size} elements, too many to transpose the pullback one element at a time.",
            site.loc() if site is not None else None,
            f"register a forward rule with @bytegrad.frule({qualname(fn)}), or use reverse mode.")
    _warn_once(node)
    if type(out) is not TupleOut:
        return _basis_tangent(node, out, parent_dots, lambda e: e, out)
    n = len(items)
    result: list[Any] = []
    for j, item in enumerate(items):
        if not _is_float(item):
            result.append(None)
            continue

        def make_ct(e: Any, j: int = j) -> Any:
            return tuple(e if k == j else ZERO for k in range(n))

        result.append(_basis_tangent(node, out, parent_dots, make_ct, item))
    return tuple(result)


def _is_float(v: Any) -> bool:
    if type(v) is _ndarray or isinstance(v, np.generic):
        return v.dtype.kind in "fc"
    return type(v) is float or type(v) is complex
