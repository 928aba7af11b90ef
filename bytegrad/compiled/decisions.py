"""The operands a capture's decision keeps (compiled/capture.py `CaptureTape.check`).

A compiled program computes each decision again from its operands: a tracked operand is read from
the program's values, any other is kept as the capture saw it. Two kinds of operand would make that
check wrong, so they are dealt with here:

- a list, tuple, dict or set holding tracked values (`[t, 1.0] == ref`, `0.5 in {t: v}`): the
  container itself is not tracked, so the program would compare the captured container, whatever
  the later values; the decision is refused;
- a mutable container without tracked values (`t in seen` on a list or dict the function fills
  later): the program would read the container as it is after the capture run, not as it was when
  the decision was made; it keeps a copy taken at the decision.
"""
from __future__ import annotations

import copy
from typing import Any

from bytegrad.runtime import keys
from bytegrad.runtime.recording import parent_of

__all__ = ["operands"]

_MUTABLE = (list, dict, set, bytearray)
#: `k in d`, `k not in d`: the functions CONTAINS_OP's decisions call (transform/opcodes `predicate_fn`), by name
_CONTAINS = frozenset({("bytegrad.transform.opcodes.decode", "_contains"),
                       ("bytegrad.transform.opcodes.decode", "_not_contains")})


def operands(tape: Any, fn: Any, args: tuple, site: Any) -> tuple[tuple, tuple]:
    """(the operands to keep, the tape index of each) for the decision `fn(*args)` at `site`; the
    tape is told (`refuse`) of an operand the program could not check."""
    ids = tape.ids
    at_ids = tuple(ids.get(id(a)) for a in args)
    kept = []
    for k, (a, at) in enumerate(zip(args, at_ids)):
        if at is None and _holds_tracked(ids, a, keys_only=k == 1 and _contains(fn)):
            tape.refuse(f"decides on a {type(a).__name__} holding values computed from the arguments "
                        "(a program would check the captured container, not the one of the call)", site)
        elif at is None and type(a) in _MUTABLE:
            try:
                a = copy.deepcopy(a)  # (as it is now: the run may write into it later)
            except (TypeError, copy.Error):  # (an item that cannot be copied: the decision cannot be kept)
                tape.refuse(f"decides on a {type(a).__name__} that cannot be copied", site)
        kept.append(a)
    return tuple(kept), at_ids


def _holds_tracked(ids: dict[int, int], a: Any, keys_only: bool) -> bool:
    """Whether the container `a` holds a tracked value (of a dict, only its keys where `keys_only`: the
    container of `k in d`)."""
    t = type(a)
    if t is list or t is tuple:
        return parent_of(ids, a) is not None
    if t is set or t is frozenset:
        return any(ids.get(id(v)) is not None for v in a)
    if isinstance(a, dict):
        return keys.keyed_dict(ids, a) or (not keys_only and parent_of(ids, list(a.values())) is not None)
    return False


def _contains(fn: Any) -> bool:
    return (getattr(fn, "__module__", None), getattr(fn, "__name__", None)) in _CONTAINS
