"""The program IR: what a capture recorded, read once from its tape into typed parts.

A capture tape (compiled/capture.py) holds every operation on the tracked values, the decisions
Python code took on them and the arrays made from constants. `read` turns it into an `IR`:

- `inputs`: the tracked leaves (arguments, and arrays read from globals), each with its type;
- `made`: arrays the function made from constants (`np.zeros(3)`), made again per call;
- `ops`: the operations the outputs and the decisions need, in the tape's order, each a `Record`
  (compiled/parts.py: its kind, rule, operands and options) with the type of its output;
- `decisions`: each check Python code made on a tracked value (a comparison, a call without a
  derivative), at its place among the operations, with its captured result;
- `depends`: the values that depend on a differentiated leaf (the reverse pass is theirs);
- `outputs`: the tape indices of the values the program returns.

The back ends (compiled/lower_numpy.py's `Builder`, compiled/lower_numba.py) write their code
from the IR, not from the tape. `dump` prints it, one line a value, for `explain`-style reading
and golden tests (tests/test_ir.py). Effects have no node: a capture that saw one made no
program (compiled/effects.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from bytegrad.compiled.parts import Record, item_pairs, python_raises
from bytegrad.compiled.source import Ineligible
from bytegrad.errors import qualname
from bytegrad.runtime.records import IDENTITY
from bytegrad.runtime.tape import Tape

__all__ = ["IR", "Decision", "ValueType", "depends_on", "dump", "op_text", "read", "type_of", "version_at"]

_ndarray = np.ndarray


@dataclass(frozen=True)
class ValueType:
    """A value's type as the guards fix it: `array` (dtype, shape) or a Python/NumPy `scalar`."""

    kind: str
    dtype: str
    shape: tuple[int, ...] = ()

    def __str__(self) -> str:
        if self.kind == "array":
            return f"{self.dtype}[{', '.join(map(str, self.shape))}]"
        return self.dtype


def type_of(value: Any) -> ValueType:
    if type(value) is _ndarray:
        return ValueType("array", str(value.dtype), value.shape)
    return ValueType("scalar", type(value).__name__)


@dataclass(frozen=True)
class Decision:
    """A check on tracked values: `fn(*args, **kwargs)` gave `result` after `at` records."""

    at: int
    fn: Any
    args: tuple
    kwargs: Optional[dict]
    result: Any
    site: Any


def operand_ids(tape: Tape, args: tuple, at: int) -> list[Optional[int]]:
    """The tape index of each operand of a decision when the capture made it, before record `at`
    (capture.py `Operands`; an object recorded again later, as `float(a)` gives `a` itself, or an
    array written in place later, has a later index in `ids` by then)."""
    at_ids = getattr(args, "at_ids", None)
    return list(at_ids) if at_ids is not None else [version_at(tape, a, at) for a in args]


@dataclass
class IR:
    """A capture's computation: see the module's docstring."""

    inputs: dict[int, ValueType] = field(default_factory=dict)
    made: dict[int, tuple[Any, tuple, Optional[dict]]] = field(default_factory=dict)
    ops: dict[int, Record] = field(default_factory=dict)
    types: dict[int, ValueType] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)
    order: list[int] = field(default_factory=list)
    depends: set[int] = field(default_factory=set)
    outputs: list[int] = field(default_factory=list)
    differentiated: frozenset[int] = frozenset()
    #: records whose operation raises on the general path in some cases (Python's float division,
    #: `math`): computed where they are, whether anything reads them or not (compiled/parts.py)
    raising: frozenset[int] = frozenset()
    #: the tape indices each decision (in `decisions`' order) reads
    decision_reads: list[list[int]] = field(default_factory=list)
    #: the records compiled/passes.py's `dead_code` left out (nothing needs them)
    dropped: dict[int, Record] = field(default_factory=dict)


def read(tape: Tape, outs: list[int], wrt_leaves: set[int], known: set[int]) -> IR:
    """The IR of the values `outs` (tape indices) of a capture's `tape`; `wrt_leaves`: the leaves
    differentiated; `known`: the leaves the program reads as inputs. Raises `Ineligible` for a
    tape a program cannot replay (a value that entered without an operation, an operand
    overwritten in place after it was read). Every record is in it: compiled/passes.py's
    `dead_code` keeps those the outputs, the decisions and the raising operations need."""
    nodes, values = tape.nodes, tape.values
    made = getattr(tape, "made", {})
    decided = getattr(tape, "decided", {})  # arrays decisions gave: read from their variables
    ir = IR(outputs=list(outs), differentiated=frozenset(wrt_leaves))
    records: dict[int, Record] = {}
    for i, node in enumerate(nodes):
        if node is None:
            if i not in known and i not in made and i not in decided:
                raise Ineligible("a value entered the tape without an operation (a nested derivative)")
            if i in known:
                ir.inputs[i] = type_of(values[i])
            continue
        rec = Record(i, node, values[i])
        if rec.kind == "item":  # (the tuple it is an element of)
            rec.args = (values[rec.parents[0]], rec.args[1])
        read_ = list(zip(rec.parents, rec.args))
        for k, items in rec.nested.items():
            read_ += item_pairs(items, rec.args[k])
        for p, a in read_:
            if p is not None and values[p] is not a and not _copy_of(tape, p, a):
                raise Ineligible(f"an argument of {qualname(rec.fn)} was overwritten in place", rec.site)
        records[i] = rec
    ir.decisions = [Decision(*check) for check in getattr(tape, "checks", ())]
    ir.raising = frozenset(i for i, rec in records.items() if python_raises(rec))
    for d in ir.decisions:  # (the tape indices each decision reads, as it read them: what it reads is computed)
        reads = [p for p in operand_ids(tape, d.args, d.at) if p is not None]
        ir.decision_reads.append(reads + [p for p in (version_at(tape, a, d.at) for a in (d.kwargs or {}).values())
                                          if p is not None])
    # (a made array, and an array a decision gave, is a leaf of the tape)
    ir.order = sorted(records.keys() | ir.inputs.keys() | made.keys() | decided.keys())
    ir.ops = records
    ir.made = {i: made[i] for i in ir.order if i in made}
    ir.types = {i: type_of(values[i]) for i in ir.order}
    ir.depends = depends_on(ir, wrt_leaves)
    return ir


def depends_on(ir: IR, wrt_leaves: set[int] | frozenset[int]) -> set[int]:
    """The differentiated leaves and the values of `ir.order` computed from them."""
    depends = set(wrt_leaves)
    for i in ir.order:
        op = ir.ops.get(i)
        if op is not None and any(p in depends for p in op.inputs()):
            depends.add(i)
    return depends


def version_at(tape: Tape, a: Any, at: int) -> Optional[int]:
    """The tape index of `a`'s value as it was before record `at` (an array written in place later has
    newer versions, runtime/writes.py), or None when `a` is not tracked then."""
    i = tape.ids.get(id(a))
    if i is None or i < at:
        return i
    values = tape.values
    for j in range(min(at, len(values)) - 1, -1, -1):
        if values[j] is a:
            return j
    return None


def _copy_of(tape: Tape, p: int, a: Any) -> bool:
    """Whether `a` is the recorded copy of value p that a write gave the record reading it (copy on
    write, runtime/tape.py): a program's versions are never overwritten, so it reads p's variable."""
    j = tape.ids.get(id(a))
    if j is None:
        return False
    node = tape.nodes[j]
    return node is not None and node[0] is IDENTITY and node[1] == (p,) and tape.values[j] is a


def dump(ir: IR) -> str:
    """The IR as text: a line per input, made array, operation and decision, in the tape's order.

    `%3 = sin(%1)  float64[3]  (elementwise, line 4) *` reads: value 3 is `sin` of value 1, a
    float64 array of shape (3,), an elementwise record from line 4; `*` marks the values that
    depend on a differentiated leaf (the reverse pass runs through them)."""
    lines = []
    decisions = sorted(ir.decisions, key=lambda d: d.at)
    k = 0
    for i in ir.order:
        while k < len(decisions) and decisions[k].at <= i:
            lines.append(_decision_line(decisions[k]))
            k += 1
        mark = " *" if i in ir.depends else ""
        if i in ir.inputs:
            role = "differentiated input" if i in ir.differentiated else "input"
            lines.append(f"%{i} = {role}  {ir.inputs[i]}{mark}")
        elif i in ir.made:
            fn, args, kwargs = ir.made[i]
            lines.append(f"%{i} = made {_name(fn)}({_args(args, kwargs)})  {ir.types[i]}")
        elif i in ir.ops:
            rec = ir.ops[i]
            operands = [f"%{p}" if p is not None else _short(a) for p, a in zip(rec.parents, rec.args)]
            for pos, items in rec.nested.items():
                operands[pos] = _items_text(items)
            line = getattr(rec.site, "lineno", None)
            where = f", line {line}" if line else ""
            lines.append(f"%{i} = {_name(rec.fn)}({', '.join(operands)})  {ir.types[i]}  ({rec.kind}{where}){mark}")
    lines += [_decision_line(d) for d in decisions[k:]]
    lines.append("return " + ", ".join(f"%{i}" for i in ir.outputs))
    return "\n".join(lines)


def _items_text(items: tuple) -> str:
    return "[" + ", ".join(_items_text(q) if type(q) is tuple else f"%{q}" if q is not None else "_"
                           for q in items) + "]"


def op_text(rec: Record) -> str:
    """`fn(%p, _)` of a record: its function as `dump` names it, its operands (`_`: not on the tape)."""
    return f"{_name(rec.fn)}({', '.join('_' if p is None else f'%{p}' for p in rec.parents)})"


def _decision_line(d: Decision) -> str:
    operands = ", ".join(_short(a) for a in d.args)
    line = getattr(d.site, "lineno", None)
    return f"check {_name(d.fn)}({operands}) == {_short(d.result)}" + (f"  (line {line})" if line else "")


def _name(fn: Any) -> str:
    name = qualname(fn)
    if name.startswith("bytegrad.transform.opcodes.") and "._bool_" in name:  # (3.13: a comparison and its bool())
        name = "operator." + name.rsplit("_", 1)[1]
    return name.replace("numpy.", "np.").replace("_operator.", "operator.")


def _short(value: Any) -> str:
    if type(value) is _ndarray:
        return f"<{value.dtype}[{', '.join(map(str, value.shape))}]>"
    if isinstance(value, np.generic):
        value = value.item()
    if type(value) is float and len(repr(value)) > 10:
        return f"{value:.6g}"
    text = repr(value)
    return text if len(text) <= 24 else text[:21] + "..."


def _args(args: tuple, kwargs: Optional[dict]) -> str:
    parts = [_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in (kwargs or {}).items()]
    return ", ".join(parts)
