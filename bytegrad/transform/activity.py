"""Activity analysis: which stack values and locals may depend on the differentiated arguments.

Input: a `Bytecode` and the activity of each parameter. Output: for every instruction, the abstract
stack before it (activity, NULL-ness, and the variables a value may alias), so the rewrite can leave
alone every site that provably cannot touch a differentiated value, and knows each call's layout.
Locals are flow-insensitive (a local is active if any store into it may be); a container that
receives an active value through a store, an append or a call taints every variable it may alias.
"""
from __future__ import annotations

import builtins
import inspect
import types
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
from bytecode import Bytecode, Instr, Label, TryBegin, TryEnd

from bytegrad.errors import SourceLoc, UnsupportedOpcodeError
from bytegrad.rules import registry
from bytegrad.transform import opcodes
from bytegrad.transform.opcodes import OpKind

# A stack slot: (may be active, is a NULL, names of variables the value may alias, the value when it
# is statically known: a builtin or a module attribute, used to see that `len(x)` is an int)
Slot = tuple[bool, bool, frozenset, Any]
INACTIVE: Slot = (False, False, frozenset(), None)
ACTIVE: Slot = (True, False, frozenset(), None)
NULL: Slot = (False, True, frozenset(), None)

_MODULE = object()  # stands for "a module imported inside the function"

#: attributes that describe an array rather than hold its values: never differentiable
NONDIFF_ATTRS = frozenset({"shape", "ndim", "dtype", "size", "itemsize", "nbytes", "strides", "flags"})

# Global values that can never hold a differentiated value nor be mutated into holding one.
_INERT_TYPES = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, np.ufunc,
                int, float, complex, str, bytes, bool, type(None), np.ndarray, np.generic, np.dtype,
                types.MethodType, types.MethodDescriptorType, types.WrapperDescriptorType,
                type(np.sum))  # NumPy 2's `_ArrayFunctionDispatcher` (np.sum, np.linalg.norm...)


_WRITABLE_GLOBALS = (type, types.FunctionType, np.ndarray)


@dataclass
class Activity:
    """Result of the analysis."""

    stacks: list[Optional[tuple[Slot, ...]]]   # abstract stack before each instruction (None: unreachable)
    active_locals: set[str]
    tainted_globals: set[str] = field(default_factory=set)


def _join(a: Slot, b: Slot) -> Slot:
    if a is b or a == b:
        return a
    return (a[0] or b[0], a[1] and b[1], a[2] | b[2], a[3] if a[3] is b[3] else None)


#: non-differentiable functions whose result on a differentiated value depends on its shape only:
#: calls of them run as they are (any other call on a differentiated value is hooked, so that a
#: capture run sees it: bytegrad/compiled.py checks its result as a decision)
SHAPE_ONLY = frozenset({len, isinstance, type, np.shape, np.ndim, np.size})


def _nondiff_callable(slot: Any) -> bool:
    """A statically known callable whose result never carries a derivative (len, range, np.shape...)."""
    if slot is None or slot[3] is None:
        return False
    rule = registry.lookup(slot[3])
    return rule is not None and rule.kind is registry.RuleKind.NONDIFF


# Builtins that run code or read variables out of bytegrad's sight: values computed through them
# would silently get no derivative, so a differentiated function may not call them.
_INVISIBLE_CALLS = {
    eval: ("eval() runs code from a string, which bytegrad cannot rewrite",
           "write the expression in the function itself (`x * x`, not `eval('x * x')`)."),
    exec: ("exec() runs code from a string, which bytegrad cannot rewrite",
           "write the statements in the function itself, or in a helper function it calls."),
    locals: ("locals() hands the function's variables to code that bytegrad does not follow",
             "use the variables directly."),
}


def _refuse_invisible_call(ins: Instr, fn: Any, nargs: int, loc: SourceLoc) -> None:
    what = _INVISIBLE_CALLS.get(fn) if type(fn) is types.BuiltinFunctionType else None
    if what is None and fn is vars and nargs == 0:
        what = _INVISIBLE_CALLS[locals]
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
        return (True, False, frozenset({"G:" + key}), None)
    if isinstance(value, _INERT_TYPES):
        return (False, False, frozenset({"G:" + key}) if isinstance(value, _WRITABLE_GLOBALS) else frozenset(),
                value)
    return (True, False, frozenset({"G:" + key}), value)


def _join_all(slots: Any) -> Slot:
    active = False
    srcs: frozenset = frozenset()
    for s in slots:
        active = active or s[0]
        srcs = srcs | s[2]
    return (active, False, srcs, None)


def analyze(bc: Bytecode, active_params: set[str], fn_globals: dict[str, Any], loc: SourceLoc,
            cells_active: bool = True, immutable_params: frozenset[str] = frozenset(),
            assumed: Any = None) -> Activity:
    """Compute the activity of every stack slot; see the module docstring.

    `immutable_params` hold ints, strings, None...: when the function never rebinds them, no
    aliasing or mutation can make them active. `assumed` (a `cache.Assumptions`) records every
    global and module attribute the analysis resolved, so a cached rewrite can be revalidated.
    """
    instrs = list(bc)
    n = len(instrs)
    label_pos: dict[int, int] = {}
    handler_of: list[Optional[TryBegin]] = [None] * n
    current: Optional[TryBegin] = None
    for i, ins in enumerate(instrs):
        if isinstance(ins, Label):
            label_pos[id(ins)] = i
        elif isinstance(ins, TryBegin):
            current = ins
        elif isinstance(ins, TryEnd):
            current = None
        handler_of[i] = current

    active_locals = set(active_params)
    cell_names = set(bc.cellvars) | set(bc.freevars)
    if cells_active:
        active_locals |= cell_names
    tainted_globals: set[str] = set()
    bltns = fn_globals.get("__builtins__", builtins)
    if isinstance(bltns, types.ModuleType):
        bltns = bltns.__dict__

    def global_slot(name: str) -> Slot:
        if name in tainted_globals:
            return (True, False, frozenset({"G:" + name}), None)
        in_module = name in fn_globals
        value = fn_globals.get(name, bltns.get(name))
        if assumed is not None:
            assumed.note_global(name, value, in_module)
        if isinstance(value, _INERT_TYPES):
            # builtins (rarely rebound) and modules are remembered, to see through `len(x)`, `np.shape(x)`
            known = value if (not in_module or isinstance(value, types.ModuleType)) else None
            # a module-level class, function or array may be written into (`K.v = x`, `f.cache = x`,
            # `BUF[:] = x`) and read back: its name is an alias source, inactive until tainted
            if in_module and isinstance(value, _WRITABLE_GLOBALS):
                if tainted_globals and type(value) is types.FunctionType:
                    # a module function may read what this one wrote into a global: its call is hooked
                    return (True, False, frozenset({"G:" + name}), None)
                return (False, False, frozenset({"G:" + name}), known)
            # no alias source: a call's result never aliases the module or function it came from
            return (False, False, frozenset(), known)
        return (True, False, frozenset({"G:" + name}), None)

    def local_slot(name: str) -> Slot:
        if name in module_locals:
            return (False, False, frozenset(), _MODULE)
        return (name in active_locals, False, frozenset({"L:" + name}), None)

    # local -> the variables whose objects it may alias (`M = buf.reshape(2, 2)`: M ~ buf)
    aliases: dict[str, set[str]] = {}

    # locals that hold modules (`import collections` inside the function): never differentiable
    module_locals: set[str] = set()
    stored = {n for ins in instrs if isinstance(ins, Instr) and opcodes.kind_of(ins) in (
        OpKind.STORE_LOCAL, OpKind.STORE_CELL, OpKind.STORE_LOCAL_LOAD, OpKind.STORE_LOCAL_PAIR)
        for n in opcodes.local_names(ins)}
    frozen = {n for n in immutable_params if n not in stored}

    def note_alias(name: str, srcs: frozenset) -> None:
        others = {x for x in srcs if x != "L:" + name and x[2:] not in module_locals}
        if others:
            aliases.setdefault(name, set()).update(others)

    def taint(srcs: frozenset) -> bool:
        changed = False
        todo = list(srcs)
        seen: set[str] = set()
        while todo:
            s = todo.pop()
            if s in seen:
                continue
            seen.add(s)
            kind, name = s[:2], s[2:]
            if kind == "L:":
                if name in module_locals or name in frozen:
                    continue
                if name not in active_locals:
                    active_locals.add(name)
                    changed = True
                todo.extend(aliases.get(name, ()))
                todo.extend("L:" + other for other, srcs2 in aliases.items() if s in srcs2)
            elif kind == "G:" and name not in tainted_globals:
                tainted_globals.add(name)
                changed = True
        return changed

    def fail(ins: Instr, why: str) -> None:
        raise UnsupportedOpcodeError(
            f"bytegrad cannot rewrite the instruction {ins.name} ({why}).",
            SourceLoc(loc.filename, ins.lineno or loc.lineno, loc.function),
            "differentiate a function that avoids this construct, or move it into a helper "
            "function that does not touch differentiated values.")

    _refuse_invisible_code(instrs, active_locals | cell_names, loc)

    for _round in range(50):
        stacks: list[Optional[tuple[Slot, ...]]] = [None] * n
        stacks[0] = ()
        changed_vars = False
        work = [0]
        queued = {0}

        def flow(j: int, st: tuple[Slot, ...]) -> None:
            if j >= n:
                return
            old = stacks[j]
            if old is None:
                new = st
            else:
                if len(old) != len(st):
                    raise AssertionError(f"stack depth mismatch at instruction {j}: {len(old)} vs {len(st)}")
                new = tuple(_join(a, b) for a, b in zip(old, st))
                if new == old:
                    return
            stacks[j] = new
            if j not in queued:
                queued.add(j)
                work.append(j)

        while work:
            i = work.pop()
            queued.discard(i)
            st = stacks[i]
            assert st is not None
            ins = instrs[i]
            if not isinstance(ins, Instr):
                flow(i + 1, st)
                continue
            handler = handler_of[i]
            if handler is not None:
                depth = handler.stack_depth
                if not isinstance(depth, int) or depth > len(st):
                    fail(ins, "exception handler with unknown stack depth")
                # the exception may carry a differentiated value (`raise ValueError(x * x)`, then `e.args`)
                exc = ACTIVE if active_locals or tainted_globals else INACTIVE
                exc_stack = st[:depth] + ((INACTIVE,) if handler.push_lasti else ()) + (exc,)
                flow(label_pos[id(handler.target)], exc_stack)
            try:
                kind = opcodes.kind_of(ins)
            except KeyError:
                fail(ins, "an opcode bytegrad does not know")
            stack = list(st)
            jump_stack: Optional[list[Slot]] = None

            if kind is OpKind.LOAD_CONST:
                stack.append(INACTIVE)
            elif kind is OpKind.LOAD_LOCAL:
                stack.append(local_slot(opcodes.var_name(ins.arg)))
            elif kind is OpKind.LOAD_LOCAL_PAIR:
                for name in opcodes.local_names(ins):
                    stack.append(local_slot(name))
            elif kind is OpKind.LOAD_CELL:
                stack.append(local_slot(opcodes.var_name(ins.arg)))
            elif kind is OpKind.LOAD_GLOBAL:
                name, null = opcodes.global_parts(ins)
                if null and opcodes.NULL_BELOW_CALLABLE:
                    stack.append(NULL)
                stack.append(global_slot(name))
                if null and not opcodes.NULL_BELOW_CALLABLE:
                    stack.append(NULL)
            elif kind is OpKind.LOAD_NAME:
                stack.append(ACTIVE)
            elif kind in (OpKind.LOAD_ATTR, OpKind.LOAD_METHOD):
                obj = stack.pop()
                name, method = opcodes.attr_parts(ins)
                if isinstance(obj[3], types.ModuleType):
                    value = _attr_slot(obj[3], name, tainted_globals, assumed)
                elif name in NONDIFF_ATTRS and not method:
                    value = (False, False, frozenset(), None)
                else:
                    value = (obj[0], False, obj[2], None)
                if method:  # normalised by the rewrite to a fixed [NULL, attr] / [attr, NULL] layout
                    stack += [NULL, value] if opcodes.NULL_BELOW_CALLABLE else [value, NULL]
                else:
                    stack.append(value)
            elif kind is OpKind.LOAD_SUPER_ATTR:
                popped = [stack.pop() for _ in range(3)]
                value = _join_all(popped)
                if opcodes.super_attr_is_method(ins):
                    stack += [NULL, value] if opcodes.NULL_BELOW_CALLABLE else [value, NULL]
                else:
                    stack.append(value)
            elif kind is OpKind.PUSH_NULL:
                stack.append(NULL)
            elif kind is OpKind.STORE_LOCAL or kind is OpKind.STORE_CELL:
                v = stack.pop()
                name = opcodes.var_name(ins.arg)
                if v[3] is _MODULE or isinstance(v[3], types.ModuleType):
                    module_locals.add(name)
                note_alias(name, v[2])
                if v[0] and name not in active_locals:
                    active_locals.add(name)
                    changed_vars = True
            elif kind is OpKind.STORE_LOCAL_LOAD:
                store_name, load_name = opcodes.local_names(ins)
                v = stack.pop()
                note_alias(store_name, v[2])
                if v[0] and store_name not in active_locals:
                    active_locals.add(store_name)
                    changed_vars = True
                stack.append(local_slot(load_name))
            elif kind is OpKind.STORE_LOCAL_PAIR:
                for name in opcodes.local_names(ins):
                    v = stack.pop()
                    note_alias(name, v[2])
                    if v[0] and name not in active_locals:
                        active_locals.add(name)
                        changed_vars = True
            elif kind is OpKind.STORE_GLOBAL:
                v = stack.pop()
                if v[0] and ins.arg not in tainted_globals:
                    tainted_globals.add(ins.arg)
                    changed_vars = True
            elif kind is OpKind.STORE_ATTR:
                obj = stack.pop()
                v = stack.pop()
                if v[0] and isinstance(obj[3], types.ModuleType):  # `mod.attr = x`: a global elsewhere
                    changed_vars = taint(frozenset({f"G:{obj[3].__name__}.{ins.arg}"})) or changed_vars
                elif v[0] and taint(obj[2]):
                    changed_vars = True
            elif kind is OpKind.STORE_SUBSCR or kind is OpKind.STORE_SLICE:
                nkeys = 1 if kind is OpKind.STORE_SUBSCR else 2
                for _ in range(nkeys):
                    stack.pop()
                container = stack.pop()
                v = stack.pop()
                if v[0] and taint(container[2]):
                    changed_vars = True
            elif kind is OpKind.SWAP:
                k = int(ins.arg)
                stack[-1], stack[-k] = stack[-k], stack[-1]
            elif kind is OpKind.COPY:
                stack.append(stack[-int(ins.arg)])
            elif kind is OpKind.POP:
                stack.pop()
            elif kind is OpKind.BINARY:
                b = stack.pop()
                a = stack.pop()
                # `a op b` makes a new object; only the in-place forms (`a += b`) return `a` itself
                inplace = opcodes.binary_op(ins) >= 13
                stack.append((a[0] or b[0], False, a[2] if inplace else frozenset(), None))
            elif kind is OpKind.SUBSCR:
                key = stack.pop()
                obj = stack.pop()
                stack.append((obj[0] or key[0], False, obj[2], None))
            elif kind is OpKind.SLICE:
                stack.pop()
                stack.pop()
                obj = stack.pop()
                stack.append((obj[0], False, obj[2], None))
            elif kind in (OpKind.UNARY_NEG, OpKind.UNARY_POS, OpKind.INTRINSIC_1, OpKind.GET_ITER):
                v = stack.pop()
                stack.append((v[0], False, v[2], None))
            elif kind is OpKind.PREDICATE:
                k = opcodes.predicate_pops(ins)
                for _ in range(k):
                    stack.pop()
                stack.append(INACTIVE)
            elif kind is OpKind.UNPACK or kind is OpKind.UNPACK_EX:
                v = stack.pop()
                count = int(ins.arg) if kind is OpKind.UNPACK else opcodes.unpack_ex_count(ins)
                stack += [(v[0], False, v[2], None)] * count
            elif kind in (OpKind.PRECALL, OpKind.KW_NAMES):
                pass
            elif kind in (OpKind.CALL, OpKind.CALL_KW, OpKind.CALL_EX):
                if kind is OpKind.CALL_EX:
                    count = opcodes.call_ex_pops(ins)
                else:
                    count = int(ins.arg) + 2 + (1 if kind is OpKind.CALL_KW else 0)
                fn_slot = opcodes.callable_slot(int(ins.arg) + (1 if kind is OpKind.CALL_KW else 0), stack) \
                    if kind is not OpKind.CALL_EX else None
                if kind is OpKind.CALL_KW:  # the names tuple sits on top: look below it
                    fn_slot = opcodes.callable_slot(int(ins.arg), stack[:-1])
                if fn_slot is not None and fn_slot[3] is not None:
                    _refuse_invisible_call(ins, fn_slot[3], int(ins.arg), loc)
                popped = [stack.pop() for _ in range(count)]
                real = [p for p in popped if not p[1]]
                if _nondiff_callable(fn_slot):
                    stack.append(INACTIVE)
                    continue_flow = True
                else:
                    continue_flow = False
                any_active = any(p[0] for p in real) and not continue_flow
                if any_active:
                    # the callee may store an active value into any argument (or the receiver)
                    for p in real:
                        if taint(p[2]):
                            changed_vars = True
                if not continue_flow:
                    stack.append(_join_all(real))
            elif kind is OpKind.MAKE_FUNCTION:
                popped = [stack.pop() for _ in range(opcodes.make_function_pops(ins))]
                stack.append(_join_all(popped))
            elif kind is OpKind.CONTAINER_ADD:
                npop, depth = opcodes.container_add_parts(ins)
                items = [stack.pop() for _ in range(npop)]
                if any(x[0] for x in items):
                    pos = len(stack) - depth  # CPython peeks the container `depth` deep after the pops
                    c = stack[pos]
                    stack[pos] = (True, False, c[2], None)
                    if taint(c[2]):
                        changed_vars = True
            elif kind is OpKind.WITH:
                mgr = stack.pop()
                stack += [(mgr[0], False, mgr[2], None), (mgr[0], False, mgr[2], None)]
            elif kind is OpKind.FOR_ITER:
                it = stack[-1]
                jump_stack = list(stack)
                if opcodes.for_iter_jump_pushes() < 0:
                    jump_stack.pop()
                else:
                    jump_stack.append(INACTIVE)
                stack.append((it[0], False, it[2], None))
            elif kind is OpKind.JUMP:
                jump_stack = stack
            elif kind is OpKind.POP_JUMP:
                stack.pop()
                jump_stack = stack
            elif kind is OpKind.JUMP_OR_POP:
                jump_stack = list(stack)
                stack.pop()
            elif kind is OpKind.RETURN:
                pass
            elif kind is OpKind.IMPORT:
                consumed, produced = opcodes.stack_effect(ins, jump=False)
                for _ in range(consumed):
                    stack.pop()
                stack += [(False, False, frozenset(), _MODULE)] * produced
            else:  # OTHER
                consumed, produced = opcodes.stack_effect(ins, jump=False)
                if consumed > len(stack):
                    fail(ins, "stack underflow in bytegrad's model")
                popped = [stack.pop() for _ in range(consumed)]
                out = _join_all(popped)
                stack += [out] * produced
                if opcodes.receives_sent_value(ins):  # `gen.send(v)` may pass in a differentiated value
                    stack[-1] = (True, False, stack[-1][2], None)
                if ins.has_jump():
                    c2, p2 = opcodes.stack_effect(ins, jump=True)
                    jump_stack = list(st)
                    popped2 = [jump_stack.pop() for _ in range(c2)]
                    jump_stack += [_join_all(popped2)] * p2

            if jump_stack is not None and isinstance(ins.arg, Label):
                flow(label_pos[id(ins.arg)], tuple(jump_stack))
            if not opcodes.is_terminator(ins):
                flow(i + 1, tuple(stack))

        if not changed_vars:
            return Activity(stacks, active_locals, tainted_globals)
    raise AssertionError("activity analysis did not converge")
