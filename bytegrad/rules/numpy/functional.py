"""Rules for NumPy's higher-order functions, which apply a user's Python function: `np.vectorize` and
`np.apply_along_axis`.

NumPy runs the user's function from C (a `frompyfunc` ufunc over object arrays), where bytegrad
cannot follow it; the rule calls the function once per element through `rrule_via_ad` instead.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from bytegrad.errors import NotImplementedRuleError, RuleCaseError, qualname
from bytegrad.rules._project import is_float, project
from bytegrad.rules._shape import unbroadcast
from bytegrad.rules.closures import hidden, tracked
from bytegrad.rules.registry import NO_TANGENT, ZERO, differentiate_through, recording, rrule, rrule_via_ad


def _vectorized_positions(vf: np.vectorize, args: tuple[Any, ...]) -> list[int]:
    return [i for i in range(len(args)) if i not in vf.excluded]


def _element_function(vf: np.vectorize, args: tuple[Any, ...], positions: list[int], params: list[int],
                      kwargs: dict[str, Any]) -> Callable[..., Any]:
    """`vf.pyfunc` as a function of the vectorized positional arguments, then of the differentiated
    excluded ones (`params`: their positions)."""
    pyfunc = vf.pyfunc

    def element(*values: Any) -> Any:
        full = list(args)
        for i, v in zip(positions + params, values):
            full[i] = v
        return pyfunc(*full, **kwargs)

    return element


def _output_type(vf: np.vectorize, element: Callable[..., Any], arrays: Sequence[np.ndarray],
                 extra: tuple[Any, ...]) -> Any:
    """The output dtype NumPy picks: `otypes`, else that of the function at the first elements as
    NumPy scalars (so float32 input may give float32 output)."""
    if vf.otypes:
        return vf.otypes[0]
    if not arrays or arrays[0].size == 0:
        return np.float64
    return np.asarray(element(*(a.flat[0] for a in arrays), *extra)).dtype


def _differentiated_excluded(vf: np.vectorize, args: tuple[Any, ...]) -> list[int]:
    """The excluded positional arguments that are floats or float arrays (the rule differentiates the
    function with respect to them too, summing over the elements); a differentiated value hidden
    elsewhere (the function's closure cell, default or global, an excluded list) is refused: its
    derivative would be a silent zero."""
    params = [i for i in range(len(args)) if i in vf.excluded and is_float(args[i])]
    holders = [args[i] for i in range(len(args)) if i in vf.excluded and i not in params]
    found = hidden((vf.pyfunc, holders), tracked)
    if found:
        raise RuleCaseError(
            f"np.vectorize({qualname(vf.pyfunc)}) reads a differentiated value that is not one of its "
            f"arguments ({_where(found[0][0][0])}): bytegrad differentiates np.vectorize with respect to its "
            "arguments only, so its derivative would be lost.", None,
            "pass the value to the vectorized function as an argument (np.vectorize(f, excluded={k}) for "
            "one that is not vectorized), or write the loop in Python.")
    return params


def _where(path: tuple) -> str:
    """How the value is reached (`hidden`'s path from `(pyfunc, excluded arguments)`)."""
    if path[0] == ("item", 1) or len(path) < 2:
        return "inside an excluded argument"
    return {"cell": "through a closure variable", "default": "through a default argument",
            "kwdefault": "through a keyword default", "global": "through a global"}.get(path[1][0], "through what it holds")


@rrule(np.vectorize.__call__)
def vectorize_call_rrule(vf: np.vectorize, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., tuple[Any, ...]]]:
    if vf.pyfunc is np._NoValue or vf.signature is not None or any(k not in vf.excluded for k in kwargs):
        raise RuleCaseError(
            f"differentiating np.vectorize({qualname(vf.pyfunc)}) is supported for positional arguments "
            f"without a `signature`; this call has " +
            ("a signature" if vf.signature is not None else "vectorized keyword arguments"), None,
            "pass the vectorized arguments positionally, or write the loop in Python.")
    positions = _vectorized_positions(vf, args)
    params = _differentiated_excluded(vf, args)
    extra = tuple(args[i] for i in params)
    arrays = np.broadcast_arrays(*(np.asarray(args[i]) for i in positions))
    shape = arrays[0].shape if arrays else ()
    element = _element_function(vf, args, positions, params, kwargs)
    # np.vectorize hands the function Python scalars (its ufunc runs on object arrays): so do we.
    pairs = [rrule_via_ad(element, *(a[idx].item() for a in arrays), *extra) for idx in np.ndindex(shape)]
    values = [out for out, _ in pairs]
    out = np.array(values, dtype=_output_type(vf, element, arrays, extra)).reshape(shape)

    def vectorize_call_pullback(out_bar: Any) -> tuple[Any, ...]:
        if recording():
            # a nested derivative records this pullback, but the per-element pullbacks ran in the
            # forward pass, unrecorded: their dependence on the arguments would be lost (zeros)
            raise NotImplementedRuleError(
                f"second derivatives through np.vectorize({qualname(vf.pyfunc)}) are not supported.", None,
                "write the elementwise function with NumPy operations (np.where for branches), or loop in Python.")
        cotangents: list[Any] = [NO_TANGENT] * (len(args) + 1)
        if out_bar is ZERO or out.dtype.kind not in "fc":
            return tuple(cotangents)
        out_bars = np.broadcast_to(np.asarray(out_bar), shape).ravel()
        dense = np.zeros((len(positions), len(pairs)), dtype=np.result_type(out.dtype, *arrays))
        sums: list[Any] = [0.0] * len(params)
        for j, ((_, pullback), ob) in enumerate(zip(pairs, out_bars)):
            cts = pullback(ob.item())
            for k, c in enumerate(cts[:len(positions)]):
                if c is not None and c is not NO_TANGENT and c is not ZERO:
                    dense[k, j] = c
            for k, c in enumerate(cts[len(positions):]):
                if c is not None and c is not NO_TANGENT and c is not ZERO:
                    sums[k] = sums[k] + c
        for k, i in enumerate(positions):
            if is_float(args[i]) or type(args[i]) in (list, tuple):  # a list: each float element's share
                cotangents[i + 1] = project(unbroadcast(dense[k].reshape(shape), np.shape(args[i])), args[i])
        for k, i in enumerate(params):
            total = sums[k] if np.ndim(sums[k]) else np.broadcast_to(sums[k], np.shape(args[i]))
            cotangents[i + 1] = project(total, args[i])
        return tuple(cotangents)

    return out, vectorize_call_pullback


# ---- np.apply_along_axis: the user's function per slice, in Python bytegrad rewrites --------------------

def apply_along_axis_in_python(func1d: Callable[..., Any], axis: int, arr: Any, *args: Any, **kwargs: Any) -> Any:
    """np.apply_along_axis as NumPy defines it: func1d of each 1-D slice along `axis`, its results
    (all of one shape) stacked where that axis was. Written here because NumPy's own code fills
    its result through C helpers that bytegrad cannot follow."""
    a = np.asarray(arr)
    axis = normalize_axis_index(axis, a.ndim)
    moved = np.moveaxis(a, axis, -1)
    outer = moved.shape[:-1]
    if any(n == 0 for n in outer):
        raise ValueError("Cannot apply_along_axis when any iteration dimensions are 0")
    results = [np.asarray(func1d(moved[index], *args, **kwargs)) for index in np.ndindex(outer)]
    stacked = np.reshape(np.stack(results), outer + np.shape(results[0]))
    n_res = np.ndim(results[0])
    return np.moveaxis(stacked, list(range(len(outer), len(outer) + n_res)), list(range(axis, axis + n_res)))


differentiate_through(np.apply_along_axis, apply_along_axis_in_python)
