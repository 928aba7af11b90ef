"""Rules that return a tuple (`np.linalg.svd`, `eigh`, `slogdet`, `qr`), in the NumPy back end.

On the general path such a rule's record holds a `TupleOut` (runtime/records.py) and each float
element of its output is a "tuple item" record of its own (runtime/recording.py `push_output`).
The reverse sweep adds each item's cotangent into its slot of the tuple's cotangent (ZERO in the
others) and then runs the rule's reverse step, `RULE.backward` (runtime/backward.py `_bw_rrule`:
the slots materialized to their items' shapes, a namedtuple rebuilt, the pullback's result
checked). A program does the same, with the same functions:

- forward: the tuple record is `v, p = rrule(args)` (or `fn(args)` where nothing is
  differentiated through it), each item record `v_j = v[k]`;
- reverse: an item's step only passes its cotangent on (the tuple's state records that one was
  set); the tuple's step builds the cotangent tuple from its items' cotangents, in slot order,
  and calls `RULE.backward` on it, as the general sweep does, then routes each argument's
  cotangent as any rule's.

The Numba back end declines these programs (compiled/lower_numba.py).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from bytegrad.compiled.parts import Record, flat_items
from bytegrad.compiled.source import MAYBE, SET, UNSET
from bytegrad.rules._shape import stand_in
from bytegrad.runtime.records import TupleOut

__all__ = ["forward_item", "is_tuple_rule", "reverse_item", "reverse_tuple"]

_ndarray = np.ndarray


def is_tuple_rule(rec: Record) -> bool:
    """Whether `rec` is a rule whose output is a tuple (its items are records of their own)."""
    return rec.kind == "rrule" and type(rec.out) is TupleOut


def forward_item(b: Any, rec: Record) -> None:
    """`v_j = v[k]`: element k of a tuple record's output."""
    i = rec.idx
    v = b.var[i] = f"v{i}"
    b.stmt_of[i] = len(b.src.stmts)
    if type(rec.out) is not _ndarray:
        b.src.scalars.update((v, f"g{i}"))
    b.src.emit(f"{v} = {b.var[rec.parents[0]]}[{rec.args[1]!r}]", rec.site.lineno)


def reverse_item(b: Any, rec: Record) -> None:
    """An item's reverse step: its cotangent is its tuple's slot, read by the tuple's own step;
    here only the tuple's state (SET where any item's is, MAYBE where one may be)."""
    st = b.state.get(rec.idx, UNSET)
    if st == UNSET:
        return
    p = rec.parents[0]
    old = b.state.get(p, UNSET)
    b.state[p] = SET if SET in (st, old) else MAYBE


def _items_of(b: Any, i: int) -> dict[int, int]:
    """Slot -> item record of tuple record i, for the items whose cotangent may be set."""
    return {r.args[1]: j for j, r in b.records.items()
            if r.kind == "item" and r.parents[0] == i and b.state.get(j, UNSET) != UNSET}


def _like(out: TupleOut) -> TupleOut:
    """The tuple output as `RULE.backward` reads it (its items' shapes and dtypes, its type)."""
    items = out.value
    shaped = [stand_in(v) if type(v) is _ndarray else v for v in items]
    if type(items) is tuple:
        return TupleOut(tuple(shaped))
    return TupleOut(type(items)(*shaped) if hasattr(items, "_fields") else type(items)(shaped))


def reverse_tuple(b: Any, rec: Record, depends: set[int]) -> None:
    """The reverse step of a rule with a tuple output: `RULE.backward` of the items' cotangents."""
    i = rec.idx
    targets = [(k, p) for k, p in enumerate(rec.parents) if p is not None and p in depends]
    targets += [(k, items) for k, items in rec.nested.items() if any(q in depends for q in flat_items(items))]
    slots = _items_of(b, i)
    if not targets or not slots:
        return
    n = len(rec.out.value)
    ct = "(" + "".join((f"g{slots[k]}" if k in slots else "ZERO") + ", " for k in range(n)) + ")"
    maybe = [f"g{j}" for j in slots.values() if b.state.get(j) == MAYBE]
    cond = len(maybe) == len(slots)  # (every slot may be None: then the general sweep skips the step)
    pre: list[str] = []
    body: list[str] = []
    shaped = tuple(stand_in(a) if type(a) is _ndarray else a for a in rec.args)
    node = b.src.const((None, rec.parents, rec.site, None, shaped, rec.fn), "node")
    bars = b.tmp()
    body.append(f"{bars} = _untrusted({ct}, {node}, p{i}, {b.src.const(_like(rec.out), 'like')})")
    for k, p in targets:
        t = b.tmp()
        body += [f"{t} = {bars}[{k}]", f"if {t}.__class__ is FunctionType: {t} = {t}()",
                 f"if {t} is ZERO or {t} is NO_TANGENT: {t} = None"]
        if type(p) is tuple:
            b._items(p, t, body, pre, cond)
        else:
            b._contribute(p, t, True, body, pre, cond)
    temps = sorted({w for line in body for w in line.replace("(", " ").replace(")", " ").replace(",", " ").split()
                    if w.startswith("_t") and w[2:].isdigit()})
    body.append(f"del {', '.join(temps)}")
    lines = pre + ([f"if {' or '.join(g + ' is not None' for g in maybe)}:"] + ["    " + x for x in body]
                   if cond else body)
    b.src.emit(lines, rec.site.lineno)
