"""Named passes over the program IR (compiled/ir.py), each read and tested alone.

`ir.read` turns a capture's tape into an IR holding every record; these passes annotate it, and
the back ends (compiled/lower_numpy.py's `Builder`, compiled/lower_numba.py, compiled/numba_fused.py)
lower what they give:

- `dead_code`: the records the outputs, the decisions and the operations that raise as Python
  does need; the others are dropped (the IR a back end lowers, and `program.ir`'s listing);
- `reverse_schedule`: the reverse sweep, once: each record whose cotangent flows, in the sweep's
  order (the tape's, reversed), the inputs it flows into, and which cotangents are sums of
  several contributions (each back end accumulates them in this order, as the general path's
  sweep does, so results are the general path's bit for bit);
- `summed_bias`: the new-axes getitems (`b[:, None]`) whose only contribution is a broadcast
  sum, so that their argument's cotangent is summed straight to its shape (the NumPy back end's
  `_squeezed_sum` lowers it where the cotangent is known to be an array then).

`Plan` holds what they give; `dump` lists it, one section a pass (golden-tested in
tests/test_passes_ir.py). Value-only steps and buffer reuse decide on the generated statements
(what each reads once written), so they stay passes over the lowered code (compiled/parts.py
`value_only`, compiled/reuse.py); `dump_lowering` lists what they did, beside the others.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

from bytegrad.compiled.ir import IR, depends_on, op_text
from bytegrad.compiled.parts import flat_items
from bytegrad.rules._apply import shape_of
from bytegrad.rules._shape import unbroadcast_plan

__all__ = ["Plan", "Schedule", "Step", "dead_code", "dump", "dump_lowering", "plan", "reverse_schedule",
           "summed_bias"]

_ndarray = np.ndarray
#: a target of a reverse step: (argument position, the input's tape index, or a list argument's items')
Target = tuple[int, Union[int, tuple]]


def dead_code(ir: IR) -> IR:
    """`ir` with only what the outputs need: the records (and inputs, made arrays) they read, what
    each decision reads, and the records that may raise as Python does (`ir.raising`: computed
    where they are, whether anything reads them or not). `dropped` lists the records left out."""
    needed: set[int] = set()
    todo = list(ir.outputs) + list(ir.raising)
    for reads in ir.decision_reads:  # what each decision reads is computed, needed or not
        todo += reads
    while todo:
        i = todo.pop()
        if i in needed:
            continue
        needed.add(i)
        needed_rec = ir.ops.get(i)
        if needed_rec is not None:
            todo.extend(needed_rec.inputs())
    order = sorted(needed)
    kept = dataclasses.replace(ir, order=order, ops={i: ir.ops[i] for i in order if i in ir.ops},
                               made={i: ir.made[i] for i in order if i in ir.made},
                               types={i: ir.types[i] for i in order},
                               dropped={i: rec for i, rec in ir.ops.items() if i not in needed})
    kept.depends = depends_on(kept, ir.differentiated)
    return kept


@dataclass(frozen=True)
class Step:
    """One reverse step: record `idx`'s cotangent flows into `targets`, its inputs that depend on a
    differentiated leaf, each `(argument position, tape index)` or, for a list argument, `(position,
    the items' tape indices)`."""

    idx: int
    targets: tuple[Target, ...]


@dataclass(frozen=True)
class Schedule:
    """The reverse sweep: `steps` in the sweep's order; `into[p]`: the records whose steps
    contribute to p's cotangent, in the order they are accumulated (a sum where there are two or more)."""

    steps: tuple[Step, ...]
    into: dict[int, tuple[int, ...]]
    by_idx: dict[int, Step] = field(repr=False, default_factory=dict)

    def targets(self, i: int) -> list[Target]:
        """The targets of record i's step (none where its cotangent flows nowhere)."""
        step = self.by_idx.get(i)
        return list(step.targets) if step is not None else []

    def sweep(self, records: Any = None) -> list[int]:
        """The records of the steps in the sweep's order; only those in `records`, when given."""
        return [s.idx for s in self.steps if records is None or s.idx in records]


def reverse_schedule(ir: IR) -> Schedule:
    """The reverse sweep of `ir` (after `dead_code`): a step for each record that depends on a
    differentiated leaf, last record first, with the inputs its cotangent flows into."""
    depends = ir.depends
    steps = []
    into: dict[int, list[int]] = {}
    for i in reversed(ir.order):
        rec = ir.ops.get(i)
        if rec is None or i not in depends:
            continue
        targets: list[Target] = [(k, p) for k, p in enumerate(rec.parents) if p is not None and p in depends]
        targets += [(k, items) for k, items in rec.nested.items() if any(q in depends for q in flat_items(items))]
        steps.append(Step(i, tuple(targets)))
        for _, p in targets:
            for q in (flat_items(p) if type(p) is tuple else (p,)):
                if q is not None and q in depends:
                    into.setdefault(q, []).append(i)
    return Schedule(tuple(steps), {p: tuple(v) for p, v in into.items()}, {s.idx: s for s in steps})


#: the ProgramForm cotangent of a new-axes getitem (`b[:, None]`): its cotangent reshaped to b's shape
_RESHAPE = "{g}.reshape({shape0})"


def summed_bias(ir: IR) -> dict[int, tuple[int, ...]]:
    """The new-axes getitems p (`b[:, None]`, a trusted rule whose ProgramForm gives `{g}.reshape`)
    read by exactly one operand of one record, which broadcasts p against its output by summing
    axes that keep b's shape: p -> those axes. Summing the reader's contribution over them gives
    b's cotangent at once, a new array, where the general path sums with keepdims and reshapes."""
    found: dict[int, tuple[int, ...]] = {}
    reads: dict[int, int] = {}
    for rec in ir.ops.values():
        for q in rec.inputs():
            reads[q] = reads.get(q, 0) + 1
    for rec in ir.ops.values():
        if rec.kind != "elementwise":
            continue
        out_shape = rec.out.shape if type(rec.out) is _ndarray else ()
        for k, p in enumerate(rec.parents):
            bias = ir.ops.get(p) if p is not None else None
            if bias is None or reads.get(p) != 1 or not _reshaped(bias, ir.depends):
                continue
            a = rec.args[k]
            a_shape = a.shape if type(a) is _ndarray else shape_of(a)
            if a_shape == out_shape or len(a_shape) != len(out_shape):
                continue
            lead, axes = unbroadcast_plan(out_shape, a_shape)
            kept = tuple(n for j, n in enumerate(a_shape) if j not in axes)
            if not lead and axes and kept and kept == getattr(bias.args[0], "shape", None):
                found[p] = tuple(axes)
    return found


def _reshaped(rec: Any, depends: set[int]) -> bool:
    """Whether `rec` is lowered with its rule's ProgramForm whose cotangent is `{g}.reshape`."""
    form = getattr(rec.rule.rrule, "program_form", None) if rec.kind == "rrule" else None
    if form is None or not rec.trusted or rec.nested or not form.cotangents or form.cotangents[0] != _RESHAPE:
        return False
    if not form.when(*rec.args, **(rec.kwargs or {})):
        return False
    return all(p is None or p not in depends or (k < len(form.cotangents) and form.cotangents[k] is not None)
               for k, p in enumerate(rec.parents))


@dataclass(frozen=True)
class Plan:
    """What the passes give a back end: the live IR, its reverse sweep, the summed biases."""

    ir: IR
    schedule: Schedule
    bias: dict[int, tuple[int, ...]]


def plan(ir: IR) -> Plan:
    """Every pass, in order, on the IR `ir.read` gave."""
    live = dead_code(ir)
    return Plan(live, reverse_schedule(live), summed_bias(live))


def dump(p: Plan) -> str:
    """The passes' results as text, a section a pass:

    `dead code: dropped %5 = np.cos(%1)` names each record no output, decision or raising
    operation needs (`kept %3 = ...: it may raise` one kept for that alone, or also); `reverse: g%8 -> %7` reads: record 8's cotangent flows into value 7 (`[%3,
    %4]`: a list argument's items); `g%5 = g%5 from %7 + from %6` a cotangent summed from two steps,
    in that order; `summed bias: %4 over axes (1,)` a new-axes getitem whose argument's cotangent is
    summed straight to its shape."""
    ir = p.ir
    lines = ["dead code:"]
    lines += [f"  dropped %{i} = {op_text(rec)}" for i, rec in ir.dropped.items()] or ["  none dropped"]
    lines += [f"  kept %{i} = {op_text(ir.ops[i])}: it may raise as Python does" for i in sorted(ir.raising)]
    lines.append("reverse:")
    for step in p.schedule.steps:
        for k, t in step.targets:
            to = "[" + ", ".join("_" if q is None else f"%{q}" for q in t) + "]" if type(t) is tuple else f"%{t}"
            lines.append(f"  g%{step.idx} -> {to}  (argument {k})")
    lines += [f"  g%{q} = " + " + ".join(f"from %{i}" for i in srcs) for q, srcs in sorted(p.schedule.into.items())
              if len(srcs) > 1]
    lines.append("summed bias:")
    lines += [f"  %{q} over axes {axes!r}" for q, axes in sorted(p.bias.items())] or ["  none"]
    return "\n".join(lines)


def dump_lowering(value_only: list[int], reused: list[tuple[int, str, str]], stmt_of: dict[int, int]) -> str:
    """What the passes over the lowered NumPy code did: `value only: %6` a record's forward step a
    gradient asked alone skips (compiled/parts.py `value_only`); `buffer reuse: %7 into v5:
    v5 = ...` a statement (of record 7's forward step, or `reverse` for a reverse step) written
    into a dead variable's buffer (compiled/reuse.py, taken by `Source.render`)."""
    record_of = {k: i for i, k in stmt_of.items()}
    lines = ["value only:"]
    lines += ["  " + " ".join(f"%{i}" for i in value_only)] if value_only else ["  none"]
    lines.append("buffer reuse:")
    for k, var, first in reused:
        i = record_of.get(k)
        lines.append(f"  {'reverse' if i is None else f'%{i}'} into {var}: {first}")
    if not reused:
        lines.append("  none")
    return "\n".join(lines)
