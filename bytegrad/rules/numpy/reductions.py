"""Reductions: sum, mean, prod, max/min and std/var, as functions and as ndarray methods; nansum,
nanmean, nanprod, nanmax, nanmin and ptp. (cumsum is in `cumulative.py`.)

Each rule serves both forms (`np.sum(x, 0)` and `x.sum(0)` take their arguments in the same order).
The pullback of a full reduction returns a uniform scalar cotangent.
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Optional

import numpy as np

from bytegrad.rules._project import project, stand_in
from bytegrad.rules._shape import unbroadcast
from bytegrad.rules._tangents import add_tangents, filled, is_zero, linear_frule
from bytegrad.rules.registry import NO_TANGENT, ZERO, frule, program_form, rrule

_NOVALUE = getattr(np, "_NoValue", None)

_SUM_PARAMS = ("axis", "dtype", "out", "keepdims", "initial", "where")
_MEAN_PARAMS = ("axis", "dtype", "out", "keepdims")
_MAX_PARAMS = ("axis", "out", "keepdims", "initial", "where")
_VAR_PARAMS = ("axis", "dtype", "out", "ddof", "keepdims")


# Cotangents up to this many elements are materialized (cheaper than np.broadcast_to's ~4 us);
# larger ones are read-only broadcast views, which cost no memory.
_COPY_LIMIT = 1 << 16


def _spread(value: Any, shape: tuple[int, ...]) -> Any:
    """`value` (broadcastable to `shape`) as an array of `shape`."""
    if np.shape(value) == shape:
        return value
    n = 1
    for d in shape:
        n *= d
    if n > _COPY_LIMIT:
        return np.broadcast_to(value, shape)
    out = np.empty(shape, dtype=np.result_type(value))
    out[...] = value
    return out


class _Reduction:
    """A reduction's arguments, bound by name: the input as an array, its axes, keepdims, where."""

    __slots__ = ("x", "axes", "keepdims", "where", "params")

    def __init__(self, fn_name: str, names: tuple[str, ...], x: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> None:
        params = dict(zip(names, args)) if args else {}
        if kwargs:
            params.update(kwargs)
        if params.get("out") is not None:
            raise TypeError(
                f"numpy.{fn_name}(..., out=...) writes into an existing array, which bytegrad cannot "
                f"differentiate; assign the result to a new name instead."
            )
        self.x = x
        xa = self.xa
        axis = params.get("axis")
        # The primal call has already validated the axes.
        if axis is None:
            self.axes = tuple(range(xa.ndim))
        elif np.ndim(axis) == 0:
            self.axes = (operator.index(axis) % xa.ndim,)
        else:
            self.axes = tuple(sorted(operator.index(a) % xa.ndim for a in axis))
        keepdims = params.get("keepdims", False)
        self.keepdims = keepdims is not _NOVALUE and bool(keepdims)
        where = params.get("where", True)
        self.where = True if where is _NOVALUE else where
        self.params = params

    @property
    def xa(self) -> np.ndarray:
        """The input as an array. Made again on each use for a list input, not kept from the forward
        pass: a nested derivative records what a pullback computes, and must see it made from the
        list's values."""
        x = self.x
        return x if type(x) is np.ndarray else np.asarray(x)

    @property
    def full(self) -> bool:
        """Whether the whole input is reduced to a scalar, with every element taking part."""
        return self.where is True and not self.keepdims and len(self.axes) == self.xa.ndim

    def expand(self, value: Any) -> Any:
        """A reduced value brought back to the input's rank (size 1 on the reduced axes)."""
        if self.keepdims or not self.axes:
            return value
        axes = self.axes
        return np.reshape(value, tuple(1 if i in axes else d for i, d in enumerate(self.xa.shape)))

    def count(self) -> Any:
        """How many elements each output element reduced (an int, or an array with `where`)."""
        if self.where is True:
            n = 1
            for a in self.axes:
                n *= self.xa.shape[a]
            return n
        mask = np.broadcast_to(self.where, self.xa.shape)
        return np.sum(mask, axis=self.axes, keepdims=True)

    def finish(self, x_bar: Any) -> Any:
        """The input's cotangent from an array broadcastable to its shape: masked by `where`, projected."""
        if self.where is not True:
            x_bar = np.where(self.where, x_bar, 0)
        x_bar = _spread(x_bar, self.xa.shape)
        x = self.x
        if type(x) is np.ndarray and (x_bar.dtype == x.dtype or x.dtype.kind not in "fc"):
            return x_bar
        return project(x_bar, x)

    def uniform(self, value: Any) -> Any:
        """A scalar cotangent standing for `value` everywhere in the input, in the input's dtype."""
        x = self.x
        if type(x) is np.ndarray:
            if isinstance(value, (np.generic, np.ndarray)) and value.dtype != x.dtype and x.dtype.kind in "fc":
                return x.dtype.type(value)
            return value
        return project(np.broadcast_to(value, self.xa.shape), x)


def _pullback_result(x_bar: Any, args: tuple[Any, ...], names: tuple[str, ...] = (),
                     initial_bar: Optional[Callable[[], Any]] = None) -> tuple[Any, ...]:
    """x's cotangent, then NO_TANGENT for each positional option, except a positional `initial`
    (a float that takes part in the reduction), whose cotangent `initial_bar()` gives."""
    result = [x_bar] + [NO_TANGENT] * len(args)
    if initial_bar is not None and "initial" in names and names.index("initial") < len(args):
        i = names.index("initial")
        result[i + 1] = project(initial_bar(), args[i])
    return tuple(result)


def _float_dtype(r: _Reduction, out_bar: Any) -> Any:
    dtype = r.xa.dtype
    return dtype if dtype.kind in "fc" else np.result_type(out_bar, np.float64)


def _full_float_sum(x: Any, *args: Any, **kwargs: Any) -> bool:
    return not args and not kwargs and type(x) is np.ndarray and x.dtype.kind == "f"


@rrule(np.ndarray.sum)
@rrule(np.sum)
@program_form(_full_float_sum, "{0}.sum()", "{g}")  # _full_sum_pullback's uniform cotangent
def sum_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    if _full_float_sum(x, *args, **kwargs):
        return x.sum(), _full_sum_pullback  # the common `np.sum(x)`: no argument parsing
    out = np.sum(x, *args, **kwargs)
    r = _Reduction("sum", _SUM_PARAMS, x, args, kwargs)

    def sum_pullback(out_bar: Any) -> tuple[Any, ...]:
        x_bar = r.uniform(out_bar) if r.full else r.finish(r.expand(out_bar))
        return _pullback_result(x_bar, args, _SUM_PARAMS, lambda: np.sum(out_bar))

    return out, sum_pullback


def _full_sum_pullback(out_bar: Any) -> tuple[Any]:
    return (out_bar,)  # uniform: out_bar everywhere in x


@frule(np.ndarray.sum)
@frule(np.sum)
def sum_frule(args_dot: tuple[Any, ...], x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    out = np.sum(x, *args, **kwargs)
    initial_dot = args_dot[5] if len(args_dot) > 5 else ZERO  # a positional `initial` adds to every sum
    if is_zero(args_dot[0]) and is_zero(initial_dot):
        return out, ZERO
    if "initial" in kwargs:  # the tangent of the sum starts from zero
        kwargs = dict(kwargs, initial=0)
    if len(args) > 4:
        args = args[:4] + (0,) + args[5:]
    out_dot = np.sum(filled(args_dot[0], x), *args, **kwargs)
    return out, add_tangents(out_dot, initial_dot)


frule(np.mean)(linear_frule(np.mean))
frule(np.ndarray.mean)(linear_frule(np.ndarray.mean))


@rrule(np.ndarray.mean)
@rrule(np.mean)
def mean_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    if not args and not kwargs and type(x) is np.ndarray and x.dtype.kind == "f" and x.size:
        n = x.size

        def full_mean_pullback(out_bar: Any) -> tuple[Any]:
            return (out_bar / n,)  # uniform

        return x.mean(), full_mean_pullback
    out = np.mean(x, *args, **kwargs)
    r = _Reduction("mean", _MEAN_PARAMS, x, args, kwargs)

    def mean_pullback(out_bar: Any) -> tuple[Any, ...]:
        count = r.count()
        if r.full:
            return _pullback_result(r.uniform(out_bar / count), args)
        if type(count) is np.ndarray:
            count = np.maximum(count, 1).astype(_float_dtype(r, out_bar))
        return _pullback_result(r.finish(r.expand(out_bar) / count), args)

    return out, mean_pullback


def _prod_of_others(xa: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """For each element, the product of the other elements it is reduced with (exact with zeros)."""
    k = len(axes)
    moved = np.moveaxis(xa, axes, tuple(range(xa.ndim - k, xa.ndim)))
    flat: np.ndarray = moved.reshape(moved.shape[: xa.ndim - k] + (-1,))
    left = np.ones_like(flat)
    right = np.ones_like(flat)
    if flat.shape[-1] > 1:
        left[..., 1:] = np.cumprod(flat[..., :-1], axis=-1)
        right[..., :-1] = np.cumprod(flat[..., :0:-1], axis=-1)[..., ::-1]
    others = (left * right).reshape(moved.shape)
    return np.moveaxis(others, tuple(range(xa.ndim - k, xa.ndim)), axes)


@rrule(np.ndarray.prod)
@rrule(np.prod)
def prod_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.prod(x, *args, **kwargs)
    r = _Reduction("prod", _SUM_PARAMS, x, args, kwargs)

    def prod_pullback(out_bar: Any) -> tuple[Any, ...]:
        xa = r.xa if r.where is True else np.where(r.where, r.xa, 1)
        initial = r.params.get("initial", _NOVALUE)
        if np.all(xa != 0):
            others = r.expand(out) / xa
        else:
            others = _prod_of_others(xa, r.axes)
            if initial is not _NOVALUE and initial is not None:
                others = others * initial
        x_bar = r.finish(r.expand(out_bar) * others)
        return _pullback_result(x_bar, args, _SUM_PARAMS, lambda: np.sum(out_bar * np.prod(
            r.xa, axis=r.axes, keepdims=r.keepdims, where=r.where)))

    return out, prod_pullback


def _extreme_rrule(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    def extreme_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        out = fn(x, *args, **kwargs)
        r = _Reduction(name, _MAX_PARAMS, x, args, kwargs)

        # The cotangent is split evenly among tied extreme elements.
        def extreme_pullback(out_bar: Any) -> tuple[Any, ...]:
            mask = r.xa == r.expand(out)
            if r.where is not True:
                mask &= r.where
            count = np.sum(mask, axis=r.axes, keepdims=True)
            share = r.expand(out_bar) / np.maximum(count, 1).astype(_float_dtype(r, out_bar))
            # `initial` gets the cotangent of the outputs no element of x reached.
            return _pullback_result(r.finish(mask * share), args, _MAX_PARAMS,
                                    lambda: np.sum(r.expand(out_bar) * (count == 0)))

        return out, extreme_pullback

    extreme_rrule.__name__ = extreme_rrule.__qualname__ = f"{name}_rrule"
    return extreme_rrule


for _fns, _name, _primal in (((np.max, np.amax, np.ndarray.max), "max", np.max),
                             ((np.min, np.amin, np.ndarray.min), "min", np.min)):
    _rule = _extreme_rrule(_primal, _name)
    for _fn in dict.fromkeys(_fns):  # np.max and np.amax are one object in some NumPy versions
        rrule(_fn)(_rule)


def _var_parts(r: _Reduction, out_bar: Any) -> tuple[Any, Any]:
    """conj(x - mean) and out_bar / (N - ddof), both broadcastable to the input's shape (var is
    mean(|x - mean|**2): its cotangent pairs with the conjugate, docs/plugins.md)."""
    params = r.params
    ddof = params.get("ddof", 0)
    correction = params.get("correction", _NOVALUE)
    if correction is not _NOVALUE and correction is not None:
        ddof = correction
    where = r.where
    mean = np.mean(r.xa, axis=r.axes, keepdims=True, where=where) if where is not True else (
        np.mean(r.xa, axis=r.axes, keepdims=True))
    centered = r.xa - mean
    if centered.dtype.kind == "c":
        centered = centered.conj()
    count = r.count()
    denom = np.maximum(count - ddof, 0)
    if type(denom) is np.ndarray:
        denom = denom.astype(_float_dtype(r, out_bar))
    return centered, r.expand(out_bar) / denom


# np.var and np.std take `mean=` (NumPy 2), keyword-only, which may be differentiated: the rules are
# given a signature with it in a positional place, where the runtime puts it (with defaults before it).
_VAR_ALL_PARAMS = _VAR_PARAMS + ("where", "mean", "correction")


def _var_signature() -> Any:
    import inspect  # already imported by dataclasses

    P = inspect.Parameter
    params = [P("x", P.POSITIONAL_ONLY)] + [
        P(name, P.POSITIONAL_OR_KEYWORD, default=None if name in ("axis", "dtype", "out") else
          0 if name == "ddof" else _NOVALUE) for name in _VAR_ALL_PARAMS]
    return inspect.Signature(params + [P("kwargs", P.VAR_KEYWORD)])


def _given_mean(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Optional[dict[str, Any]]:
    """np.var's options by name when a `mean` is given (else None), _NoValue defaults dropped."""
    params = dict(zip(_VAR_ALL_PARAMS, args), **kwargs)
    if params.get("mean", _NOVALUE) is _NOVALUE:
        return None
    return {k: v for k, v in params.items() if v is not _NOVALUE}


def _with_mean_rrule(x: Any, args: tuple[Any, ...], params: dict[str, Any], std: bool) -> tuple[Any, Callable[..., Any]]:
    """var or std about the given `mean` m: d var = 2 conj(x - m) (dx - dm) / (N - ddof), summed."""
    m = params.pop("mean")
    out = (np.std if std else np.var)(x, mean=m, **params)
    r = _Reduction("std" if std else "var", _VAR_PARAMS, x, (), params)
    like_m = stand_in(m)

    def with_mean_pullback(out_bar: Any) -> tuple[Any, ...]:
        centered = r.xa - np.asarray(m)
        if centered.dtype.kind == "c":
            centered = centered.conj()
        ddof = params.get("correction", params.get("ddof", 0))
        scale = r.expand(out_bar) / np.maximum(r.count() - (ddof or 0), 0)
        if std:
            out_e = r.expand(out)
            zero = out_e == 0  # all equal to the mean: the subgradient 0
            x_bar = np.where(zero, 0, centered * scale / np.where(zero, 1, out_e))
        else:
            x_bar = 2 * centered * scale
        x_bar = r.finish(x_bar)
        bars = [x_bar] + [NO_TANGENT] * len(args)
        if len(args) > _VAR_ALL_PARAMS.index("mean"):  # (a mean given by keyword is a constant)
            bars[1 + _VAR_ALL_PARAMS.index("mean")] = project(unbroadcast(-x_bar, np.shape(like_m)), like_m)
        return tuple(bars)

    return out, with_mean_pullback


@rrule(np.ndarray.var)
@rrule(np.var)
def var_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    return _var_or_std(x, args, kwargs, std=False)


@rrule(np.ndarray.std)
@rrule(np.std)
def std_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    return _var_or_std(x, args, kwargs, std=True)


def _var_or_std(x: Any, args: tuple[Any, ...], kwargs: dict[str, Any], std: bool) -> tuple[Any, Callable[..., Any]]:
    given = _given_mean(args, kwargs)
    if given is not None:
        return _with_mean_rrule(x, args, given, std=std)
    out = (np.std if std else np.var)(x, *args, **kwargs)
    r = _Reduction("std" if std else "var", _VAR_PARAMS, x, args, kwargs)

    if not std:
        def var_pullback(out_bar: Any) -> tuple[Any, ...]:
            centered, scale = _var_parts(r, out_bar)
            return _pullback_result(r.finish(2 * centered * scale), args)

        return out, var_pullback

    def std_pullback(out_bar: Any) -> tuple[Any, ...]:
        centered, scale = _var_parts(r, out_bar)
        out_e = r.expand(out)
        # d std = d var / (2 std); where std == 0 (all equal) the subgradient 0 is taken. The
        # division is by a safe denominator, not masked after: a nested derivative differentiates
        # this step, and 0 * d(1/std) at std == 0 would be NaN.
        zero = out_e == 0
        x_bar = np.where(zero, 0, centered * scale / np.where(zero, 1, out_e))
        return _pullback_result(r.finish(x_bar), args)

    return out, std_pullback


var_rrule.__signature__ = std_rrule.__signature__ = _var_signature()  # type: ignore[attr-defined]


# ---- NaN-ignoring reductions and ptp --------------------------------------------------------------

@rrule(np.nansum)
def nansum_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.nansum(x, *args, **kwargs)
    r = _Reduction("nansum", _SUM_PARAMS, x, args, kwargs)

    def nansum_pullback(out_bar: Any) -> tuple[Any, ...]:
        x_bar = r.finish(np.where(np.isnan(r.xa), 0, r.expand(out_bar)))
        return _pullback_result(x_bar, args, _SUM_PARAMS, lambda: np.sum(out_bar))

    return out, nansum_pullback


@rrule(np.nanmean)
def nanmean_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.nanmean(x, *args, **kwargs)
    r = _Reduction("nanmean", _MEAN_PARAMS, x, args, kwargs)

    def nanmean_pullback(out_bar: Any) -> tuple[Any, ...]:
        present = ~np.isnan(r.xa)
        if r.where is not True:
            present &= r.where
        count = np.maximum(np.sum(present, axis=r.axes, keepdims=True), 1).astype(_float_dtype(r, out_bar))
        return _pullback_result(r.finish(np.where(present, r.expand(out_bar) / count, 0)), args)

    return out, nanmean_pullback


@rrule(np.nanprod)
def nanprod_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.nanprod(x, *args, **kwargs)
    like = stand_in(x)

    def nanprod_pullback(out_bar: Any) -> tuple[Any, ...]:
        # prod's pullback with NaNs counted as ones, made here from x (see _Reduction.xa)
        xa = np.asarray(x)
        nan = np.isnan(xa)
        _, prod_pullback = prod_rrule(np.where(nan, xa.dtype.type(1), xa), *args, **kwargs)
        x_bar, *rest = prod_pullback(out_bar)
        return (project(np.where(nan, 0, x_bar), like), *rest)

    return out, nanprod_pullback


# NaNs never equal the extreme, so the max/min rules give them no cotangent.
rrule(np.nanmax)(_extreme_rrule(np.nanmax, "nanmax"))
rrule(np.nanmin)(_extreme_rrule(np.nanmin, "nanmin"))
max_rrule = _extreme_rrule(np.max, "max")
min_rrule = _extreme_rrule(np.min, "min")


@rrule(np.ptp)
def ptp_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.ptp(x, *args, **kwargs)

    def ptp_pullback(out_bar: Any) -> tuple[Any, ...]:
        # max - min: ptp's (axis, out, keepdims) are max's and min's first three parameters
        xa = np.asarray(x)  # as an array (a list's two cotangents would be lists), projected back
        max_bar = max_rrule(xa, *args, **kwargs)[1](out_bar)[0]
        min_bar = min_rrule(xa, *args, **kwargs)[1](out_bar)[0]
        return (project(max_bar - min_bar, x),) + (NO_TANGENT,) * len(args)

    return out, ptp_pullback
