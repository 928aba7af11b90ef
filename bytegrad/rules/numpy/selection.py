"""Functions that build their result by picking elements of their arguments: np.choose and np.compress
(and their ndarray methods), np.insert, np.delete, np.block and np.unique's values; np.putmask and np.place,
which write picked values into an array.

A picking function is linear in the values it picks from, so its rules come from the function itself:
run on integer tags in place of the values, it says where each output element came from (the pullback
adds cotangents up per tag), and run on the tangents it gives the output's tangent.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from bytegrad.rules._project import is_float, project
from bytegrad.rules.registry import NO_TANGENT, ZERO, differentiate_through, frule, rrule

__all__ = ["picking_rule", "putmask_in_python", "place_in_python"]

_NO_SOURCE = -1  # the tag of an element that comes from no differentiated value (an int, a constant)


def _tag(x: Any, start: int) -> tuple[Any, int]:
    """`x` with each float leaf replaced by distinct int tags from `start` (other leaves by
    _NO_SOURCE, in their shapes), and the next free tag."""
    if isinstance(x, (list, tuple)):
        items = []
        for item in x:
            tagged, start = _tag(item, start)
            items.append(tagged)
        return type(x)(items) if type(x) in (list, tuple) else items, start
    shape = np.shape(x)
    size = int(np.prod(shape, dtype=np.int64))
    if not is_float(x):
        return np.full(shape, _NO_SOURCE, dtype=np.int64), start
    return np.arange(start, start + size, dtype=np.int64).reshape(shape), start + size


def _untag(x: Any, flat: np.ndarray, start: int) -> tuple[Any, int]:
    """The cotangent of `x` from the per-tag sums `flat` (the inverse walk of `_tag`)."""
    if isinstance(x, (list, tuple)):
        items = []
        for item in x:
            bar, start = _untag(item, flat, start)
            items.append(bar)
        return type(x)(items) if type(x) in (list, tuple) else items, start
    if not is_float(x):
        return NO_TANGENT, start
    size = int(np.prod(np.shape(x), dtype=np.int64))
    return project(flat[start:start + size].reshape(np.shape(x)), x), start + size


def _per_tag(tags: np.ndarray, out_bar: Any, n: int) -> np.ndarray:
    """Sum of out_bar over the output elements of each tag (0..n-1)."""
    bar = np.broadcast_to(np.asarray(out_bar), tags.shape).reshape(-1)
    t = tags.reshape(-1)
    keep = t >= 0
    if bar.dtype.kind == "c":
        return (np.bincount(t[keep], weights=bar.real[keep], minlength=n)
                + 1j * np.bincount(t[keep], weights=bar.imag[keep], minlength=n))
    return np.bincount(t[keep], weights=bar[keep], minlength=n)


def picking_rule(fn: Any, positions: tuple[int, ...], name: str) -> None:
    """Register the reverse and forward rules of `fn`, a function that picks elements of its
    arguments at `positions` (arrays, or lists of them) into its result."""

    def picking_rrule(*args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        out = fn(*args, **kwargs)
        tagged, n = list(args), 0
        for p in positions:
            if p < len(args):
                tagged[p], n = _tag(args[p], n)
        tags = np.asarray(fn(*tagged, **kwargs))

        def picking_pullback(out_bar: Any) -> tuple[Any, ...]:
            flat = _per_tag(tags, out_bar, n)
            bars: list[Any] = [NO_TANGENT] * len(args)
            start = 0
            for p in positions:
                if p < len(args):
                    bars[p], start = _untag(args[p], flat, start)
            return tuple(bars)

        return out, picking_pullback

    def picking_frule(args_dot: tuple[Any, ...], *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        out = fn(*args, **kwargs)
        if all(p >= len(args) or _no_dot(args_dot[p]) for p in positions):
            return out, ZERO
        dots = list(args)
        for p in positions:
            if p < len(args):
                dots[p] = _dots_like(args[p], args_dot[p])
        return out, fn(*dots, **kwargs)

    picking_rrule.__name__ = picking_rrule.__qualname__ = f"{name}_rrule"
    picking_frule.__name__ = picking_frule.__qualname__ = f"{name}_frule"
    rrule(fn)(picking_rrule)
    frule(fn)(picking_frule)


def _no_dot(x_dot: Any) -> bool:
    return x_dot is None or x_dot is ZERO or x_dot is NO_TANGENT


def _dots_like(x: Any, x_dot: Any) -> Any:
    """The tangent of `x` in x's structure, zeros where it has none (the picking is linear in x)."""
    if isinstance(x, (list, tuple)):
        dots = x_dot if isinstance(x_dot, (list, tuple)) else [None] * len(x)
        return type(x)(_dots_like(a, d) for a, d in zip(x, dots))
    if _no_dot(x_dot) or not is_float(x):
        return np.zeros(np.shape(x), dtype=np.result_type(x, np.float64) if not is_float(x) else np.asarray(x).dtype)
    return x_dot


picking_rule(np.choose, (1,), "choose")
picking_rule(np.ndarray.choose, (1,), "choose_method")  # `index.choose(choices)`
picking_rule(np.compress, (1,), "compress")
picking_rule(np.ndarray.compress, (0,), "compress_method")
picking_rule(np.insert, (0, 2), "insert")
picking_rule(np.delete, (0,), "delete")
picking_rule(np.block, (0,), "block")


# ---- np.unique: each distinct value is its first occurrence (its copies are ties, as for max) --------

def _unique_firsts(ar: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, np.ndarray, Any]:
    """np.unique's result, the index of each value's first occurrence, and the axis."""
    params = dict(zip(("return_index", "return_inverse", "return_counts", "axis"), args), **kwargs)
    out = np.unique(ar, *args, **kwargs)
    first = np.unique(ar, **dict(params, return_index=True, return_inverse=False, return_counts=False))[1]
    return out, first, params.get("axis")


@frule(np.unique)
def unique_frule(args_dot: tuple[Any, ...], ar: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    out, first, axis = _unique_firsts(ar, args, kwargs)
    if _no_dot(args_dot[0]):
        return out, ZERO
    x_dot = np.asarray(args_dot[0])
    values_dot = np.reshape(x_dot, -1)[first] if axis is None else np.take(x_dot, first, axis=axis)
    return out, ((values_dot,) + (NO_TANGENT,) * (len(out) - 1) if isinstance(out, tuple) else values_dot)


@rrule(np.unique)
def unique_rrule(ar: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    out, first, axis = _unique_firsts(ar, args, kwargs)

    def unique_pullback(out_bar: Any) -> tuple[Any, ...]:
        values_bar = out_bar[0] if isinstance(out, tuple) else out_bar
        if values_bar is ZERO or values_bar is None:
            return (ZERO,) + (NO_TANGENT,) * len(args)
        xa = np.asarray(ar)
        x_bar = np.zeros(xa.shape, dtype=np.result_type(values_bar, xa.dtype if is_float(xa) else np.float64))
        if axis is None:
            x_bar.reshape(-1)[first] = np.reshape(values_bar, -1)
        else:
            moved = np.moveaxis(x_bar, axis, 0)  # a view: the assignment writes x_bar
            moved[first] = np.moveaxis(np.asarray(values_bar), axis, 0)
        return (project(x_bar, ar),) + (NO_TANGENT,) * len(args)

    return out, unique_pullback


# ---- np.putmask and np.place: writes into an array, run as Python so the writes are recorded ---------

def _write_picked(a: Any, mask: Any, values: Any, by_position: bool) -> None:
    """a[mask] = values repeated, in a's flat order: values picked by the element's flat position
    (np.putmask) or by its count among the selected ones (np.place)."""
    where = np.flatnonzero(np.asarray(mask, dtype=bool))
    if where.size == 0:
        return
    flat_values = np.reshape(values, -1)
    n = np.size(flat_values)
    if n == 0:
        raise ValueError("Cannot insert from an empty array!")
    picked = (where if by_position else np.arange(where.size)) % n
    a[np.unravel_index(where, np.shape(a))] = flat_values[picked]


def putmask_in_python(a: Any, mask: Any, values: Any) -> None:
    """np.putmask: a.flat[n] = values.flat[n % values.size] where mask.flat[n] (mask has a's size)."""
    _write_picked(a, mask, values, by_position=True)


def place_in_python(arr: Any, mask: Any, vals: Any) -> None:
    """np.place: the selected elements of arr, in order, take vals repeated (vals may be longer)."""
    _write_picked(arr, mask, vals, by_position=False)


differentiate_through(np.putmask, putmask_in_python)
differentiate_through(np.place, place_in_python)
