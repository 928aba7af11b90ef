"""Rules for functions that move elements without arithmetic: reshape, transpose, flips, concatenate, stack,
broadcast_to, tile, repeat, np.array of nested lists, copies and casts. Pullbacks move cotangents back.
"""
from __future__ import annotations

from typing import Any, Callable, Literal

import numpy as np
from numpy.lib.array_utils import normalize_axis_index, normalize_axis_tuple

from bytegrad.rules._project import project
from bytegrad.rules._shape import unbroadcast
from bytegrad.rules._tangents import linear_frule
from bytegrad.rules.registry import NO_TANGENT, ZERO, frule, rrule

Back = Callable[[Any, Any, tuple[Any, ...], dict[str, Any]], Any]


def _moving_rule(primal: Callable[..., Any], back: Back, name: str) -> Callable[..., Any]:
    """The rrule of a function that only moves the elements of its first argument.

    `back(out_bar, x, args, kwargs)` moves the output's cotangent back into x's layout; the other
    positional arguments (shapes, axes, reps) get NO_TANGENT.
    """

    def moving_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        out = primal(x, *args, **kwargs)
        if out is x:  # rules return fresh objects: a view, not the input itself
            out = x.view()

        def moving_pullback(out_bar: Any) -> tuple[Any, ...]:
            return (project(back(out_bar, x, args, kwargs), x),) + (NO_TANGENT,) * len(args)

        return out, moving_pullback

    moving_rrule.__name__ = moving_rrule.__qualname__ = f"{name}_rrule"
    return moving_rrule


def _register(fns: tuple[Any, ...], primal: Callable[..., Any], back: Back) -> None:
    name = getattr(primal, "__name__", "moving")
    rule = _moving_rule(primal, back, name)
    forward = linear_frule(primal, name)  # moving elements is linear: the tangent moves the same way
    for fn in dict.fromkeys(fns):  # some names are one object in some NumPy versions
        rrule(fn)(rule)
        frule(fn)(forward)


def _to_shape(out_bar: Any, x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return np.reshape(out_bar, np.shape(x))


def _memory_order(x: Any, order: Any) -> Literal["C", "F", "A"]:
    """The C/F order that order 'A' stands for on `x` ('K' is handled by `_ravel_back`)."""
    if order in ("A", "a"):
        flags = getattr(x, "flags", None)
        return "F" if flags is not None and flags.f_contiguous and not flags.c_contiguous else "C"
    return order


def _reshape_back(out_bar: Any, x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    order = kwargs.get("order", args[1] if len(args) > 1 else "C")
    return np.reshape(out_bar, np.shape(x), order=_memory_order(x, order))


def _method_reshape_back(out_bar: Any, x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return np.reshape(out_bar, x.shape, order=_memory_order(x, kwargs.get("order", "C")))


def _ravel_with_order(out_bar: Any, x: Any, order: str) -> Any:
    if order in ("K", "k") and type(x) is np.ndarray and not (x.flags.c_contiguous or x.flags.f_contiguous):
        # 'K' reads x in its memory order: an index array laid out like x tells which element went where.
        probe = np.empty_like(x, dtype=np.intp)
        probe[...] = np.arange(x.size).reshape(x.shape)
        x_bar = np.empty(x.size, dtype=np.result_type(out_bar))
        x_bar[probe.ravel(order="K")] = out_bar
        return x_bar.reshape(x.shape)
    if order in ("K", "k"):
        order = "F" if x.flags.f_contiguous and not x.flags.c_contiguous else "C"
    return np.reshape(out_bar, np.shape(x), order=_memory_order(x, order))


def _ravel_back(out_bar: Any, x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _ravel_with_order(out_bar, x, kwargs.get("order", args[0] if args else "C"))


def _transpose_axes(x: Any, axes: Any) -> Any:
    return None if axes is None else normalize_axis_tuple(axes, np.ndim(x), allow_duplicate=False)


def _transpose_back(out_bar: Any, x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    axes = _transpose_axes(x, kwargs.get("axes", args[0] if args else None))
    return np.transpose(out_bar) if axes is None else np.transpose(out_bar, np.argsort(axes))


def _method_transpose_back(out_bar: Any, x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # x.transpose(), x.transpose(None), x.transpose(1, 0) and x.transpose((1, 0)) all work.
    axes = args if len(args) > 1 else (args[0] if args else kwargs.get("axes"))
    axes = _transpose_axes(x, axes)
    return np.transpose(out_bar) if axes is None else np.transpose(out_bar, np.argsort(axes))


def _swapaxes_back(out_bar: Any, x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    params = dict(zip(("axis1", "axis2"), args), **kwargs)
    return np.swapaxes(out_bar, params["axis1"], params["axis2"])


def _moveaxis_back(out_bar: Any, x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    params = dict(zip(("source", "destination"), args), **kwargs)
    return np.moveaxis(out_bar, params["destination"], params["source"])


def _flip_back(out_bar: Any, x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return np.flip(out_bar, kwargs.get("axis", args[0] if args else None))


def _rot90_back(out_bar: Any, x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    params = dict(zip(("k", "axes"), args), **kwargs)
    return np.rot90(out_bar, -params.get("k", 1), params.get("axes", (0, 1)))


def _roll_back(out_bar: Any, x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    params = dict(zip(("shift", "axis"), args), **kwargs)
    return np.roll(out_bar, np.negative(params["shift"]), params.get("axis"))


def _broadcast_to_back(out_bar: Any, x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return unbroadcast(out_bar, np.shape(x))


def _tile_back(out_bar: Any, x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    reps: Any = kwargs.get("reps", args[0] if args else None)
    reps = (int(reps),) if np.ndim(reps) == 0 else tuple(int(r) for r in reps)
    shape = np.shape(x)
    d = max(len(shape), len(reps))
    shape = (1,) * (d - len(shape)) + shape
    reps = (1,) * (d - len(reps)) + reps
    # out has shape (r0*s0, r1*s1, ...): split each axis into (r, s) and sum over the r axes.
    split = np.reshape(out_bar, tuple(n for pair in zip(reps, shape) for n in pair))
    return np.sum(split, axis=tuple(range(0, 2 * d, 2))).reshape(np.shape(x))


def _repeat_back(out_bar: Any, x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    params = dict(zip(("repeats", "axis"), args), **kwargs)
    repeats, axis = params["repeats"], params.get("axis")
    xa = np.asarray(x)
    if axis is None:
        xa = xa.reshape(-1)
        axis = 0
    axis = normalize_axis_index(axis, xa.ndim)
    n = xa.shape[axis]
    if np.ndim(repeats) == 0 or np.size(repeats) == 1:
        r = int(np.reshape(repeats, -1)[0])
        split = np.reshape(out_bar, xa.shape[:axis] + (n, r) + xa.shape[axis + 1:])
        return np.sum(split, axis=axis + 1).reshape(np.shape(x))
    x_bar = np.zeros(xa.shape, dtype=np.result_type(out_bar))
    moved = np.moveaxis(x_bar, axis, 0)  # a view: np.add.at writes through it
    np.add.at(moved, np.repeat(np.arange(n), repeats), np.moveaxis(out_bar, axis, 0))
    return x_bar.reshape(np.shape(x))


def _copy_back(out_bar: Any, x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return out_bar


def _array_back(out_bar: Any, x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # np.array(x, ndmin=...) may add leading axes; `project` splits it back into x's lists.
    return np.reshape(out_bar, np.shape(x))


_register((np.reshape,), np.reshape, _reshape_back)
_register((np.ndarray.reshape,), np.ndarray.reshape, _method_reshape_back)
_register((np.transpose, getattr(np, "permute_dims", np.transpose)), np.transpose, _transpose_back)
_register((np.ndarray.transpose,), np.ndarray.transpose, _method_transpose_back)
_register((np.swapaxes, np.ndarray.swapaxes), np.swapaxes, _swapaxes_back)
if hasattr(np, "matrix_transpose"):  # NumPy >= 2.0: np.matrix_transpose and np.linalg.matrix_transpose
    _register((np.matrix_transpose, np.linalg.matrix_transpose), np.matrix_transpose,
              lambda out_bar, x, args, kwargs: np.swapaxes(out_bar, -1, -2))
_register((np.moveaxis,), np.moveaxis, _moveaxis_back)
_register((np.expand_dims,), np.expand_dims, _to_shape)
_register((np.squeeze,), np.squeeze, _to_shape)
_register((np.ndarray.squeeze,), np.ndarray.squeeze, _to_shape)
_register((np.ravel,), np.ravel, _ravel_back)
_register((np.ndarray.ravel,), np.ndarray.ravel, _ravel_back)
_register((np.ndarray.flatten,), np.ndarray.flatten, _ravel_back)
_register((np.flip,), np.flip, _flip_back)
_register((np.fliplr,), np.fliplr, lambda out_bar, x, args, kwargs: np.fliplr(out_bar))
_register((np.flipud,), np.flipud, lambda out_bar, x, args, kwargs: np.flipud(out_bar))
_register((np.rot90,), np.rot90, _rot90_back)
_register((np.roll,), np.roll, _roll_back)
_register((np.broadcast_to,), np.broadcast_to, _broadcast_to_back)
_register((np.tile,), np.tile, _tile_back)
_register((np.repeat, np.ndarray.repeat), np.repeat, _repeat_back)
_register((np.copy,), np.copy, _copy_back)
_register((np.ndarray.copy,), np.ndarray.copy, _copy_back)


def _plain_view(x: np.ndarray, *args: Any, **kwargs: Any) -> np.ndarray:
    """`x.view()`: the same values under a new array object. A dtype or type argument reinterprets
    the memory, which has no derivative."""
    if args or kwargs:
        raise TypeError("x.view(dtype) reinterprets the array's memory and cannot be differentiated; "
                        "use x.astype(dtype) to convert values")
    return x.view()


_register((np.ndarray.view,), _plain_view, _copy_back)
_register((np.array,), np.array, _array_back)
_register((np.asarray,), np.asarray, _array_back)
_register((np.asanyarray,), np.asanyarray, _array_back)
_register((np.ascontiguousarray,), np.ascontiguousarray, _array_back)
_register((np.asfortranarray,), np.asfortranarray, _array_back)
_register((np.ndarray.astype,), np.ndarray.astype, _copy_back)   # `project` casts back to x's dtype
_register((np.float64,), np.float64, _array_back)
_register((np.float32,), np.float32, _array_back)
# (np.complex128(z) runs in nested derivatives: `project` builds a complex scalar's cotangent with it)
_register((np.complex128,), np.complex128, _array_back)
_register((np.complex64,), np.complex64, _array_back)


def _single_atleast(fn: Callable[..., Any]) -> Callable[..., Any]:
    def atleast_rrule(*arys: Any) -> tuple[Any, Callable[..., Any]]:
        out = fn(*arys)
        if len(arys) == 1 and out is arys[0]:
            out = out.view()
        elif len(arys) > 1:
            out = type(out)(o.view() if o is a else o for o, a in zip(out, arys))

        def atleast_pullback(out_bar: Any) -> tuple[Any, ...]:
            bars = (out_bar,) if len(arys) == 1 else out_bar
            return tuple(ZERO if b is ZERO else project(np.reshape(b, np.shape(a)), a) for b, a in zip(bars, arys))

        return out, atleast_pullback

    atleast_rrule.__name__ = atleast_rrule.__qualname__ = f"{fn.__name__}_rrule"
    return atleast_rrule


for _fn in (np.atleast_1d, np.atleast_2d, np.atleast_3d):
    rrule(_fn)(_single_atleast(_fn))


# ---- attributes: the runtime calls these rules with the array as the only argument -------------------

frule(np.ndarray.T)(linear_frule(lambda x: x.T, "T"))


@rrule(np.ndarray.T)
def T_rrule(x: np.ndarray) -> tuple[np.ndarray, Callable[..., Any]]:
    out = x.T
    if out is x:  # a 0-d or 1-d array is its own transpose
        out = x.view()

    def T_pullback(out_bar: Any) -> tuple[Any]:
        return (np.transpose(out_bar),)

    return out, T_pullback


if hasattr(np.ndarray, "mT"):

    frule(np.ndarray.mT)(linear_frule(lambda x: x.mT, "mT"))

    @rrule(np.ndarray.mT)
    def mT_rrule(x: np.ndarray) -> tuple[np.ndarray, Callable[..., Any]]:
        out = x.mT

        def mT_pullback(out_bar: Any) -> tuple[Any]:
            return (np.swapaxes(out_bar, -1, -2),)

        return out, mT_pullback


@rrule(np.ndarray.real)
def real_rrule(x: np.ndarray) -> tuple[np.ndarray, Callable[..., Any]]:
    out = x.real
    if out is x:  # a real array is its own real part
        out = x.view()

    def real_pullback(out_bar: Any) -> tuple[Any]:
        return (project(out_bar, x),)

    return out, real_pullback


@rrule(np.ndarray.imag)
def imag_rrule(x: np.ndarray) -> tuple[np.ndarray, Callable[..., Any]]:
    out = x.imag

    def imag_pullback(out_bar: Any) -> tuple[Any]:
        if x.dtype.kind != "c":
            return (ZERO,)  # the imaginary part of a real array is a constant zero
        return (project(-1j * np.asarray(out_bar), x),)  # Re(-1j * out_bar * x_dot) = out_bar * Im(x_dot)

    return out, imag_pullback


@rrule(np.generic.real)
def scalar_real_rrule(x: np.generic) -> tuple[np.generic, Callable[..., Any]]:
    """`.real` of a NumPy scalar (`np.sum(z).real`); a real scalar's is a fresh copy of itself."""
    out = x.real
    if out is x:
        out = x.dtype.type(x)

    def scalar_real_pullback(out_bar: Any) -> tuple[Any]:
        return (project(out_bar, x),)

    return out, scalar_real_pullback


@rrule(np.generic.imag)
def scalar_imag_rrule(x: np.generic) -> tuple[np.generic, Callable[..., Any]]:
    out = x.imag

    def scalar_imag_pullback(out_bar: Any) -> tuple[Any]:
        if x.dtype.kind != "c":
            return (ZERO,)
        return (project(-1j * out_bar, x),)

    return out, scalar_imag_pullback


# ---- sequences of arrays in, one array out (and back) --------------------------------------------------

def _split(out_bar: Any, arrays: Any, sizes: list[int], axis: int) -> list[Any]:
    bounds = np.cumsum(sizes)[:-1]
    return np.split(out_bar, bounds, axis=axis)


def _sequence_cotangent(pieces: list[Any], arrays: Any) -> Any:
    bars = [project(np.reshape(p, np.shape(a)), a) for p, a in zip(pieces, arrays)]
    return bars if isinstance(arrays, list) else tuple(bars)


@rrule(np.concatenate)
def concatenate_rrule(arrays: Any, *args: Any, **kwargs: Any) -> tuple[np.ndarray, Callable[..., Any]]:
    out = np.concatenate(arrays, *args, **kwargs)
    axis = kwargs.get("axis", args[0] if args else 0)

    def concatenate_pullback(out_bar: Any) -> tuple[Any, ...]:
        if axis is None:
            pieces = _split(np.reshape(out_bar, -1), arrays, [np.size(a) for a in arrays], 0)
        else:
            ax = normalize_axis_index(axis, out.ndim)
            pieces = _split(out_bar, arrays, [np.shape(a)[ax] for a in arrays], ax)
        return (_sequence_cotangent(pieces, arrays),) + (NO_TANGENT,) * len(args)

    return out, concatenate_pullback


@rrule(np.stack)
def stack_rrule(arrays: Any, *args: Any, **kwargs: Any) -> tuple[np.ndarray, Callable[..., Any]]:
    out = np.stack(arrays, *args, **kwargs)
    axis = normalize_axis_index(kwargs.get("axis", args[0] if args else 0), out.ndim)

    def stack_pullback(out_bar: Any) -> tuple[Any, ...]:
        moved = np.moveaxis(out_bar, axis, 0)
        return (_sequence_cotangent(list(moved), arrays),) + (NO_TANGENT,) * len(args)

    return out, stack_pullback


def _stack_along(fn: Callable[..., Any], at_least: Callable[[Any], np.ndarray], axis_of: Callable[[int], int]) -> Any:
    def along_rrule(tup: Any, *args: Any, **kwargs: Any) -> tuple[np.ndarray, Callable[..., Any]]:
        out = fn(tup, *args, **kwargs)

        def along_pullback(out_bar: Any) -> tuple[Any, ...]:
            shapes = [at_least(a).shape for a in tup]
            axis = axis_of(len(shapes[0]))
            pieces = _split(out_bar, tup, [s[axis] for s in shapes], axis)
            return (_sequence_cotangent(pieces, tup),) + (NO_TANGENT,) * len(args)

        return out, along_pullback

    along_rrule.__name__ = along_rrule.__qualname__ = f"{fn.__name__}_rrule"
    return along_rrule


rrule(np.hstack)(_stack_along(np.hstack, np.atleast_1d, lambda ndim: 0 if ndim == 1 else 1))
rrule(np.vstack)(_stack_along(np.vstack, np.atleast_2d, lambda ndim: 0))

# joining is linear in the sequence of arrays: tangents join the same way (zeros for constants)
for _joiner in (np.concatenate, np.stack, np.hstack, np.vstack):
    frule(_joiner)(linear_frule(_joiner))


# ---- array to Python values -----------------------------------------------------------------------------

def _fill(x_bar: np.ndarray, out_bar: Any, index: tuple[int, ...] = ()) -> None:
    """Write a nested-list cotangent into `x_bar`; ZERO entries (whole sublists too) stay zero."""
    if out_bar is ZERO:
        return
    if isinstance(out_bar, (list, tuple)):
        for i, item in enumerate(out_bar):
            _fill(x_bar, item, index + (i,))
    else:
        x_bar[index] = out_bar


@rrule(np.ndarray.tolist)
def tolist_rrule(x: np.ndarray) -> tuple[Any, Callable[..., Any]]:
    out = x.tolist()
    dtype = x.dtype if x.dtype.kind in "fc" else np.float64

    def tolist_pullback(out_bar: Any) -> tuple[Any]:
        try:
            return (np.asarray(out_bar, dtype=dtype).reshape(x.shape),)
        except (TypeError, ValueError):  # ZERO entries
            x_bar = np.zeros(x.shape, dtype=dtype)
            _fill(x_bar, out_bar)
            return (x_bar,)

    return out, tolist_pullback


# linear: the tangent of `x.tolist()` is `x_dot.tolist()`, nested lists for a matrix (forward mode
# reads the rows of rows through the runtime's item records)
frule(np.ndarray.tolist)(linear_frule(np.ndarray.tolist, "tolist"))


@rrule(np.ndarray.item)
def item_rrule(x: np.ndarray, *args: Any) -> tuple[Any, Callable[..., Any]]:
    out = x.item(*args)

    def item_pullback(out_bar: Any) -> tuple[Any, ...]:
        x_bar = np.zeros(x.shape, dtype=x.dtype if x.dtype.kind in "fc" else np.float64)
        if not args:
            x_bar[...] = out_bar
        elif len(args) == 1 and np.ndim(args[0]) == 0:
            x_bar.flat[args[0]] = out_bar  # a flat index
        else:
            x_bar[args[0] if len(args) == 1 else args] = out_bar
        return (x_bar,) + (NO_TANGENT,) * len(args)

    return out, item_pullback


def _scalar_to_python(method: str) -> Callable[..., Any]:
    """`x.item()` and `x.tolist()` of a NumPy scalar (`x[0].item()`): a Python number."""

    def scalar_to_python_rrule(x: Any, *args: Any) -> tuple[Any, Callable[..., Any]]:
        out = getattr(x, method)(*args)
        dtype = np.result_type(x)

        def scalar_to_python_pullback(out_bar: Any) -> tuple[Any, ...]:
            x_bar = dtype.type(out_bar) if dtype.kind in "fc" else NO_TANGENT
            return (x_bar,) + (NO_TANGENT,) * len(args)

        return out, scalar_to_python_pullback

    scalar_to_python_rrule.__name__ = scalar_to_python_rrule.__qualname__ = f"scalar_{method}_rrule"
    return scalar_to_python_rrule


# np.float64.item is np.generic.item: one rule serves every scalar type
rrule(np.generic.item)(_scalar_to_python("item"))
rrule(np.generic.tolist)(_scalar_to_python("tolist"))


# ---- constructors whose values come from their arguments ---------------------------------------------------

@rrule(np.full)
def full_rrule(shape: Any, fill_value: Any, *args: Any, **kwargs: Any) -> tuple[np.ndarray, Callable[..., Any]]:
    out = np.full(shape, fill_value, *args, **kwargs)

    def full_pullback(out_bar: Any) -> tuple[Any, ...]:
        fill_bar = project(unbroadcast(out_bar, np.shape(fill_value), out.shape), fill_value)
        return (NO_TANGENT, fill_bar) + (NO_TANGENT,) * len(args)

    return out, full_pullback


@rrule(np.full_like)
def full_like_rrule(a: Any, fill_value: Any, *args: Any, **kwargs: Any) -> tuple[np.ndarray, Callable[..., Any]]:
    out = np.full_like(a, fill_value, *args, **kwargs)

    def full_like_pullback(out_bar: Any) -> tuple[Any, ...]:
        fill_bar = project(unbroadcast(out_bar, np.shape(fill_value), out.shape), fill_value)
        return (ZERO, fill_bar) + (NO_TANGENT,) * len(args)  # a's values do not matter

    return out, full_like_pullback


@rrule(np.linspace)
def linspace_rrule(start: Any, stop: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.linspace(start, stop, *args, **kwargs)
    params = dict(zip(("num", "endpoint", "retstep", "dtype", "axis"), args), **kwargs)
    num, endpoint = params.get("num", 50), params.get("endpoint", True)
    retstep, axis = params.get("retstep", False), params.get("axis", 0)
    samples = out[0] if retstep else out

    def linspace_pullback(out_bar: Any) -> tuple[Any, ...]:
        # out = start + (stop - start) * t along `axis`, with t the samples of [0, 1].
        step_bar: Any
        samples_bar, step_bar = out_bar if retstep else (out_bar, ZERO)
        t = np.linspace(0.0, 1.0, num, endpoint=endpoint)
        if samples_bar is ZERO:
            start_bar = stop_bar = 0.0
        else:
            ob = np.moveaxis(np.asarray(samples_bar), normalize_axis_index(axis, samples.ndim), 0)
            t_e = t.reshape((-1,) + (1,) * (ob.ndim - 1))
            start_bar, stop_bar = np.sum(ob * (1 - t_e), axis=0), np.sum(ob * t_e, axis=0)
        if step_bar is not ZERO:
            div = (num - 1 if endpoint else num) or 1
            start_bar, stop_bar = start_bar - step_bar / div, stop_bar + step_bar / div
        start_bar = project(unbroadcast(np.asarray(start_bar), np.shape(start)), start)
        stop_bar = project(unbroadcast(np.asarray(stop_bar), np.shape(stop)), stop)
        return (start_bar, stop_bar) + (NO_TANGENT,) * len(args)

    return out, linspace_pullback
