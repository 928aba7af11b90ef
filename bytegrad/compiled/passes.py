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
  `_squeezed_sum` lowers it where the cotangent is known to be an array then);
- `value_only`: the records only the output's value reads (the loss, and what only it reads):
  no reverse step, decision or other record needs them, so a gradient asked alone skips them;
- `buffer_reuse`: the records whose output is a new array of the program's own (rules 1, 2 and 5
  of compiled/reuse.py), and for each elementwise record the operands whose buffers it may
  write its result into.

`Plan` holds what they give; `dump` lists it, one section a pass (golden-tested in
tests/test_passes_ir.py). The NumPy lowering takes the last two's results as what it may do, and
checks on its own statements what only they show: a value-only step is skipped where no
statement it emitted beside the records' (a count guard, a write's) reads it (compiled/parts.py
`value_only`); a buffer is taken where no later statement reads its variable (rule 3, in
`Source.render`) and, when the program runs, nothing else holds it (rule 4). The reverse steps'
in-place sums and partials (compiled/reuse.py `accumulate`, `lower_partial`) decide on the
expressions the lowering writes, with the `made` records of `buffer_reuse`. `dump_lowering`
lists what the lowering did.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

from bytegrad.compiled.ir import IR, depends_on, op_text
from bytegrad.compiled.parts import flat_items
from bytegrad.compiled.reuse import donors, fresh
from bytegrad.rules._apply import shape_of
from bytegrad.rules._shape import unbroadcast_plan
from bytegrad.runtime.backward import partial_uses
from bytegrad.runtime.records import TupleOut

__all__ = ["Plan", "Schedule", "Step", "buffer_reuse", "dead_code", "dump", "dump_lowering", "plan",
           "program_form", "reverse_schedule", "summed_bias", "value_only"]

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


def program_form(rec: Any, depends: set[int]) -> Any:
    """The rule's ProgramForm where it holds for these arguments and gives every needed cotangent
    (the back ends write such a record as its form: no rule call, no pullback closure); else None."""
    form = getattr(rec.rule.rrule, "program_form", None) if rec.kind == "rrule" else None
    if form is None or not rec.trusted or rec.nested or not form.when(*rec.args, **(rec.kwargs or {})):
        return None
    for k, p in enumerate(rec.parents):
        if p is not None and p in depends and (k >= len(form.cotangents) or form.cotangents[k] is None):
            return None
    return form


#: an operand in a ProgramForm's template
_OPERAND = re.compile(r"\{(\d+)\}")


def reverse_reads(ir: IR, schedule: Schedule) -> set[int]:
    """The values the reverse sweep may read: an elementwise step the operands (or output) its
    partials read (`partial_uses`), a ProgramForm's step the operands its cotangents' templates
    name, a tuple's item nothing; any other step (a pullback closure, a write, a tuple, a loop)
    its record and every input."""
    reads: set[int] = set()
    for step in schedule.steps:
        i = step.idx
        rec = ir.ops[i]
        form = program_form(rec, ir.depends) if type(rec.out) is not TupleOut else None
        if rec.kind == "item":  # its cotangent is its tuple's slot, read by the tuple's own step
            continue
        if rec.kind == "elementwise":
            n, partials = len(rec.args), rec.rule.partials
            for k, _ in step.targets:
                d = partials[k] if k < len(partials) else None
                if d is None or d.__class__ is int or d.__class__ is float:
                    continue
                uses = partial_uses(d, n)
                reads.update(rec.parents[j] for j in uses if j < n and rec.parents[j] is not None)
                if n in uses:
                    reads.add(i)
        elif form is not None:
            for k, _ in step.targets:
                reads.update(rec.parents[j] for j in map(int, _OPERAND.findall(form.cotangents[k]))
                             if j < len(rec.parents) and rec.parents[j] is not None)
        else:
            reads.add(i)
            reads.update(rec.inputs())
    return reads


#: record kinds whose forward step is more than one assignment of their value (compiled/writes.py,
#: lower_stepped.py): never skipped alone
_COMPOUND = frozenset({"write", "zerosafe", "stepped"})


def value_only(ir: IR, schedule: Schedule) -> tuple[int, ...]:
    """The records only the output's value reads (a program of one output): not read by a reverse
    step (`reverse_reads`), a decision or a record outside them, not a record that may raise as
    Python does, and a one-assignment step; a gradient asked alone skips them. The output first,
    then each record whose readers are all value-only."""
    if len(ir.outputs) != 1 or ir.outputs[0] not in ir.ops:
        return ()
    out = ir.outputs[0]
    kept = reverse_reads(ir, schedule) | ir.raising | {p for reads in ir.decision_reads for p in reads}
    readers: dict[int, set[int]] = {}
    for i, rec in ir.ops.items():
        for q in rec.inputs():
            readers.setdefault(q, set()).add(i)
    chosen: set[int] = set()
    for i in reversed(ir.order):  # readers before what they read
        op = ir.ops.get(i)
        if op is None or i in kept or op.kind in _COMPOUND:
            continue
        others = readers.get(i, set()) - {i}
        if (others or i == out) and others <= chosen:
            chosen.add(i)
    return tuple(sorted(chosen))


def buffer_reuse(ir: IR) -> tuple[frozenset[int], dict[int, tuple[int, ...]]]:
    """(the records whose output is a new array one of the program's own ufuncs or matrix products
    made: rule 1 of compiled/reuse.py; for each elementwise record the operands, among those, that
    have its result's shape and dtype, when that has at least INPLACE_MIN_SIZE elements: rules 2
    and 5). Whether a buffer is then taken is decided where the program's statements are known
    (rule 3) and when it runs (rule 4)."""
    made = frozenset(i for i, rec in ir.ops.items() if fresh(rec, program_form(rec, ir.depends) is not None))
    into = {i: found for i, rec in ir.ops.items() if rec.kind == "elementwise" and (found := donors(rec, made))}
    return made, into


@dataclass(frozen=True)
class Plan:
    """What the passes give a back end: the live IR, its reverse sweep, the summed biases, the
    value-only records, the records that made their arrays and the buffers each record may take."""

    ir: IR
    schedule: Schedule
    bias: dict[int, tuple[int, ...]]
    value_only: tuple[int, ...] = ()
    made: frozenset[int] = frozenset()
    into: dict[int, tuple[int, ...]] = field(default_factory=dict)


def plan(ir: IR) -> Plan:
    """Every pass, in order, on the IR `ir.read` gave."""
    live = dead_code(ir)
    schedule = reverse_schedule(live)
    made, into = buffer_reuse(live)
    return Plan(live, schedule, summed_bias(live), value_only(live, schedule), made, into)


def dump(p: Plan) -> str:
    """The passes' results as text, a section a pass:

    `dead code: dropped %5 = np.cos(%1)` names each record no output, decision or raising
    operation needs (`kept %3 = ...: it may raise` one kept for that alone, or also); `reverse: g%8 -> %7` reads: record 8's cotangent flows into value 7 (`[%3,
    %4]`: a list argument's items); `g%5 = g%5 from %7 + from %6` a cotangent summed from two steps,
    in that order; `summed bias: %4 over axes (1,)` a new-axes getitem whose argument's cotangent is
    summed straight to its shape; `value only: %8 %9` the records only the output's value reads;
    `buffer reuse: %3 may write into %2` an elementwise record that may write its result into
    the array record 2 made."""
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
    lines.append("value only:")
    lines += ["  " + " ".join(f"%{i}" for i in p.value_only)] if p.value_only else ["  none"]
    lines.append("buffer reuse:")
    lines += [f"  %{i} may write into " + " or ".join(f"%{q}" for q in qs) for i, qs in sorted(p.into.items())] \
        or ["  none"]
    return "\n".join(lines)


def dump_lowering(skipped: list[int], reused: list[tuple[int, str, str]], stmt_of: dict[int, int]) -> str:
    """What the NumPy lowering did of it: `value only, skipped: %6` a record's forward step a
    gradient asked alone skips (compiled/parts.py `value_only`, among the pass's records);
    `buffer reuse, taken: %7 into v5: v5 = ...` a statement (of record 7's forward step, or
    `reverse` for a reverse step) written into a dead variable's buffer (compiled/reuse.py,
    taken by `Source.render`)."""
    record_of = {k: i for i, k in stmt_of.items()}
    lines = ["value only, skipped:"]
    lines += ["  " + " ".join(f"%{i}" for i in skipped)] if skipped else ["  none"]
    lines.append("buffer reuse, taken:")
    for k, var, first in reused:
        i = record_of.get(k)
        lines.append(f"  {'reverse' if i is None else f'%{i}'} into {var}: {first}")
    if not reused:
        lines.append("  none")
    return "\n".join(lines)
