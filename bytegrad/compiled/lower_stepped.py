"""`np.where` records and zero-safe elementwise records, in the NumPy back end.

Once a mask is recorded, the general path swaps each elementwise record before it for its
zero-safe twin (runtime/zerosafe.py: an exact zero where the cotangent is exactly zero, even
where the partial is inf or NaN), and records `np.where` as a `WHERE` record whose reverse step
selects rather than multiplies. The swap depends only on the records' order, which a program's
guards and decisions fix, so the same records are zero-safe on every call the program runs.

Both are one record kind here, "stepped" (compiled/parts.py `Record.step`: WHERE, or the zero-safe
twin of ELEMENTWISE or UNARY), with one lowering. A program computes such a record's primal as an
elementwise one (`np.where(c, a, b)`, the condition read from the decision that computed it:
compiled/lower_numpy.py `decide`), and its reverse step is the record kind's own
(`Kind.backward`), called on a record rebuilt from the call's values, with the parents whose
cotangent the program needs (the others None, as the general path has them when they do not depend
on a differentiated argument): the same functions as the general sweep, so the same results bit
for bit. The Numba back end declines these records (compiled/lower_numba.py).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from bytegrad.compiled.parts import Record
from bytegrad.compiled.source import MAYBE, UNSET, operator_expr
from bytegrad.runtime.backward import UNARY

__all__ = ["forward_stepped", "reverse_stepped"]

_ndarray = np.ndarray


def forward_stepped(b: Any, rec: Record) -> None:
    """The record's primal, as an elementwise record's."""
    i = rec.idx
    ops = [b.operand(a, p, rec) for a, p in zip(rec.args, rec.parents + (None,) * len(rec.args))]
    v = b.var[i] = f"v{i}"
    b.stmt_of[i] = len(b.src.stmts)
    if type(rec.out) is not _ndarray:
        b.src.scalars.update((v, f"g{i}"))
    expr = operator_expr(rec.fn, ops) or f"{b.src.const(rec.fn, 'f')}({', '.join(ops)})"
    b.src.emit(f"{v} = {expr}", rec.site.lineno)


def reverse_stepped(b: Any, rec: Record, depends: set[int]) -> None:
    """The record kind's reverse step on the call's values; each parent's cotangent routed as the
    general sweep routes it."""
    i = rec.idx
    st = b.state.get(i, UNSET)
    targets = b.plan.schedule.targets(i)  # (compiled/passes.py `reverse_schedule`: the parents in `depends`)
    if st == UNSET or not targets:
        return
    cond = st == MAYBE
    g = f"g{i}"
    ops = [b.operand(a, p, rec) for a, p in zip(rec.args, rec.parents + (None,) * len(rec.args))]
    wanted = {p for _, p in targets}
    parents = rec.parents[0] if rec.step is UNARY.safe else tuple(p if p in wanted else None for p in rec.parents)
    kind, rule, site, fn = (b.src.const(x, n) for x, n in ((rec.step, "kind"), (rec.rule, "rule"),
                                                            (rec.site, "site"), (rec.fn, "f")))
    node = f"({kind}, {parents!r}, {site}, {rule}, ({''.join(o + ', ' for o in ops)}), {fn})"
    bars = b.tmp()
    pre: list[str] = []
    body = [f"{bars} = {kind}.backward({g}, {node}, v{i})"]
    single = rec.step is UNARY.safe
    temps = [bars]
    for k, p in targets:
        t = b.tmp()
        temps.append(t)
        body += [f"{t} = {bars}" if single else f"{t} = {bars}[{k}]",
                 f"if {t}.__class__ is FunctionType: {t} = {t}()",
                 f"if {t} is ZERO or {t} is NO_TANGENT: {t} = None"]
        b._contribute(p, t, True, body, pre, cond)
    body.append(f"del {', '.join(temps)}")
    lines = pre + ([f"if {g} is not None:"] + ["    " + x for x in body] if cond else body)
    b.src.emit(lines, rec.site.lineno)
