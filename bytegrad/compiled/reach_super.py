"""`super().name(...)` in a method of an object the call built (compiled/objects.py `without_self_writes`).

Zero-argument `super()` in a method is `super(__class__, self)`: `__class__` is the cell the class
statement filled with the class that defines the method, and the attribute it finds is read along
`type(self).__mro__` after that class. For an object the call built from differentiated values
(`CaptureTape.local`), that lookup is fixed by what the program already guards: the method's
code (a "code" guard), and the class of the object with every entry of its own and its bases'
`__dict__` (a "class" guard, `objects.class_state`). What the found method computes is recorded
like any other callee's (the capture follows it, and checks its code as eligible).

`allowed_super` drops, from a method's refusal reasons, those the static check
(compiled/eligibility.py) gave for the super lookups alone: the call of `super` on constants and
the attribute read off its result (3.11), or LOAD_SUPER_ATTR (3.12, 3.13), each at its line and
for its attribute's name (matched by the reasons' kinds, compiled/reasons.py, not their text).
Anything else on those lines stays refused. Only the zero-argument form
with the method's own first parameter is taken (`super(Other, obj)` names a class and an object
the program does not guard).
"""
from __future__ import annotations

import dis
import types
from collections import Counter

from bytegrad.compiled.reach_params import minus
from bytegrad.compiled.reasons import ATTR_OFF_CONSTANT, CALL_ON_CONSTANTS, SUPER

__all__ = ["allowed_super", "super_sites"]


def super_sites(code: types.CodeType) -> list[tuple[int, str]]:
    """(line, attribute name) of each zero-argument `super().name` in `code`, a method whose first
    parameter is never rebound; empty when there is none or when the form is not that one."""
    if not code.co_argcount or "__class__" not in code.co_freevars:
        return []
    me = code.co_varnames[0]
    instrs = [i for i in dis.get_instructions(code) if i.opname not in ("CACHE", "PRECALL", "EXTENDED_ARG")]
    sites: list[tuple[int, str]] = []
    for k, ins in enumerate(instrs):
        if ins.opname.startswith(("STORE_FAST", "DELETE_FAST")) and me in str(ins.argval):
            return []  # (`self` rebound: the object super is handed is not known)
        if ins.opname != "LOAD_GLOBAL" or ins.argval != "super":
            continue
        line = _line(instrs, k)
        nxt = instrs[k + 1:k + 4]
        if len(nxt) >= 2 and nxt[0].opname == "CALL" and nxt[0].arg == 0 and \
                nxt[1].opname in ("LOAD_ATTR", "LOAD_METHOD"):  # 3.11
            sites.append((line, _name(nxt[1].argval)))
        elif len(nxt) == 3 and nxt[0].opname == "LOAD_DEREF" and nxt[0].argval == "__class__" and \
                nxt[1].opname == "LOAD_FAST" and nxt[1].argval == me and nxt[2].opname == "LOAD_SUPER_ATTR" \
                and not (nxt[2].arg or 0) & 2:  # 3.12, 3.13 (bit 2 set: the two-argument form)
            sites.append((line, _name(nxt[2].argval)))
    return sites


def allowed_super(code: types.CodeType, reasons: list[str]) -> list[str]:
    """`reasons` less those given for the zero-argument super lookups of `code` (`super_sites`), each
    reason taken once per lookup (a line with another super or attribute read keeps its own)."""
    sites = super_sites(code)
    if not sites:
        return reasons
    allowed: Counter[tuple[str, int, str]] = Counter()
    for line, name in sites:  # (compiled/reasons.py: matched by kind, line and name, not by their text)
        allowed.update([(CALL_ON_CONSTANTS, line, "super"), (SUPER, line, ""), (ATTR_OFF_CONSTANT, line, name)])
    return minus(reasons, allowed)


def _line(instrs: list, k: int) -> int:
    for ins in reversed(instrs[:k + 1]):
        if ins.positions is not None and ins.positions.lineno is not None:
            return ins.positions.lineno
    return -1


def _name(argval: object) -> str:
    return argval if isinstance(argval, str) else str(argval)
