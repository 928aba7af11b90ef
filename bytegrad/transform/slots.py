"""The activity analysis's lattice: a `Slot` per abstract stack value (activity, NULL-ness, what it
may alias, its value when known statically), joins, and the facts about globals, attributes and
calls that the analysis (transform/activity.py) and its transfer functions (transform/transfer.py)
read."""
from __future__ import annotations

import collections
import inspect
import types
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Optional

import numpy as np
from bytegrad.transform.code import Instr

from bytegrad.errors import SourceLoc, UnsupportedOpcodeError
from bytegrad.rules import registry
from bytegrad.transform import opcodes

if TYPE_CHECKING:  # (activity.py imports this module)
    from bytegrad.transform.activity import Analysis

__all__ = ["Slot", "INACTIVE", "ACTIVE", "NULL", "IMPORTED_MODULE", "NONDIFF_ATTRS", "SHAPE_ONLY", "INERT_GLOBAL_TYPES", "WRITABLE_GLOBALS", "Activity", "join", "join_all", "derived", "nondiff_callable", "refuse_invisible_call", "refuse_invisible_code", "attr_slot"]


if TYPE_CHECKING:
    class Slot(NamedTuple):
        """One value of the abstract stack."""

        active: bool        # may depend on a differentiated argument
        null: bool          # is the NULL of a call layout
        aliases: frozenset  # the variables whose objects it may be: "L:name" (local), "G:name" (global)
        known: Any          # the value when statically known (a builtin, a module attribute), else None
else:  # the same tuple class, without typing.NamedTuple's cost at import (a first gradient imports this module)
    Slot = collections.namedtuple("Slot", ("active", "null", "aliases", "known"))
    Slot.__doc__ = "One value of the abstract stack."


INACTIVE: Final = Slot(False, False, frozenset(), None)
ACTIVE: Final = Slot(True, False, frozenset(), None)
NULL: Final = Slot(False, True, frozenset(), None)

IMPORTED_MODULE = object()  # stands for "a module imported inside the function"

#: attributes that describe an array rather than hold its values: never differentiable
NONDIFF_ATTRS = frozenset({"shape", "ndim", "dtype", "size", "itemsize", "nbytes", "strides", "flags"})

# Global values that can never hold a differentiated value nor be mutated into holding one.
INERT_GLOBAL_TYPES = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, np.ufunc,
                int, float, complex, str, bytes, bool, type(None), np.ndarray, np.generic, np.dtype,
                types.MethodType, types.MethodDescriptorType, types.WrapperDescriptorType,
                type(np.sum))  # NumPy 2's `_ArrayFunctionDispatcher` (np.sum, np.linalg.norm...)


WRITABLE_GLOBALS = (type, types.FunctionType, np.ndarray)


class Activity:
    """Result of the analysis."""

    __slots__ = ("stacks", "active_locals", "tainted_globals")  # (a plain class: a dataclass costs its import)

    def __init__(self, stacks: list[Optional[tuple[Slot, ...]]], active_locals: set[str],
                 tainted_globals: Optional[set[str]] = None) -> None:
        self.stacks = stacks                  # abstract stack before each instruction (None: unreachable)
        self.active_locals = active_locals
        self.tainted_globals = set() if tainted_globals is None else tainted_globals


def join(a: Slot, b: Slot) -> Slot:
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


def refuse_invisible_call(a: Analysis, ins: Instr, fn: Any, nargs: int) -> None:
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


def refuse_invisible_code(instrs: list[Any], watched: set[str], loc: SourceLoc) -> None:
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


def attr_slot(module: types.ModuleType, name: str, tainted_globals: set[str], assumed: Any) -> Slot:
    """`mod.attr`: a global of another module, held to the rules of `global_slot` in `analyze`: an
    object that may hold (or be written) a differentiated value is active (`np.r_[x, x]` and
    `mod.table[x]` then run their Python `__getitem__` rewritten), and a store into it taints it."""
    key = f"{module.__name__}.{name}"
    value = getattr(module, name, None)
    if assumed is not None:
        assumed.note_attr(module, name, value)
    if key in tainted_globals:
        return Slot(True, False, frozenset({"G:" + key}), None)
    if isinstance(value, INERT_GLOBAL_TYPES):
        return Slot(False, False, frozenset({"G:" + key}) if isinstance(value, WRITABLE_GLOBALS) else frozenset(),
                    value)
    return Slot(True, False, frozenset({"G:" + key}), value)


def join_all(slots: Any) -> Slot:
    active = False
    srcs: frozenset = frozenset()
    for s in slots:
        active = active or s.active
        srcs = srcs | s.aliases
    return Slot(active, False, srcs, None)


def derived(v: Slot) -> Slot:
    """A value computed from `v` that may be (part of) it: its activity and aliases, nothing known."""
    return Slot(v.active, False, v.aliases, None)
