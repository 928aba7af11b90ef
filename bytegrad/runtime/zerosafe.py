"""NaN-safe masks: the branch `np.where` (or `np.select`, or `y[mask] = v`) did not select
contributes an exact zero to the gradient, even where its partial derivative is inf or NaN.

Where the NaN is born: the reverse step of the mask hands the unselected slots a cotangent of
exactly zero, and the reverse step of the operation that computed the unselected branch
(`np.sqrt(-x)` at x = 1) multiplies that zero by its partial (NaN), and 0 * NaN is NaN. The rule
bytegrad applies: once a mask is recorded, the elementwise reverse steps recorded before it (only
they can receive its cotangent) give an exact zero wherever their cotangent is exactly zero. They
do so by replacement: `guard(tape)` swaps each earlier elementwise record's kind for its
zero-safe twin (`Kind.safe`, made by `make_safe`), which runs the original and, only when a result is not finite and the
cotangent has exact zeros, recomputes it with those slots zeroed before any broadcast sum. A
gradient that records no mask never reaches this module, and pays nothing for it.

`np.where` itself is recorded as a `WHERE` record, with `bw_where` (selection, not multiplication by a 0/1 mask), and
its forward-mode step selects the tangent of the chosen branch (`pf_where`), so `jvp` gives no NaN
from the other branch either.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from bytegrad.rules._apply import shape_of
from bytegrad.rules._shape import unbroadcast
from bytegrad.runtime.backward import ELEMENTWISE, UNARY
from bytegrad.runtime.records import Kind
from bytegrad.runtime.tape import Tape

__all__ = ["guard", "record_where", "WHERE", "make_safe"]

_ndarray = np.ndarray
_where = np.where


def guard(tape: Tape) -> None:
    """A mask is being recorded: make every elementwise record before it zero-safe (once each)."""
    nodes = tape.nodes
    for i in range(tape.guarded, len(nodes)):
        node = nodes[i]
        if node is not None:
            twin = node[0].safe
            # constant partials (x + y, -x) are finite: zero times them is zero already
            if twin is not None and not getattr(node[3], "constant_partials", False):
                nodes[i] = (twin,) + node[1:]
    tape.guarded = len(nodes)


def record_where(tape: Tape, node: tuple, out: Any) -> Any:
    """Push an `np.where` record (an elementwise record's layout), guarding what came before."""
    guard(tape)
    return tape.push((WHERE,) + node[1:], out)


# ---- the where record: selection in both directions ---------------------------------------------


def bw_where(ct: Any, node: tuple, out: Any) -> list[Any]:
    """`x_bar = where(cond, ct, 0)`, `y_bar = where(cond, 0, ct)`: exact zeros, never `ct * False`."""
    parents = node[1]
    cond, *branches = node[4]
    out_shape = shape_of(out)
    complex_out = np.iscomplexobj(out)
    res: list[Any] = [None] * len(parents)
    for k, a in enumerate(branches, start=1):
        if parents[k] is None:
            continue
        bar = _where(cond, ct, 0) if k == 1 else _where(cond, 0, ct)
        if complex_out and not np.iscomplexobj(a):
            bar = bar.real  # a real branch of a complex result
        a_shape = shape_of(a)
        res[k] = unbroadcast(bar, a_shape, out_shape) if np.shape(bar) != a_shape else bar
    return res


def pf_where(node: tuple, out: Any, parent_dots: Any) -> Any:
    """The tangent of the selected branch at each slot (no `NaN * False` from the other one)."""
    cond = node[4][0]
    dots = [d if d is not None else 0 for d in list(parent_dots)[1:3]]
    if all(type(d) is int for d in dots):
        return None
    out_dot = _where(cond, dots[0], dots[1])
    if np.iscomplexobj(out_dot) and not np.iscomplexobj(out):
        out_dot = out_dot.real
    if type(out) is _ndarray:
        return np.asarray(out_dot, dtype=out.dtype) if out_dot.shape == out.shape else \
            np.broadcast_to(out_dot, out.shape).astype(out.dtype)
    return out_dot


#: the record keeps what an elementwise one does (cond)
WHERE = Kind("where", ELEMENTWISE.fields, bw_where, pushforward=pf_where, saved=ELEMENTWISE.saved,
             reads_out=ELEMENTWISE.reads_out, slim=ELEMENTWISE.slim, fn_at=ELEMENTWISE.fn_at,
             args_at=ELEMENTWISE.args_at)


# ---- zero-safe twins of the elementwise reverse steps -------------------------------------------


def make_safe(kind: Kind, full: Callable[[tuple, tuple], tuple], shapes: Callable[[tuple], list],
              unary: bool = False, plain: Callable[[tuple], tuple] = lambda node: node) -> Kind:
    """Make the zero-safe twin of `kind` (an elementwise-like kind) and set it as `kind.safe`.

    `full(node, out_shape)`: the record with its arguments seen at the output's shape, so that the
    step returns full-shape cotangents (no broadcast sum yet); `shapes(node)`: each parent's shape;
    `plain(node)`: the record as the twin runs it first (one that may run twice).
    """
    backward = kind.backward

    def zero_safe(ct: Any, node: tuple, out: Any) -> Any:
        bars = backward(ct, plain(node), out)
        if _finite(bars, unary):
            return bars
        zero = np.equal(ct, 0)
        if not zero.any():
            return bars  # an inf or NaN with a non-zero cotangent: the derivative is that
        out_shape = shape_of(out)
        if unary:
            return _where(np.broadcast_to(zero, np.shape(bars)), 0, bars) if np.ndim(bars) else \
                (bars if not zero else _zero(bars))
        if np.shape(ct) != out_shape:
            ct = np.broadcast_to(ct, out_shape)
        full_bars = backward(ct, full(node, out_shape), out)
        zero = np.broadcast_to(zero, out_shape)
        fixed = list(full_bars)
        for j, (bar, shape) in enumerate(zip(full_bars, shapes(node))):
            if bar is None or (type(bar) is not _ndarray and not isinstance(bar, (float, complex, np.generic))):
                continue
            bar = _where(zero, 0, bar)
            fixed[j] = unbroadcast(bar, shape, out_shape) if bar.shape != shape else bar
        return fixed

    zero_safe.__name__ = zero_safe.__qualname__ = f"zero_safe{backward.__name__}"
    kind.safe = kind.twin(f"zero-safe {kind.name}", zero_safe)
    return kind.safe


def _finite(bars: Any, unary: bool) -> bool:
    if unary:
        return bars is None or bool(np.isfinite(bars).all())
    for bar in bars:
        t = type(bar)
        if t is _ndarray or t is float or isinstance(bar, (complex, np.generic)):
            if not np.isfinite(bar).all():
                return False
    return True


def _zero(bar: Any) -> Any:
    return np.zeros_like(bar) if type(bar) is _ndarray else type(bar)(0)


def _full_elementwise(node: tuple, out_shape: tuple) -> tuple:
    args = tuple(a if shape_of(a) == out_shape else np.broadcast_to(a, out_shape) for a in node[4])
    return node[:4] + (args,) + node[5:]


def _elementwise_shapes(node: tuple) -> list:
    return [shape_of(a) for a in node[4]]


make_safe(ELEMENTWISE, _full_elementwise, _elementwise_shapes)
make_safe(UNARY, _full_elementwise, _elementwise_shapes, unary=True)
