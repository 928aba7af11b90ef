"""An operation without a derivative rule in a capture run: the general path's answer, without running the call twice.

A capture run tracks every float argument (compiled/capture.py), the general path only the differentiated
ones. A function with no rule given a float the call does not differentiate (`t.is_integer()`) meets a
tracked value in the capture run only: raising there (NoRuleError) and running the call again on the
general path would repeat the effects the body had before that point (an append, an RNG draw, a print).

So the capture tape knows which of its leaves are differentiated (`Roots`: the leaves made while the
call's arguments are prepared, outside the preparation of the arguments it does not differentiate, and
those a rule makes in the run, as the general path does, np.vectorize's per element; not the values
read from globals and cells, nor the arrays made from constants), and which records depend on them (through their parents). At an operation with no rule (runtime/dispatch.py,
runtime/operators.py ask `tape.plain`):
- no operand depends on a differentiated leaf: the general path tracks none of them and runs the operation
  as it is, so the run does the same and goes on; the capture is refused (the reason names the function and
  the line) and the run's own result is the call's;
- an operand depends on one: the general path raises the same error at the same operation, so the capture
  run's error is the call's (`raised`), raised once;
- a record whose parents cannot be read: neither (the capture run's error sends the call to the general
  path, as before).
"""
from __future__ import annotations

import types
from typing import Any, Callable, Optional

import numpy as np

from bytegrad.compiled import objects
from bytegrad.errors import DifferentiationError, qualname
from bytegrad.runtime import tape as _tape
from bytegrad.runtime.tape import Tape

__all__ = ["Roots", "ARGS_DONE", "forward", "general_ids", "general_tracked", "leaf", "plain_write", "track_read", "plain", "raised", "started", "sweep"]

#: put last in the `tracked` reads handed to `Differentiated._forward`: the arguments are prepared
ARGS_DONE = object()

_BuiltinMethod = types.BuiltinMethodType  # (`t.is_integer`: its `__self__` an operand, as runtime/dispatch.py reads it)


class Roots:
    """A capture tape's differentiated leaves (`wrt`), and what each record depends on (`dep`: True when on a
    differentiated leaf, False when not, None when its parents cannot be read), filled in as asked."""

    __slots__ = ("phase", "wrt", "dep", "raised")

    def __init__(self) -> None:
        self.phase = True  # leaves made now are differentiated arguments' (until `ARGS_DONE`)
        self.wrt: set[int] = set()
        self.dep: list[Optional[bool]] = []
        self.raised: Any = None  # the site where the run raised as the general path raises too


def leaf(tape: Any, value: Any) -> int:
    """`Tape.leaf`, noting whether the leaf is a differentiated argument's."""
    idx = Tape.leaf(tape, value)
    if tape.roots.phase:
        tape.roots.wrt.add(idx)
    return idx


def track_read(tape: Any, value: Any) -> None:
    """`CaptureTape.track_read` (compiled/objects.py): a value read from a global or a cell is not
    differentiated; `ARGS_DONE` ends the arguments' preparation."""
    roots = tape.roots
    if value is ARGS_DONE:  # (a leaf a rule makes in the run, np.vectorize's per element, the general path
        roots.phase = True  # makes too: differentiated, as there; the capture's made arrays are not, `_depends`)
        return
    phase, roots.phase = roots.phase, False
    try:
        objects.track_read(tape, value)
    finally:
        roots.phase = phase


def forward(d: Any, args: tuple, positions: Any, tape_class: type, tracked: list, wrt: Any,
            prepare: Callable[[Any, Any], Any], every: bool = False) -> Any:
    """The capture run's `d._forward`, on a `tape_class` whose leaves made by `prepare` (how an argument the
    call does not differentiate is tracked) and by `tracked` reads are noted as not differentiated (`every`: a
    pullback's, whose general path differentiates every argument: those of `prepare` are too). A
    DifferentiationError it raises where the general path raises too is marked (`raised(exc)`)."""
    tapes: list[Any] = []

    def made() -> Any:
        tapes.append(tape_class())
        return tapes[-1]

    def prepare_other(value: Any, tape: Any) -> Any:
        roots = tape.roots
        phase, roots.phase = roots.phase, every
        try:
            return prepare(value, tape)
        finally:
            roots.phase = phase

    try:
        return d._forward(args, {}, positions, strict=False, capture=made, tracked=(*tracked, ARGS_DONE),
                          protect=frozenset(wrt), prepare_other=prepare_other)
    except DifferentiationError as exc:  # (raised at that site: not one user code caught, then another)
        site = tapes[0].roots.raised if tapes else None
        if site is not None and exc.loc == site.loc():
            exc.__dict__["_bytegrad_general"] = True
        elif tapes and tapes[0].started and not raised(exc):  # (the body ran: `started`, compiled/abandon.py)
            exc.__dict__["_bytegrad_started"] = tapes[0]
        raise


def _indices(parents: Any, out: list[int]) -> bool:
    """The node indices in a record's `parents` (an index, None, or a tuple, list or dict of them), added
    to `out`; False when they cannot be read."""
    t = type(parents)
    if t is int:
        out.append(parents)
    elif parents is None:
        pass
    elif t is tuple or t is list or t is dict:
        return all(_indices(p, out) for p in (parents.values() if t is dict else parents))
    else:
        return False
    return True


def _depends(tape: Any, idx: int) -> Optional[bool]:
    roots = tape.roots
    dep, nodes = roots.dep, tape.nodes
    for i in range(len(dep), len(nodes)):
        node = nodes[i]
        if node is None:
            dep.append(i in roots.wrt and i not in tape.made)
            continue
        found: list[int] = []
        if type(node) is not tuple or len(node) < 2 or not _indices(node[1], found):
            dep.append(None)
            continue
        seen = [dep[j] if 0 <= j < i else None for j in found]
        dep.append(True if True in seen else (None if None in seen else False))
    return dep[idx] if 0 <= idx < len(dep) else None


def _operand_state(tape: Any, value: Any, depth: int = 0) -> Optional[bool]:
    """True when `value` (or a value a tuple or list of it holds: what the runtime looks into, `parent_of`)
    depends on a differentiated leaf, False when nothing tracked in it does, None when unknown (an array
    that may be a view of memory the run wrote tracked values into: `writes.view_parent`)."""
    idx = tape.ids.get(id(value))
    if idx is not None:
        return _depends(tape, idx)
    t = type(value)
    if t is tuple or t is list:
        if depth > 8:
            return None
        states = [_operand_state(tape, v, depth + 1) for v in value]
        return True if True in states else (None if None in states else False)
    return None if t is np.ndarray and tape.owners else False


def plain(tape: Any, fn: Any, args: tuple, kwargs: Optional[dict], site: Any) -> bool:
    """`Tape.plain` of a capture tape: True (the caller runs `fn(*args, **kwargs)` as it is, and the capture is
    refused) when no operand depends on a differentiated leaf."""
    operands = [*args, *(kwargs or {}).values()]
    if type(fn) is _BuiltinMethod:
        operands.append(fn.__self__)
    states = [_operand_state(tape, v) for v in operands]
    if True in states:
        tape.roots.raised = site  # (the general path raises at this operation too)
        return False
    if None in states:
        return False
    name = qualname(fn) if not isinstance(fn, type) else fn.__qualname__
    tape.refuse(f"calls {name} on a value that depends on no differentiated argument (one the call does not "
                f"differentiate, or an array made from constants): {name} has no derivative rule that takes it, "
                "and a program would track it", site)
    return True


def plain_write(tape: Any, parents: Any, site: Any, marked: list[int], why: Optional[str] = None) -> bool:
    """`Tape.plain_write` of a capture tape: a write through a view bytegrad cannot map back to its owner (a
    `.view(np.float32)`, a complex array's `.real`) is one the general path makes as it is when neither the
    owner's version nor the value depends on a differentiated leaf (it tracks neither): so does the run (the
    records it made stale, `marked`, which the general path does not have, are current again: no derivative
    flows through them), and the capture is refused. When one does, the general path raises here too."""
    found: list[int] = []
    if not _indices(parents, found):
        return False
    states = [_depends(tape, i) for i in found]
    if True in states:
        tape.roots.raised = site  # (`raised`)
        return False
    if None in states or any(_depends(tape, j) is not False for j in marked):
        return False
    for j in marked:
        del tape.stale[j]
    tape.refuse(why or ("writes through a view in a memory layout bytegrad cannot map back to its array, values that "
                        "depend on no differentiated argument: the general path stores them as they are, and a program "
                        "would track them"), site)
    return True


def general_tracked(tape: Any, value: Any) -> bool:
    """`CaptureTape.general_tracked`: whether a tracked `value` is one the general path tracks too (it may depend
    on a differentiated leaf), as rules/closures.py `tracked` asks it for a rule (a SciPy solver's, which
    differentiates the values its callable reads, and refuses a tracked ODE time). One that is not is a constant
    there: so it is for the rule here, and the capture is refused (a program would not see it as an input)."""
    if _operand_state(tape, value) is not False:
        return True
    import sys

    from bytegrad.runtime import monitor

    monitor.refuse_at_user_line(tape, "hands a value the call does not differentiate to a rule that looks for the "
                                "differentiated values a function it is given reads (np.vectorize's, a SciPy solver's): "
                                "the general path takes it as a constant, and so does the run, which a program would "
                                "not replay", sys._getframe(1))
    return False


def general_ids(tape: Any, ids: dict[int, int]) -> dict[int, int]:
    """`CaptureTape.general_ids`: the entries of `ids` (the tape's, or a part of them) for the values the general
    path tracks too (those that may depend on a differentiated leaf): runtime/monitor.py checks a blind call
    from C on them, and lets one that meets only the others run, as the general path does."""
    nodes = tape.nodes
    if nodes:
        _depends(tape, len(nodes) - 1)
    dep = tape.roots.dep
    n = len(dep)
    return {k: i for k, i in ids.items() if not (0 <= i < n and dep[i] is False)}


def started(exc: BaseException) -> Any:
    """The tape of the capture run that raised `exc` after the user's body had started, or None (taken off
    the error: it is not kept alive by it)."""
    return getattr(exc, "__dict__", {}).pop("_bytegrad_started", None)


def raised(exc: BaseException) -> bool:
    """Whether a capture run's error is raised where the general path raises it too (the call's error)."""
    return bool(getattr(exc, "__dict__", {}).get("_bytegrad_general"))


def sweep(tape: Any, seeds: dict[int, Any]) -> list[Any]:
    """The capture's gradient sweep (`runtime.tape.sweep`) as the general path's: a record that depends on no
    differentiated leaf (only the capture tracks its inputs: `np.linalg.det(W)`, `np.sqrt(t)` of arguments not
    differentiated) is not stepped back through, as the general path records none of them (their reverse
    steps could raise, `det` of a singular matrix, or warn); the gradients of the differentiated leaves are
    the same either way."""
    nodes = tape.nodes
    if not nodes or not seeds:
        return _tape.sweep(tape, seeds)
    _depends(tape, len(nodes) - 1)
    dep = tape.roots.dep
    pruned = {i: node for i, node in enumerate(nodes) if node is not None and dep[i] is False}
    for i in pruned:
        nodes[i] = None
    try:
        return _tape.sweep(tape, seeds)
    finally:
        for i, node in pruned.items():
            nodes[i] = node
