"""Running sums, products and differences: cumsum and cumprod (functions and methods), NumPy 2's
cumulative_sum and cumulative_prod (with include_initial), diff and ediff1d.

cumprod is exact where the input has zeros (it does not divide by them), at second order too.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from bytegrad.rules._project import project, stand_in
from bytegrad.rules._tangents import linear_frule
from bytegrad.rules.registry import NO_TANGENT, frule, rrule

_NOVALUE = getattr(np, "_NoValue", None)
_CUMSUM_PARAMS = ("axis", "dtype", "out")


@rrule(np.ndarray.cumsum)
@rrule(np.cumsum)
def cumsum_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.cumsum(x, *args, **kwargs)
    params = dict(zip(_CUMSUM_PARAMS, args))
    params.update(kwargs)
    if params.get("out") is not None:
        raise TypeError("numpy.cumsum(..., out=...) cannot be differentiated; assign the result instead.")
    axis = params.get("axis")

    def cumsum_pullback(out_bar: Any) -> tuple[Any, ...]:
        if axis is None:
            x_bar = np.cumsum(out_bar[::-1])[::-1].reshape(np.shape(x))
        else:
            x_bar = np.flip(np.cumsum(np.flip(out_bar, axis), axis), axis)
        return (project(x_bar, x),) + (NO_TANGENT,) * len(args)

    return out, cumsum_pullback


def _reverse_cumsum(g: np.ndarray) -> np.ndarray:
    """out[..., j] = sum of g[..., i] for i >= j."""
    return np.cumsum(g[..., ::-1], axis=-1)[..., ::-1]


def _cumprod_cotangent(x: np.ndarray, out: np.ndarray, g: np.ndarray) -> np.ndarray:
    """The cotangent of x from g, that of out = cumprod(x) along the last axis.

    d out_i / d x_j = prod_{k <= i, k != j} x_k for j <= i. Without zeros that is out_i / x_j. With
    one, x_bar_j = P_j S_j with P_j = prod_{k < j} x_k and S_j = g_j + x_{j+1} S_{j+1}: no division
    and no mask, so that a nested derivative differentiates it too (a value masked to 0 at a zero
    of x may have a derivative that is not 0). The recurrence is a loop over the axis.
    """
    if not (x == 0).any():
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            return _reverse_cumsum(g * out) / x
    n = x.shape[-1]
    prefix = np.cumprod(np.concatenate([np.ones_like(x[..., :1]), x[..., :-1]], axis=-1), axis=-1)
    g = np.broadcast_to(g, x.shape)
    suffix = [g[..., n - 1]]
    for j in range(n - 2, -1, -1):
        suffix.append(g[..., j] + x[..., j + 1] * suffix[-1])
    return prefix * np.stack(suffix[::-1], axis=-1)


@rrule(np.ndarray.cumprod)
@rrule(np.cumprod)
def cumprod_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    params = dict(zip(("axis", "dtype", "out"), args), **kwargs)
    if params.get("out") is not None:
        raise TypeError("numpy.cumprod(..., out=...) cannot be differentiated; assign the result instead.")
    out = np.cumprod(x, *args, **kwargs)
    axis = params.get("axis")
    xa = np.asarray(x)

    def cumprod_pullback(out_bar: Any) -> tuple[Any, ...]:
        if axis is None:
            x_bar = _cumprod_cotangent(xa.reshape(-1), out, np.asarray(out_bar)).reshape(xa.shape)
        else:
            ax = normalize_axis_index(axis, xa.ndim)
            x_bar = np.moveaxis(_cumprod_cotangent(np.moveaxis(xa, ax, -1), np.moveaxis(out, ax, -1),
                                                   np.moveaxis(np.asarray(out_bar), ax, -1)), -1, ax)
        return (project(x_bar, x),) + (NO_TANGENT,) * len(args)

    return out, cumprod_pullback


def _cumulative_rule(fn: Any, back: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]) -> None:
    """NumPy 2's cumulative_sum / cumulative_prod: `back(x, out, out_bar)` along the last axis, where out
    and out_bar leave out the initial value that include_initial=True puts first."""
    name = fn.__name__

    def cumulative_rrule(x: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        if kwargs.get("out") is not None:
            raise TypeError(f"numpy.{name}(..., out=...) cannot be differentiated; assign the result instead.")
        out = fn(x, **kwargs)
        xa = np.asarray(x)
        axis = normalize_axis_index(kwargs.get("axis") or 0, max(xa.ndim, 1))
        skip = 1 if kwargs.get("include_initial", False) else 0

        def cumulative_pullback(out_bar: Any) -> tuple[Any]:
            x1, o, g = (np.moveaxis(np.atleast_1d(v), axis, -1) for v in (xa, out, np.asarray(out_bar)))
            x_bar = np.moveaxis(back(x1, o[..., skip:], g[..., skip:]), -1, axis)
            return (project(x_bar.reshape(xa.shape), x),)

        return out, cumulative_pullback

    cumulative_rrule.__name__ = cumulative_rrule.__qualname__ = f"{name}_rrule"
    rrule(fn)(cumulative_rrule)


if hasattr(np, "cumulative_sum"):  # NumPy >= 2.1
    _cumulative_rule(np.cumulative_sum, lambda x, out, g: _reverse_cumsum(g))
    _cumulative_rule(np.cumulative_prod, _cumprod_cotangent)
    frule(np.cumulative_sum)(linear_frule(np.cumulative_sum))


def _diff_adjoint(g: Any, axis: int) -> Any:
    """The adjoint of the first difference along `axis`: x_bar_j = g_{j-1} - g_j."""
    return -np.diff(g, axis=axis, prepend=0, append=0)


@rrule(np.diff)
def diff_rrule(a: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.diff(a, *args, **kwargs)
    params = dict(zip(("n", "axis", "prepend", "append"), args), **kwargs)
    n, axis = params.get("n", 1), params.get("axis", -1)
    prepend, append = params.get("prepend", _NOVALUE), params.get("append", _NOVALUE)
    if out is a:  # n == 0 returns the input itself
        out = out.view()
    ndim = np.ndim(a)
    ax = normalize_axis_index(axis, ndim)

    def width(v: Any) -> int:
        return 0 if v is _NOVALUE else (1 if np.ndim(v) == 0 else np.shape(v)[ax])

    wp, wa = width(prepend), width(append)
    likes = (stand_in(a), stand_in(prepend), stand_in(append))

    def diff_pullback(out_bar: Any) -> tuple[Any, ...]:
        g = np.asarray(out_bar)
        for _ in range(n):
            g = _diff_adjoint(g, ax)
        size = g.shape[ax]
        pieces = np.split(g, [wp, size - wa], axis=ax)
        bars = [project(pieces[1], likes[0])]
        for piece, like in ((pieces[0], likes[1]), (pieces[2], likes[2])):
            bars.append(project(np.sum(piece) if np.ndim(like) == 0 else piece, like))
        result = dict(zip(("n", "axis", "prepend", "append"), (NO_TANGENT, NO_TANGENT, bars[1], bars[2])))
        return (bars[0],) + tuple(result[name] for name in ("n", "axis", "prepend", "append")[: len(args)])

    return out, diff_pullback


@rrule(np.ediff1d)
def ediff1d_rrule(ary: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.ediff1d(ary, *args, **kwargs)
    params = dict(zip(("to_end", "to_begin"), args), **kwargs)
    to_end, to_begin = params.get("to_end"), params.get("to_begin")
    n_end = 0 if to_end is None else np.size(to_end)
    n_begin = 0 if to_begin is None else np.size(to_begin)
    like, like_end, like_begin = stand_in(ary), stand_in(to_end), stand_in(to_begin)

    def ediff1d_pullback(out_bar: Any) -> tuple[Any, ...]:
        g = np.asarray(out_bar)
        middle = g[n_begin: g.shape[0] - n_end]
        ary_bar = _diff_adjoint(middle, 0) if np.size(like) else np.zeros(0, dtype=g.dtype)
        bars = {"to_end": NO_TANGENT if like_end is None else
                project(np.reshape(g[g.shape[0] - n_end:], np.shape(like_end)), like_end),
                "to_begin": NO_TANGENT if like_begin is None else
                project(np.reshape(g[:n_begin], np.shape(like_begin)), like_begin)}
        return (project(np.reshape(ary_bar, np.shape(like)), like),) + tuple(
            bars[name] for name in ("to_end", "to_begin")[: len(args)])

    return out, ediff1d_pullback
