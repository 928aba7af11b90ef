"""Tangents for forward rules: structural zeros made concrete, and the frule of a linear function.

An frule receives one tangent per positional argument; ZERO (or NO_TANGENT, None) stands for an
argument with no tangent. A function linear in its first argument pushes a tangent forward by
being applied to it: `linear_frule(np.reshape)` is the whole forward rule of `np.reshape`, and
`bilinear_frule(np.matmul, "matmul")` that of a product.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from bytegrad.rules.registry import NO_TANGENT, ZERO

__all__ = ["is_zero", "zeros_for", "filled", "linear_frule", "bilinear_frule", "add_tangents"]


def is_zero(dot: Any) -> bool:
    return dot is None or dot is ZERO or dot is NO_TANGENT


def zeros_for(x: Any) -> Any:
    """A zero tangent for `x`: zeros of its shape and float dtype (nested sequences mirrored)."""
    if isinstance(x, (list, tuple)):
        items = [zeros_for(v) for v in x]
        return items if isinstance(x, list) else tuple(items)
    dtype = getattr(x, "dtype", None)
    if dtype is None or dtype.kind not in "fc":
        dtype = np.result_type(x, np.float64) if not isinstance(x, (int, bool)) else np.dtype(np.float64)
    if type(x) is np.ndarray:
        return np.zeros(x.shape, dtype)
    return dtype.type(0)


def filled(dot: Any, x: Any) -> Any:
    """`dot` with every structural zero replaced by zeros shaped like the matching part of `x`."""
    if is_zero(dot) or _integral(x):  # ints and bools carry no tangent, whatever was passed
        return zeros_for(x)
    if isinstance(x, (list, tuple)) and isinstance(dot, (list, tuple)):
        items = [filled(d, v) for d, v in zip(dot, x)]
        return items if isinstance(x, list) else tuple(items)
    if type(x) is np.ndarray and type(dot) is np.ndarray and not x.flags.c_contiguous and dot.shape == x.shape:
        # same memory layout as x, so order-dependent functions (ravel 'K', reshape 'A') agree
        like = np.empty_like(x, dtype=dot.dtype)
        like[...] = dot
        return like
    return dot


def _integral(x: Any) -> bool:
    dtype = getattr(x, "dtype", None)
    if dtype is not None:
        return dtype.kind in "biu"
    return isinstance(x, (int, bool))


def add_tangents(a: Any, b: Any) -> Any:
    """a + b, where either may be a structural zero."""
    if is_zero(a):
        return ZERO if is_zero(b) else b
    if is_zero(b):
        return a
    return a + b


def linear_frule(primal: Callable[..., Any], name: str = "") -> Callable[..., tuple[Any, Any]]:
    """The frule of a function linear in its first argument (the rest are shapes, axes, flags)."""

    def frule(args_dot: tuple[Any, ...], x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        out = primal(x, *args, **kwargs)
        x_dot = args_dot[0] if args_dot else ZERO
        if is_zero(x_dot) or (isinstance(x_dot, (list, tuple)) and all(is_zero(d) for d in x_dot)):
            return out, ZERO
        return out, primal(filled(x_dot, x), *args, **kwargs)

    frule.__name__ = frule.__qualname__ = f"{name or getattr(primal, '__name__', 'linear')}_frule"
    return frule


def bilinear_frule(product: Callable[..., Any], name: str) -> Callable[..., tuple[Any, Any]]:
    """(a b)' = a' b + a b': the frule of a product linear in each of its two operands."""

    def frule(args_dot: tuple[Any, ...], a: Any, b: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        out = product(a, b, *args, **kwargs)
        a_dot, b_dot = args_dot[0], args_dot[1]
        out_dot = ZERO if is_zero(a_dot) else product(a_dot, b, *args, **kwargs)
        if not is_zero(b_dot):
            out_dot = add_tangents(out_dot, product(a, b_dot, *args, **kwargs))
        return out, out_dot

    frule.__name__ = frule.__qualname__ = f"{name}_frule"
    return frule
