"""Projecting a cotangent onto its primal: the primal's float dtype, scalar or array form, and the
list/tuple structure of sequence arguments (`np.array([a, b])`, `np.concatenate((x, y))`).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from bytegrad.rules.registry import NO_TANGENT

__all__ = ["is_float", "project", "real_part", "split_like", "float_dtype", "stand_in"]


def is_float(x: Any) -> bool:
    """Whether `x` is a value that carries a derivative: a real/complex float scalar or array."""
    if type(x) is np.ndarray or isinstance(x, np.generic):
        return x.dtype.kind in "fc"
    return isinstance(x, (float, complex)) and not isinstance(x, bool)


def float_dtype(x: Any, fallback: Any = np.float64) -> Any:
    """The dtype a cotangent of `x` has: x's own for float arrays, else `fallback`'s."""
    dtype = getattr(x, "dtype", None)
    if dtype is not None and dtype.kind in "fc":
        return dtype
    return np.result_type(fallback)


def project(x_bar: Any, x: Any) -> Any:
    """`x_bar` in the form of the primal `x`: same dtype, shape (arrays) or scalar type.

    Non-float primals (ints, bools, int arrays, None, strings) get NO_TANGENT.
    """
    if type(x) is np.ndarray:
        if x.dtype.kind not in "fc":
            return NO_TANGENT
        x_bar = np.asarray(x_bar)
        if x_bar.dtype != x.dtype:
            if x_bar.dtype.kind == "c" and x.dtype.kind == "f":
                x_bar = x_bar.real  # a real primal's cotangent is the real part (no ComplexWarning)
            x_bar = x_bar.astype(x.dtype)
        return x_bar.reshape(x.shape) if x_bar.shape != x.shape else x_bar
    if isinstance(x, np.generic):
        if x.dtype.kind not in "fc":
            return NO_TANGENT
        return x.dtype.type(real_part(x_bar) if x.dtype.kind == "f" else x_bar)
    if isinstance(x, float):
        return float(real_part(x_bar))
    if isinstance(x, complex):
        return complex(x_bar)
    if isinstance(x, (list, tuple)):
        return split_like(x_bar, x)
    return NO_TANGENT


def real_part(x_bar: Any) -> Any:
    """`x_bar`'s real part if it is complex (the cotangent of a real primal), else `x_bar`."""
    return x_bar.real if np.iscomplexobj(x_bar) else x_bar


def split_like(x_bar: Any, x: Any) -> Any:
    """Split the array cotangent `x_bar` of `np.array(x)` into the (nested) list/tuple structure of `x`."""
    if isinstance(x, (list, tuple)):
        parts = [split_like(x_bar[i], xi) for i, xi in enumerate(x)]
        return parts if isinstance(x, list) else tuple(parts)
    return project(x_bar, x)


def stand_in(x: Any) -> Any:
    """What `project` needs of `x`, without x's values: for an array, a read-only zero-strided array
    of its shape and dtype. A pullback that only projects onto `x` captures this instead of `x`."""
    if type(x) is np.ndarray:
        return np.broadcast_to(np.zeros((), dtype=x.dtype), x.shape)
    return x
