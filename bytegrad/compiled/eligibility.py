"""Which functions can become compiled gradient programs, read from their bytecode.

A compiled program (bytegrad/compiled/policy.py, compiled/lower_numpy.py) replays the operations one capture
run recorded. That is the same computation on other argument values only if nothing the function
decides depends on those values beyond what the program's guards fix (types, shapes, dtypes, the
values of ints and strings, the globals read). `check` runs the activity analysis with every
non-constant parameter active and refuses, with a reason per site:

- `a or b` / `a and b` on values computed from the arguments (3.11 keeps the operand); a
  comparison, `is`, `in`, `not` or truth test of such a value (`if x.sum() > 0`, `if x[0]:`) and a
  call of a function without a derivative on one (`np.argmax(x)`) are hooked instead, and the
  capture records each as a decision that the program computes again and checks
  (compiled/lower_numpy.py);
- calls, with no argument-derived operand, of anything but pure builtins, `math`, NumPy's array
  makers, NumPy ufuncs given their inputs alone and the NumPy scalar types and shape functions of
  `_NUMPY_PURE` called positionally (random draws, I/O, user functions, `out=`);
- writes outside the function's locals, closures, inner functions, `with`, `try`, imports.

What the analysis cannot see (which Python function an active call reaches, a non-differentiable
method of an array) the capture run reports (runtime/tape.py, `CaptureTape`). The globals and
module attributes the code reads come back as guards.
"""
from __future__ import annotations

import inspect
import math
import operator
import sys
import types
from typing import TYPE_CHECKING, Any, Optional, cast

import numpy as np

from bytegrad.compiled import constructs
from bytegrad.errors import DifferentiationError, SourceLoc, qualname
from bytegrad.runtime.dispatch import MAKERS
from bytegrad.transform import opcodes
from bytegrad.transform.opcodes import OpKind

if TYPE_CHECKING:  # (a run from the disk cache does not import bytecode)
    from bytecode import Instr

__all__ = ["check"]

#: callables a compiled program may call on constants and guarded values: no state, no I/O
_PURE = frozenset({range, len, int, float, bool, abs, min, max, round, tuple, list, dict, slice, enumerate, zip,
                   reversed, sum, isinstance, divmod, pow, type, complex, str}) \
    | frozenset(v for v in vars(math).values() if callable(v)) \
    | frozenset(v for k, v in vars(operator).items() if callable(v) and not k.startswith("_"))

#: NumPy callables a compiled program may call, positionally, on constants and guarded values: no
#: state, and without keywords no `out` to write (ufuncs are taken the same way, given their inputs alone)
_NUMPY_PURE = frozenset({np.all, np.any, np.prod, np.shape, np.ndim, np.size, np.isscalar, np.float64, np.float32,
                         np.int64, np.int32, np.bool_})

_SUSPENDING = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE
_REFUSED_KINDS = {
    OpKind.STORE_GLOBAL: "writes a global variable",
    OpKind.STORE_ATTR: "writes an attribute",
    OpKind.STORE_SUBSCR: "writes into a container or array (`a[i] = v`)",
    OpKind.STORE_SLICE: "writes into a slice",
    OpKind.STORE_CELL: "writes a closure variable",
    OpKind.LOAD_NAME: "reads a name the compiler could not resolve",
    OpKind.IMPORT: "imports a module",
    OpKind.WITH: "uses a `with` block",
    OpKind.MAKE_FUNCTION: "defines a function inside",
    OpKind.LOAD_SUPER_ATTR: "calls super()",
}


def check(code: types.CodeType, active: frozenset[str], fn_globals: dict[str, Any],
          immutable: frozenset[str], defaults: tuple = (), closure: Optional[tuple] = None) \
        -> tuple[list[str], list[tuple]]:
    """(reasons the function cannot be a compiled program, guards on what it reads).

    No reasons: the function's operations on the arguments depend on data only through recorded
    operations. The guards are ("global", fn_globals, name, value), ("attr", module, name, value)
    and ("cell", cell, name, value) entries; a program (compiled/source.py) checks them on every call (an array
    among them is read at call time, an input of the program). `defaults`: the function's default
    argument values (a replaced tuple drops its programs; their contents must be constants).
    `closure`: the function's closure cells; without it a closure is refused (a Python callee's
    guards fix its code, not its cells)."""
    reasons = _code_reasons(code, closure is not None)
    if not all(_constant(v) for v in defaults):  # read as locals, never guarded: they must not change
        reasons.append("a default argument value that can change in place (a list, dict, array or object)")
    if reasons:
        return reasons, []
    from bytecode import Bytecode

    from bytegrad.transform.activity import analyze
    from bytegrad.transform.cache import Assumptions

    loc = SourceLoc(code.co_filename, code.co_firstlineno, code.co_name)
    bc = Bytecode.from_code(code, conserve_exception_block_stackdepth=True)
    assumed = Assumptions()
    try:
        act = analyze(bc, set(active), fn_globals, loc, immutable_params=immutable, assumed=assumed)
    except DifferentiationError as exc:
        return [f"the general path refuses it too: {exc.args[0] if exc.args else exc}"], []
    allowed = constructs.allowed_sites(bc)  # (an assert's AssertionError, `x.dtype.kind`)
    allowed |= constructs.errstate_sites(code, fn_globals, bc)  # (`with np.errstate(...)`)
    for ins, stack in zip(bc, act.stacks):
        if stack is None or not hasattr(ins, "name") or id(ins) in allowed:
            continue
        why = _instruction_reason(ins, stack)
        if why is not None:
            reasons.append(f"{why} (line {cast('Instr', ins).lineno})")  # (only an Instr has a name)
    guards = _guards(assumed, fn_globals, reasons)
    arrays = frozenset(name if kind == "global" else f"{owner.__name__}.{name}"
                       for kind, owner, name, value in guards if type(value) is np.ndarray)
    if arrays:
        tainted = analyze(Bytecode.from_code(code, conserve_exception_block_stackdepth=True), set(active),
                          fn_globals, loc, immutable_params=immutable, tainted=arrays)
        reasons += _unrecorded_array_uses(bc, act.stacks, tainted.stacks)
    for name, cell in zip(code.co_freevars, closure or ()):
        try:
            value = cell.cell_contents
        except ValueError:
            reasons.append(f"reads the closure variable {name} before it is assigned")
            continue
        if _guardable(value, f"the closure variable {name}", reasons):
            guards.append(("cell", cell, name, value))
    return reasons, guards


#: operations on values (not loads, stores and stack shuffles)
_COMPUTING = frozenset({OpKind.BINARY, OpKind.SUBSCR, OpKind.SLICE, OpKind.UNARY_NEG, OpKind.UNARY_POS,
                        OpKind.INTRINSIC_1, OpKind.GET_ITER, OpKind.UNPACK, OpKind.UNPACK_EX, OpKind.CALL,
                        OpKind.CALL_KW, OpKind.CALL_EX, OpKind.PREDICATE, OpKind.CONTAINER_ADD, OpKind.FOR_ITER,
                        OpKind.POP_JUMP, OpKind.JUMP_OR_POP, OpKind.LOAD_ATTR, OpKind.LOAD_METHOD, OpKind.OTHER})
#: what an array's guards fix: reading them needs no record
_GUARDED_ATTRS = frozenset({"shape", "ndim", "dtype", "size"})


def _unrecorded_array_uses(bc: Any, stacks: list, tainted: list) -> list[str]:
    """An array read from a global or a module attribute is an input of the program, tracked in the
    capture; an operation the rewrite leaves unhooked (none of its operands derives from the
    arguments) is not recorded, so what it computes from such an array (`W[0, 0]`, `W.T`,
    `len(W)`) would be folded into the program as a constant. `tainted`: the stacks with those
    arrays active; each operation whose operands are active only there is refused. (A closure's
    cells are active in the rewrite itself: their operations are hooked, so recorded.)"""
    reasons = []
    for ins, plain, marked in zip(bc, stacks, tainted):
        if plain is None or marked is None or not hasattr(ins, "name"):
            continue
        kind = opcodes.kind_of(ins)
        if kind not in _COMPUTING or (kind is OpKind.LOAD_ATTR and opcodes.attr_parts(ins)[0] in _GUARDED_ATTRS):
            continue
        n = opcodes.stack_effect(ins, False)[0]
        if n > 0 and any(s.active for s in marked[len(marked) - n:]) \
                and not any(s.active for s in plain[len(plain) - n:]):
            reasons.append(f"computes from an array read from a global or module attribute without the arguments "
                           f"(`W.T`, `W[0]`, `len(W)`: pass the array as an argument) (line {ins.lineno})")
    return reasons


def _constant(value: Any) -> bool:
    if type(value) is tuple:
        return all(_constant(v) for v in value)
    return type(value) in _GUARDED_BY_VALUE or isinstance(value, _GUARDED_BY_IDENTITY)


def _code_reasons(code: types.CodeType, cells_guarded: bool) -> list[str]:
    reasons = []
    if code.co_flags & _SUSPENDING:
        reasons.append("a generator or coroutine")
    if code.co_freevars and not cells_guarded:
        reasons.append(f"a closure (it reads {', '.join(code.co_freevars)} from an enclosing function)")
    if code.co_cellvars:
        reasons.append(f"inner functions read its variables ({', '.join(code.co_cellvars)})")
    if any(isinstance(c, types.CodeType) for c in code.co_consts):
        reasons.append("it defines a function, lambda or comprehension inside (compiled programs do not "
                       "follow Python callees yet)")
    return reasons


def _instruction_reason(ins: Any, stack: tuple) -> str | None:
    try:
        kind = opcodes.kind_of(ins)
    except KeyError:
        return f"uses {ins.name}"
    refused = _REFUSED_KINDS.get(kind)
    if refused is not None:
        return refused
    if kind is OpKind.JUMP_OR_POP:  # (a POP_JUMP's truth test is hooked, a decision; an `is None`
        # test is the value's type, fixed by the argument types and the operations replayed)
        if stack[-1].active:
            return "branches on a value computed from the arguments (`a or b`, `a and b` on 3.11)"
    elif kind is OpKind.LOAD_ATTR or kind is OpKind.LOAD_METHOD:
        obj = stack[-1]
        name, _ = opcodes.attr_parts(ins)
        if not obj.active and not isinstance(obj.known, types.ModuleType) and obj.known is None:
            return f"reads the attribute .{name} of an object that is not an argument"
    elif kind is OpKind.CALL or kind is OpKind.CALL_KW:
        return _call_reason(ins, stack, kind)
    elif kind is OpKind.CONTAINER_ADD:
        return constructs.container_reason(ins, stack)
    elif kind is OpKind.CALL_EX:
        if not any(s.active for s in stack[len(stack) - opcodes.call_ex_pops(ins):]):
            return "calls a function with unpacked constant arguments"
    elif kind is OpKind.OTHER or kind is OpKind.INTRINSIC_1:
        if not opcodes.is_plain_builder(ins):
            return constructs.other_reason(ins, stack)  # (try/except, match, sets, strings)
    return None


def _call_reason(ins: Any, stack: tuple, kind: OpKind) -> str | None:
    nargs = int(ins.arg)
    if kind is OpKind.CALL_KW:
        stack = stack[:-1]  # the names tuple
    fn_slot = opcodes.callable_slot(nargs, stack)
    operands = [s for s in stack[len(stack) - nargs - 2:] if not s.null]
    known = fn_slot.known if fn_slot is not None else None
    if any(s.active for s in operands):  # (without a derivative, the capture records it as a decision)
        return None
    if known is None:
        return "calls a function that is not known statically, on constants"
    # a NumPy ufunc on its inputs alone (`np.sqrt(d)` of a shape): what it gives from guarded numbers is
    # fixed; an array it gives is refused where a recorded operation reads it (compiled/lower_numpy.py), and
    # without `out` (a positional one, or any keyword) it writes nothing
    try:
        pure = known in _PURE or known in MAKERS or (  # (a made array: the capture records how, runtime/dispatch.py)
            kind is OpKind.CALL and (nargs == known.nin if isinstance(known, np.ufunc) else known in _NUMPY_PURE)) \
            or constructs.pure_call(known)
    except TypeError:
        pure = False
    if not pure:
        return (f"calls {qualname(known)} on constants (a compiled program takes only pure builtins, math, NumPy's "
                "array makers, scalar types, shape functions and its ufuncs without `out` there: nothing that may "
                "depend on state such as random draws or I/O, or write)")
    return None


_GUARDED_BY_IDENTITY = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, np.ufunc,
                        types.MethodDescriptorType, types.WrapperDescriptorType)
_GUARDED_BY_VALUE = (int, float, str, bytes, bool, complex, type(None))


def _guards(assumed: Any, fn_globals: dict[str, Any], reasons: list[str]) -> list[tuple]:
    guards: list[tuple] = []
    for name, (_, value) in assumed.globals.items():
        if _guardable(value, f"the global {name}", reasons):
            guards.append(("global", fn_globals, name, value))
    for (modname, name), value in assumed.attrs.items():
        module = sys.modules.get(modname)
        if module is None:
            reasons.append(f"reads {modname}.{name} from a module no longer imported")
        elif _guardable(value, f"{modname}.{name}", reasons):
            guards.append(("attr", module, name, value))
    return guards


def _guardable(value: Any, what: str, reasons: list[str]) -> bool:
    drawn = constructs.random_reason(value, what)
    if drawn is not None:
        reasons.append(drawn)
        return False
    if isinstance(value, _GUARDED_BY_IDENTITY) or type(value) in _GUARDED_BY_VALUE or callable(value) \
            or constructs.is_table(value):  # (a dict of functions: guarded entry by entry)
        return True
    if type(value) is np.ndarray and value.dtype.kind in "biuf":
        return True  # (read at call time: an input of the program, its type, shape and dtype guarded)
    if isinstance(value, np.ndarray):
        reasons.append(f"reads {what}, an array of dtype {value.dtype} or of a subclass")
    else:
        reasons.append(f"reads {what}, a {type(value).__name__} that a guard cannot fix")
    return False
