"""Numba programs whose elementwise part is one loop nest over its broadcast shape, forward and reverse.

A program that ends in the full sum of an elementwise chain on arrays of one shape S (1-D or 2-D),
whose other operands are arrays that broadcast to S (a bias `b[:, None]`, a row, a column) computed
before the chain (a matrix product, an index) or arguments, is written as three pieces in one kernel:
the records before the chain as array code (program_numba.py's `_Kernel`, as in any array kernel),
one loop nest over S that computes each element of the chain, adds it to the loss, and runs the
chain's reverse pass on it, and the reverse pass of the records before the chain as array code
again. The loop calls runtime/vmath.py's functions, so LLVM vectorises it; no element of the chain is
ever stored in an array, and what the loop hands back is only the cotangent of each operand,
accumulated where the operand broadcast: a row of a (n, 1) operand in a float, a (m,) or (1, m)
operand's elements across rows in a float64 array, an operand of S's shape stored element by element.

`emit` returns None when a program is not of this shape; program_numba.py then writes it as before.
"""
from __future__ import annotations

import math
import re
from typing import Any, Optional

import numpy as np

from bytegrad.runtime import kernels
from bytegrad.compiled.lower_numpy import Builder

__all__ = ["emit"]

_ndarray = np.ndarray
_FLOATS = (np.dtype(np.float64), np.dtype(np.float32))
_SUMS = (np.sum, np.ndarray.sum)
_LOOP = ("i", "j")


def _split(b: Builder, records: list[int], out_idx: int) -> Optional[tuple[tuple, list[int], list[int]]]:
    """(S, the records before the chain, the chain's records), or None when the program is not a full
    sum of an elementwise chain over S whose other operands broadcast to S."""
    last = b.records.get(out_idx)
    if last is None or last.fn not in _SUMS or len(last.args) != 1 or last.kwargs or last.parents[0] is None \
            or type(last.out) is _ndarray:
        return None  # only a full sum, to a float
    top = last.args[0]
    if type(top) is not _ndarray or top.dtype not in _FLOATS or not 1 <= top.ndim <= 2 or top.size == 0:
        return None
    shape = top.shape
    chain = [i for i in records if i != out_idx and b.records[i].kind == "elementwise"
             and type(b.records[i].out) is _ndarray and b.records[i].out.shape == shape]
    inside = set(chain)
    if last.parents[0] not in inside:
        return None
    before = [i for i in records if i != out_idx and i not in inside]
    for i in before:
        if any(p in inside for p in b.records[i].parents if p is not None):
            return None  # a record before the chain reads an element of it
    narrow = False
    for i in chain:
        rec = b.records[i]
        for a in rec.args:
            if type(a) is _ndarray:
                narrow = narrow or a.dtype == np.float32
                if a.dtype not in _FLOATS or a.ndim > len(shape) or a.ndim == 0 or \
                        any(n not in (1, s) for n, s in zip(a.shape[::-1], shape[::-1])):
                    return None
            elif not (type(a) in (int, float) or isinstance(a, (np.floating, np.integer))):
                return None
    if narrow and any(type(b.tape.values[p]) is not _ndarray for p in b.wrt_leaves):
        return None  # a float argument's gradient from float32 arithmetic: as program_numba._loop_shape
    return shape, before, chain


#: the elements of a one-dimensional float32 loop summed in float32 before they go to the float64 total
_BLOCK = 1024


def _index(a_shape: tuple, shape: tuple) -> tuple[str, ...]:
    """The index of an operand of `a_shape` broadcast over S, in the loop variables (0 where it broadcast)."""
    loops = _LOOP[2 - len(shape):] if len(shape) == 2 else ("i",)
    tail = loops[len(loops) - len(a_shape):]
    return tuple(v if n != 1 or s == 1 else "0" for v, n, s in zip(tail, a_shape, shape[len(shape) - len(a_shape):]))


def emit(k: Any, records: list[int], out_idx: int, vector_calls: Any) -> Optional[tuple[list[str], list[str], list[int], frozenset]]:
    """The kernel's lines, what it returns, the differentiated leaves it returns cotangents of and
    those of its returns that are arrays it made and holds nowhere else,
    written with `k` (program_numba's `_Kernel`, fresh); None when the program is not of this shape
    (then `k` is spent)."""
    vm = kernels.vector_math()
    found = _split(k.b, records, out_idx) if vm else None
    if found is None:
        return None
    shape, before, chain = found
    b, depends = k.b, k.depends
    k.hybrid = True
    for i in before:
        k.forward(i)
    if k.splits:
        return None
    body: list[str]
    post: list[str]
    pre, body, post = k.lines, [], []
    k.lines, k.hybrid = body, False
    for i in chain:
        k.forward(i)
    inside = set(chain)
    operands: dict[str, tuple[Any, Any]] = {}  # variable -> (its array, its tape index or None)
    for i in chain:
        rec = b.records[i]
        k.array.pop(f"v{i}", None)
        for a, p in zip(rec.args, rec.parents + (None,) * len(rec.args)):
            if (type(a) is _ndarray or p is not None) and p not in inside:  # an array, or a float argument
                operands.setdefault(k.operand(a, p, rec), (a, p))
    top = b.records[out_idx].parents[0]
    radd = k.names.const(vm["radd"], "radd")
    f32 = all(type(b.records[i].out) is _ndarray and b.records[i].out.dtype == np.float32 for i in chain) and \
        all(a.dtype == np.float32 for a, _ in operands.values() if type(a) is _ndarray)
    # float32 elements: the loop computes in float32 (8 lanes), summing into float32 partial sums of a
    # row or a block of _BLOCK elements, each added to the float64 total
    body.append(f"{'part' if f32 else 'total'} = {radd}({'part' if f32 else 'total'}, v{top})")
    if out_idx in depends:
        k.loop = True
        body.append(f"g{top} = 1.0")
        k.set.add(top)
        for i in b.plan.schedule.sweep(inside):  # the chain's part of the reverse schedule (compiled/passes.py)
            k.reverse(i)
        k.loop = False
    outside = sorted({p for _, p in operands.values() if p is not None and p in k.set})
    for v, (a, _) in operands.items():
        if type(a) is _ndarray:
            body[:] = [re.sub(rf"\b{v}\b", f"{v}_e", ln) for ln in body]
    for p in outside:  # inside the loop an operand's cotangent is one element's
        body[:] = [re.sub(rf"\bg{p}\b", f"e{p}", ln) for ln in body]
    narrow = all(a.dtype == np.float32 for a, _ in operands.values() if type(a) is _ndarray)
    scalars = {v for v, (a, _) in operands.items() if type(a) is not _ndarray}
    body = vector_calls(body, k.names, narrow, scalars if f32 else None, "part" if f32 else "total", math.prod(shape))
    loops = _loops(k, shape, operands, outside, body, radd, f32)
    for p in outside:
        if type(b.tape.values[p]) is _ndarray:
            k.array[f"g{p}"] = b.tape.values[p].shape
    for i in b.plan.schedule.sweep(set(before)):  # the rest of the reverse schedule
        k.lines = post
        k.reverse(i)
    leaves = sorted(p for p in b.wrt_leaves if p in k.set)
    # a leaf's array from the loop that nothing after it wrote: made here, held nowhere else
    owned = frozenset(f"g{p}" for p in outside if not any(ln.startswith(f"g{p} = ") for ln in post))
    return pre + loops + post, ["total"] + [f"g{p}" for p in leaves], leaves, owned


def _loops(k: Any, shape: tuple, operands: dict[str, tuple[Any, Any]], outside: list[int], body: list[str],
           radd: str, f32: bool = False) -> list[str]:
    """The loop nest over `shape`: each operand's element read, `body`, and each outside cotangent
    accumulated where its operand broadcast; then `g{p}` the array of each. `f32`: the elements stay
    float32, and the body sums into `part`, a float32 sum of a row (of a block of one dimension)."""
    values = k.b.tape.values
    two = len(shape) == 2
    inner = "j" if two else "i"
    first, outer_end, inner_end, after = ["total = 0.0"], [], [], []
    outer_start: list[str] = []
    zero = f"{k.names.const(np.float32, 'f32')}(0.0)" if f32 else "0.0"
    if f32:
        outer_start.append(f"part = {zero}")
        outer_end.append("total = total + part")
    widen = "float(" if not f32 else "("
    loads = [f"{v}_e = {widen if a.dtype == np.float32 else '('}{v}[{', '.join(_index(a.shape, shape))}])"
             for v, (a, _) in operands.items() if type(a) is _ndarray]
    for p in outside:
        value = values[p]
        if type(value) is not _ndarray:
            first.append(f"a{p} = 0.0")
            inner_end.append(f"a{p} = {radd}(a{p}, e{p})")
            after.append(f"g{p} = a{p}")
            continue
        idx = _index(value.shape, shape)
        at = f"r{p}[{', '.join(idx)}]"
        dt = k.names.const(value.dtype.type, "dt")
        if inner in idx and (not two or "i" in idx):  # every element its own
            first.append(f"r{p} = np.empty({value.shape!r}, {dt})")
            inner_end.append(f"{at} = e{p}")
        elif inner in idx:  # (m,) or (1, m) over rows: float64 sums per element
            first.append(f"r{p} = np.zeros({value.shape!r}, np.float64)")
            inner_end.append(f"{at} += e{p}")
            after.append(f"r{p} = r{p}.astype({dt})")
        else:  # one float per row, or one in all
            per_row = two and "i" in idx
            (outer_start if per_row else first).append(f"a{p} = {zero if per_row else '0.0'}")
            if f32 and not per_row:  # one in all: float32 sums of each row (block), into a float64 one
                outer_start.append(f"b{p} = {zero}")
                outer_end.append(f"a{p} = a{p} + b{p}")
            inner_end.append(f"b{p} = {radd}(b{p}, e{p})" if f32 and not per_row else f"a{p} = {radd}(a{p}, e{p})")
            if per_row:
                first.append(f"r{p} = np.empty({value.shape!r}, {dt})")
                outer_end.append(f"{at} = a{p}")
            else:
                after.append(f"r{p} = np.full({value.shape!r}, a{p}, {dt})")
        after.append(f"g{p} = r{p}")
    blocks = f32 and not two  # one dimension in float32: in blocks, each with its float32 partial sum
    pad = "        " if two or blocks else "    "
    n = shape[-1]
    outer = f"for i in range({shape[0]}):" if two else f"for i0 in range(0, {n}, {_BLOCK}):"
    lines = first + ([outer] + ["    " + ln for ln in outer_start] if two or blocks else [])
    lines += [f"{pad[4:]}for {inner} in range({f'i0, min(i0 + {_BLOCK}, {n})' if blocks else n}):"]
    lines += [pad + ln for ln in loads + body + inner_end]
    return lines + ["    " + ln for ln in outer_end] + after
