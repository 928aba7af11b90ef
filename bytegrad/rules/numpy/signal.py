"""Signal-processing and numerical helpers: convolve and correlate (1-D, modes 'full', 'same', 'valid'),
interp, trapezoid and polyval. Real input.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from bytegrad.errors import RuleCaseError
from bytegrad.rules._project import project, stand_in
from bytegrad.rules._shape import unbroadcast
from bytegrad.rules.registry import NO_TANGENT, rrule


def _real(name: str, *values: Any) -> None:
    if any(np.iscomplexobj(v) for v in values):
        raise RuleCaseError(f"the numpy.{name} rule covers real input only")


# ---- convolve, correlate ----------------------------------------------------------------------------

def _window(n: int, m: int, mode: str, correlate: bool) -> tuple[int, int]:
    """Where the output of `mode` starts in the full output (length n + m - 1), and its length."""
    short, long = min(n, m), max(n, m)
    if mode == "full":
        return 0, n + m - 1
    if mode == "valid":
        return short - 1, long - short + 1
    if mode == "same":
        # NumPy centres the window; correlate, computed with its operands swapped when v is the
        # longer one, centres it from the other end.
        return ((short - 1) // 2 if not correlate or n >= m else short // 2), long
    raise ValueError(f"mode must be 'full', 'same' or 'valid', not {mode!r}")


def window_cotangents(full: np.ndarray, a: np.ndarray, v: np.ndarray, like_a: Any, like_v: Any, correlate: bool,
                      correlate_valid: Callable[[Any, Any], Any]) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """The cotangents of a convolution's (or correlation's) operands a and v, as thunks, from `full`:
    the output's cotangent zero-padded to the full convolution. A correlation is a convolution with
    v flipped, so a's cotangent is the valid correlation of `full` with the kernel, and v's that of
    `full` with a, flipped back for a correlation. Shared with scipy.signal's n-D rules."""
    kernel = np.flip(v) if correlate else v

    def a_bar() -> Any:
        return project(correlate_valid(full, kernel), like_a)

    def v_bar() -> Any:
        kernel_bar = correlate_valid(full, a)
        return project(np.flip(kernel_bar) if correlate else kernel_bar, like_v)

    return a_bar, v_bar


def _correlate_valid(x: Any, kernel: Any) -> Any:
    return np.correlate(x, kernel, "valid")


def _convolution_rule(fn: Callable[..., Any], correlate: bool) -> Callable[..., Any]:
    def convolution_rrule(a: Any, v: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        _real(fn.__name__, a, v)
        out = fn(a, v, *args, **kwargs)
        mode = kwargs.get("mode", args[0] if args else ("valid" if correlate else "full"))
        n, m = np.shape(a)[0], np.shape(v)[0]
        start, length = _window(n, m, mode, correlate)

        def convolution_pullback(out_bar: Any) -> tuple[Any, ...]:
            # made here from a and v, not in the forward pass: a nested derivative records what a
            # pullback computes, and must see these made from the arguments
            A, V = np.asarray(a), np.asarray(v)
            full = np.zeros(n + m - 1, dtype=np.result_type(out_bar, A, V, 0.0))
            full[start: start + length] = out_bar
            return window_cotangents(full, A, V, a, v, correlate, _correlate_valid) + (NO_TANGENT,) * len(args)

        return out, convolution_pullback

    convolution_rrule.__name__ = convolution_rrule.__qualname__ = f"{fn.__name__}_rrule"
    return convolution_rrule


rrule(np.convolve)(_convolution_rule(np.convolve, correlate=False))
rrule(np.correlate)(_convolution_rule(np.correlate, correlate=True))


# ---- interp -----------------------------------------------------------------------------------------

# np.interp is written in Python around this C function, which it calls after folding x and xp into
# one period: with its rule, np.interp(..., period=p) is differentiated through NumPy's own code.
_compiled_interp = np._core.multiarray.interp  # type: ignore[attr-defined]  # (not in NumPy's stubs)


@rrule(_compiled_interp)
@rrule(np.interp)
def interp_rrule(x: Any, xp: Any, fp: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    """Differentiable in x, in the data points xp and fp, and in `left`/`right` when given. Between
    two points x moves along the segment; at a data point its one-sided (right) slope is taken."""
    params = dict(zip(("left", "right", "period"), args), **kwargs)
    if params.get("period") is not None:
        raise RuleCaseError("the numpy.interp rule does not cover period=")
    _real("interp", x, xp, fp)
    out = _compiled_interp(x, xp, fp, *args, **kwargs)
    n = np.shape(xp)[0]
    left, right = params.get("left"), params.get("right")
    likes = [stand_in(v) for v in (x, xp, fp)]

    def interp_pullback(out_bar: Any) -> tuple[Any, ...]:
        # (converted here: a nested derivative records what the pullback computes from x, xp, fp)
        X, XP, FP = (np.asarray(v, dtype=np.float64) for v in (x, xp, fp))
        g = np.broadcast_to(np.asarray(out_bar, dtype=np.float64), X.shape)
        below, above = X < XP[0], X > XP[-1]
        inside = ~(below | above)
        if n > 1:
            i = np.clip(np.searchsorted(XP, X, side="right") - 1, 0, n - 2)
            with np.errstate(divide="ignore", invalid="ignore"):
                h = XP[i + 1] - XP[i]
                t, slope = (X - XP[i]) / h, (FP[i + 1] - FP[i]) / h
        else:
            i, t, slope = np.zeros(X.shape, dtype=np.intp), np.zeros(X.shape), np.zeros(X.shape)
        gi = np.where(inside, g, 0.0)
        t = np.where(inside, t, 0.0)

        def spread(lo_weights: Any, hi_weights: Any) -> np.ndarray:
            """Weights on the two ends of each segment, added up per data point."""
            total = np.bincount(i.ravel(), weights=np.ravel(lo_weights), minlength=n)
            if n > 1:
                total = total + np.bincount((i + 1).ravel(), weights=np.ravel(hi_weights), minlength=n)
            return total

        fp_bar = spread(gi * (1 - t), gi * t)
        outside = {"left": (np.sum(np.where(below, g, 0.0)), 0, left),
                   "right": (np.sum(np.where(above, g, 0.0)), -1, right)}
        bars = {}
        for name, (total, end, given) in outside.items():
            if given is None:
                fp_bar[end] += total  # the value outside the data is fp's first (last) one
                bars[name] = NO_TANGENT
            else:
                bars[name] = project(total, given)
        xp_bar = spread(-gi * slope * (1 - t), -gi * slope * t)
        result = (project(np.where(inside, g * slope, 0.0).reshape(X.shape), likes[0]),
                  project(xp_bar, likes[1]), project(fp_bar, likes[2]))
        return result + tuple(bars.get(name, NO_TANGENT) for name in ("left", "right", "period")[: len(args)])

    return out, interp_pullback


# ---- trapezoid --------------------------------------------------------------------------------------

if hasattr(np, "trapezoid"):

    @rrule(np.trapezoid)
    def trapezoid_rrule(y: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        """Differentiable in y, in the sample points x (1-D or shaped like y) and in a float dx."""
        out = np.trapezoid(y, *args, **kwargs)
        params = dict(zip(("x", "dx", "axis"), args), **kwargs)
        Y = np.asarray(y)
        ax = normalize_axis_index(params.get("axis", -1), Y.ndim)
        x, dx = params.get("x"), params.get("dx", 1.0)
        like_y, like_x = stand_in(y), stand_in(x)

        def trapezoid_pullback(out_bar: Any) -> tuple[Any, ...]:
            # out = sum(d * (y[1:] + y[:-1]) / 2) along the axis, d = diff(x) or dx
            ym = np.moveaxis(Y, ax, -1)
            g = np.asarray(out_bar)[..., None]
            if x is None:
                d = np.asarray(dx)
            else:
                X = np.asarray(x)
                xm = X if X.ndim == 1 else np.moveaxis(X, ax, -1)
                d = np.diff(xm, axis=-1)
            half = g * d / 2
            y_bar = np.zeros(ym.shape, dtype=np.result_type(half, ym, 0.0))
            y_bar[..., 1:] += half
            y_bar[..., :-1] += half
            d_bar = g * (ym[..., 1:] + ym[..., :-1]) / 2
            bars = {"x": NO_TANGENT, "dx": NO_TANGENT, "axis": NO_TANGENT}
            if x is None:
                bars["dx"] = project(np.sum(d_bar), dx)
            else:
                d_bar = unbroadcast(d_bar, d.shape)
                x_bar = -np.diff(d_bar, axis=-1, prepend=0, append=0)  # the adjoint of diff
                bars["x"] = project(x_bar if X.ndim == 1 else np.moveaxis(x_bar, -1, ax), like_x)
            return (project(np.moveaxis(y_bar, -1, ax), like_y),) + tuple(
                bars[name] for name in ("x", "dx", "axis")[: len(args)])

        return out, trapezoid_pullback


# ---- polyval ----------------------------------------------------------------------------------------

@rrule(np.polyval)
def polyval_rrule(p: Any, x: Any) -> tuple[Any, Callable[..., Any]]:
    """p[0] x^(n-1) + ... + p[n-1], differentiable in the coefficients and in x."""
    out = np.polyval(p, x)
    out_shape = np.shape(out)

    def polyval_pullback(out_bar: Any) -> tuple[Any, Any]:
        P, X = np.asarray(p), np.asarray(x)  # made here: see convolution_pullback
        n = P.shape[0]

        def p_bar() -> Any:
            power = np.ones(X.shape, dtype=np.result_type(X, 0.0))
            bars: list[Any] = [None] * n
            for k in range(n - 1, -1, -1):  # p[k] multiplies x^(n-1-k)
                bars[k] = unbroadcast(np.multiply(out_bar, power), P.shape[1:], out_shape)
                power = power * X
            return project(np.stack([np.broadcast_to(b, P.shape[1:]) for b in bars]), p)

        def x_bar() -> Any:
            value = np.zeros(out_shape, dtype=np.result_type(P, X, 0.0))
            slope = np.zeros(out_shape, dtype=value.dtype)
            for c in P:  # Horner's scheme for the polynomial and its derivative together
                slope = slope * X + value
                value = value * X + c
            return project(unbroadcast(np.multiply(out_bar, slope), X.shape, out_shape), x)

        return p_bar, x_bar

    return out, polyval_pullback
