"""Indexing rules: `operator.getitem` on arrays (basic, fancy, boolean), `np.take`, `np.take_along_axis`,
`np.diagonal` (and `ndarray.diagonal`), `np.sort` and `np.partition`.

Fancy indices may repeat an element, so their pullback accumulates with `np.add.at`; indices that
select each element at most once (basic indexing, boolean masks) take the fast assignment path.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from bytegrad.rules._project import project, stand_in
from bytegrad.rules._tangents import filled, is_zero, linear_frule
from bytegrad.rules.registry import NO_TANGENT, ZERO, frule, program_form, rrule

_BASIC_TYPES = frozenset((int, slice, type(None), type(Ellipsis), bool))


def _selects_once(index: Any) -> bool:
    """Whether `index` selects each element at most once: ints, slices, None, ..., boolean masks."""
    items = index if type(index) is tuple else (index,)
    for item in items:
        if type(item) in _BASIC_TYPES or isinstance(item, (np.integer, np.bool_)):
            continue
        if type(item) is np.ndarray and item.dtype == np.bool_:
            continue
        return False
    return True


def _only_new_axes(index: Any) -> bool:
    """Whether `x[index]` keeps every element of x in order: full slices, `None` and one `...`."""
    items = index if type(index) is tuple else (index,)
    for item in items:
        if item is None or item is Ellipsis:
            continue
        if type(item) is slice and item.start is None and item.stop is None and item.step is None:
            continue
        return False
    return True


def _zeros_like(x: np.ndarray, out_bar: Any) -> np.ndarray:
    dtype = x.dtype if x.dtype.kind in "fc" else np.result_type(out_bar, np.float64)
    return np.zeros(x.shape, dtype=dtype)


def _structural_getitem_cotangent(x: Any, index: Any, out_bar: Any) -> Any:
    """The cotangent of a list, tuple or dict `x` from that of `x[index]`."""
    if isinstance(x, dict):
        x_bar = {k: ZERO for k in x}
        x_bar[index] = out_bar
        return x_bar
    if isinstance(x, (list, tuple)):
        bars: list[Any] = [ZERO] * len(x)
        if isinstance(index, slice):
            for i, b in zip(range(*index.indices(len(x))), out_bar):
                bars[i] = b
        else:
            bars[operator.index(index)] = out_bar
        return bars if isinstance(x, list) else tuple(bars)
    if isinstance(x, np.generic):
        return project(out_bar, x)
    raise TypeError(
        f"operator.getitem rule: cannot form the cotangent of a {type(x).__name__} indexed by "
        f"{type(index).__name__}; only arrays, NumPy scalars, lists, tuples and dicts are supported."
    )


def _array_new_axes(x: Any, index: Any) -> bool:
    return type(x) is np.ndarray and _only_new_axes(index)


@rrule(operator.getitem)
@program_form(_array_new_axes, "{0}[{1}]", "{g}.reshape({shape0})", None)  # new_axes_getitem_pullback's
def getitem_rrule(x: Any, index: Any) -> tuple[Any, Callable[..., Any]]:
    out = x[index]
    if type(x) is not np.ndarray:

        def structural_getitem_pullback(out_bar: Any) -> tuple[Any, Any]:
            return _structural_getitem_cotangent(x, index, out_bar), NO_TANGENT

        return out, structural_getitem_pullback
    if out is x:
        out = x.view()
    if _only_new_axes(index):  # x[:, None] and the like: the same elements, reshaped
        x_shape0 = x.shape

        def new_axes_getitem_pullback(out_bar: Any) -> tuple[Any, Any]:
            if type(out_bar) is np.ndarray:
                return out_bar.reshape(x_shape0), NO_TANGENT  # the method: np.reshape costs 5x more
            return np.reshape(out_bar, x_shape0), NO_TANGENT

        return out, new_axes_getitem_pullback
    once = _selects_once(index)
    x_shape, x_dtype = x.shape, x.dtype  # the pullback needs only these, not x's values

    def getitem_pullback(out_bar: Any) -> tuple[Any, Any]:
        dtype = x_dtype if x_dtype.kind in "fc" else np.result_type(out_bar, np.float64)
        x_bar = np.zeros(x_shape, dtype=dtype)
        if once:
            x_bar[index] = out_bar
        else:
            np.add.at(x_bar, index, out_bar)  # repeated indices accumulate
        return x_bar, NO_TANGENT

    return out, getitem_pullback


@frule(operator.getitem)
def getitem_frule(args_dot: tuple[Any, ...], x: Any, index: Any) -> tuple[Any, Any]:
    out = x[index]
    if is_zero(args_dot[0]):
        return out, ZERO
    return out, filled(args_dot[0], x)[index]  # the index never carries a tangent


@rrule(np.take)
def take_rrule(x: Any, indices: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.take(x, indices, *args, **kwargs)
    params = dict(zip(("axis", "out", "mode"), args), **kwargs)
    if params.get("out") is not None:
        raise TypeError("numpy.take(..., out=...) cannot be differentiated; assign the result instead.")
    axis, mode = params.get("axis"), params.get("mode", "raise")

    def take_pullback(out_bar: Any) -> tuple[Any, ...]:
        xa = np.asarray(x)
        x_bar = _zeros_like(xa, out_bar)
        target = x_bar.reshape(-1) if axis is None else x_bar  # a view of x_bar in both cases
        ax = 0 if axis is None else normalize_axis_index(axis, xa.ndim)
        n = target.shape[ax]
        idx = np.asarray(indices)
        if mode == "wrap":
            idx = np.mod(idx, n)
        elif mode == "clip":
            idx = np.clip(idx, 0, n - 1)
        # (NumPy's stub: at() takes any index, a tuple of slices and an array too)
        np.add.at(target, (slice(None),) * ax + (idx,), out_bar)  # type: ignore[arg-type]
        return (project(x_bar, x), NO_TANGENT) + (NO_TANGENT,) * len(args)

    return out, take_pullback


@rrule(np.bincount)
def bincount_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    """Linear in its weights: a weight's cotangent is its bin's (the bins themselves are integers)."""
    out = np.bincount(x, *args, **kwargs)
    weights = args[0] if args else kwargs.get("weights")

    def bincount_pullback(out_bar: Any) -> tuple[Any, ...]:
        bars: list[Any] = [NO_TANGENT] * (1 + len(args))
        if args and weights is not None:
            bars[1] = project(np.asarray(out_bar)[np.asarray(x)], weights)
        return tuple(bars)

    return out, bincount_pullback


@frule(np.bincount)
def bincount_frule(args_dot: tuple[Any, ...], x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    out = np.bincount(x, *args, **kwargs)
    w_dot = args_dot[1] if len(args_dot) > 1 else ZERO
    if not args or args[0] is None or is_zero(w_dot):
        return out, ZERO
    return out, np.bincount(x, filled(w_dot, args[0]), *args[1:], **kwargs)


@rrule(np.sort)
def sort_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.sort(x, *args, **kwargs)
    axis = kwargs.get("axis", args[0] if args else -1)

    def sort_pullback(out_bar: Any) -> tuple[Any, ...]:
        # A stable argsort is one permutation that sorts x; ties may take any, all give `out`.
        xa = np.asarray(x)
        x_bar = _zeros_like(xa, out_bar)
        if axis is None:
            x_bar.reshape(-1)[np.argsort(xa, axis=None, kind="stable")] = out_bar
        else:
            np.put_along_axis(x_bar, np.argsort(xa, axis=axis, kind="stable"), out_bar, axis=axis)
        return (project(x_bar, x),) + (NO_TANGENT,) * len(args)

    return out, sort_pullback


def _permutation_to(xa: np.ndarray, out: np.ndarray, axis: Any) -> np.ndarray:
    """Indices along `axis` (of the flattened arrays for None) with take_along_axis(x, idx) == out,
    for an `out` that rearranges x along the axis: stable sorts of the two, matched rank by rank."""
    if axis is None:
        xa, out, axis = xa.reshape(-1), out.reshape(-1), 0
    order_x = np.argsort(xa, axis=axis, kind="stable")
    idx = np.empty_like(order_x)
    np.put_along_axis(idx, np.argsort(out, axis=axis, kind="stable"), order_x, axis=axis)
    return idx


@rrule(np.partition)
def partition_rrule(x: Any, kth: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    """Each output element is the input element partition moved there (ties: any of them)."""
    out = np.partition(x, kth, *args, **kwargs)
    axis = kwargs.get("axis", args[0] if args else -1)

    def partition_pullback(out_bar: Any) -> tuple[Any, ...]:
        xa = np.asarray(x)
        idx = _permutation_to(xa, np.asarray(out), axis)
        x_bar = _zeros_like(xa, out_bar)
        np.put_along_axis(x_bar.reshape(-1) if axis is None else x_bar, idx, out_bar, axis=0 if axis is None else axis)
        return (project(x_bar, x), NO_TANGENT) + (NO_TANGENT,) * len(args)

    return out, partition_pullback


@frule(np.partition)
def partition_frule(args_dot: tuple[Any, ...], x: Any, kth: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    out = np.partition(x, kth, *args, **kwargs)
    if is_zero(args_dot[0]):
        return out, ZERO
    axis = kwargs.get("axis", args[0] if args else -1)
    idx = _permutation_to(np.asarray(x), np.asarray(out), axis)
    x_dot = filled(args_dot[0], x)
    return out, np.take_along_axis(np.reshape(x_dot, -1) if axis is None else x_dot, idx, axis=0 if axis is None else axis)


frule(np.take_along_axis)(linear_frule(np.take_along_axis))


@rrule(np.take_along_axis)
def take_along_axis_rrule(arr: Any, indices: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.take_along_axis(arr, indices, *args, **kwargs)
    axis = kwargs.get("axis", args[0] if args else -1)
    like = stand_in(arr)

    def take_along_axis_pullback(out_bar: Any) -> tuple[Any, ...]:
        x_bar = _zeros_like(np.asarray(like), out_bar)
        target = x_bar.reshape(-1) if axis is None else x_bar  # a view of x_bar in both cases
        ax = 0 if axis is None else normalize_axis_index(axis, x_bar.ndim)
        index = tuple(np.asarray(indices) if d == ax else
                      np.arange(n).reshape((1,) * d + (n,) + (1,) * (target.ndim - d - 1))
                      for d, n in enumerate(target.shape))
        np.add.at(target, index, out_bar)  # an index taken twice accumulates
        return (project(x_bar, like), NO_TANGENT) + (NO_TANGENT,) * len(args)

    return out, take_along_axis_pullback


@rrule(np.ndarray.diagonal)
@rrule(np.diagonal)
def diagonal_rrule(a: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.diagonal(a, *args, **kwargs)  # a read-only view
    params = dict(zip(("offset", "axis1", "axis2"), args), **kwargs)
    offset, axis1, axis2 = params.get("offset", 0), params.get("axis1", 0), params.get("axis2", 1)
    like = stand_in(a)

    def diagonal_pullback(out_bar: Any) -> tuple[Any, ...]:
        x_bar = _zeros_like(np.asarray(like), out_bar)
        ndim = x_bar.ndim
        moved = np.moveaxis(x_bar, (normalize_axis_index(axis1, ndim), normalize_axis_index(axis2, ndim)), (-2, -1))
        n = np.shape(out_bar)[-1]
        moved[..., np.arange(n) + max(-offset, 0), np.arange(n) + max(offset, 0)] = out_bar  # writes into x_bar
        return (project(x_bar, like),) + (NO_TANGENT,) * len(args)

    return out, diagonal_pullback


# ---- a.flat: the runtime calls the rule with the array as the only argument ---------------------------

def _flat_of(x: np.ndarray) -> np.ndarray:
    """`x.flat` as a 1-D array: a view for a C-contiguous x, so `x.flat[k] = v` writes x as NumPy's
    flatiter does; otherwise a read-only copy (a write through it raises instead of being lost)."""
    out = x.reshape(-1)
    if not np.shares_memory(out, x) and x.size > 1:
        out.flags.writeable = False
    return out


@rrule(np.ndarray.flat)
def flat_rrule(x: np.ndarray) -> tuple[np.ndarray, Callable[..., Any]]:
    """`x.flat` of a differentiated array: indexing, iterating and writing it are then those of a
    1-D array, which bytegrad records (a flatiter object hides its elements from the tape)."""
    out = _flat_of(x)

    def flat_pullback(out_bar: Any) -> tuple[Any]:
        return (np.reshape(out_bar, x.shape),)

    return out, flat_pullback


frule(np.ndarray.flat)(lambda args_dot, x: (_flat_of(x), ZERO if is_zero(args_dot[0]) else np.reshape(args_dot[0], -1)))
