"""An attribute read off a method's parameter that holds a number, a string or None in every call.

A user operator written for both its own type and numbers (`Vec.__add__`: `other.data if
isinstance(other, Vec) else other`) reads `other.data` on a line the static check
(compiled/eligibility.py) sees with `other` inactive when the run called it with a constant
(`w + 1.0`): "reads the attribute .data of an object that is not an argument". What an attribute
read gives on an int, float, complex, bool, str or None is fixed by the value's type (a method of a
builtin type, or AttributeError), and those values, reaching a callee of the run, come from the
caller's code or its guarded values (anything else passed to a callee is refused by
`capture._unreplayable`). `allowed_param_reads` drops that reason for a read made directly off
such a parameter (never rebound), when every call of the function the run made passed it such a
value; any other read on the line stays refused.
"""
from __future__ import annotations

import dis
from collections import Counter
from typing import Any

from bytegrad.compiled.reasons import ATTR_OFF_CONSTANT, key

__all__ = ["allowed_param_reads", "minus"]

#: values whose attributes are fixed by their type (what the guards fix by value, or the code's literals)
_BY_VALUE = (int, float, complex, bool, str, type(None))
_READS = ("LOAD_ATTR", "LOAD_METHOD")


def allowed_param_reads(f: Any, reasons: list[str], tape: Any) -> list[str]:
    """`reasons` less one "reads the attribute" reason per read of an attribute directly off a
    parameter of `f` that every call of `f` the capture `tape` saw bound positionally to a number, a
    string or None, or else to a value the run tracks or an object it built (for which the parameter
    is active, so that its reads are the operations recorded, not this reason's)."""
    code = f.__code__
    params = [n for n in code.co_varnames[:code.co_argcount]]
    calls = [(args, kwargs) for g, args, kwargs, _ in tape.callees if g is f]
    known = set(tape.ids) | {id(o) for o in tape.local}
    plain = {p for k, p in enumerate(params)
             if calls and all(not kwargs and k < len(args) for args, kwargs in calls)
             and any(type(args[k]) in _BY_VALUE for args, _ in calls)
             and all(type(args[k]) in _BY_VALUE or id(args[k]) in known for args, _ in calls)}
    if not plain or not any(getattr(r, "kind", None) == ATTR_OFF_CONSTANT for r in reasons):
        return reasons
    allowed: Counter[tuple[str, int, str]] = Counter()
    prev = None
    for ins in dis.get_instructions(code):
        if ins.opname.startswith(("STORE_FAST", "DELETE_FAST")) and any(p in str(ins.argval) for p in plain):
            return reasons  # (a parameter rebound: what it holds at the read is not known)
        if ins.opname in _READS and prev is not None and _loads_param(prev, plain) and ins.positions is not None:
            allowed[ATTR_OFF_CONSTANT, ins.positions.lineno or -1, str(ins.argval)] += 1
        if ins.opname not in ("CACHE", "EXTENDED_ARG"):
            prev = ins
    return minus(reasons, allowed)


def minus(reasons: list[str], allowed: Counter[tuple[str, int, str]]) -> list[str]:
    """`reasons` less each reason whose key (compiled/reasons.py: kind, line, name) `allowed` counts, as
    many times as it counts it; a reason without a key stays."""
    kept = []
    for r in reasons:
        k = key(r)
        if k is not None and allowed[k] > 0:
            allowed[k] -= 1
        else:
            kept.append(r)
    return kept


def _loads_param(ins: Any, plain: set[str]) -> bool:
    if ins.opname in ("LOAD_FAST", "LOAD_FAST_CHECK"):
        return ins.argval in plain
    if ins.opname == "LOAD_FAST_LOAD_FAST":  # (3.13: the second is on top)
        return ins.argval[1] in plain
    return False
