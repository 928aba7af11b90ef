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
- writes outside the function's locals (a closure variable of a frame that is not part of the
  call included), `with`, `try`, imports; `min`/`max` with keywords on constants; a module
  callable the capture cannot follow (no rule, not Python code) on constants.

Inner functions, lambdas, comprehensions and generators are checked where they are defined,
with everything active (`_nested`), and again as callees with the activity their run had
(compiled/capture.py, compiled/nested.py); a comprehension or module-level helper run on
constants is checked with nothing active.

What the analysis cannot see (which Python function an active call reaches, a non-differentiable
method of an array) the capture run reports (runtime/tape.py, `CaptureTape`). The globals and
module attributes the code reads come back as guards.
"""
from __future__ import annotations

import math
import operator
import sys
import threading
import types
from typing import TYPE_CHECKING, Any, Optional, Sequence, cast

import numpy as np

from bytegrad.compiled import constructs, objects, reach_config, reach_objects, reach_with
from bytegrad.compiled.reasons import ATTR_OFF_CONSTANT, CALL_ON_CONSTANTS, SUPER, Reason, located
from bytegrad.compiled.reach_consts import constant_attribute, made_view_site
from bytegrad.errors import DifferentiationError, SourceLoc, qualname
from bytegrad.runtime.dispatch import MAKERS
from bytegrad.compiled.writes import own_writes
from bytegrad.transform import opcodes
from bytegrad.transform.opcodes import OpKind
from bytegrad.transform.slots import SHAPE_ONLY

if TYPE_CHECKING:  # (a run from the disk cache does not import the disassembler)
    from bytegrad.transform.code import Instr

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

_REFUSED_KINDS = {
    OpKind.STORE_GLOBAL: "writes a global variable",
    OpKind.STORE_ATTR: "writes an attribute",
    OpKind.STORE_SUBSCR: "writes into a container or array (`a[i] = v`)",
    OpKind.STORE_SLICE: "writes into a slice",
    OpKind.STORE_CELL: "writes a closure variable",
    OpKind.LOAD_NAME: "reads a name the compiler could not resolve",
    OpKind.IMPORT: "imports a module",
    OpKind.WITH: "uses a `with` block",
    OpKind.LOAD_SUPER_ATTR: Reason("calls super()", SUPER),
}


def check(code: types.CodeType, active: frozenset[str], fn_globals: dict[str, Any],
          immutable: frozenset[str], defaults: tuple = (), closure: Optional[tuple] = None,
          local_cells: frozenset[str] = frozenset(), cells_active: bool = True, callee: bool = False,
          untracked: frozenset[str] = frozenset()) -> tuple[list[str], list[tuple]]:
    """(reasons the function cannot be a compiled program, guards on what it reads).

    No reasons: the function's operations on the arguments depend on data only through recorded
    operations. The guards are ("global", fn_globals, name, value), ("attr", module, name, value)
    and ("cell", cell, name, value) entries; a program (compiled/source.py) checks them on every call (an array
    among them is read at call time, an input of the program). `defaults`: the function's default
    argument values (a replaced tuple drops its programs; their contents must be constants).
    `closure`: the function's closure cells, guarded by value; without it a closure is refused.
    `local_cells`: free variables whose cells belong to a frame of the capture run (an inner
    function's reads and `nonlocal` writes of its enclosing function's variables: compiled/nested.py),
    neither guarded nor refused. `cells_active=False`: a callee that ran as it is (not rewritten); else its
    rewrite was a capture's, where what it computes from an array made from constants is hooked, so
    recorded (the analyses here take such an array as active too: transform.activity's `made_active`).
    `callee`: an array in a guarded cell was not tracked by the capture (found only when the run
    called the function): what the function computes from it must be recorded (`_cell_array_uses`)."""
    reasons = _code_reasons(code, closure is not None, local_cells)
    configs = [v for v in defaults if not _constant(v)]  # read as locals: they must not change, or be guarded
    if not all(objects.config_default(v) for v in configs):
        reasons.append(f"a default argument value that can change in place (a list, dict, array or object) "
                       f"(line {code.co_firstlineno})")
    if reasons:
        return reasons, []
    from bytegrad.transform.code import Bytecode

    from bytegrad.transform.activity import analyze
    from bytegrad.transform.cache import Assumptions

    loc = SourceLoc(code.co_filename, code.co_firstlineno, code.co_name)
    bc = Bytecode.from_code(code, conserve_exception_block_stackdepth=True)
    assumed = Assumptions()
    try:
        act = analyze(bc, set(active), fn_globals, loc, immutable_params=immutable, assumed=assumed,
                      cells_active=cells_active, made_active=cells_active)
    except DifferentiationError as exc:
        return [f"the general path refuses it too: {exc.args[0] if exc.args else exc}"], []
    inner_guards: list[tuple] = []
    own = own_writes(bc, act.stacks, code)  # writes into arrays and containers it made (compiled/writes.py)
    own |= constructs.allowed_sites(bc)  # (an assert's AssertionError, `x.dtype.kind`)
    own |= constructs.errstate_sites(code, fn_globals, bc)  # (`with np.errstate(...)`)
    reasons += _instruction_reasons(bc, act.stacks, frozenset(code.co_cellvars) | local_cells, fn_globals,
                                    inner_guards, own)
    params = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]  # (`cfg = Config(); cfg.scale`:)
    reasons = reach_config.allowed_config_reads(bc, act.stacks, params, immutable, fn_globals, reasons, check,
                                                reach_config.config_params(code, defaults))
    guards = _guards(assumed, fn_globals, reasons, bc) + inner_guards
    guards += [("config", v, f"the default {type(v).__qualname__}", objects.config_state(v)) for v in configs]
    _nested(code, fn_globals, reasons, guards)
    guards = _each_once(guards)
    arrays = frozenset(name if kind == "global" else f"{owner.__name__}.{name}"
                       for kind, owner, name, value in guards if type(value) is np.ndarray)
    if arrays:
        tainted = analyze(Bytecode.from_code(code, conserve_exception_block_stackdepth=True), set(active),
                          fn_globals, loc, immutable_params=immutable, tainted=arrays, cells_active=cells_active,
                          made_active=cells_active)
        reasons += _unrecorded_array_uses(bc, act.stacks, tainted.stacks)
    if untracked:  # (parameters holding integer or boolean arrays: inputs the capture does not track)
        marked = analyze(Bytecode.from_code(code, conserve_exception_block_stackdepth=True), set(active) | untracked,
                         fn_globals, loc, immutable_params=immutable, cells_active=cells_active,
                         made_active=cells_active)
        reasons += _unrecorded_array_uses(bc, act.stacks, marked.stacks, _UNTRACKED_USE)
    if callee:
        reasons += _cell_array_uses(code, bc, active, fn_globals, loc, immutable, closure or (), local_cells,
                                    cells_active)
    for name, cell in zip(code.co_freevars, closure or ()):
        if name in local_cells:
            continue  # (a variable of a frame of the run, as its locals are)
        try:
            value = cell.cell_contents
        except ValueError:
            reasons.append(f"reads the closure variable {name} before it is assigned{_at(bc, _CELL_LOADS, name)}")
            continue
        if _guardable(value, f"the closure variable {name}", reasons, _at(bc, _CELL_LOADS, name)):
            guards.append(("cell", cell, name, value))
    return reasons, guards


def _instruction_reasons(bc: Any, stacks: list, own_cells: frozenset[str], fn_globals: dict[str, Any],
                         guards: list[tuple], own: frozenset[int] | set[int] = frozenset()) -> list[str]:
    """The reason of each instruction a program cannot replay. `own_cells`: the cells of frames of
    the capture run (the function's own, its enclosing function's), written as locals are. `guards`:
    where those of a comprehension run on constants go. `own`: ids of the writes into arrays and
    containers the function made itself (compiled/writes.py), replayed."""
    from bytegrad.compiled import nested

    reasons = []
    keywords = False  # (3.11, 3.12: KW_NAMES before the CALL it names)
    instrs = list(bc)
    for k, (ins, stack) in enumerate(zip(instrs, stacks)):
        after = stacks[k + 1] if k + 1 < len(stacks) else None
        if stack is None or not hasattr(ins, "name") or id(ins) in own:
            continue
        if ins.name == "KW_NAMES":
            keywords = True
            continue
        if ins.name in nested.GENERATOR_OPS or ins.name == "MAKE_FUNCTION" or nested.generator_intrinsic(ins):
            continue  # (a function made here is checked when the run calls it; see _nested)
        try:
            kind: Optional[OpKind] = opcodes.kind_of(ins)
        except KeyError:
            kind = None
        if kind is OpKind.STORE_CELL and opcodes.var_name(ins.arg) in own_cells:
            continue  # `nonlocal v; v = ...` of a frame of the run: a local's write
        why = _keyed_select(ins, stack, kind, keywords) or _instruction_reason(ins, stack) or \
            _opaque_module_callable(ins, stack, after, kind)
        if why is not None and k and (constant_attribute(instrs[k - 1], ins, kind) or made_view_site(instrs, stacks, k)
                                      or reach_with.allowed(instrs, stacks, k)):
            why = None  # (`"{:.2f}".format`, `np.arange(9.0).reshape(3, 3)`, `with obj:`: compiled/reach_*.py)
        if kind is OpKind.CALL or kind is OpKind.CALL_KW:
            keywords = False
            if why is not None and why.startswith("calls a function that is not known statically"):
                why = _constant_comprehension(instrs, k, fn_globals, guards, why)
                if why is not None:
                    why = _pure_on_constants(ins, stack, kind, fn_globals, guards, why)
                if why is not None:  # `Acc(np.zeros(n))`: compiled/reach_objects.py
                    why = reach_objects.constant_class(ins, stack, kind, fn_globals, guards, why, check)
        if why is not None:
            reasons.append(located(why, cast('Instr', ins).lineno))  # (only an Instr has a name)
    return reasons


def _keyed_select(ins: Any, stack: tuple, kind: Any, keywords: bool) -> Optional[str]:
    """`min`/`max` with keywords (`key=`) on constants: the C builtin would call the key function
    without a hook, so what it computes would not be recorded."""
    if not (kind is OpKind.CALL_KW or (kind is OpKind.CALL and keywords)):
        return None
    nargs = int(ins.arg)
    own = stack[:-1] if kind is OpKind.CALL_KW else stack
    fn_slot = opcodes.callable_slot(nargs, own)
    if fn_slot is None or fn_slot.known not in (min, max):
        return None
    if any(s.active for s in own[len(own) - nargs - 2:] if not s.null):
        return None
    return f"calls {fn_slot.known.__name__} with keywords on constants (its key function would run unrecorded)"


def _constant_comprehension(instrs: list, k: int, fn_globals: dict[str, Any], guards: list[tuple],
                            why: str) -> Optional[str]:
    """A comprehension or generator expression without a closure run on a constant iterable (`[f(k)
    for k in range(3)]` on 3.11): the call is not hooked, so it runs as it is; fine when its code,
    with nothing active, passes the check (what it computes is then fixed by its guards, added to
    `guards`). Else `why`."""
    from bytegrad.compiled import nested

    inner = nested.comprehension_on_constants(instrs, k)
    if inner is None:
        return why
    sub, more = check(inner, frozenset(), fn_globals, frozenset(), cells_active=False)
    if sub:
        return f"runs a comprehension on constants, which {sub[0]}"
    guards += more
    return None


_CHECKING = threading.local()  # the functions `_pure_on_constants` is checking (recursion)


def _pure_on_constants(ins: Any, stack: tuple, kind: Any, fn_globals: dict[str, Any], guards: list[tuple],
                       why: str) -> Optional[str]:
    """A module-level Python function called on constants (`_rpow(1.5, 2)` in a helper that ran as it
    is): not hooked, so it runs as it is and its result is fixed in the program. Fine when its code,
    with nothing active, passes the check (its globals guarded, its code fixed by a "code" guard):
    a pure function of guarded values. A recursive call is taken as its own check. Else `why`."""
    own = stack[:-1] if kind is OpKind.CALL_KW else stack
    fn_slot = opcodes.callable_slot(int(ins.arg), own)
    names = [a[2:] for a in (fn_slot.aliases if fn_slot is not None else ()) if a.startswith("G:")]
    f = fn_globals.get(names[0]) if len(names) == 1 else None
    if type(f) is not types.FunctionType or f.__closure__:
        return why
    checking = getattr(_CHECKING, "fns", None)
    if checking is None:
        checking = _CHECKING.fns = set()
    if f not in checking:
        checking.add(f)
        try:
            defaults = (f.__defaults__ or ()) + tuple((f.__kwdefaults__ or {}).values())
            sub, more = check(f.__code__, frozenset(), f.__globals__, frozenset(), defaults, cells_active=False)
        finally:
            checking.discard(f)
        if sub:
            return f"calls {f.__qualname__} on constants, which {sub[0]}"
        guards += more
    guards.append(("global", fn_globals, names[0], f))  # (its identity, code and defaults)
    return None


def _nested(code: types.CodeType, fn_globals: dict[str, Any], reasons: list[str], guards: list[tuple]) -> None:
    """The code objects defined in `code` (inner functions, lambdas, comprehensions, generator
    expressions), checked with all their parameters and cells active (conservatively: the capture
    checks each again as a callee, with the activity its run had): their reasons, named by their
    line, and the guards on the globals they read."""
    from bytegrad.compiled import nested

    for inner in nested.nested_codes(code):
        params = frozenset(transform_params(inner))
        sub, more = check(inner, params, fn_globals, frozenset(), (), None, frozenset(inner.co_freevars))
        name = "a lambda" if inner.co_name == "<lambda>" else inner.co_name
        reasons += [f"its {name} (line {inner.co_firstlineno}) {why}" if why.startswith("reads ") or
                    why.startswith("calls ") else f"its {name} (line {inner.co_firstlineno}): {why}" for why in sub]
        have = {(kind, id(owner), key) for kind, owner, key, _ in guards}
        guards += [g for g in more if (g[0], id(g[1]), g[2]) not in have]  # (each read guarded once)


def transform_params(code: types.CodeType) -> tuple[str, ...]:
    from bytegrad.transform import param_names

    return param_names(code)


#: operations on values (not loads, stores and stack shuffles)
_COMPUTING = frozenset({OpKind.BINARY, OpKind.SUBSCR, OpKind.SLICE, OpKind.UNARY_NEG, OpKind.UNARY_POS,
                        OpKind.INTRINSIC_1, OpKind.GET_ITER, OpKind.UNPACK, OpKind.UNPACK_EX, OpKind.CALL,
                        OpKind.CALL_KW, OpKind.CALL_EX, OpKind.PREDICATE, OpKind.CONTAINER_ADD, OpKind.FOR_ITER,
                        OpKind.POP_JUMP, OpKind.JUMP_OR_POP, OpKind.LOAD_ATTR, OpKind.LOAD_METHOD, OpKind.OTHER})
#: containers built of their operands as they are (what is later computed from them is checked there)
_BUILDERS = frozenset({"BUILD_TUPLE", "BUILD_LIST"})
#: what an array's guards fix: reading them needs no record
_GUARDED_ATTRS = frozenset({"shape", "ndim", "dtype", "size"})


_GLOBAL_USE = ("computes from an array read from a global or module attribute without the arguments "
               "(`W.T`, `W[0]`, `len(W)`: pass the array as an argument)")
_UNTRACKED_USE = ("computes from an integer or boolean array argument where nothing is recorded (`idx[0]`, "
                  "`idx.sum()`, `len(idx)`: a program would hold the capture's values; index a float array "
                  "with it, `x[idx]`, or pass what it computes as an int)")


_CELL_USE = ("computes from an array held by a closure variable without the arguments (`W.T`, `W[0]`, "
             "`np.sum(W)`: a program would hold the capture's values; pass the array as an argument)")


def _cell_array_uses(code: types.CodeType, bc: Any, active: frozenset[str], fn_globals: dict[str, Any],
                     loc: SourceLoc, immutable: frozenset[str], closure: tuple, local_cells: frozenset[str],
                     cells_active: bool) -> list[str]:
    """A callee's closure cell made before the call (a loss built by a factory) holding an array: the
    program reads it from the cell at each call (compiled/source.py `static_guards`), but the capture
    met it untracked, so an operation computing from it alone was not recorded and its result would be
    a constant of the program. Refused: each operation whose operands are active only when those
    cells are (the cells' activity taken away from the function's own, rewritten or not)."""
    from bytegrad.transform.code import Bytecode

    from bytegrad.transform.activity import analyze

    arrays = set()
    for name, cell in zip(code.co_freevars, closure):
        try:
            if name not in local_cells and type(cell.cell_contents) is np.ndarray:
                arrays.add(name)
        except ValueError:
            pass  # (an empty cell: refused by the caller)
    if not arrays:
        return []
    cells = (set(code.co_cellvars) | set(code.co_freevars)) if cells_active else set()
    base = set(active) | (cells - arrays)
    plain = analyze(Bytecode.from_code(code, conserve_exception_block_stackdepth=True), base, fn_globals, loc,
                    immutable_params=immutable, cells_active=False, made_active=cells_active)
    marked = analyze(Bytecode.from_code(code, conserve_exception_block_stackdepth=True), base | arrays, fn_globals,
                     loc, immutable_params=immutable, cells_active=False, made_active=cells_active)
    return _unrecorded_array_uses(bc, plain.stacks, marked.stacks, _CELL_USE)


def _unrecorded_array_uses(bc: Any, stacks: list, tainted: list, what: str = _GLOBAL_USE) -> list[str]:
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
        if kind is OpKind.OTHER and ins.name in _BUILDERS:  # (a tuple or list of the array itself, as in
            continue  # `x[:, idx]`: its later unrecorded uses are marked, the analysis carries the array on)
        n = opcodes.stack_effect(ins, False)[0]
        if kind is OpKind.CALL and _shape_only_call(marked[len(marked) - n:]):
            continue  # (`len(W)`, `np.shape(W)`: what the array's guards fix)
        if n > 0 and any(s.active for s in marked[len(marked) - n:]) \
                and not any(s.active for s in plain[len(plain) - n:]):
            reasons.append(f"{what} (line {ins.lineno})")
    return reasons


def _shape_only_call(popped: Sequence[Any]) -> bool:
    """A call of `len`, `np.shape`, `np.ndim`, `np.size`, `type` or `isinstance` (the callable is one of
    the first two slots a CALL pops, on 3.11 to 3.13; the arguments follow)."""
    return any(any(s.known is f for f in SHAPE_ONLY) for s in popped[:2]) and \
        not any(any(s.known is f for f in SHAPE_ONLY) for s in popped[2:])


def _constant(value: Any) -> bool:
    if type(value) is tuple:
        return all(_constant(v) for v in value)
    return type(value) in _GUARDED_BY_VALUE or isinstance(value, _GUARDED_BY_IDENTITY)


def _code_reasons(code: types.CodeType, cells_guarded: bool, local_cells: frozenset[str]) -> list[str]:
    from bytegrad.compiled import nested

    reasons = []
    if code.co_flags & nested.REFUSED_FLAGS:
        reasons.append("a coroutine or async generator")
    outer = [n for n in code.co_freevars if n not in local_cells]
    if outer and not cells_guarded:
        reasons.append(f"a closure (it reads {', '.join(outer)} from an enclosing function)")
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
            return Reason(f"reads the attribute .{name} of an object that is not an argument", ATTR_OFF_CONSTANT, name)
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
        return constructs.map_key_reason(ins, stack)  # (`{t: v}` with a computed key)
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
        return Reason(f"calls {qualname(known)} on constants (a compiled program takes only pure builtins, math, "
                      "NumPy's array makers, scalar types, shape functions and its ufuncs without `out` there: nothing "
                      "that may depend on state such as random draws or I/O, or write)", CALL_ON_CONSTANTS, qualname(known))
    return None


def _each_once(guards: list[tuple]) -> list[tuple]:
    """Each read guarded once, the first entry kept (a nested code's reads are its function's too;
    an array read twice would be two inputs)."""
    seen: set[tuple] = set()
    out = []
    for g in guards:
        key = (g[0], id(g[1]), g[2])
        if key not in seen:
            seen.add(key)
            out.append(g)
    return out


def _opaque_module_callable(ins: Any, stack: tuple, after: Optional[tuple], kind: Any) -> Optional[str]:
    """A module attribute the analysis cannot see through, callable, without a rule and not Python
    code the capture follows (`np.random.default_rng`, a Cython function): its slot is active, so a
    call of it is hooked even on constants, and the runtime then runs it as it is, unrecorded: its
    result (a random generator, a clock) would be fixed in the program."""
    if (kind is not OpKind.LOAD_ATTR and kind is not OpKind.LOAD_METHOD) or after is None:
        return None
    module = stack[-1].known
    if not isinstance(module, types.ModuleType):
        return None
    if not any(s.active and not s.null and s.known is None for s in after[len(stack) - 1:]):
        return None
    name, _ = opcodes.attr_parts(ins)
    value = getattr(module, name, None)
    if not callable(value) or isinstance(value, (types.FunctionType, type)):
        return None  # (data, or what the capture follows: a Python function, a class)
    from bytegrad.rules import registry

    try:
        if registry.get_rule(value) is not None or value in MAKERS:
            return None
    except TypeError:
        pass
    return (f"calls {module.__name__}.{name}, which the capture cannot follow (no rule, not Python code): "
            "on constants it would run unrecorded")


_GUARDED_BY_IDENTITY = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, np.ufunc,
                        types.MethodDescriptorType, types.WrapperDescriptorType)
_GUARDED_BY_VALUE = (int, float, str, bytes, bool, complex, type(None))


def _guards(assumed: Any, fn_globals: dict[str, Any], reasons: list[str], bc: Any = ()) -> list[tuple]:
    guards: list[tuple] = []
    for name, (_, value) in assumed.globals.items():
        if _guardable(value, f"the global {name}", reasons, _at(bc, _GLOBAL_LOADS, name)):
            guards.append(("global", fn_globals, name, value))
    for (modname, name), value in assumed.attrs.items():
        module = sys.modules.get(modname)
        if module is None:
            reasons.append(f"reads {modname}.{name} from a module no longer imported{_at(bc, _ATTR_LOADS, name)}")
        elif _other_module(modname, module, fn_globals):
            reasons.append(f"reads {modname}.{name} from a module object that is not sys.modules[{modname!r}] "
                           f"(a guard would watch the other one){_at(bc, _ATTR_LOADS, name)}")
        elif _guardable(value, f"{modname}.{name}", reasons, _at(bc, _ATTR_LOADS, name)):
            guards.append(("attr", module, name, value))
    return guards


_GLOBAL_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
_ATTR_LOADS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_CELL_LOADS = frozenset({"LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_DEREF"})


def _at(bc: Any, opnames: frozenset[str], name: str) -> str:
    """" (line N)": the first line where `bc` loads `name` with one of `opnames` (a refusal names it)."""
    for ins in bc:
        if getattr(ins, "name", None) not in opnames:
            continue
        arg = ins.arg
        arg = arg[-1] if type(arg) is tuple and arg else arg  # (3.11+: LOAD_GLOBAL/LOAD_ATTR carry (flag, name))
        if arg == name or getattr(arg, "name", None) == name:
            return f" (line {ins.lineno})"
    return ""


def _other_module(modname: str, module: Any, fn_globals: dict[str, Any]) -> bool:
    """Whether the code's globals hold a module named `modname` that is not `module` (sys.modules'):
    the attribute it reads is then that one's, and a guard on sys.modules' would not see it change."""
    return any(isinstance(v, types.ModuleType) and v is not module and v.__name__ == modname
               for v in list(fn_globals.values()))


def _frozen(value: Any) -> bool:
    """A frozenset or tuple of numbers, strings, types, ufuncs and builtins (`_PICKS =
    frozenset({np.maximum, np.minimum})`, `COEFS = (1.0, 0.5)`): immutable all through, so the same
    object holds the same items, and a guard by identity fixes it (source.py `static_guards`)."""
    return type(value) in (frozenset, tuple) and len(value) <= 64 and all(
        type(e) in _GUARDED_BY_VALUE or isinstance(e, _FROZEN_ITEMS) for e in value)


_FROZEN_ITEMS = (type, np.ufunc, types.BuiltinFunctionType)


def _guardable(value: Any, what: str, reasons: list[str], at: str = "") -> bool:
    drawn = constructs.random_reason(value, what)
    if drawn is not None:
        reasons.append(drawn + at)
        return False
    if isinstance(value, _GUARDED_BY_IDENTITY) or type(value) in _GUARDED_BY_VALUE or callable(value) \
            or constructs.is_table(value) or _frozen(value):  # (a dict of functions: guarded entry by entry)
        return True
    if type(value) is np.ndarray and value.dtype.kind in "biuf":
        return True  # (read at call time: an input of the program, its type, shape and dtype guarded)
    if objects.takes_apart(value):
        return True  # (a model at module level: taken apart by the capture, walked at call time as an object argument)
    if isinstance(value, np.ndarray):
        reasons.append(f"reads {what}, an array of dtype {value.dtype} or of a subclass{at}")
    else:
        reasons.append(f"reads {what}, a {type(value).__name__} that a guard cannot fix{at}")
    return False
