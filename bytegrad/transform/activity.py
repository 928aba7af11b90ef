"""Activity analysis: which stack values and locals may depend on the differentiated arguments.

Input: a `Bytecode` and the activity of each parameter. Output: for every instruction, the abstract
stack before it (a `Slot` per value: activity, NULL-ness, the variables it may alias, its value when
known statically), so the rewrite can leave alone every site that provably cannot touch a
differentiated value, and knows each call's layout. Each kind of instruction has its transfer
function in `TRANSFER` (transform/transfer.py; one per `OpKind`, checked at import). Locals are flow-insensitive (a local is
active if any store into it may be); a container that receives an active value through a store, an
append or a call taints every variable it may alias.
"""
from __future__ import annotations

import builtins
import types
from typing import Any, Final, Optional

from bytegrad.transform.code import Bytecode, Instr, Label, TryBegin, TryEnd

from bytegrad.errors import SourceLoc, UnsupportedOpcodeError
from bytegrad.transform import opcodes
from bytegrad.transform.opcodes import OpKind

from bytegrad.transform.slots import (
    ACTIVE as ACTIVE, INACTIVE as INACTIVE, INERT_GLOBAL_TYPES, NONDIFF_ATTRS as NONDIFF_ATTRS, NULL as NULL,
    SHAPE_ONLY as SHAPE_ONLY, WRITABLE_GLOBALS, Activity as Activity, IMPORTED_MODULE, Slot as Slot, join,
    nondiff_callable as nondiff_callable, refuse_invisible_code,
)
from bytegrad.transform.transfer import TRANSFER

__all__ = ["analyze", "Analysis", "Activity", "Slot", "NONDIFF_ATTRS", "SHAPE_ONLY", "nondiff_callable"]


def analyze(bc: Bytecode, active_params: set[str], fn_globals: dict[str, Any], loc: SourceLoc,
            immutable_params: frozenset[str] = frozenset(), assumed: Any = None,
            tainted: frozenset[str] = frozenset(), cells_active: bool = True, made_active: bool = False) -> Activity:
    """Compute the activity of every stack slot; see the module docstring.

    `immutable_params` hold ints, strings, None...: when the function never rebinds them, no
    aliasing or mutation can make them active. `assumed` (a `cache.Assumptions`) records every
    global and module attribute the analysis resolved, so a cached rewrite can be revalidated.
    `tainted`: globals (`name`) and module attributes (`module.name`) taken as active from the
    start (compiled/eligibility.py traces what is computed from arrays read there).
    Locals and globals only ever become active, so sweeping until a sweep activates none converges.
    `cells_active=False`: closure cells start inactive (compiled/eligibility.py: a callee that ran as it
    is, not rewritten, hooked nothing on them).
    `made_active=True`: the result of a call of one of NumPy's array makers (`np.eye(n)`,
    runtime/dispatch.py's MAKERS) is active, so what is computed from it is hooked: the rewrite a
    capture run asks for (compiled/capture.py records such an array and the operations on it).
    """
    a = Analysis(bc, active_params, fn_globals, loc, immutable_params, assumed)
    a.made_active = made_active
    if not cells_active:
        a.active_locals -= a.cell_names - set(active_params)
    a.tainted_globals |= tainted
    refuse_invisible_code(a.instrs, a.active_locals | a.cell_names, loc)
    for _round in range(50):
        stacks = a.sweep()
        if not a.changed:
            return Activity(stacks, a.active_locals, a.tainted_globals)
    raise AssertionError("activity analysis did not converge")


class Analysis:
    """The state of one analysis: what is known of the variables, and the stacks of the current sweep."""

    def __init__(self, bc: Bytecode, active_params: set[str], fn_globals: dict[str, Any], loc: SourceLoc,
                 immutable_params: frozenset[str], assumed: Any) -> None:
        self.instrs: list[Any] = list(bc)
        self.loc = loc
        self.fn_globals = fn_globals
        self.assumed = assumed
        bltns = fn_globals.get("__builtins__", builtins)
        self.builtins: dict[str, Any] = bltns.__dict__ if isinstance(bltns, types.ModuleType) else bltns
        self.label_pos: dict[int, int] = {}
        self.handler_of: list[Optional[TryBegin]] = []
        current: Optional[TryBegin] = None
        for i, ins in enumerate(self.instrs):
            if isinstance(ins, Label):
                self.label_pos[id(ins)] = i
            elif isinstance(ins, TryBegin):
                current = ins
            elif isinstance(ins, TryEnd):
                current = None
            self.handler_of.append(current)
        self.cell_names = set(bc.cellvars) | set(bc.freevars)
        # a closure's cells may be shared with code bytegrad does not see: active from the start
        self.active_locals = set(active_params) | self.cell_names
        self.tainted_globals: set[str] = set()
        # local -> the variables whose objects it may alias (`M = buf.reshape(2, 2)`: M ~ buf)
        self.aliases: dict[str, set[str]] = {}
        # locals that hold modules (`import collections` inside the function): never differentiable
        self.module_locals: set[str] = set()
        stored = {n for ins in self.instrs if isinstance(ins, Instr) and opcodes.kind_of(ins) in _STORES
                  for n in opcodes.local_names(ins)}
        self.frozen = {n for n in immutable_params if n not in stored}
        self.changed = False  # a sweep activated a variable: sweep again
        self.made_active = False  # a maker's result (`np.eye(n)`) is active (see `analyze`)
        self.stacks: list[Optional[tuple[Slot, ...]]] = []
        self.work: list[int] = []
        self.queued: set[int] = set()

    # ---- values of variables ----

    def global_slot(self, name: str) -> Slot:
        if name in self.tainted_globals:
            return Slot(True, False, frozenset({"G:" + name}), None)
        in_module = name in self.fn_globals
        value = self.fn_globals.get(name, self.builtins.get(name))
        if self.assumed is not None:
            self.assumed.note_global(name, value, in_module)
        if isinstance(value, INERT_GLOBAL_TYPES):
            # builtins (rarely rebound) and modules are remembered, to see through `len(x)`, `np.shape(x)`
            known = value if (not in_module or isinstance(value, types.ModuleType)) else None
            # a module-level class, function or array may be written into (`K.v = x`, `f.cache = x`,
            # `BUF[:] = x`) and read back: its name is an alias source, inactive until tainted
            if in_module and isinstance(value, WRITABLE_GLOBALS):
                if self.tainted_globals and type(value) is types.FunctionType:
                    # a module function may read what this one wrote into a global: its call is hooked
                    return Slot(True, False, frozenset({"G:" + name}), None)
                return Slot(False, False, frozenset({"G:" + name}), known)
            # no alias source: a call's result never aliases the module or function it came from
            return Slot(False, False, frozenset(), known)
        return Slot(True, False, frozenset({"G:" + name}), None)

    def local_slot(self, name: str) -> Slot:
        if name in self.module_locals:
            return Slot(False, False, frozenset(), IMPORTED_MODULE)
        return Slot(name in self.active_locals, False, frozenset({"L:" + name}), None)

    def bind(self, name: str, v: Slot) -> None:
        """`name = v`: name may alias what v aliases, and is active if v may be."""
        others = {x for x in v.aliases if x != "L:" + name and x[2:] not in self.module_locals}
        if others:
            self.aliases.setdefault(name, set()).update(others)
        if v.active and name not in self.active_locals:
            self.active_locals.add(name)
            self.changed = True

    def taint(self, srcs: frozenset) -> None:
        """An active value was stored into the objects of `srcs`: they and their aliases are active."""
        todo = list(srcs)
        seen: set[str] = set()
        while todo:
            s = todo.pop()
            if s in seen:
                continue
            seen.add(s)
            kind, name = s[:2], s[2:]
            if kind == "L:":
                if name in self.module_locals or name in self.frozen:
                    continue
                if name not in self.active_locals:
                    self.active_locals.add(name)
                    self.changed = True
                todo.extend(self.aliases.get(name, ()))
                todo.extend("L:" + other for other, srcs2 in self.aliases.items() if s in srcs2)
            elif kind == "G:" and name not in self.tainted_globals:
                self.tainted_globals.add(name)
                self.changed = True

    def fail(self, ins: Instr, why: str) -> None:
        raise UnsupportedOpcodeError(
            f"bytegrad cannot rewrite the instruction {ins.name} ({why}).",
            SourceLoc(self.loc.filename, ins.lineno or self.loc.lineno, self.loc.function),
            "differentiate a function that avoids this construct, or move it into a helper "
            "function that does not touch differentiated values.")

    # ---- one sweep over the control-flow graph ----

    def sweep(self) -> list[Optional[tuple[Slot, ...]]]:
        """The stacks before every instruction, given what is known of the variables so far."""
        instrs, handler_of = self.instrs, self.handler_of
        stacks: list[Optional[tuple[Slot, ...]]] = [None] * len(instrs)
        stacks[0] = ()
        self.stacks = stacks
        self.changed = False
        work = self.work = [0]
        queued = self.queued = {0}
        while work:
            i = work.pop()
            queued.discard(i)
            st = stacks[i]
            assert st is not None
            ins = instrs[i]
            if not isinstance(ins, Instr):
                self.flow(i + 1, st)
                continue
            if handler_of[i] is not None:
                self.flow_to_handler(i, ins, st)
            try:
                kind = opcodes.kind_of(ins)
            except KeyError:
                self.fail(ins, "an opcode bytegrad does not know")
            stack = list(st)
            jump_stack = TRANSFER[kind](self, ins, stack)
            if jump_stack is not None and isinstance(ins.arg, Label):
                self.flow(self.label_pos[id(ins.arg)], tuple(jump_stack))
            if kind not in opcodes.TERMINATOR_KINDS:  # (`opcodes.is_terminator`, from the kind at hand)
                self.flow(i + 1, tuple(stack))
        return self.stacks

    def flow(self, j: int, st: tuple[Slot, ...]) -> None:
        """Control may reach instruction `j` with the stack `st`."""
        if j >= len(self.instrs):
            return
        old = self.stacks[j]
        if old is None:
            new = st
        else:
            if len(old) != len(st):
                raise AssertionError(f"stack depth mismatch at instruction {j}: {len(old)} vs {len(st)}")
            new = tuple(join(a, b) for a, b in zip(old, st))
            if new == old:
                return
        self.stacks[j] = new
        if j not in self.queued:
            self.queued.add(j)
            self.work.append(j)

    def flow_to_handler(self, i: int, ins: Instr, st: tuple[Slot, ...]) -> None:
        handler = self.handler_of[i]
        if handler is None:
            return
        depth = handler.stack_depth
        if not isinstance(depth, int) or depth > len(st):
            self.fail(ins, "exception handler with unknown stack depth")
        # the exception may carry a differentiated value (`raise ValueError(x * x)`, then `e.args`)
        exc = ACTIVE if self.active_locals or self.tainted_globals else INACTIVE
        exc_stack = st[:depth] + ((INACTIVE,) if handler.push_lasti else ()) + (exc,)
        self.flow(self.label_pos[id(handler.target)], exc_stack)


_STORES: Final = (OpKind.STORE_LOCAL, OpKind.STORE_CELL, OpKind.STORE_LOCAL_LOAD, OpKind.STORE_LOCAL_PAIR)
