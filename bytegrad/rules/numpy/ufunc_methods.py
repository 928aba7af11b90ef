"""ufunc methods on differentiated values: `.accumulate`, `.outer` and `.reduceat` of any ufunc with a
rule, `.reduce` of add, multiply, maximum, minimum, logaddexp and logaddexp2, and `.at` of the ufuncs
other than add and subtract (which the runtime records as writes); np.divmod, the ufunc with two
outputs.

All but `.reduce` run as Python code that bytegrad differentiates (`differentiate_through`), built
from the ufunc itself and rules that exist (cumsum, take_along_axis, reduce, stack), so reverse and
forward mode come from those. Rules see the ufunc as their first argument.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from bytegrad.errors import RuleCaseError
from bytegrad.rules._project import project
from bytegrad.rules._tangents import filled, is_zero
from bytegrad.rules.numpy.reductions import max_rrule, min_rrule, prod_rrule, sum_frule, sum_rrule
from bytegrad.rules.registry import NO_TANGENT, ZERO, differentiate_through, frule, non_differentiable, rrule

__all__ = ["ufunc_accumulate", "ufunc_outer", "ufunc_reduceat", "ufunc_at_in_rounds"]

# ufuncs whose accumulation picks one of the values it has seen: the running maximum is x at the
# last place where x was the maximum so far (ties give the later element the whole cotangent)
_PICKS = frozenset({np.maximum, np.minimum, np.fmax, np.fmin})


def _refuse_out(name: str, out: Any) -> None:
    if out is not None:
        raise TypeError(f"numpy.ufunc.{name}(..., out=...) cannot be differentiated; assign the result instead")


def running_pick(ufunc: Any, x: Any, axis: int) -> np.ndarray:
    """Indices along `axis` with `ufunc.accumulate(x, axis) == take_along_axis(x, indices, axis)`."""
    xa = np.asarray(x)
    out = ufunc.accumulate(xa, axis=axis)
    shape = [1] * xa.ndim
    shape[axis] = xa.shape[axis]
    here = np.arange(xa.shape[axis]).reshape(shape)
    return np.maximum.accumulate(np.where(xa == out, here, 0), axis=axis)


def ufunc_accumulate(ufunc: Any, array: Any, axis: int = 0, dtype: Any = None, out: Any = None) -> Any:
    """`ufunc.accumulate`: np.cumsum and np.cumprod for add and multiply, a running pick for
    maximum and minimum, and otherwise one ufunc call per step along the axis."""
    _refuse_out("accumulate", out)
    if ufunc is np.add:
        return np.cumsum(array, axis=axis, dtype=dtype)
    if ufunc is np.multiply:
        return np.cumprod(array, axis=axis, dtype=dtype)
    x = np.asarray(array) if dtype is None else np.asarray(array).astype(dtype)
    axis = normalize_axis_index(axis, np.ndim(x))
    if ufunc in _PICKS:
        return np.take_along_axis(x, running_pick(ufunc, x, axis), axis)
    steps = np.moveaxis(x, axis, 0)
    items = [steps[0]]
    for i in range(1, len(steps)):
        items.append(ufunc(items[-1], steps[i]))
    return np.moveaxis(np.stack(items), 0, axis)


def ufunc_outer(ufunc: Any, A: Any, B: Any, /, **kwargs: Any) -> Any:
    """`ufunc.outer(A, B)`: the ufunc of A, with B's number of axes appended, and B."""
    _refuse_out("outer", kwargs.pop("out", None))
    a = np.asarray(A)
    return ufunc(np.reshape(a, np.shape(a) + (1,) * np.ndim(B)), B, **kwargs)


def reduceat_segments(indices: Any, n: int, name: str) -> list[tuple[int, int]]:
    """The (start, stop) of each piece `ufunc.reduceat` reduces: up to the next index, or the one
    element at an index that is not below the next."""
    idx = [int(i) for i in np.asarray(indices).reshape(-1)]
    pieces = []
    for k, lo in enumerate(idx):
        if not 0 <= lo < n:
            raise IndexError(f"index {lo} out-of-bounds in {name}.reduceat [0, {n})")
        hi = idx[k + 1] if k + 1 < len(idx) else n
        pieces.append((lo, hi if lo < hi else lo + 1))
    return pieces


def ufunc_reduceat(ufunc: Any, array: Any, indices: Any, axis: int = 0, dtype: Any = None, out: Any = None) -> Any:
    """`ufunc.reduceat`: `ufunc.reduce` of each piece, stacked along the axis."""
    _refuse_out("reduceat", out)
    x = np.asarray(array)
    axis = normalize_axis_index(axis, np.ndim(x))
    steps = np.moveaxis(x, axis, 0)
    pieces = reduceat_segments(indices, len(steps), ufunc.__name__)
    parts = [ufunc.reduce(steps[lo:hi], axis=0, dtype=dtype) for lo, hi in pieces]
    return np.moveaxis(np.stack(parts), 0, axis)


def at_rounds(shape: tuple[int, ...], indices: Any) -> tuple[np.ndarray, list[np.ndarray]]:
    """The flat positions `a[indices]` names, and the rounds in which `ufunc.at` visits them: round r
    holds each position's r-th occurrence, so no round names a position twice and a later
    occurrence comes in a later round, as `ufunc.at` applies them (in index order)."""
    positions = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)[indices]
    flat = np.asarray(positions).reshape(-1)
    order = np.argsort(flat, kind="stable")
    ordered = flat[order]
    starts = np.r_[0, np.flatnonzero(ordered[1:] != ordered[:-1]) + 1] if flat.size else np.zeros(0, np.intp)
    occurrence = np.empty(flat.size, dtype=np.intp)
    occurrence[order] = np.arange(flat.size) - np.repeat(starts, np.diff(np.r_[starts, flat.size]))
    rounds = [np.flatnonzero(occurrence == r) for r in range(int(occurrence.max(initial=-1)) + 1)]
    return positions, rounds


def ufunc_at_in_rounds(ufunc: Any, a: Any, indices: Any, b: Any = None) -> None:
    """`ufunc.at(a, indices[, b])` as fancy reads and writes of `a`, one round of distinct positions
    at a time (np.multiply.at, np.maximum.at, np.negative.at...)."""
    positions, rounds = at_rounds(np.shape(a), indices)
    flat = np.reshape(positions, -1)
    values = None if b is None else np.reshape(np.broadcast_to(b, np.shape(positions)), -1)
    for picked in rounds:
        key = np.unravel_index(flat[picked], np.shape(a))
        a[key] = ufunc(a[key]) if values is None else ufunc(a[key], values[picked])


def divmod_in_python(x1: Any, x2: Any, /, **kwargs: Any) -> tuple[Any, Any]:
    """np.divmod: the quotient (floor_divide, flat: no derivative) and the remainder (np.mod)."""
    return np.floor_divide(x1, x2, **kwargs), np.mod(x1, x2, **kwargs)


non_differentiable(running_pick, reduceat_segments, at_rounds)
differentiate_through(np.divmod, divmod_in_python)
differentiate_through(np.ufunc.accumulate, ufunc_accumulate)
differentiate_through(np.ufunc.outer, ufunc_outer)
differentiate_through(np.ufunc.reduceat, ufunc_reduceat)


# ---- ufunc.reduce: np.add.reduce is a sum along axis 0 by default ----------------------------------

_REDUCE_PARAMS = ("axis", "dtype", "out", "keepdims", "initial", "where")
_NOVALUE = getattr(np, "_NoValue", None)


def _reduce_params(ufunc: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    params = dict(zip(_REDUCE_PARAMS, args), **kwargs)
    params.setdefault("axis", 0)  # reduce's default axis is 0, the functions' is None
    if params.get("out") is not None:
        raise TypeError("numpy.ufunc.reduce(..., out=...) cannot be differentiated; assign the result instead")
    return params


def _picked(ufunc: Any, params: dict[str, Any]) -> dict[str, Any]:
    """reduce's options as np.max's (which has no dtype), for maximum.reduce and minimum.reduce."""
    if params.get("dtype") is not None:
        raise RuleCaseError(f"the numpy.ufunc.reduce rule covers {ufunc.__name__}.reduce without dtype=")
    return {k: v for k, v in params.items() if k not in ("dtype", "out")}


def logaddexp_reduce_rrule(ufunc: Any, x: Any, params: dict[str, Any]) -> tuple[Any, Callable[..., Any]]:
    """logaddexp.reduce: out = log(sum(exp(x))), so d out / d x = exp(x - out) (2**(x - out) for logaddexp2)."""
    if params.get("initial", _NOVALUE) is not _NOVALUE or params.get("where", True) is not True:
        raise RuleCaseError(f"the numpy.ufunc.reduce rule covers {ufunc.__name__}.reduce without initial= and where=")
    out = ufunc.reduce(x, **params)
    xa = np.asarray(x)
    axis = params["axis"]
    axes = tuple(range(xa.ndim)) if axis is None else tuple(np.atleast_1d(axis) % max(xa.ndim, 1))
    keep = bool(params.get("keepdims", False))
    power = np.exp if ufunc is np.logaddexp else np.exp2

    def logaddexp_reduce_pullback(out_bar: Any) -> Any:
        expanded = out if keep else np.expand_dims(out, axes)  # (here: a nested derivative records it)
        return project(power(xa - expanded) * (out_bar if keep else np.expand_dims(out_bar, axes)), x)

    return out, logaddexp_reduce_pullback


def _reduce_rule(ufunc: Any, x: Any, params: dict[str, Any]) -> tuple[Any, Callable[..., Any]]:
    """(out, pullback giving x's cotangent) for `ufunc.reduce(x, **params)`, ufunc not add or multiply."""
    if isinstance(params.get("initial"), (float, np.floating, np.ndarray)):  # it would need a cotangent
        raise RuleCaseError(f"the numpy.ufunc.reduce rule covers {ufunc.__name__}.reduce without a float initial=")
    if ufunc is np.maximum or ufunc is np.minimum:
        out, pullback = (max_rrule if ufunc is np.maximum else min_rrule)(x, **_picked(ufunc, params))
        return out, lambda out_bar: pullback(out_bar)[0]
    if ufunc is np.logaddexp or ufunc is np.logaddexp2:
        return logaddexp_reduce_rrule(ufunc, x, params)
    raise RuleCaseError(f"the numpy.ufunc.reduce rule covers add, multiply, maximum, minimum, logaddexp and "
                        f"logaddexp2, not {getattr(ufunc, '__name__', ufunc)}.reduce")


@rrule(np.ufunc.reduce)
def ufunc_reduce_rrule(ufunc: Any, x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    if ufunc is np.add or ufunc is np.multiply:  # np.sum's and np.prod's options are reduce's, in order
        if not args and "axis" not in kwargs:
            kwargs = dict(kwargs, axis=0)
        out, reduction_pullback = (sum_rrule if ufunc is np.add else prod_rrule)(x, *args, **kwargs)

        def sum_reduce_pullback(out_bar: Any) -> tuple[Any, ...]:
            return (NO_TANGENT,) + tuple(reduction_pullback(out_bar))

        return out, sum_reduce_pullback
    out, x_bar_of = _reduce_rule(ufunc, x, _reduce_params(ufunc, args, kwargs))

    def ufunc_reduce_pullback(out_bar: Any) -> tuple[Any, ...]:
        return (NO_TANGENT, x_bar_of(out_bar)) + (NO_TANGENT,) * len(args)

    return out, ufunc_reduce_pullback


@frule(np.ufunc.reduce)
def ufunc_reduce_frule(args_dot: tuple[Any, ...], ufunc: Any, x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    params = _reduce_params(ufunc, args, kwargs)
    if ufunc is np.add:
        if not args and "axis" not in kwargs:
            kwargs = dict(kwargs, axis=0)
        return sum_frule(args_dot[1:], x, *args, **kwargs)
    if ufunc is np.multiply:
        out, pullback = ufunc_reduce_rrule(ufunc, x, *args, **kwargs)
        x_bar_of = lambda out_bar: pullback(out_bar)[1]  # noqa: E731
    else:
        out, x_bar_of = _reduce_rule(ufunc, x, params)
    if is_zero(args_dot[1]):
        return out, ZERO
    # each output is a function of its own slice of x: d out = sum over the slice of (d out / d x) dx,
    # and the pullback of ones gives those partials
    weights = x_bar_of(np.ones_like(np.asarray(out, dtype=np.result_type(out, np.float64))))
    sums = {k: v for k, v in params.items() if k in ("axis", "keepdims", "where")}
    return out, np.sum(np.multiply(weights, filled(args_dot[1], x)), **sums)
