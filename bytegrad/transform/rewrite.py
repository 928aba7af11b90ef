"""The rewrite pass: every site that may touch a differentiated value becomes a call into `runtime.abi`.

Input: a `Bytecode` and its `Activity`. Output: a `Bytecode` that fetches the thread's tape once per
frame (`__bg_tape__`) and calls `hook(tape, site, *operands)` at active sites; inactive sites, the
control flow and the line table are kept exactly as they were. Method loads are normalised to a
fixed [NULL, bound method] layout so every call's layout is known statically.
"""
from __future__ import annotations

import os
from typing import Any, Optional

from bytecode import Bytecode, Instr

from bytegrad.errors import SourceLoc
from bytegrad.runtime import abi, fused
from bytegrad.transform import fusion, opcodes
from bytegrad.transform.activity import NONDIFF_ATTRS, Activity, _nondiff_callable
from bytegrad.transform.opcodes import OpKind

TAPE_LOCAL = "__bg_tape__"
#: the first in-place operator of BINARY_OP's argument (NB_INPLACE_ADD): `+=` and the rest
INPLACE_OP_FIRST = 13



def _site(loc: SourceLoc, ins: Instr, what: str) -> abi.Site:
    return abi.Site(loc.filename, ins.lineno if isinstance(ins.lineno, int) else loc.lineno, loc.function, what)


def rewrite(bc: Bytecode, act: Activity, loc: SourceLoc,
            plans: Optional[dict[int, fusion.FusedPlan]] = None) -> tuple[Bytecode, int]:
    """Return the rewritten bytecode and the number of hooked sites; `plans` are the fused trees
    (`fusion.find`), found here when not given."""
    instrs = list(bc)
    stacks = act.stacks
    out: list[Any] = []
    hooked = 0
    drop: set[int] = set()
    pending_kw: Optional[tuple[str, ...]] = None
    prologue_done = False
    if plans is None:
        plans = {} if fusion_disabled() else fusion.find(instrs, act, loc)
    fused_drop: set[int] = set()
    plain_loads: dict[int, list[Instr]] = {}
    for plan in plans.values():
        fused_drop |= plan.drop
        plain_loads.update(plan.plain_loads)

    # A hooked 3.11/3.12 CALL takes its KW_NAMES (and 3.11 PRECALL) with it.
    for i, ins in enumerate(instrs):
        if isinstance(ins, Instr) and opcodes.kind_of(ins) is OpKind.CALL and _call_active(ins, stacks[i]):
            j = i - 1
            while j >= 0 and isinstance(instrs[j], Instr) and opcodes.kind_of(instrs[j]) in (
                    OpKind.PRECALL, OpKind.KW_NAMES):
                drop.add(j)
                j -= 1

    for i, ins in enumerate(instrs):
        if not isinstance(ins, Instr):
            out.append(ins)
            continue
        st = stacks[i]
        kind = opcodes.kind_of(ins)
        iloc = ins.location
        if kind is OpKind.KW_NAMES:
            pending_kw = ins.arg
        if i in plans:
            plan = plans[i]
            out.append(opcodes.build_tuple(plan.n_operands, iloc))
            out += opcodes.call_hook(1, fused.fused_hook, TAPE_LOCAL, plan.site, iloc)
            hooked += 1
            continue
        if i in fused_drop or i in drop:
            continue
        if i in plain_loads:
            out += plain_loads[i]
            continue
        if st is None:  # unreachable: keep as is
            out.append(ins)
            continue

        if kind is OpKind.OTHER and ins.name == "RESUME" and not prologue_done:
            out.append(ins)
            out += opcodes.call_zero_args(abi.current_tape, iloc)
            out.append(opcodes.store_local(TAPE_LOCAL, iloc))
            prologue_done = True
            continue

        if kind in (OpKind.LOAD_ATTR, OpKind.LOAD_METHOD):
            name, method = opcodes.attr_parts(ins)
            obj_active = st[-1][0]
            if obj_active and not method and name not in NONDIFF_ATTRS:
                out.append(opcodes.load_const(name, iloc))
                out += opcodes.call_hook(2, abi.getattr_, TAPE_LOCAL, _site(loc, ins, "." + name), iloc)
                hooked += 1
            elif method:
                out += opcodes.method_load_as_plain(ins, name)
            else:
                out.append(ins)
            continue
        if kind is OpKind.LOAD_SUPER_ATTR:
            if opcodes.super_attr_is_method(ins):
                out += opcodes.method_load_as_plain(ins, "")
            else:
                out.append(ins)
            continue

        if kind is OpKind.BINARY:
            # an in-place operator is hooked even on inactive operands: `w *= 0.5` may overwrite an
            # array the tape saved (`x * w` earlier), which must first be copied for the operation
            # that saved it (tape.check_write)
            if st[-1][0] or st[-2][0] or opcodes.binary_op(ins) >= INPLACE_OP_FIRST:
                op = opcodes.binary_op(ins)
                out += opcodes.call_hook(2, abi.BINARY_HOOKS[op], TAPE_LOCAL, _site(loc, ins, abi.BINARY_NAMES[op]), iloc)
                hooked += 1
            else:
                out.append(ins)
            continue
        if kind is OpKind.SUBSCR:
            # the key counts too: `np.r_[x, x]` hands a differentiated tuple to NumPy's Python
            # `__getitem__`, which must run rewritten
            if st[-2][0] or st[-1][0]:
                out += opcodes.call_hook(2, abi.getitem, TAPE_LOCAL, _site(loc, ins, "[]"), iloc)
                hooked += 1
            else:
                out.append(ins)
            continue
        if kind is OpKind.SLICE:
            if st[-3][0] or st[-2][0] or st[-1][0]:
                out += opcodes.call_hook(3, abi.getslice, TAPE_LOCAL, _site(loc, ins, "[:]"), iloc)
                hooked += 1
            else:
                out.append(ins)
            continue
        if kind is OpKind.STORE_SUBSCR:
            # inactive stores too: they may overwrite an array the tape saved (as with `+=` above)
            out += opcodes.call_hook(3, abi.setitem, TAPE_LOCAL, _site(loc, ins, "[]="), iloc)
            out.append(Instr("POP_TOP", location=iloc))
            hooked += 1
            continue
        if kind is OpKind.STORE_ATTR:
            # `obj.name = value`: a property setter or `__setattr__` in Python runs rewritten, and it
            # may compute with the object's own differentiated values when the value is a constant
            if st[-2][0] or st[-1][0]:
                out.append(opcodes.load_const(ins.arg, iloc))
                out += opcodes.call_hook(3, abi.setattr_, TAPE_LOCAL, _site(loc, ins, f".{ins.arg} ="), iloc)
                out.append(Instr("POP_TOP", location=iloc))
                hooked += 1
            else:
                out.append(ins)
            continue
        if kind is OpKind.STORE_SLICE:
            out += opcodes.call_hook(4, abi.setslice, TAPE_LOCAL, _site(loc, ins, "[:]="), iloc)
            out.append(Instr("POP_TOP", location=iloc))
            hooked += 1
            continue
        if kind is OpKind.UNARY_NEG or kind is OpKind.UNARY_POS or (
                kind is OpKind.INTRINSIC_1 and opcodes.is_unary_positive_intrinsic(ins)):
            if st[-1][0]:
                hook = abi.neg if kind is OpKind.UNARY_NEG else abi.pos
                out += opcodes.call_hook(1, hook, TAPE_LOCAL, _site(loc, ins, "unary -" if hook is abi.neg else "unary +"), iloc)
                hooked += 1
            else:
                out.append(ins)
            continue
        if kind is OpKind.GET_ITER:
            if st[-1][0]:
                out += opcodes.call_hook(1, abi.iter_, TAPE_LOCAL, _site(loc, ins, "iteration"), iloc)
                hooked += 1
            else:
                out.append(ins)
            continue
        if kind is OpKind.WITH:
            if st[-1][0]:  # a context manager whose __enter__ may compute with differentiated values
                out += opcodes.call_hook(1, abi.before_with, TAPE_LOCAL, _site(loc, ins, "with"), iloc)
                out.append(opcodes.unpack_sequence(2, iloc))
                hooked += 1
            else:
                out.append(ins)
            continue
        if kind is OpKind.CONTAINER_ADD and ins.name in ("LIST_EXTEND", "SET_UPDATE"):
            if st[-1][0]:  # `[*x]`, `f(a, *x)`, `{*x}`: a differentiated array unpacks into its rows
                out += opcodes.call_hook(1, abi.unpack, TAPE_LOCAL, _site(loc, ins, "unpacking"), iloc)
                hooked += 1
            out.append(ins)
            continue
        if kind is OpKind.UNPACK or kind is OpKind.UNPACK_EX:
            if st[-1][0]:
                out += opcodes.call_hook(1, abi.unpack, TAPE_LOCAL, _site(loc, ins, "unpacking"), iloc)
                hooked += 1
            out.append(ins)
            continue
        if kind is OpKind.CALL:
            if _call_active(ins, st):
                out += _emit_call(ins, st, pending_kw, loc)
                hooked += 1
            else:
                out.append(ins)
            pending_kw = None
            continue
        if kind is OpKind.CALL_KW:
            n = int(ins.arg)
            slots = st[-(n + 3):]
            if any(s[0] for s in slots if not s[1]):
                site = _site(loc, ins, "call")
                if slots[1][1]:  # [callable, NULL, args..., names]
                    out.append(opcodes.build_tuple(n + 1, iloc))
                    out += opcodes.call_hook(2, abi.call_kw, TAPE_LOCAL, site, iloc, null=True)
                else:             # [callable, self, args..., names]
                    out.append(opcodes.build_tuple(n + 2, iloc))
                    out += opcodes.call_hook(2, abi.call_kw, TAPE_LOCAL, site, iloc)
                hooked += 1
            else:
                out.append(ins)
            continue
        if kind is OpKind.CALL_EX:
            has_kw = int(ins.arg) & 1
            count = opcodes.call_ex_pops(ins)
            slots = st[-count:]
            if any(s[0] for s in slots if not s[1]):
                if not has_kw:
                    out.append(opcodes.load_const(None, iloc))
                out += opcodes.call_hook(3, abi.call_ex, TAPE_LOCAL, _site(loc, ins, "call"), iloc, null=True)
                hooked += 1
            else:
                out.append(ins)
            continue
        out.append(ins)

    new = Bytecode(out)
    new._copy_attr_from(bc)
    return new, hooked


def fusion_disabled() -> bool:
    """Fusion is off with `BYTEGRAD_DISABLE_NUMBA=1` (or `BYTEGRAD_DISABLE_FUSION=1`)."""
    return any(os.environ.get(v, "") not in ("", "0") for v in ("BYTEGRAD_DISABLE_NUMBA", "BYTEGRAD_DISABLE_FUSION"))


def _call_active(ins: Instr, st: Any) -> bool:
    """A call is hooked when its callable or an argument may be active, unless the callable is a
    known non-differentiable builtin (`len(x)` runs as it is)."""
    if st is None:
        return False
    n = int(ins.arg)
    if _nondiff_callable(opcodes.callable_slot(n, st)):
        return False
    return any(s[0] for s in st[-(n + 2):] if not s[1])


def _emit_call(ins: Instr, st: Any, kwnames: Optional[tuple[str, ...]], loc: SourceLoc) -> list[Instr]:
    n = int(ins.arg)
    iloc = ins.location
    site = _site(loc, ins, "call")
    known = opcodes.callable_slot(n, st) if not kwnames else None
    if known is not None and known[3] is not None and callable(known[3]):
        site.callee = known[3]
    if opcodes.NULL_BELOW_CALLABLE:
        has_null = st[-(n + 2)][1]
    else:
        has_null = st[-(n + 1)][1]
    seq: list[Instr] = []
    if kwnames:
        seq.append(opcodes.load_const(kwnames, iloc))
        if has_null:
            seq.append(opcodes.build_tuple(n + 1, iloc))
        else:
            seq.append(opcodes.build_tuple(n + 2, iloc))
        seq += opcodes.call_hook(2, abi.call_kw, TAPE_LOCAL, site, iloc, null=has_null)
        return seq
    if has_null:
        if n <= 2:
            hook = (abi.call0, abi.call1, abi.call2)[n]
            return opcodes.call_hook(1 + n, hook, TAPE_LOCAL, site, iloc, null=True)
        seq.append(opcodes.build_tuple(n, iloc))
        seq += opcodes.call_hook(2, abi.call, TAPE_LOCAL, site, iloc, null=True)
        return seq
    # NULL-less layout [X, Y, args...] means X(Y, *args): decorators, with-exits, comprehensions.
    seq.append(opcodes.build_tuple(n + 1, iloc))
    seq += opcodes.call_hook(2, abi.call, TAPE_LOCAL, site, iloc)
    return seq

