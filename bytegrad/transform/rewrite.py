"""The rewrite pass: every site that may touch a differentiated value becomes a call into `runtime.abi`.

Input: a `Bytecode`, its `Activity` and the fused trees of `fusion`. Output: a `Bytecode` that
fetches the thread's tape once per frame (`__bg_tape__`) and calls `hook(tape, site, *operands)` at
active sites; inactive sites, the control flow and the line table are kept exactly as they were.
What each kind of instruction becomes is its emitter in `EMIT` (one per `OpKind`, checked at
import). Method loads are normalised to a fixed [NULL, bound method] layout so every call's layout
is known statically.
"""
from __future__ import annotations

from typing import Any, Callable, Final, Optional, cast

from bytegrad.transform.code import Bytecode, Instr

from bytegrad._config import config as _config
from bytegrad.errors import SourceLoc
from bytegrad.runtime import abi, fused, keys, monitor
from bytegrad.runtime.dispatch import MAKERS
from bytegrad.transform import fusion, opcodes
from bytegrad.transform.activity import NONDIFF_ATTRS, SHAPE_ONLY, Activity, Slot, nondiff_callable
from bytegrad.transform.opcodes import OpKind

TAPE_LOCAL = "__bg_tape__"


def _site(loc: SourceLoc, ins: Instr, what: str) -> abi.Site:
    return abi.Site(loc.filename, ins.lineno if isinstance(ins.lineno, int) else loc.lineno, loc.function, what)


def rewrite(bc: Bytecode, act: Activity, loc: SourceLoc,
            plans: Optional[dict[int, fusion.FusedPlan]] = None, made: bool = False) -> tuple[Bytecode, int]:
    """Return the rewritten bytecode and the number of hooked sites; `plans` are the fused trees
    (`fusion.find`), found here when not given; `made`: a capture run's rewrite."""
    instrs = list(bc)
    if plans is None:
        plans = {} if fusion_disabled() else fusion.find(instrs, act, loc)
    r = _Rewriter(instrs, act, loc, plans)
    r.made = made
    for i, ins in enumerate(instrs):
        r.emit(i, ins)
    new = Bytecode(r.out)
    new._copy_attr_from(bc)
    return new, r.hooked


class _Rewriter:
    """The state of one rewrite: the instructions emitted so far, and what earlier ones decided."""

    def __init__(self, instrs: list[Any], act: Activity, loc: SourceLoc, plans: dict[int, fusion.FusedPlan]) -> None:
        self.loc = loc
        self.stacks = act.stacks
        self.plans = plans
        self.out: list[Any] = []
        self.hooked = 0
        self.pending_kw: Optional[tuple[str, ...]] = None  # the names of the 3.11/3.12 KW_NAMES before a CALL
        self.prologue_done = False
        self.made = False  # a capture's rewrite (`_unpacked_if_active`)
        self.drop: set[int] = set()  # fused trees' instructions, and the PRECALL/KW_NAMES of hooked calls
        self.plain_loads: dict[int, list[Instr]] = {}
        for plan in plans.values():
            self.drop |= plan.drop
            self.plain_loads.update(plan.plain_loads)
        # A hooked 3.11/3.12 CALL takes its KW_NAMES (and 3.11 PRECALL) with it.
        for i, ins in enumerate(instrs):
            if isinstance(ins, Instr) and opcodes.kind_of(ins) is OpKind.CALL and _hooked_call(ins, self.stacks[i]):
                j = i - 1
                while j >= 0 and isinstance(instrs[j], Instr) and opcodes.kind_of(instrs[j]) in (
                        OpKind.PRECALL, OpKind.KW_NAMES):
                    self.drop.add(j)
                    j -= 1

    def emit(self, i: int, ins: Any) -> None:
        """Append what instruction `i` becomes."""
        if not isinstance(ins, Instr):
            self.out.append(ins)
            return
        kind = opcodes.kind_of(ins)
        if kind is OpKind.KW_NAMES:
            self.pending_kw = cast(tuple[str, ...], ins.arg)
        plan, stack = self.plans.get(i), self.stacks[i]
        if plan is not None:
            self.out.append(opcodes.build_tuple(plan.n_operands, ins.location))
            self.out += opcodes.call_hook(1, fused.fused_hook, TAPE_LOCAL, plan.site, ins.location)
            self.hooked += 1
        elif i in self.drop:
            pass
        elif i in self.plain_loads:
            self.out += self.plain_loads[i]
        elif stack is None:  # unreachable: keep as is
            self.out.append(ins)
        else:
            EMIT[kind](self, ins, stack)

    def hook(self, n_operands: int, hook: Any, ins: Instr, what: str, null: bool = False) -> None:
        """Call `hook(tape, site, *operands)` on the `n_operands` values on top of the stack."""
        self.out += opcodes.call_hook(n_operands, hook, TAPE_LOCAL, _site(self.loc, ins, what), ins.location, null=null)
        self.hooked += 1

    def guard(self, n_operands: int, hook: Any, ins: Instr, what: str) -> None:
        """BYTEGRAD_CHECK=1: a site left inactive still checks that no operand is differentiated."""
        from bytegrad.runtime import guards  # (imported here: only BYTEGRAD_CHECK=1 emits guards)
        self.out += opcodes.call_hook(n_operands, guards.guard_for(hook), TAPE_LOCAL, _site(self.loc, ins, what),
                                      ins.location)


# ---- what each kind of instruction becomes: one emitter per OpKind ---------------------------------

Stack = tuple[Slot, ...]
Emitter = Callable[[_Rewriter, Instr, Stack], None]


def _keep(r: _Rewriter, ins: Instr, st: Stack) -> None:
    r.out.append(ins)


def _hooked_if_active(n: int, hook: Any, what: str, guarded: bool = False) -> Emitter:
    """An operation on the top `n` values, hooked when any of them may be active (else, when
    `guarded`, checked by BYTEGRAD_CHECK=1's guard)."""
    def emit(r: _Rewriter, ins: Instr, st: Stack) -> None:
        if any(s.active for s in st[-n:]):
            r.hook(n, hook, ins, what)
        elif guarded and monitor.CHECK:
            r.guard(n, hook, ins, what)
        else:
            r.out.append(ins)
    return emit


def _hooked_store(n: int, hook: Any, what: str) -> Emitter:
    """A store into an item or slice, hooked even when inactive: it may overwrite an array the tape
    saved, which must first be copied for the operation that saved it (tape.check_write)."""
    def emit(r: _Rewriter, ins: Instr, st: Stack) -> None:
        r.hook(n, hook, ins, what)
        r.out.append(opcodes.pop_top(ins.location))
    return emit


def _unpacked_if_active(r: _Rewriter, ins: Instr, st: Stack) -> None:
    """`a, b = x`, `[*x]`, `f(a, *x)`, `{*x}`: a differentiated array unpacks into its rows."""
    if st[-1].active and opcodes.unpacks_operand(ins):
        r.hook(1, abi.unpack, ins, "unpacking")
    elif r.made and opcodes.adds_map_entry(ins) and st[-2].active:  # a capture's rewrite: a dict comprehension's
        r.hook(2, keys.map_entry, ins, "dict entry")  # key that may be tracked (nothing else sees `len(d)`)
        r.out.append(opcodes.unpack_sequence(2, ins.location))
    r.out.append(ins)


def _load_attr(r: _Rewriter, ins: Instr, st: Stack) -> None:
    name, method = opcodes.attr_parts(ins)
    if st[-1].active and not method and name not in NONDIFF_ATTRS:
        r.out.append(opcodes.load_const(name, ins.location))
        r.hook(2, abi.getattr_, ins, "." + name)
    elif method:
        r.out += opcodes.method_load_as_plain(ins, name)
    elif monitor.CHECK and name not in NONDIFF_ATTRS:
        r.out.append(opcodes.load_const(name, ins.location))
        r.guard(2, abi.getattr_, ins, "." + name)
    else:
        r.out.append(ins)


def _load_super_attr(r: _Rewriter, ins: Instr, st: Stack) -> None:
    if opcodes.super_attr_is_method(ins):
        r.out += opcodes.method_load_as_plain(ins, "")
    else:
        r.out.append(ins)


def _binary(r: _Rewriter, ins: Instr, st: Stack) -> None:
    # an in-place operator is hooked even on inactive operands: `w *= 0.5` may overwrite an
    # array the tape saved (`x * w` earlier), which must first be copied for the operation
    # that saved it (tape.check_write)
    op = opcodes.binary_operator(ins)
    if st[-1].active or st[-2].active or op.inplace:
        r.hook(2, abi.BINARY_HOOKS[op.symbol], ins, op.symbol)
    elif monitor.CHECK:
        r.guard(2, abi.BINARY_HOOKS[op.symbol], ins, op.symbol)
    else:
        r.out.append(ins)


def _store_attr(r: _Rewriter, ins: Instr, st: Stack) -> None:
    # `obj.name = value`: a property setter or `__setattr__` in Python runs rewritten, and it
    # may compute with the object's own differentiated values when the value is a constant
    if st[-2].active or st[-1].active:
        r.out.append(opcodes.load_const(ins.arg, ins.location))
        r.hook(3, abi.setattr_, ins, f".{ins.arg} =")
        r.out.append(opcodes.pop_top(ins.location))
    else:
        r.out.append(ins)


_unary_pos = _hooked_if_active(1, abi.pos, "unary +")


def _intrinsic(r: _Rewriter, ins: Instr, st: Stack) -> None:
    if opcodes.is_unary_positive_intrinsic(ins):  # unary `+` since 3.12
        _unary_pos(r, ins, st)
    else:
        r.out.append(ins)


def _with(r: _Rewriter, ins: Instr, st: Stack) -> None:
    if st[-1].active:  # a context manager whose __enter__ may compute with differentiated values
        r.hook(1, abi.before_with, ins, "with")
        r.out.append(opcodes.unpack_sequence(2, ins.location))
    else:
        r.out.append(ins)


def _call(r: _Rewriter, ins: Instr, st: Stack) -> None:
    if _hooked_call(ins, st):
        r.out += _emit_call(ins, st, r.pending_kw, r.loc)
        r.hooked += 1
    else:
        r.out.append(ins)
    r.pending_kw = None


def _call_kw(r: _Rewriter, ins: Instr, st: Stack) -> None:
    n = opcodes.int_arg(ins)
    slots = st[-(n + 3):]
    if not any(s.active for s in slots if not s.null) and not _makes_array(slots[0]):
        r.out.append(ins)
    elif slots[1].null:  # [callable, NULL, args..., names]
        r.out.append(opcodes.build_tuple(n + 1, ins.location))
        r.hook(2, abi.call_kw, ins, "call", null=True)
    else:  # [callable, self, args..., names]
        r.out.append(opcodes.build_tuple(n + 2, ins.location))
        r.hook(2, abi.call_kw, ins, "call")


def _call_ex(r: _Rewriter, ins: Instr, st: Stack) -> None:
    if any(s.active for s in st[-opcodes.call_ex_pops(ins):] if not s.null):
        if not opcodes.call_ex_has_kwargs(ins):
            r.out.append(opcodes.load_const(None, ins.location))
        r.hook(3, abi.call_ex, ins, "call", null=True)
    else:
        r.out.append(ins)


def _predicate(r: _Rewriter, ins: Instr, st: Stack) -> None:
    # a decision on a differentiated value: the hook computes it as it is, and a capture
    # run records it for the compiled program to check (bytegrad/compiled/policy.py)
    n = opcodes.predicate_pops(ins)
    if any(s.active for s in st[len(st) - n:]):
        r.hook(n, abi.predicate_hook(opcodes.predicate_fn(ins)), ins, "decision")
    else:
        r.out.append(ins)


def _pop_jump(r: _Rewriter, ins: Instr, st: Stack) -> None:
    if st[-1].active and opcodes.tests_truth(ins):
        # `if x:` on a differentiated value (3.11/3.12 test it in the jump itself): its truth
        # is taken by the hook, as a decision a capture records, then the jump tests a bool
        r.hook(1, abi.predicate_hook(bool), ins, "decision")
    r.out.append(ins)


def _other(r: _Rewriter, ins: Instr, st: Stack) -> None:
    r.out.append(ins)
    if opcodes.is_resume(ins) and not r.prologue_done:  # the prologue: fetch the thread's tape once
        r.out += opcodes.call_zero_args(abi.current_tape, ins.location)
        r.out.append(opcodes.store_local(TAPE_LOCAL, ins.location))
        r.prologue_done = True


EMIT: Final[dict[OpKind, Emitter]] = {
    **{kind: _keep for kind in (
        OpKind.LOAD_CONST, OpKind.LOAD_LOCAL, OpKind.LOAD_LOCAL_PAIR, OpKind.LOAD_CELL, OpKind.LOAD_GLOBAL,
        OpKind.LOAD_NAME, OpKind.PUSH_NULL, OpKind.STORE_LOCAL, OpKind.STORE_LOCAL_LOAD, OpKind.STORE_LOCAL_PAIR,
        OpKind.STORE_CELL, OpKind.STORE_GLOBAL, OpKind.SWAP, OpKind.COPY, OpKind.POP, OpKind.PRECALL,
        OpKind.KW_NAMES, OpKind.MAKE_FUNCTION, OpKind.IMPORT, OpKind.FOR_ITER, OpKind.JUMP, OpKind.JUMP_OR_POP,
        OpKind.RETURN)},
    OpKind.PREDICATE: _predicate,
    OpKind.POP_JUMP: _pop_jump,
    OpKind.LOAD_ATTR: _load_attr,
    OpKind.LOAD_METHOD: _load_attr,
    OpKind.LOAD_SUPER_ATTR: _load_super_attr,
    OpKind.BINARY: _binary,
    # the key counts too: `np.r_[x, x]` hands a differentiated tuple to NumPy's Python
    # `__getitem__`, which must run rewritten
    OpKind.SUBSCR: _hooked_if_active(2, abi.getitem, "[]", guarded=True),
    OpKind.SLICE: _hooked_if_active(3, abi.getslice, "[:]"),
    OpKind.STORE_SUBSCR: _hooked_store(3, abi.setitem, "[]="),
    OpKind.STORE_SLICE: _hooked_store(4, abi.setslice, "[:]="),
    OpKind.STORE_ATTR: _store_attr,
    OpKind.UNARY_NEG: _hooked_if_active(1, abi.neg, "unary -"),
    OpKind.UNARY_POS: _unary_pos,
    OpKind.INTRINSIC_1: _intrinsic,
    OpKind.GET_ITER: _hooked_if_active(1, abi.iter_, "iteration", guarded=True),
    OpKind.WITH: _with,
    OpKind.CONTAINER_ADD: _unpacked_if_active,
    OpKind.UNPACK: _unpacked_if_active,
    OpKind.UNPACK_EX: _unpacked_if_active,
    OpKind.CALL: _call,
    OpKind.CALL_KW: _call_kw,
    OpKind.CALL_EX: _call_ex,
    OpKind.OTHER: _other,
}
assert EMIT.keys() == set(OpKind), f"the rewrite lacks an emitter for {set(OpKind) - EMIT.keys()}"


def fusion_disabled() -> bool:
    """Fusion is off with `bytegrad.config.disable_numba` or `disable_fusion` (BYTEGRAD_DISABLE_NUMBA=1,
    BYTEGRAD_DISABLE_FUSION=1)."""
    return _config.disable_numba or _config.disable_fusion


def _hooked_call(ins: Instr, st: Any) -> bool:
    return call_active(ins, st) or (st is not None and _makes_array(opcodes.callable_slot(opcodes.int_arg(ins), st)))


def _makes_array(slot: Optional[Slot]) -> bool:
    """A call of a NumPy function that makes an array from shapes and numbers (`np.zeros(3)`): hooked
    on constants too, so that a capture records it (runtime/dispatch.py's MAKERS)."""
    try:
        return slot is not None and slot.known in MAKERS
    except TypeError:  # (an unhashable known value)
        return False


def call_active(ins: Instr, st: Any) -> bool:
    """A call is hooked when its callable or an argument may be active, unless the callable is a
    known shape query (`len(x)` runs as it is)."""
    if st is None:
        return False
    n = opcodes.int_arg(ins)
    slot = opcodes.callable_slot(n, st)
    if nondiff_callable(slot) and slot.known in SHAPE_ONLY:
        return False
    return any(s.active for s in st[-(n + 2):] if not s.null)


def _emit_call(ins: Instr, st: Any, kwnames: Optional[tuple[str, ...]], loc: SourceLoc) -> list[Instr]:
    n = opcodes.int_arg(ins)
    iloc = ins.location
    site = _site(loc, ins, "call")
    known = opcodes.callable_slot(n, st) if not kwnames else None
    if known is not None and known.known is not None and callable(known.known):
        site.callee = known.known
    has_null = st[-(n + 2) if opcodes.NULL_BELOW_CALLABLE else -(n + 1)].null
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

