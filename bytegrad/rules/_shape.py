"""Shape helpers for rules: undoing broadcasting, and the `uniform` cotangent convention.

A cotangent reaching an elementwise rule may be a scalar standing for "this value everywhere in
the output" (the seed of `sum` is one): `unbroadcast` and `materialize` handle that case.
"""
from __future__ import annotations

from typing import Any

import numpy as np

_sum = np.add.reduce
_empty = np.empty
_copyto = np.copyto


def materialize(x_bar: Any, like: Any) -> Any:
    """Expand a uniform scalar cotangent to the shape of `like` (an array); arrays pass through."""
    if type(like) is np.ndarray and (type(x_bar) is not np.ndarray or x_bar.shape != like.shape):
        if type(x_bar) is np.ndarray and x_bar.ndim:
            return np.broadcast_to(x_bar, like.shape).copy()
        dtype = like.dtype if like.dtype.kind in "fc" else np.result_type(x_bar, np.float64)
        return filled(like.shape, dtype, x_bar)
    return x_bar


def filled(shape: tuple[int, ...], dtype: Any, value: Any) -> np.ndarray:
    """`np.full(shape, value, dtype)`, without its Python wrapper (a uniform cotangent expanded)."""
    out = _empty(shape, dtype)
    _copyto(out, value, casting="unsafe")
    return out


def unbroadcast(x_bar: Any, shape: tuple[int, ...], out_shape: tuple[int, ...] | None = None) -> Any:
    """Sum `x_bar` (a cotangent of an output of `out_shape`) down to an input of `shape`.

    A scalar `x_bar` is a uniform cotangent of the whole output: it stays a scalar, scaled by
    how many output elements each input element fed.
    """
    if type(x_bar) is not np.ndarray or x_bar.ndim == 0:
        if out_shape is None or out_shape == shape:
            return x_bar
        n_out = 1
        for d in out_shape:
            n_out *= d
        n_in = 1
        for d in shape:
            n_in *= d
        return x_bar * (n_out // n_in if n_in else 0)
    xs = x_bar.shape
    if out_shape is not None and xs != out_shape:
        # out_bar * partial with a uniform out_bar: the product has the partial's (smaller) shape.
        x_bar = np.broadcast_to(x_bar, out_shape)
        xs = out_shape
    if xs == shape:
        return x_bar
    plan = _PLANS.get((xs, shape))
    if plan is None:
        plan = unbroadcast_plan(xs, shape)
    lead_axes, axes = plan
    if lead_axes:
        x_bar = _sum(x_bar, axis=lead_axes)
    if axes:
        x_bar = _sum(x_bar, axis=axes, keepdims=True)
    if x_bar.shape != shape:
        x_bar = x_bar.reshape(shape)
    return x_bar


_PLANS: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[tuple[int, ...], tuple[int, ...]]] = {}


def unbroadcast_plan(xs: tuple[int, ...], shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The axes `unbroadcast` sums over, for a cotangent of shape `xs` and an input of `shape`."""
    lead = len(xs) - len(shape)
    lead_axes = tuple(range(lead)) if lead > 0 else ()
    kept = xs[lead:] if lead > 0 else xs
    axes = tuple(i for i, d in enumerate(shape) if d == 1 and kept[i] != 1)
    if len(_PLANS) < 4096:  # shapes seen in one program are few; don't grow without bound
        _PLANS[(xs, shape)] = (lead_axes, axes)
    return lead_axes, axes


_STAND_INS: dict[tuple, np.ndarray] = {}


def stand_in(v: np.ndarray) -> np.ndarray:
    """A read-only array of `v`'s shape and dtype that holds no memory (one zero, broadcast): what a
    record keeps of a value it needs only the shape of, so that the value itself can be freed."""
    key = (v.shape, v.dtype)
    s = _STAND_INS.get(key)
    if s is None:
        if len(_STAND_INS) > 256:
            _STAND_INS.clear()
        s = _STAND_INS[key] = np.broadcast_to(np.zeros((), v.dtype), v.shape)
    return s


def is_stand_in(arr: np.ndarray) -> bool:
    """Whether `arr` is a `stand_in` (it holds no data of its own)."""
    return arr.base is not None and _STAND_INS.get((arr.shape, arr.dtype)) is arr
