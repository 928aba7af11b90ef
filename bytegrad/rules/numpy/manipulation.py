"""Array manipulation with many pieces: split, array_split, hsplit, vsplit, dsplit, pad,
`np.lib.stride_tricks.sliding_window_view` and broadcast_arrays.

pad and sliding_window_view copy elements (some several times): their pullbacks apply the same
function to an array of element numbers and add each output cotangent to the element it came from.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from numpy.lib.array_utils import normalize_axis_index
from numpy.lib.stride_tricks import sliding_window_view

from bytegrad.errors import RuleCaseError
from bytegrad.rules._project import project, stand_in
from bytegrad.rules.registry import NO_TANGENT, ZERO, differentiate_through, rrule


def _gather_back(index: np.ndarray, out_bar: Any, like: Any) -> Any:
    """The cotangent of x from that of out = x.flat[index] (index < 0: a value not taken from x)."""
    g = np.broadcast_to(np.asarray(out_bar), index.shape)
    keep = index >= 0
    n = int(np.prod(np.shape(like), dtype=np.int64))
    taken = index[keep]
    x_bar = np.bincount(taken, weights=np.real(g[keep]), minlength=n)  # float64; `project` casts back
    if np.iscomplexobj(g):  # (bincount's weights are real)
        x_bar = x_bar + 1j * np.bincount(taken, weights=np.imag(g[keep]), minlength=n)
    return project(x_bar.reshape(np.shape(like)), like)


def _element_numbers(x: Any) -> np.ndarray:
    shape = np.shape(x)
    return np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)


# ---- split ------------------------------------------------------------------------------------------

def _split_rule(fn: Callable[..., Any], axis_of: Callable[[int, tuple[Any, ...], dict[str, Any]], int]) -> Any:
    def split_rrule(ary: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        out = fn(ary, *args, **kwargs)
        ndim = np.ndim(ary)
        ax = normalize_axis_index(axis_of(ndim, args, kwargs), ndim)
        shapes = [piece.shape for piece in out]
        like = stand_in(ary)

        def split_pullback(out_bar: Any) -> tuple[Any, ...]:
            dtype = np.result_type(*(np.asarray(g).dtype for g in out_bar if g is not ZERO), np.float16)
            pieces = [np.zeros(s, dtype=dtype) if g is ZERO else g for g, s in zip(out_bar, shapes)]
            return (project(np.concatenate(pieces, axis=ax), like),) + (NO_TANGENT,) * len(args)

        return out, split_pullback

    split_rrule.__name__ = split_rrule.__qualname__ = f"{fn.__name__}_rrule"
    return split_rrule


def _split_axis(ndim: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    return kwargs.get("axis", args[1] if len(args) > 1 else 0)


rrule(np.split)(_split_rule(np.split, _split_axis))
rrule(np.array_split)(_split_rule(np.array_split, _split_axis))
rrule(np.hsplit)(_split_rule(np.hsplit, lambda ndim, args, kwargs: 1 if ndim > 1 else 0))
rrule(np.vsplit)(_split_rule(np.vsplit, lambda ndim, args, kwargs: 0))
rrule(np.dsplit)(_split_rule(np.dsplit, lambda ndim, args, kwargs: 2))


# ---- pad --------------------------------------------------------------------------------------------

_COPYING_MODES = ("constant", "edge", "reflect", "symmetric", "wrap")


@rrule(np.pad)
def pad_rrule(array: Any, pad_width: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    """Modes that copy elements: 'constant', 'edge', 'reflect', 'symmetric' and 'wrap' (reflect_type
    'even'). The array is differentiated; `constant_values`, a keyword, carries no cotangent (for
    differentiable padding values, add `c * np.pad(np.zeros_like(x), width, constant_values=1)`)."""
    mode = kwargs.get("mode", args[0] if args else "constant")
    if not (isinstance(mode, str) and mode in _COPYING_MODES) or kwargs.get("reflect_type", "even") != "even":
        detail = f"reflect_type={kwargs['reflect_type']!r}" if "reflect_type" in kwargs else f"mode={mode!r}"
        raise RuleCaseError(f"the numpy.pad rule covers the modes {', '.join(_COPYING_MODES)} "
                                  f"(with reflect_type='even'), not {detail}")
    out = np.pad(array, pad_width, *args, **kwargs)
    index_kwargs = dict(kwargs)
    if mode == "constant":
        index_kwargs["constant_values"] = -1
    index = np.pad(_element_numbers(array), pad_width, *args, **index_kwargs)
    like = stand_in(array)

    def pad_pullback(out_bar: Any) -> tuple[Any, ...]:
        return (_gather_back(index, out_bar, like), NO_TANGENT) + (NO_TANGENT,) * len(args)

    return out, pad_pullback


# ---- sliding windows --------------------------------------------------------------------------------

@rrule(sliding_window_view)
def sliding_window_view_rrule(x: Any, window_shape: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    """A read-only view, like NumPy's; overlapping windows add their cotangents."""
    out = sliding_window_view(x, window_shape, *args, **kwargs)
    axis = kwargs.get("axis", args[0] if args else None)
    index = sliding_window_view(_element_numbers(x), window_shape, axis)
    like = stand_in(x)

    def sliding_window_view_pullback(out_bar: Any) -> tuple[Any, ...]:
        return (_gather_back(index, out_bar, like), NO_TANGENT) + (NO_TANGENT,) * len(args)

    return out, sliding_window_view_pullback


# ---- broadcast_arrays: np.broadcast_to of each, run as Python (NumPy's code asks C for the shape) ------

def broadcast_arrays_in_python(*args: Any, subok: bool = False) -> tuple[Any, ...]:
    shape = np.broadcast_shapes(*(np.shape(a) for a in args))
    return tuple(np.broadcast_to(a, shape, subok=subok) for a in args)


differentiate_through(np.broadcast_arrays, broadcast_arrays_in_python)
