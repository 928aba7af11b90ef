"""Activity analysis: which stack values and locals may depend on the differentiated arguments.

Input: a `Bytecode` and the activity of each parameter. Output: for every instruction, the abstract
stack before it (a `Slot` per value: activity, NULL-ness, the variables it may alias, its value when
known statically), so the rewrite can leave alone every site that provably cannot touch a
differentiated value, and knows each call's layout. Each kind of instruction has its transfer
function in `TRANSFER` (one per `OpKind`, checked at import). Locals are flow-insensitive (a local is
active if any store into it may be); a container that receives an active value through a store, an
append or a call taints every variable it may alias.
"""
from __future__ import annotations

import builtins
import inspect
import types
from typing import Any, Callable, Final, NamedTuple, Optional, cast

import numpy as np
from bytecode import Bytecode, Instr, Label, TryBegin, TryEnd

from bytegrad.errors import SourceLoc, UnsupportedOpcodeError
from bytegrad.rules import registry
from bytegrad.transform import opcodes
from bytegrad.transform.opcodes import OpKind



class Slot(NamedTuple):
    """One value of the abstract stack."""

    active: bool        # may depend on a differentiated argument
    null: bool          # is the NULL of a call layout
    aliases: frozenset  # the variables whose objects it may be: "L:name" (local), "G:name" (global)
    known: Any          # the value when statically known (a builtin, a module attribute), else None


INACTIVE: Final = Slot(False, False, frozenset(), None)
ACTIVE: Final = Slot(True, False, frozenset(), None)
NULL: Final = Slot(False, True, frozenset(), None)

_MODULE = object()  # stands for "a module imported inside the function"

#: attributes that describe an array rather than hold its values: never differentiable
NONDIFF_ATTRS = frozenset({"shape", "ndim", "dtype", "size", "itemsize", "nbytes", "strides", "flags"})

# Global values that can never hold a differentiated value nor be mutated into holding one.
_INERT_TYPES = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, np.ufunc,
                int, float, complex, str, bytes, bool, type(None), np.ndarray, np.generic, np.dtype,
                types.MethodType, types.MethodDescriptorType, types.WrapperDescriptorType,
                type(np.sum))  # NumPy 2's `_ArrayFunctionDispatcher` (np.sum, np.linalg.norm...)


_WRITABLE_GLOBALS = (type, types.FunctionType, np.ndarray)


class Activity:
    """Result of the analysis."""

    __slots__ = ("stacks", "active_locals", "tainted_globals")  # (a plain class: a dataclass costs its import)

    def __init__(self, stacks: list[Optional[tuple[Slot, ...]]], active_locals: set[str],
                 tainted_globals: Optional[set[str]] = None) -> None:
        self.stacks = stacks                  # abstract stack before each instruction (None: unreachable)
        self.active_locals = active_locals
        self.tainted_globals = set() if tainted_globals is None else tainted_globals


def _join(a: Slot, b: Slot) -> Slot:
    if a is b or a == b:
        return a
    return Slot(a.active or b.active, a.null and b.null, a.aliases | b.aliases,
                a.known if a.known is b.known else None)


#: non-differentiable functions whose result on a differentiated value depends on its shape only:
#: calls of them run as they are (any other call on a differentiated value is hooked, so that a
#: capture run sees it: bytegrad/compiled/policy.py checks its result as a decision)
SHAPE_ONLY = frozenset({len, isinstance, type, np.shape, np.ndim, np.size})


def nondiff_callable(slot: Optional[Slot]) -> bool:
    """A statically known callable whose result never carries a derivative (len, range, np.shape...)."""
    if slot is None or slot.known is None:
        return False
    rule = registry.lookup(slot.known)
    return rule is not None and rule.kind is registry.RuleKind.NONDIFF


# Builtins that run code or read variables out of bytegrad's sight: values computed through them
# would silently get no derivative, so a differentiated function may not call them.
_INVISIBLE_CALLS: dict[Any, tuple[str, str]] = {
    eval: ("eval() runs code from a string, which bytegrad cannot rewrite",
           "write the expression in the function itself (`x * x`, not `eval('x * x')`)."),
    exec: ("exec() runs code from a string, which bytegrad cannot rewrite",
           "write the statements in the function itself, or in a helper function it calls."),
    locals: ("locals() hands the function's variables to code that bytegrad does not follow",
             "use the variables directly."),
}


def _refuse_invisible_call(a: _Analysis, ins: Instr, fn: Any, nargs: int) -> None:
    what = _INVISIBLE_CALLS.get(fn) if type(fn) is types.BuiltinFunctionType else None
    if what is None and fn is vars and nargs == 0:
        what = _INVISIBLE_CALLS[locals]
    if what is _INVISIBLE_CALLS[locals] and \
            opcodes.tests_membership_next(a.instrs, next(k for k, x in enumerate(a.instrs) if x is ins)):
        return  # `'x' in locals()` (pytest's assert messages): only the names are read
    loc = a.loc
    if what is not None:
        raise UnsupportedOpcodeError(
            f"{what[0]}: the values it computes would have no derivative.",
            SourceLoc(loc.filename, ins.lineno or loc.lineno, loc.function), what[1])


def _refuse_invisible_code(instrs: list[Any], watched: set[str], loc: SourceLoc) -> None:
    """A class body that reads the function's variables computes out of sight (it is not rewritten)."""
    for ins in instrs:
        if not isinstance(ins, Instr) or not isinstance(ins.arg, types.CodeType):
            continue
        body = ins.arg
        if body.co_flags & inspect.CO_OPTIMIZED:
            continue  # a function, lambda or comprehension: rewritten when it is called
        names = sorted(set(body.co_freevars) & watched & opcodes.cell_reads(body))
        if names:
            raise UnsupportedOpcodeError(
                f"the body of class {body.co_name} reads {', '.join(names)}: bytegrad does not rewrite class "
                "bodies, so what it computes from differentiated values would have no derivative.",
                SourceLoc(loc.filename, ins.lineno or body.co_firstlineno, loc.function),
                f"compute the value in the function and set it afterwards (`{body.co_name}.attr = ...`), or "
                "define the class outside the differentiated function.")


def _attr_slot(module: types.ModuleType, name: str, tainted_globals: set[str], assumed: Any) -> Slot:
    """`mod.attr`: a global of another module, held to the rules of `global_slot` in `analyze`: an
    object that may hold (or be written) a differentiated value is active (`np.r_[x, x]` and
    `mod.table[x]` then run their Python `__getitem__` rewritten), and a store into it taints it."""
    key = f"{module.__name__}.{name}"
    value = getattr(module, name, None)
    if assumed is not None:
        assumed.note_attr(module, name, value)
    if key in tainted_globals:
        return Slot(True, False, frozenset({"G:" + key}), None)
    if isinstance(value, _INERT_TYPES):
        return Slot(False, False, frozenset({"G:" + key}) if isinstance(value, _WRITABLE_GLOBALS) else frozenset(),
                    value)
    return Slot(True, False, frozenset({"G:" + key}), value)


def _join_all(slots: Any) -> Slot:
    active = False
    srcs: frozenset = frozenset()
    for s in slots:
        active = active or s.active
        srcs = srcs | s.aliases
    return Slot(active, False, srcs, None)


def _derived(v: Slot) -> Slot:
    """A value computed from `v` that may be (part of) it: its activity and aliases, nothing known."""
    return Slot(v.active, False, v.aliases, None)


def analyze(bc: Bytecode, active_params: set[str], fn_globals: dict[str, Any], loc: SourceLoc,
            immutable_params: frozenset[str] = frozenset(), assumed: Any = None,
            tainted: frozenset[str] = frozenset()) -> Activity:
    """Compute the activity of every stack slot; see the module docstring.

    `immutable_params` hold ints, strings, None...: when the function never rebinds them, no
    aliasing or mutation can make them active. `assumed` (a `cache.Assumptions`) records every
    global and module attribute the analysis resolved, so a cached rewrite can be revalidated.
    `tainted`: globals (`name`) and module attributes (`module.name`) taken as active from the
    start (compiled/eligibility.py traces what is computed from arrays read there).
    Locals and globals only ever become active, so sweeping until a sweep activates none converges.
    """
    a = _Analysis(bc, active_params, fn_globals, loc, immutable_params, assumed)
    a.tainted_globals |= tainted
    _refuse_invisible_code(a.instrs, a.active_locals | a.cell_names, loc)
    for _round in range(50):
        stacks = a.sweep()
        if not a.changed:
            return Activity(stacks, a.active_locals, a.tainted_globals)
    raise AssertionError("activity analysis did not converge")


class _Analysis:
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
        if isinstance(value, _INERT_TYPES):
            # builtins (rarely rebound) and modules are remembered, to see through `len(x)`, `np.shape(x)`
            known = value if (not in_module or isinstance(value, types.ModuleType)) else None
            # a module-level class, function or array may be written into (`K.v = x`, `f.cache = x`,
            # `BUF[:] = x`) and read back: its name is an alias source, inactive until tainted
            if in_module and isinstance(value, _WRITABLE_GLOBALS):
                if self.tainted_globals and type(value) is types.FunctionType:
                    # a module function may read what this one wrote into a global: its call is hooked
                    return Slot(True, False, frozenset({"G:" + name}), None)
                return Slot(False, False, frozenset({"G:" + name}), known)
            # no alias source: a call's result never aliases the module or function it came from
            return Slot(False, False, frozenset(), known)
        return Slot(True, False, frozenset({"G:" + name}), None)

    def local_slot(self, name: str) -> Slot:
        if name in self.module_locals:
            return Slot(False, False, frozenset(), _MODULE)
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
        instrs = self.instrs
        self.stacks = [None] * len(instrs)
        self.stacks[0] = ()
        self.changed = False
        self.work = [0]
        self.queued = {0}
        while self.work:
            i = self.work.pop()
            self.queued.discard(i)
            st = self.stacks[i]
            assert st is not None
            ins = instrs[i]
            if not isinstance(ins, Instr):
                self.flow(i + 1, st)
                continue
            self.flow_to_handler(i, ins, st)
            try:
                kind = opcodes.kind_of(ins)
            except KeyError:
                self.fail(ins, "an opcode bytegrad does not know")
            stack = list(st)
            jump_stack = TRANSFER[kind](self, ins, stack)
            if jump_stack is not None and isinstance(ins.arg, Label):
                self.flow(self.label_pos[id(ins.arg)], tuple(jump_stack))
            if not opcodes.is_terminator(ins):
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
            new = tuple(_join(a, b) for a, b in zip(old, st))
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


# ---- transfer functions: one per OpKind ------------------------------------------------------------
# Each updates the stack in place (the stack before `ins` becomes the stack after it, falling
# through) and returns the stack on the jump edge, or None when `ins` does not jump.

Stack = list[Slot]
Transfer = Callable[[_Analysis, Instr, Stack], Optional[Stack]]


def _pop(stack: Stack, n: int) -> list[Slot]:
    """The top `n` values, top first."""
    return [stack.pop() for _ in range(n)]


def _push_method(stack: Stack, value: Slot) -> None:
    """A method load, normalised by the rewrite to a fixed [NULL, attr] / [attr, NULL] layout."""
    stack += [NULL, value] if opcodes.NULL_BELOW_CALLABLE else [value, NULL]


def _load_const(a: _Analysis, ins: Instr, stack: Stack) -> None:
    stack.append(INACTIVE)


def _load_local(a: _Analysis, ins: Instr, stack: Stack) -> None:
    for name in opcodes.local_names(ins):
        stack.append(a.local_slot(name))


def _load_global(a: _Analysis, ins: Instr, stack: Stack) -> None:
    name, null = opcodes.global_parts(ins)
    if null and opcodes.NULL_BELOW_CALLABLE:
        stack.append(NULL)
    stack.append(a.global_slot(name))
    if null and not opcodes.NULL_BELOW_CALLABLE:
        stack.append(NULL)


def _load_name(a: _Analysis, ins: Instr, stack: Stack) -> None:
    stack.append(ACTIVE)


def _load_attr(a: _Analysis, ins: Instr, stack: Stack) -> None:
    obj = stack.pop()
    name, method = opcodes.attr_parts(ins)
    if isinstance(obj.known, types.ModuleType):
        value = _attr_slot(obj.known, name, a.tainted_globals, a.assumed)
    elif name in NONDIFF_ATTRS and not method:
        value = INACTIVE
    else:
        value = _derived(obj)
    if method:
        _push_method(stack, value)
    else:
        stack.append(value)


def _load_super_attr(a: _Analysis, ins: Instr, stack: Stack) -> None:
    value = _join_all(_pop(stack, 3))
    if opcodes.super_attr_is_method(ins):
        _push_method(stack, value)
    else:
        stack.append(value)


def _push_null(a: _Analysis, ins: Instr, stack: Stack) -> None:
    stack.append(NULL)


def _store_local(a: _Analysis, ins: Instr, stack: Stack) -> None:
    v = stack.pop()
    name = opcodes.var_name(ins.arg)
    if v.known is _MODULE or isinstance(v.known, types.ModuleType):
        a.module_locals.add(name)
    a.bind(name, v)


def _store_local_load(a: _Analysis, ins: Instr, stack: Stack) -> None:
    store_name, load_name = opcodes.local_names(ins)
    a.bind(store_name, stack.pop())
    stack.append(a.local_slot(load_name))


def _store_local_pair(a: _Analysis, ins: Instr, stack: Stack) -> None:
    for name in opcodes.local_names(ins):
        a.bind(name, stack.pop())


def _store_global(a: _Analysis, ins: Instr, stack: Stack) -> None:
    name = cast(str, ins.arg)  # STORE_GLOBAL's argument: the name
    if stack.pop().active and name not in a.tainted_globals:
        a.tainted_globals.add(name)
        a.changed = True


def _store_attr(a: _Analysis, ins: Instr, stack: Stack) -> None:
    obj, v = _pop(stack, 2)
    if v.active and isinstance(obj.known, types.ModuleType):  # `mod.attr = x`: a global elsewhere
        a.taint(frozenset({f"G:{obj.known.__name__}.{ins.arg}"}))
    elif v.active:
        a.taint(obj.aliases)


def _store_item(nkeys: int) -> Transfer:
    def store_item(a: _Analysis, ins: Instr, stack: Stack) -> None:
        _pop(stack, nkeys)
        container, v = _pop(stack, 2)
        if v.active:
            a.taint(container.aliases)
    return store_item


def _swap(a: _Analysis, ins: Instr, stack: Stack) -> None:
    k = opcodes.int_arg(ins)
    stack[-1], stack[-k] = stack[-k], stack[-1]


def _copy(a: _Analysis, ins: Instr, stack: Stack) -> None:
    stack.append(stack[-opcodes.int_arg(ins)])


def _pop_top(a: _Analysis, ins: Instr, stack: Stack) -> None:
    stack.pop()


def _binary(a: _Analysis, ins: Instr, stack: Stack) -> None:
    y, x = _pop(stack, 2)
    # `x op y` makes a new object; only the in-place forms (`x += y`) return `x` itself
    aliases = x.aliases if opcodes.binary_operator(ins).inplace else frozenset()
    stack.append(Slot(x.active or y.active, False, aliases, None))


def _subscr(a: _Analysis, ins: Instr, stack: Stack) -> None:
    key, obj = _pop(stack, 2)
    stack.append(Slot(obj.active or key.active, False, obj.aliases, None))


def _slice(a: _Analysis, ins: Instr, stack: Stack) -> None:
    obj = _pop(stack, 3)[2]
    stack.append(_derived(obj))


def _unary(a: _Analysis, ins: Instr, stack: Stack) -> None:
    stack.append(_derived(stack.pop()))


def _predicate(a: _Analysis, ins: Instr, stack: Stack) -> None:
    _pop(stack, opcodes.predicate_pops(ins))
    stack.append(INACTIVE)


def _unpack(a: _Analysis, ins: Instr, stack: Stack) -> None:
    v = stack.pop()
    stack += [_derived(v)] * opcodes.unpack_count(ins)


def _nothing(a: _Analysis, ins: Instr, stack: Stack) -> None:
    pass


def _call(a: _Analysis, ins: Instr, stack: Stack) -> None:
    n = opcodes.int_arg(ins)
    _call_result(a, ins, stack, n + 2, opcodes.callable_slot(n, stack))


def _call_kw(a: _Analysis, ins: Instr, stack: Stack) -> None:
    n = opcodes.int_arg(ins)  # the names tuple sits on top: the callable is below it
    _call_result(a, ins, stack, n + 3, opcodes.callable_slot(n, stack[:-1]))


def _call_ex(a: _Analysis, ins: Instr, stack: Stack) -> None:
    _call_result(a, ins, stack, opcodes.call_ex_pops(ins), None)


def _call_result(a: _Analysis, ins: Instr, stack: Stack, count: int, fn_slot: Optional[Slot]) -> None:
    if fn_slot is not None and fn_slot.known is not None:
        _refuse_invisible_call(a, ins, fn_slot.known, opcodes.int_arg(ins))
    real = [p for p in _pop(stack, count) if not p.null]
    if nondiff_callable(fn_slot):
        stack.append(INACTIVE)
        return
    if any(p.active for p in real):
        # the callee may store an active value into any argument (or the receiver)
        for p in real:
            a.taint(p.aliases)
    stack.append(_join_all(real))


def _make_function(a: _Analysis, ins: Instr, stack: Stack) -> None:
    stack.append(_join_all(_pop(stack, opcodes.make_function_pops(ins))))


def _container_add(a: _Analysis, ins: Instr, stack: Stack) -> None:
    npop, depth = opcodes.container_add_parts(ins)
    if any(x.active for x in _pop(stack, npop)):
        pos = len(stack) - depth  # CPython peeks the container `depth` deep after the pops
        c = stack[pos]
        stack[pos] = Slot(True, False, c.aliases, None)
        a.taint(c.aliases)


def _with(a: _Analysis, ins: Instr, stack: Stack) -> None:
    mgr = stack.pop()
    stack += [_derived(mgr), _derived(mgr)]


def _import(a: _Analysis, ins: Instr, stack: Stack) -> None:
    consumed, produced = opcodes.stack_effect(ins, jump=False)
    _pop(stack, consumed)
    stack += [Slot(False, False, frozenset(), _MODULE)] * produced


def _for_iter(a: _Analysis, ins: Instr, stack: Stack) -> Stack:
    it = stack[-1]
    jump_stack = list(stack)
    if opcodes.for_iter_jump_pushes() < 0:
        jump_stack.pop()
    else:
        jump_stack.append(INACTIVE)
    stack.append(_derived(it))
    return jump_stack


def _jump(a: _Analysis, ins: Instr, stack: Stack) -> Stack:
    return stack


def _pop_jump(a: _Analysis, ins: Instr, stack: Stack) -> Stack:
    stack.pop()
    return stack


def _jump_or_pop(a: _Analysis, ins: Instr, stack: Stack) -> Stack:
    jump_stack = list(stack)
    stack.pop()
    return jump_stack


def _other(a: _Analysis, ins: Instr, stack: Stack) -> Optional[Stack]:
    """An instruction modelled by its stack effect: its results join its operands."""
    before = list(stack)
    consumed, produced = opcodes.stack_effect(ins, jump=False)
    if consumed > len(stack):
        a.fail(ins, "stack underflow in bytegrad's model")
    stack += [_join_all(_pop(stack, consumed))] * produced
    if opcodes.receives_sent_value(ins):  # `gen.send(v)` may pass in a differentiated value
        stack[-1] = Slot(True, False, stack[-1].aliases, None)
    if not ins.has_jump():
        return None
    consumed, produced = opcodes.stack_effect(ins, jump=True)
    return before + [_join_all(_pop(before, consumed))] * produced


TRANSFER: Final[dict[OpKind, Transfer]] = {
    OpKind.LOAD_CONST: _load_const,
    OpKind.LOAD_LOCAL: _load_local,
    OpKind.LOAD_LOCAL_PAIR: _load_local,
    OpKind.LOAD_CELL: _load_local,
    OpKind.LOAD_GLOBAL: _load_global,
    OpKind.LOAD_NAME: _load_name,
    OpKind.LOAD_ATTR: _load_attr,
    OpKind.LOAD_METHOD: _load_attr,
    OpKind.LOAD_SUPER_ATTR: _load_super_attr,
    OpKind.PUSH_NULL: _push_null,
    OpKind.STORE_LOCAL: _store_local,
    OpKind.STORE_CELL: _store_local,
    OpKind.STORE_LOCAL_LOAD: _store_local_load,
    OpKind.STORE_LOCAL_PAIR: _store_local_pair,
    OpKind.STORE_GLOBAL: _store_global,
    OpKind.STORE_ATTR: _store_attr,
    OpKind.STORE_SUBSCR: _store_item(1),
    OpKind.STORE_SLICE: _store_item(2),
    OpKind.SWAP: _swap,
    OpKind.COPY: _copy,
    OpKind.POP: _pop_top,
    OpKind.BINARY: _binary,
    OpKind.SUBSCR: _subscr,
    OpKind.SLICE: _slice,
    OpKind.UNARY_NEG: _unary,
    OpKind.UNARY_POS: _unary,
    OpKind.INTRINSIC_1: _unary,
    OpKind.GET_ITER: _unary,
    OpKind.UNPACK: _unpack,
    OpKind.UNPACK_EX: _unpack,
    OpKind.PRECALL: _nothing,
    OpKind.KW_NAMES: _nothing,
    OpKind.CALL: _call,
    OpKind.CALL_KW: _call_kw,
    OpKind.CALL_EX: _call_ex,
    OpKind.MAKE_FUNCTION: _make_function,
    OpKind.PREDICATE: _predicate,
    OpKind.CONTAINER_ADD: _container_add,
    OpKind.WITH: _with,
    OpKind.IMPORT: _import,
    OpKind.FOR_ITER: _for_iter,
    OpKind.JUMP: _jump,
    OpKind.POP_JUMP: _pop_jump,
    OpKind.JUMP_OR_POP: _jump_or_pop,
    OpKind.RETURN: _nothing,
    OpKind.OTHER: _other,
}
assert TRANSFER.keys() == set(OpKind), f"activity lacks a transfer for {set(OpKind) - TRANSFER.keys()}"
