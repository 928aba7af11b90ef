"""The records of a fused site's kernel tier (runtime/fused.py, runtime/kernels.py): their kinds
(runtime/records.py), reverse steps and zero-safe twins.

`FUSED` `(kind, parents, site, kernels, saved leaves, leaf shapes, out or None)`: the reverse step
runs the kernels' backward functions on the saved leaves; `PARTIALS` `(kind, parents, site,
kernels, partials, leaf shapes, once)`: a one-pass kernel saved its partials, and the reverse
step scales them by the cotangent (in their own memory when `once`: a tape swept once drops the
record right after the step).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from bytegrad.rules._shape import stand_in, unbroadcast
from bytegrad.runtime import zerosafe
from bytegrad.runtime.backward import INPLACE_MIN_SIZE, scalable, unrecorded
from bytegrad.runtime.records import Kind

__all__ = ["FUSED", "PARTIALS"]

_ndarray = np.ndarray
_multiply = np.multiply


def _bw_fused(ct: Any, node: tuple, out: Any) -> Any:
    ks = node[3]
    saved = node[4]
    shapes = node[5]
    parents = node[1]
    out_shape = out.shape if type(out) is _ndarray else ()
    if type(ct) is not float and getattr(ct, "dtype", ks.dtype) != ks.dtype:
        ct = _narrow(ct, ks.dtype)
    res: list[Any] = [None] * len(parents)
    for (leaves, sources), fn in zip(ks.backward_plan[1], ks.backward):
        bar = fn(*[ct if i == -1 else out if i == -2 else saved[i] for i in sources])
        for j in leaves:
            if parents[j] is None:
                continue
            shape = shapes[j]
            res[j] = bar if shape == out_shape else unbroadcast(bar, shape, out_shape)
    return res


def _narrow(ct: Any, dtype: np.dtype) -> Any:
    """A wider cotangent (float64 reaching a float32 site through a promoting operation) at the
    site's precision: the precision the kernels compute in, and its leaves' gradients are kept in."""
    return np.asarray(ct, dtype=dtype)


def _bw_partials(ct: Any, node: tuple, out: Any) -> Any:
    """The reverse step of a one-pass kernel: the cotangent times each group's saved partial (in
    the partial's memory on a tape swept once, which drops the record right after this step)."""
    ks = node[3]
    partials = node[4]
    shapes = node[5]
    parents = node[1]
    once = node[6] and unrecorded()  # (not when a nested derivative runs this step recorded)
    out_shape = out.shape if type(out) is _ndarray else ()
    res: list[Any] = [None] * len(parents)
    for (leaves, _sources), partial in zip(ks.backward_plan[1], partials):
        bar = None
        for j in leaves:
            if parents[j] is None:
                continue
            if bar is None:
                if type(ct) is not float and getattr(ct, "dtype", ks.dtype) != ks.dtype:
                    ct = _narrow(ct, ks.dtype)
                if once and type(partial) is _ndarray and scalable(ct, partial):
                    if ct.__class__ is float and ct == 1.0:
                        bar = partial
                    elif partial.size >= INPLACE_MIN_SIZE:
                        bar = _multiply(ct, partial, out=partial)
                    else:
                        bar = ct * partial
                else:
                    bar = ct * partial
            shape = shapes[j]
            res[j] = bar if shape == out_shape else unbroadcast(bar, shape, out_shape)
    return res


def _slim_partials(node: tuple, out: Any) -> tuple[tuple, Any]:
    return node, stand_in(out) if type(out) is _ndarray else out  # the reverse step reads its shape


def _saved_partials(node: tuple) -> list[np.ndarray]:
    return [p for p in node[4] if type(p) is _ndarray]


def _saved_fused(node: tuple) -> list[np.ndarray]:
    found = [v for v in node[4] if type(v) is _ndarray]
    if node[6] is not None and type(node[6]) is _ndarray:
        found.append(node[6])
    return found


FUSED = Kind("fused", ("kernels", "saved", "shapes", "out"), _bw_fused, saved=_saved_fused)
PARTIALS = Kind("fused partials", ("kernels", "partials", "shapes", "once"), _bw_partials, saved=_saved_partials,
                slim=_slim_partials)


# Zero-safe twins (runtime/zerosafe.py), for a site recorded before a mask. Seen at the output's
# shape, the step returns full-shape cotangents; a one-pass record is never scaled in place there.
def _full_fused(node: tuple, out_shape: tuple) -> tuple:
    return node[:5] + ((out_shape,) * len(node[5]),) + node[6:]


def _full_partials(node: tuple, out_shape: tuple) -> tuple:
    return node[:5] + ((out_shape,) * len(node[5]), False)


zerosafe.make_safe(FUSED, _full_fused, lambda node: node[5])
zerosafe.make_safe(PARTIALS, _full_partials, lambda node: node[5], plain=lambda node: node[:6] + (False,))
