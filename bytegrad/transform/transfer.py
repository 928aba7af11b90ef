"""The activity analysis's transfer functions, one per `OpKind` (`TRANSFER`, checked complete at
import): each updates the abstract stack in place (the stack before an instruction becomes the
stack after it, falling through) and returns the stack on the jump edge, or None when the
instruction does not jump. transform/activity.py runs them."""
from __future__ import annotations

import types
from typing import TYPE_CHECKING, Callable, Final, Optional, cast

from bytegrad.transform.code import Instr

from bytegrad.transform import opcodes
from bytegrad.transform.opcodes import OpKind

from bytegrad.transform.slots import (
    ACTIVE, IMPORTED_MODULE, INACTIVE, NONDIFF_ATTRS, NULL, Slot, attr_slot, derived, join_all,
    nondiff_callable, refuse_invisible_call,
)

if TYPE_CHECKING:  # (activity.py imports this module)
    from bytegrad.transform.activity import Analysis

__all__ = ["TRANSFER", "Stack", "Transfer"]


# ---- transfer functions: one per OpKind ------------------------------------------------------------
# Each updates the stack in place (the stack before `ins` becomes the stack after it, falling
# through) and returns the stack on the jump edge, or None when `ins` does not jump.

Stack = list[Slot]
Transfer = Callable[["Analysis", Instr, Stack], Optional[Stack]]


def _pop(stack: Stack, n: int) -> list[Slot]:
    """The top `n` values, top first."""
    return [stack.pop() for _ in range(n)]


def _push_method(stack: Stack, value: Slot) -> None:
    """A method load, normalised by the rewrite to a fixed [NULL, attr] / [attr, NULL] layout."""
    stack += [NULL, value] if opcodes.NULL_BELOW_CALLABLE else [value, NULL]


def _load_const(a: Analysis, ins: Instr, stack: Stack) -> None:
    stack.append(INACTIVE)


def _load_local(a: Analysis, ins: Instr, stack: Stack) -> None:
    for name in opcodes.local_names(ins):
        stack.append(a.local_slot(name))


def _load_global(a: Analysis, ins: Instr, stack: Stack) -> None:
    name, null = opcodes.global_parts(ins)
    if null and opcodes.NULL_BELOW_CALLABLE:
        stack.append(NULL)
    stack.append(a.global_slot(name))
    if null and not opcodes.NULL_BELOW_CALLABLE:
        stack.append(NULL)


def _load_name(a: Analysis, ins: Instr, stack: Stack) -> None:
    stack.append(ACTIVE)


def _load_attr(a: Analysis, ins: Instr, stack: Stack) -> None:
    obj = stack.pop()
    name, method = opcodes.attr_parts(ins)
    if isinstance(obj.known, types.ModuleType):
        value = attr_slot(obj.known, name, a.tainted_globals, a.assumed)
    elif name in NONDIFF_ATTRS and not method:
        value = INACTIVE
    else:
        value = derived(obj)
    if method:
        _push_method(stack, value)
    else:
        stack.append(value)


def _load_super_attr(a: Analysis, ins: Instr, stack: Stack) -> None:
    value = join_all(_pop(stack, 3))
    if opcodes.super_attr_is_method(ins):
        _push_method(stack, value)
    else:
        stack.append(value)


def _push_null(a: Analysis, ins: Instr, stack: Stack) -> None:
    stack.append(NULL)


def _store_local(a: Analysis, ins: Instr, stack: Stack) -> None:
    v = stack.pop()
    name = opcodes.var_name(ins.arg)
    if v.known is IMPORTED_MODULE or isinstance(v.known, types.ModuleType):
        a.module_locals.add(name)
    a.bind(name, v)


def _store_local_load(a: Analysis, ins: Instr, stack: Stack) -> None:
    store_name, load_name = opcodes.local_names(ins)
    a.bind(store_name, stack.pop())
    stack.append(a.local_slot(load_name))


def _store_local_pair(a: Analysis, ins: Instr, stack: Stack) -> None:
    for name in opcodes.local_names(ins):
        a.bind(name, stack.pop())


def _store_global(a: Analysis, ins: Instr, stack: Stack) -> None:
    name = cast(str, ins.arg)  # STORE_GLOBAL's argument: the name
    if stack.pop().active and name not in a.tainted_globals:
        a.tainted_globals.add(name)
        a.changed = True


def _store_attr(a: Analysis, ins: Instr, stack: Stack) -> None:
    obj, v = _pop(stack, 2)
    if v.active and isinstance(obj.known, types.ModuleType):  # `mod.attr = x`: a global elsewhere
        a.taint(frozenset({f"G:{obj.known.__name__}.{ins.arg}"}))
    elif v.active:
        a.taint(obj.aliases)


def _store_item(nkeys: int) -> Transfer:
    def store_item(a: Analysis, ins: Instr, stack: Stack) -> None:
        _pop(stack, nkeys)
        container, v = _pop(stack, 2)
        if v.active:
            a.taint(container.aliases)
    return store_item


def _swap(a: Analysis, ins: Instr, stack: Stack) -> None:
    k = opcodes.int_arg(ins)
    stack[-1], stack[-k] = stack[-k], stack[-1]


def _copy(a: Analysis, ins: Instr, stack: Stack) -> None:
    stack.append(stack[-opcodes.int_arg(ins)])


def _pop_top(a: Analysis, ins: Instr, stack: Stack) -> None:
    stack.pop()


def _binary(a: Analysis, ins: Instr, stack: Stack) -> None:
    y, x = _pop(stack, 2)
    # `x op y` makes a new object; only the in-place forms (`x += y`) return `x` itself
    aliases = x.aliases if opcodes.binary_operator(ins).inplace else frozenset()
    stack.append(Slot(x.active or y.active, False, aliases, None))


def _subscr(a: Analysis, ins: Instr, stack: Stack) -> None:
    key, obj = _pop(stack, 2)
    stack.append(Slot(obj.active or key.active, False, obj.aliases, None))


def _slice(a: Analysis, ins: Instr, stack: Stack) -> None:
    obj = _pop(stack, 3)[2]
    stack.append(derived(obj))


def _unary(a: Analysis, ins: Instr, stack: Stack) -> None:
    stack.append(derived(stack.pop()))


def _predicate(a: Analysis, ins: Instr, stack: Stack) -> None:
    _pop(stack, opcodes.predicate_pops(ins))
    stack.append(INACTIVE)


def _unpack(a: Analysis, ins: Instr, stack: Stack) -> None:
    v = stack.pop()
    stack += [derived(v)] * opcodes.unpack_count(ins)


def _nothing(a: Analysis, ins: Instr, stack: Stack) -> None:
    pass


def _call(a: Analysis, ins: Instr, stack: Stack) -> None:
    n = opcodes.int_arg(ins)
    _call_result(a, ins, stack, n + 2, opcodes.callable_slot(n, stack))


def _call_kw(a: Analysis, ins: Instr, stack: Stack) -> None:
    n = opcodes.int_arg(ins)  # the names tuple sits on top: the callable is below it
    _call_result(a, ins, stack, n + 3, opcodes.callable_slot(n, stack[:-1]))


def _call_ex(a: Analysis, ins: Instr, stack: Stack) -> None:
    _call_result(a, ins, stack, opcodes.call_ex_pops(ins), None)


def _call_result(a: Analysis, ins: Instr, stack: Stack, count: int, fn_slot: Optional[Slot]) -> None:
    if fn_slot is not None and fn_slot.known is not None:
        refuse_invisible_call(a, ins, fn_slot.known, opcodes.int_arg(ins))
    real = [p for p in _pop(stack, count) if not p.null]
    made = a.made_active and _makes_array(fn_slot)  # (a capture tracks the array it makes)
    if nondiff_callable(fn_slot):
        stack.append(ACTIVE if made else INACTIVE)
        return
    if any(p.active for p in real):
        # the callee may store an active value into any argument (or the receiver)
        for p in real:
            a.taint(p.aliases)
    out = join_all(real)
    stack.append(out._replace(active=True) if made else out)


def _makes_array(fn_slot: Optional[Slot]) -> bool:
    """A call of one of NumPy's array makers (`np.zeros`, `np.eye`: runtime/dispatch.py's MAKERS)."""
    from bytegrad.runtime.dispatch import MAKERS

    try:
        return fn_slot is not None and fn_slot.known in MAKERS
    except TypeError:  # (an unhashable known value)
        return False


def _make_function(a: Analysis, ins: Instr, stack: Stack) -> None:
    stack.append(join_all(_pop(stack, opcodes.make_function_pops(ins))))


def _container_add(a: Analysis, ins: Instr, stack: Stack) -> None:
    npop, depth = opcodes.container_add_parts(ins)
    if any(x.active for x in _pop(stack, npop)):
        pos = len(stack) - depth  # CPython peeks the container `depth` deep after the pops
        c = stack[pos]
        stack[pos] = Slot(True, False, c.aliases, None)
        a.taint(c.aliases)


def _with(a: Analysis, ins: Instr, stack: Stack) -> None:
    mgr = stack.pop()
    stack += [derived(mgr), derived(mgr)]


def _import(a: Analysis, ins: Instr, stack: Stack) -> None:
    consumed, produced = opcodes.stack_effect(ins, jump=False)
    _pop(stack, consumed)
    stack += [Slot(False, False, frozenset(), IMPORTED_MODULE)] * produced


def _for_iter(a: Analysis, ins: Instr, stack: Stack) -> Stack:
    it = stack[-1]
    jump_stack = list(stack)
    if opcodes.for_iter_jump_pushes() < 0:
        jump_stack.pop()
    else:
        jump_stack.append(INACTIVE)
    stack.append(derived(it))
    return jump_stack


def _jump(a: Analysis, ins: Instr, stack: Stack) -> Stack:
    return stack


def _pop_jump(a: Analysis, ins: Instr, stack: Stack) -> Stack:
    stack.pop()
    return stack


def _jump_or_pop(a: Analysis, ins: Instr, stack: Stack) -> Stack:
    jump_stack = list(stack)
    stack.pop()
    return jump_stack


def _other(a: Analysis, ins: Instr, stack: Stack) -> Optional[Stack]:
    """An instruction modelled by its stack effect: its results join its operands."""
    before = list(stack)
    consumed, produced = opcodes.stack_effect(ins, jump=False)
    if consumed > len(stack):
        a.fail(ins, "stack underflow in bytegrad's model")
    stack += [join_all(_pop(stack, consumed))] * produced
    if opcodes.receives_sent_value(ins):  # `gen.send(v)` may pass in a differentiated value
        stack[-1] = Slot(True, False, stack[-1].aliases, None)
    if not ins.has_jump():
        return None
    consumed, produced = opcodes.stack_effect(ins, jump=True)
    return before + [join_all(_pop(before, consumed))] * produced


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
