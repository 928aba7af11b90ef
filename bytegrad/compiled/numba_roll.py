"""A repeated step (compiled/roll.py) as a loop in a Numba array kernel (compiled/lower_numba.py).

A program over the Numba back end's size cap whose records hold a repeated region (an RK4 loop of
40 steps: 1,162 records, 29 a step) is written with the region's body once, inside
`for it in range(count)`: the forward loop stores each body value the reverse pass reads in a
stacked array of shape (count, ...) (`stack_<i>[it] = v<i>`), and the reverse loop runs the body's
reverse steps from the last repetition to the first, each reading its repetition's stored values.
Cotangents are arrays in the loop, as they must keep one type from one iteration to the next:

- `gin_<q>`: the cotangent flowing into the value at body position q of the repetition the next
  iteration reverses (from the repetition after it through the carried value, and, for the last
  one, from what follows the region); the first repetition's flows into the value it read in its
  place (its `init`);
- an invariant's cotangent (a value defined before the region) is summed over the iterations.

Each cotangent is summed in the general path's order (the sweep's: the last repetition first),
except that an init that is also an invariant receives its carried part after the loop. The
kernel is the general path's computation to rounding (tests/test_compiled_roll.py holds it to
1e-12 relative, as compiled/policy.py's check of a twin does). Float64 values only. The elementwise
statements inside the loops call numba_outline's shared functions (`_outlined`: the RK4 kernel's
compile took about 7.7 s inline, 3.7 s outlined, on a loaded 2-core machine).
"""
from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np

from bytegrad.compiled import numba_outline, roll
from bytegrad.compiled.numba_kernel import SPLIT
from bytegrad.compiled.source import AST_LOCK, Ineligible

__all__ = ["emit", "find"]

_ndarray = np.ndarray
find = roll.of  # (the region, found once per builder: compiled/roll.py)


def emit(b: Any, found: roll.Rolled, records: list[int], depends: set[int], out_idx: int,
         kernel: Callable[..., Any], finish: Callable[..., Any]) -> Any:
    """The kernel of a program with a rolled region, through lower_numba's `_Kernel` (`kernel`) and
    `_finish` (passed: no import back); what `_finish` gives."""
    _check(b, found)
    k = kernel(b, depends)
    k.hybrid = True
    first, last = found.reps[0][0], found.body[-1]
    loop = _Loop(k, found)
    for i in records:
        if i < first:
            k.forward(i)
    loop.forward()
    for i in records:
        if i > last:
            k.forward(i)
    out_var = k.value(out_idx)
    if out_idx in depends:
        k.lines.append(f"g{out_idx} = 1.0")
        k.set.add(out_idx)
        sweep = b.plan.schedule.sweep()  # the reverse schedule (compiled/passes.py)
        for i in sweep:
            if i > last:
                k.reverse(i)
        loop.reverse()
        for i in sweep:
            if i < first:
                k.reverse(i)
    loop.drop_unread()
    if any(ln.lstrip().startswith(SPLIT) for ln in k.lines if ln.startswith(" ")):
        raise Ineligible("a large exp, log or tanh step inside a rolled loop (its NumPy ufunc between kernel parts)")
    leaves = sorted(p for p in b.wrt_leaves if p in k.set)
    params = list(dict.fromkeys(k.params))
    k.lines = _outlined(k)
    return finish(b, k, numba_outline.outline(k), [out_var] + [f"g{p}" for p in leaves], params, params, leaves,
                  out_idx, len(records) - found.saved)


def _outlined(k: Any) -> list[str]:
    """The kernel's lines, the elementwise statements on arrays inside its loops as calls of
    numba_outline's shared functions (one compiled per expression, as an unrolled kernel's are past
    numba_outline.OUTLINE_MIN statements): the loops' bodies then compile in a fraction of the time."""
    out = []
    for ln in k.lines:
        body = ln.lstrip(" ")
        found = None
        if body is not ln and not body.startswith("#"):
            with AST_LOCK:
                found = numba_outline.expression(body, k.array)
        fn = numba_outline.helper(found[1]) if found is not None else None
        if found is None or fn is None:
            out.append(ln)
            continue
        target, _, operands = found
        out.append(f"{ln[:len(ln) - len(body)]}{target} = {k.names.const(fn, 'ex')}({', '.join(operands)})")
    return out


def _check(b: Any, found: roll.Rolled) -> None:
    values = b.tape.values
    if any(rec.kind == "stepped" for rec in b.records.values()):
        raise Ineligible("`np.where` or a zero-safe elementwise record (a mask made it so): the Numba back end "
                         "does not run their reverse steps; the NumPy back end runs the general path's own")
    for rep in (found.body, found.reps[-2]):
        for i in rep:
            rec = b.records[i]
            for v in (rec.out, *(values[p] for p in rec.parents if p is not None)):
                if not (type(v) is float or type(v) is np.float64 or (type(v) is _ndarray and v.dtype == np.float64)):
                    raise Ineligible("a rolled loop of values other than float64 arrays and floats (Numba back end)",
                                     rec.site)


class _Loop:
    """The rolled region's forward and reverse loops, written into the kernel `k`'s lines."""

    def __init__(self, k: Any, found: roll.Rolled) -> None:
        self.k = k
        self.found = found
        self.n = found.count
        self.body = found.body
        self.values = k.b.tape.values
        self.allocs: dict[int, str] = {}  # body value -> the line making its stacked array
        self.read: set[int] = set()  # those the reverse loop or what follows reads

    def _zeros(self, i: int) -> str:
        v = self.values[i]
        return f"np.zeros({v.shape!r})" if type(v) is _ndarray else "0.0"

    def _full(self, g: str, i: int) -> str:
        """`g` (a cotangent of value i) as an array where the value is one and `g` a uniform float."""
        v = self.values[i]
        return f"np.full({v.shape!r}, {g})" if type(v) is _ndarray and g not in self.k.array else g

    def forward(self) -> None:
        k, found, body = self.k, self.found, self.body
        for q, init in found.carried:
            k.lines.append(f"carry_{q} = {k.value(init)}")
            k.var[found.previous(q)] = f"carry_{q}"
        for i in body:
            v = self.values[i]
            self.allocs[i] = f"stack_{i} = np.empty({(self.n, *v.shape) if type(v) is _ndarray else (self.n,)!r})"
            k.lines.append(self.allocs[i])
        outer, k.lines = k.lines, []
        for i in body:
            k.forward(i)
        k.lines += [f"stack_{i}[it] = v{i}" for i in body]
        k.lines += [f"carry_{q} = v{body[q]}" for q, _ in found.carried]
        outer += [f"for it in range({self.n}):"] + ["    " + ln for ln in k.lines]
        k.lines = outer
        after = set(body) & _reads_after(k.b, found)
        k.lines += [f"v{i} = stack_{i}[{self.n - 1}]" for i in sorted(after)]
        self.read |= after

    def reverse(self) -> None:
        k, found, body, b = self.k, self.found, self.body, self.k.b
        carried = dict(found.carried)
        previous = {found.previous(q): q for q in carried}
        incoming = sorted({q for q, i in enumerate(body) if i in k.set} | set(carried))
        for q in incoming:
            i = body[q]
            k.lines.append(f"gin_{q} = {self._full(f'g{i}', i) if i in k.set else self._zeros(i)}")
        inside = set(body)
        for p in sorted({p for i in body for _, p in b.plan.schedule.targets(i)
                         if type(p) is int and p not in inside and p not in previous}):
            if p not in k.set:
                k.lines.append(f"g{p} = {self._zeros(p)}")
                k.set.add(p)
            elif type(self.values[p]) is _ndarray and f"g{p}" not in k.array:
                k.lines.append(f"g{p} = {self._full(f'g{p}', p)}")
            if type(self.values[p]) is _ndarray:
                k.array[f"g{p}"] = self.values[p].shape
        outer, k.lines = k.lines, []
        k.set -= inside | previous.keys()
        for q in incoming:
            i = body[q]
            k.lines.append(f"g{i} = gin_{q}")
            k.set.add(i)
            if type(self.values[i]) is _ndarray:
                k.array[f"g{i}"] = self.values[i].shape
        for i in b.plan.schedule.sweep(inside):
            k.reverse(i)
        for q in incoming:
            p = found.previous(q)
            k.lines.append(f"gin_{q} = {self._full(f'g{p}', body[q]) if q in carried and p in k.set else self._zeros(body[q])}")
        k.set -= inside | previous.keys()
        loads = self._loads(k.lines, carried)
        outer += [f"for it in range({self.n - 1}, -1, -1):"] + ["    " + ln for ln in loads + k.lines]
        k.lines = outer
        for q, init in found.carried:  # the first repetition's cotangent of what it read in the carried place
            if init in k.b.ir.depends:
                v = self.values[init]
                k.contribute(init, f"gin_{q}", v.shape if type(v) is _ndarray else None)

    def _loads(self, lines: list[str], carried: dict[int, int]) -> list[str]:
        """The stored values the reverse body `lines` read, loaded for iteration `it`."""
        text = "\n".join(lines)
        names = set(re.findall(r"\b(v|carry_)(\d+)\b", text))
        loads = []
        for i in self.body:
            if ("v", str(i)) in names:
                loads.append(f"v{i} = stack_{i}[it]")
                self.read.add(i)
        for q, init in carried.items():
            if ("carry_", str(q)) in names:
                src = self.body[q]
                self.read.add(src)
                loads += ["if it == 0:", f"    carry_{q} = {self.k.value(init)}", "else:", f"    carry_{q} = stack_{src}[it - 1]"]
        return loads

    def drop_unread(self) -> None:
        """The stores of body values nothing reads again left out."""
        unread = {i for i in self.allocs if i not in self.read}
        drop = {f"    stack_{i}[it] = v{i}" for i in unread} | {self.allocs[i] for i in unread}
        self.k.lines = [ln for ln in self.k.lines if ln not in drop]


def _reads_after(b: Any, found: roll.Rolled) -> set[int]:
    last = found.body[-1]
    reads = {p for i, rec in b.records.items() if i > last for p in rec.inputs()}
    return reads | set(b.ir.outputs)
