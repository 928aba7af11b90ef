"""Order statistics and weighted means: median, quantile, percentile and average.

A quantile is a blend of (at most) two order statistics, (1 - t) x_(lo) + t x_(hi): its cotangent goes to
the elements that hold them. The methods 'linear' (the default), 'lower', 'higher', 'midpoint' and
'nearest' are covered, and with 'linear' the quantile q is differentiable too (the slope between the two
order statistics). Tied elements: one of them (the first in a stable sort) gets the cotangent. The
NaN-ignoring nanmedian, nanquantile and nanpercentile have no rules.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np

from bytegrad.errors import RuleCaseError
from bytegrad.rules._project import project, stand_in
from bytegrad.rules.registry import NO_TANGENT, ZERO, rrule

_NOVALUE = getattr(np, "_NoValue", None)
_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")
# the positional parameters after (a, q) of quantile and percentile, and after a of median
_QUANTILE_PARAMS = ("axis", "out", "overwrite_input", "method", "keepdims")
_MEDIAN_PARAMS = ("axis", "out", "overwrite_input", "keepdims")


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axis = (axis,) if np.ndim(axis) == 0 else tuple(axis)
    return tuple(sorted(operator.index(a) % ndim for a in axis))


def _positions(q: np.ndarray, n: int, method: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each q, the two order statistics (lo, hi) and the weight t of hi, as NumPy blends them."""
    pos = q * (n - 1)
    lo = np.clip(np.floor(pos), 0, n - 1)
    hi = np.clip(np.ceil(pos), 0, n - 1)
    if method == "linear":
        return lo.astype(np.intp), hi.astype(np.intp), np.where(hi > lo, pos - lo, 0.0)
    if method == "lower":
        return lo.astype(np.intp), lo.astype(np.intp), np.zeros_like(pos)
    if method == "higher":
        return hi.astype(np.intp), hi.astype(np.intp), np.zeros_like(pos)
    if method == "nearest":
        near = np.clip(np.around(pos), 0, n - 1).astype(np.intp)  # half to even, as NumPy
        return near, near, np.zeros_like(pos)
    return lo.astype(np.intp), hi.astype(np.intp), np.where(hi > lo, 0.5, 0.0)  # midpoint


def _quantile_rule(x: Any, q: Any, scale: float, axis: Any, method: str, n_args: int,
                   q_positional: bool) -> Callable[..., Any]:
    """The pullback of out = quantile(x, q / scale, axis); its result holds x's cotangent, then q's (if
    `q_positional`), then NO_TANGENT for the other n_args positional arguments."""
    if method not in _METHODS:
        raise RuleCaseError(f"the quantile rules cover the methods {', '.join(_METHODS)}, not {method!r}")
    xa = np.asarray(x)
    axes = _axes(axis, xa.ndim)
    kept = [i for i in range(xa.ndim) if i not in axes]
    kept_shape = tuple(xa.shape[i] for i in kept)
    n = int(np.prod([xa.shape[i] for i in axes], dtype=np.int64))
    k = int(np.prod(kept_shape, dtype=np.int64))
    order = np.argsort(np.transpose(xa, kept + list(axes)).reshape(k, n), axis=-1, kind="stable")
    like_x, like_q = stand_in(x), stand_in(q)

    def quantile_pullback(out_bar: Any) -> tuple[Any, ...]:
        # (the rows of x and the weights t from q are made here: a nested derivative records them)
        rows = np.transpose(np.asarray(x), kept + list(axes)).reshape(k, n)  # one row per output element
        lo, hi, t = _positions(np.reshape(np.asarray(q) / scale, -1), n, method)
        g = np.reshape(out_bar, (lo.size, k))  # q's axes first, then the kept axes
        r = np.arange(k)
        x_bar = np.zeros((k, n), dtype=xa.dtype if xa.dtype.kind in "fc" else np.float64)  # (complex: median)
        np.add.at(x_bar, (r, order[:, lo].T), (1 - t)[:, None] * g)
        np.add.at(x_bar, (r, order[:, hi].T), t[:, None] * g)
        x_bar = x_bar.reshape(kept_shape + tuple(xa.shape[i] for i in axes))
        x_bar = np.transpose(x_bar, np.argsort(kept + list(axes)))
        result: tuple[Any, ...] = (project(x_bar, like_x),)
        if q_positional:
            def q_bar() -> Any:
                if method != "linear":
                    return project(np.zeros(np.shape(like_q)), like_q)  # flat in q
                rows_sorted = np.take_along_axis(rows, order, axis=-1)
                slope = (rows_sorted[:, hi] - rows_sorted[:, lo]).T * ((n - 1) / scale)  # 0 where hi == lo
                return project(np.reshape(np.sum(g * slope, axis=1), np.shape(like_q)), like_q)

            result += (q_bar,)
        return result + (NO_TANGENT,) * n_args

    return quantile_pullback


def _quantile_params(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    params = dict(zip(_QUANTILE_PARAMS, args), **kwargs)
    if params.get("out") is not None:
        raise TypeError(f"numpy.{name}(..., out=...) cannot be differentiated; assign the result instead.")
    if params.get("weights") is not None or params.get("interpolation") is not None:
        raise RuleCaseError(f"the numpy.{name} rule covers unweighted quantiles given by `method`")
    return params


def _without_overwrite(names: tuple[str, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """args and kwargs with overwrite_input=False: rules never modify their inputs (the result is the same)."""
    i = names.index("overwrite_input")
    if len(args) > i:
        args = args[:i] + (False,) + args[i + 1:]
    if kwargs.get("overwrite_input"):
        kwargs = dict(kwargs, overwrite_input=False)
    return args, kwargs


def _quantile_out(fn: Callable[..., Any], name: str, scale: float, a: Any, q: Any, args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> tuple[Any, Callable[..., Any]]:
    """np.quantile's and np.percentile's (out, pullback): `q` is a fraction of `scale`."""
    params = _quantile_params(name, args, kwargs)
    args, kwargs = _without_overwrite(_QUANTILE_PARAMS, args, kwargs)
    out = fn(a, q, *args, **kwargs)
    return out, _quantile_rule(a, q, scale, params.get("axis"), params.get("method", "linear"), len(args), True)


@rrule(np.quantile)
def quantile_rrule(a: Any, q: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    return _quantile_out(np.quantile, "quantile", 1.0, a, q, args, kwargs)


@rrule(np.percentile)
def percentile_rrule(a: Any, q: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    return _quantile_out(np.percentile, "percentile", 100.0, a, q, args, kwargs)


@rrule(np.median)
def median_rrule(a: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    params = dict(zip(_MEDIAN_PARAMS, args), **kwargs)
    if params.get("out") is not None:
        raise TypeError("numpy.median(..., out=...) cannot be differentiated; assign the result instead.")
    args, kwargs = _without_overwrite(_MEDIAN_PARAMS, args, kwargs)
    out = np.median(a, *args, **kwargs)
    return out, _quantile_rule(a, 0.5, 1.0, params.get("axis"), "linear", len(args), False)


# ---- average ----------------------------------------------------------------------------------------

@rrule(np.average)
def average_rrule(a: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    """Weighted or not; the weights are differentiable too, and so is the sum of weights that
    returned=True adds."""
    out = np.average(a, *args, **kwargs)
    params = dict(zip(("axis", "weights", "returned"), args), **kwargs)
    weights, returned = params.get("weights"), bool(params.get("returned", False))
    xa = np.asarray(a)
    axes = _axes(params.get("axis"), xa.ndim)
    axis = params.get("axis")
    given = axes if axis is None else tuple(  # the axes in the order given: the weights' axes
        operator.index(ax) % xa.ndim for ax in ((axis,) if np.ndim(axis) == 0 else axis))
    shape_e = tuple(1 if i in axes else d for i, d in enumerate(xa.shape))
    like_a, like_w = stand_in(a), stand_in(weights)

    def laid_out() -> Any:
        """The weights laid out like a (NumPy's own broadcasting of 1-D weights), or None. Computed
        in the pullback, which a nested derivative records (weights' second derivatives)."""
        if weights is None:
            return None
        wa = np.asarray(weights)
        return wa if wa.shape == xa.shape else wa.transpose(np.argsort(given)).reshape(
            tuple(d if i in axes else 1 for i, d in enumerate(xa.shape)))

    def average_pullback(out_bar: Any) -> tuple[Any, ...]:
        wb = laid_out()
        avg_bar: Any
        scl_bar: Any
        avg_bar, scl_bar = out_bar if returned else (out_bar, ZERO)
        avg = out[0] if returned else out
        a_bar: Any = 0.0
        w_bar: Any = 0.0
        if avg_bar is not ZERO:
            g = np.reshape(avg_bar, shape_e)
            if wb is None:
                a_bar = g / (xa.size // max(np.size(avg), 1))
            else:
                total = np.sum(wb, axis=axes, keepdims=True)
                a_bar = g * wb / total
                w_bar = g * (xa - np.reshape(avg, shape_e)) / total
        if wb is not None and scl_bar is not ZERO:
            w_bar = w_bar + np.reshape(scl_bar, shape_e)
        a_bar = project(np.broadcast_to(a_bar, xa.shape), like_a)
        result = {"axis": NO_TANGENT, "returned": NO_TANGENT, "weights": NO_TANGENT}
        if wb is not None:
            w_bar = np.broadcast_to(w_bar, xa.shape)
            if np.shape(like_w) != xa.shape:
                w_bar = np.sum(w_bar, axis=tuple(i for i in range(xa.ndim) if i not in axes))
                w_bar = np.transpose(w_bar, np.argsort(np.argsort(given)))
            result["weights"] = project(w_bar, like_w)
        return (a_bar,) + tuple(result[name] for name in ("axis", "weights", "returned")[: len(args)])

    return out, average_pullback

