"""The Jacobians of `bytegrad.jacobian` and `bytegrad.hessian`, assembled from sweeps of one tape.

The function runs once. Its arguments and its output may be trees (bytegrad/tree_util.py); the
Jacobian then has JAX's block layout: the output's structure outside, the differentiated
arguments' structure inside (a tuple of them when `wrt` is a tuple), and each block shaped
`out_leaf.shape + in_leaf.shape`.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from bytegrad import tree_util
from bytegrad.errors import NonScalarOutputError
from bytegrad.runtime import pytree
from bytegrad.runtime.forward import push_forward
from bytegrad.runtime.tape import sweep

__all__ = ["jacobian_of"]

_ndarray = np.ndarray


def _take(block: Any, primal: Any) -> Any:
    """`pytree.gradient`'s projection, for trees of blocks computed already."""
    return block


def _floating(value: Any) -> bool:
    t = type(value)
    return (t is _ndarray and value.dtype.kind in "fc") or t is float or isinstance(value, np.floating)


def _output_error(d: Any, out: Any, leaf: Any) -> NonScalarOutputError:
    t = type(leaf)
    found = f"an array of dtype {leaf.dtype}" if t is _ndarray else f"a {t.__name__}"
    if leaf is not out:
        found = f"a {type(out).__name__} holding {found}"
    return NonScalarOutputError(
        f"jacobian needs a function that returns float arrays or floats (or a dict, list, tuple or other "
        f"tree of them), but {d._code.co_name} returned {found}.", d._return_loc(),
        "return float values only (leave ints and strings out of the output, or return them through "
        "has_aux with grad).")


def jacobian_of(d: Any, args: tuple, kwargs: dict, mode: str, grad_like: bool = False) -> Any:
    """The Jacobian of the `Differentiated` `d` at `args` with respect to its `wrt` argument(s).

    `grad_like`: an output that is one value of one element (a scalar, or an array such as
    `np.sum(x, keepdims=True)`) has blocks shaped like the arguments, as `grad`'s gradient (the
    inner derivative of `hessian`)."""
    out, tape, specs, nested = d._forward(args, kwargs, d._wrt, strict=True)
    out_leaves, out_def = tree_util.tree_flatten(out)
    for leaf in out_leaves:
        if not _floating(leaf):
            raise _output_error(d, out, leaf)
    ins = [leaf for s in specs for leaf in pytree.leaves(s)]
    start = nested.start if nested is not None else 0
    idxs: list[Optional[int]] = []
    for leaf in out_leaves:
        i = tape.ids.get(id(leaf))
        idxs.append(i if i is not None and i >= start else None)  # None: it does not depend on the arguments
    shapes = [np.shape(leaf) for leaf in out_leaves]
    block_shapes = list(shapes)
    if grad_like and out_def.kind == "leaf" and np.size(out_leaves[0]) == 1:
        block_shapes = [()]
    if mode == "auto":
        out_size = sum(int(np.prod(s, dtype=np.int64)) for s in shapes)
        in_size = sum(int(np.size(leaf.primal)) for leaf in ins)
        mode = "fwd" if in_size < out_size else "rev"
    blocks: list[dict[int, Any]] = [{} for _ in out_leaves]
    if mode == "rev":
        _reverse(tape, ins, out_leaves, idxs, block_shapes, blocks, nested, grad_like)
    else:
        _forward(tape, ins, out_leaves, idxs, block_shapes, blocks, nested)
    for o, leaf in enumerate(out_leaves):
        if idxs[o] is None:
            for s in ins:
                blocks[o][s.idx] = np.zeros(block_shapes[o] + np.shape(s.primal), _float_dtype(leaf, s.primal))
    per_output = []
    for o in range(len(out_leaves)):
        trees = tuple(pytree.gradient(s, blocks[o], _take) for s in specs)
        per_output.append(trees if d._wrt_tuple else trees[0])
    return out_def.unflatten(per_output)


def _float_dtype(*values: Any) -> Any:
    return np.result_type(*[getattr(v, "dtype", np.float64) for v in values], np.float32)


def _basis(shape: tuple[int, ...], dtype: Any, k: int) -> Any:
    if not shape:
        return dtype.type(1) if hasattr(dtype, "type") else 1.0
    e = np.zeros(shape, dtype)
    e.reshape(-1)[k] = 1
    return e


def _reverse(tape: Any, ins: list, out_leaves: list, idxs: list, block_shapes: list, blocks: list,
             nested: Any, grad_like: bool = False) -> None:
    """One reverse sweep per element of each output leaf: the rows of its blocks (a scalar's
    gradient as it is, when `grad_like`: as `grad`'s, without stacking it)."""
    project = nested.project if nested is not None else pytree.project
    for o, (leaf, i) in enumerate(zip(out_leaves, idxs)):
        if i is None:
            continue
        shape = np.shape(leaf)
        dtype = np.dtype(getattr(leaf, "dtype", np.float64))
        rows: list[list[Any]] = [[] for _ in ins]
        for k in range(int(np.prod(shape, dtype=np.int64))):
            seed = _basis(shape, dtype, k) if shape else 1.0
            cts = nested.sweep({i: seed}) if nested is not None else sweep(tape, {i: seed})
            for j, s in enumerate(ins):
                rows[j].append(project(cts[s.idx], s.primal))
        if grad_like and block_shapes[o] == ():
            copy = (lambda g: nested.call(np.copy, (g,))) if nested is not None else None
            grads = pytree.unalias(tuple(r[0] for r in rows), copy)  # blocks never share memory
            blocks[o].update((s.idx, g) for s, g in zip(ins, grads))
            continue
        for j, s in enumerate(ins):
            blocks[o][s.idx] = _assemble(rows[j], block_shapes[o], np.shape(s.primal), 0, nested)


def _forward(tape: Any, ins: list, out_leaves: list, idxs: list, block_shapes: list, blocks: list,
             nested: Any) -> None:
    """One tangent sweep per element of each differentiated leaf: the columns of its blocks."""
    start = nested.start if nested is not None else 0
    recorder = nested.recorder() if nested is not None else None
    for s in ins:
        shape = np.shape(s.primal)
        dtype = np.dtype(getattr(s.primal, "dtype", np.float64))
        cols: list[list[Any]] = [[] for _ in out_leaves]
        for k in range(int(np.prod(shape, dtype=np.int64))):
            seed = _basis(shape, dtype, k) if shape else 1.0
            dots = push_forward(tape, {s.idx: seed}, start, recorder)
            for o, (leaf, i) in enumerate(zip(out_leaves, idxs)):
                if i is None:
                    continue
                col = dots[i]
                cols[o].append(col if col is not None else np.zeros(np.shape(leaf), _float_dtype(leaf, s.primal)))
        for o, (leaf, i) in enumerate(zip(out_leaves, idxs)):
            if i is not None:
                blocks[o][s.idx] = _assemble(cols[o], block_shapes[o], shape, np.ndim(leaf), nested)


def _assemble(parts: list[Any], out_shape: tuple[int, ...], in_shape: tuple[int, ...], axis: int,
              nested: Any) -> Any:
    """Stack rows (axis 0) or columns (axis -1) and shape them `out_shape + in_shape`."""
    op = nested.op if nested is not None else (lambda f, *a, **k: f(*a, **k))
    if not out_shape and not in_shape:
        part = op(np.asarray, parts[0])
        return part if part.ndim == 0 else op(np.reshape, part, ())  # (a one-element output, grad_like)
    stacked = op(np.stack, parts, axis=axis)
    return op(np.reshape, stacked, out_shape + in_shape)
