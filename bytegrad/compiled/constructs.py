"""Python constructs a compiled program takes beyond straight-line code: `try`/`except`, `match`
on guarded structure, sets, strings and exception objects built from constants.

The static check (compiled/eligibility.py) asks `other_reason` about the opcodes it does not
classify itself and `pure_call` about a callable called on constants; the capture run
(compiled/capture.py) runs the function under `RaiseWatch`.

`try`/`except`. A program replays the path the capture run took. The handler's opcodes
(PUSH_EXC_INFO, CHECK_EXC_MATCH, POP_EXCEPT, RERAISE...) run only when an exception arrives, so
the check lets them through, and the capture decides whether the path it saw can be replayed:

- no exception was raised on the captured path: on a later call the program runs the same
  operations. Where the general path would raise there (an operation that raises on these values,
  as `np.linalg.cholesky` of a matrix that is not positive definite, or Python's float division by
  zero), the program raises too, and the caller (compiled/policy.py `Tiers.call`) sends any
  exception a program raises to the general path, which runs the function, handler included. A
  `raise` statement is reached only through decisions the program checks (`if y.sum() > 100:`),
  so a call that would reach it leaves the program as DECIDED first;
- an exception raised by a `raise` statement of the user's code (its frame's instruction is
  RAISE_VARARGS) was reached the same way: the handler's operations are recorded, and the program
  replays them only where every decision that led to the `raise` comes out as captured;
- an exception raised by an operation (a call, an index, an operator: `x[len(x)]`, `cholesky`) and
  handled: refused, since whether it raises again depends on values the program does not decide
  on (`RaiseWatch`).

`match`: MATCH_MAPPING, MATCH_SEQUENCE, MATCH_KEYS and GET_LEN read a subject's type, length and
keys, which the guards fix for arguments (container types, lengths, key order) and which are fixed
for constants; comparisons with literal patterns are hooked as any comparison. MATCH_CLASS reads
attributes of objects: refused.
"""
from __future__ import annotations

import builtins
import dis
import os
import random
import opcode
import sys
import threading
import types
from typing import Any, Optional

import numpy as np

from bytegrad.transform import opcodes

__all__ = ["RaiseWatch", "allowed_sites", "errstate_sites", "container_reason", "is_table", "map_key_reason",
           "other_reason", "pure_call", "random_reason"]

#: the handler side of `try`/`except` (and of `with`): they run only when an exception arrives
_HANDLER_OPS = frozenset({"PUSH_EXC_INFO", "POP_EXCEPT", "CHECK_EXC_MATCH", "RERAISE", "DELETE_FAST"})
#: `match` on a subject's type, length and keys (fixed by the guards)
_MATCH_OPS = frozenset({"MATCH_MAPPING", "MATCH_SEQUENCE", "MATCH_KEYS", "GET_LEN"})
#: builders that are pure on constants, and on values computed from the arguments are not (a set's size and
#: order depend on its items' values; a string's text on a number's digits)
_CONSTANT_BUILDERS = {
    "BUILD_SET": "builds a set of values computed from the arguments (its size and order depend on their values)",
    "FORMAT_VALUE": "formats a value computed from the arguments into a string (its text depends on the value)",
    "FORMAT_SIMPLE": "formats a value computed from the arguments into a string (its text depends on the value)",
    "FORMAT_WITH_SPEC": "formats a value computed from the arguments into a string (its text depends on the value)",
    "CONVERT_VALUE": "formats a value computed from the arguments into a string (its text depends on the value)",
    "BUILD_STRING": "builds a string from values computed from the arguments",
}


def other_reason(ins: Any, stack: tuple) -> Optional[str]:
    """Why an opcode the check does not classify keeps the function off the compiled tier (None: it
    does not): see the module's docstring."""
    name = ins.name
    if name in _HANDLER_OPS or name in _MATCH_OPS:
        return None
    why = _CONSTANT_BUILDERS.get(name)
    if why is not None:
        n = _popped(ins)
        return why if n is None or any(s.active for s in stack[len(stack) - n:]) else None
    return f"uses {name}"


def container_reason(ins: Any, stack: tuple) -> Optional[str]:
    """A value added to a set (`{*x}`, `{a, b}` built item by item): refused when it is computed from
    the arguments (whether two items are one, and the order, depend on their values)."""
    if ins.name in ("SET_ADD", "SET_UPDATE") and stack and stack[-1].active:
        return _CONSTANT_BUILDERS["BUILD_SET"]
    return None


#: a dict built with a key computed from the arguments: which entries it keeps (two equal keys are one),
#: its length and order depend on the key's value, and nothing hooks the build (runtime/keys.py refuses
#: the lookups and writes the runtime does see)
_MAP_KEY = "builds a dict with a key computed from the arguments (its entries, length and order depend on the key's value)"


def map_key_reason(ins: Any, stack: tuple) -> Optional[str]:
    """`{k: v}` (BUILD_MAP) whose key `k` is computed from the arguments: refused (a program would replay the
    captured entries); None for other opcodes and for constant keys. (A dict comprehension's MAP_ADD is left
    to the runtime: its key is active statically whenever it iterates over an argument, `{k: f(v) for k, v in
    p.items()}`, though it holds strings; a dict holding a tracked key is refused where the run uses it,
    runtime/keys.py.)"""
    if ins.name == "BUILD_MAP":
        n = int(ins.arg)
        return _MAP_KEY if n and any(s.active for s in stack[len(stack) - 2 * n::2]) else None
    return None


def _popped(ins: Any) -> Optional[int]:
    """How many values a builder pops (written out: `bytecode`'s stack effects are net ones)."""
    name = ins.name
    if name in ("BUILD_SET", "BUILD_STRING"):
        return int(ins.arg)
    if name == "FORMAT_VALUE":  # (3.11, 3.12: a format spec on the stack when bit 0x04 is set)
        return 2 if int(ins.arg or 0) & 0x04 else 1
    return {"FORMAT_SIMPLE": 1, "FORMAT_WITH_SPEC": 2, "CONVERT_VALUE": 1}.get(name)


#: a dtype's attributes: fixed where the dtype is (a value's dtype is guarded or recorded)
_DTYPE_ATTRS = frozenset({"kind", "char", "itemsize", "name", "type", "str", "num", "byteorder", "isnative"})


def allowed_sites(instrs: Any) -> set[int]:
    """Instructions (by id) that the check would refuse by their stack alone and that are fixed by
    where they stand: the call that makes an `assert`'s AssertionError from its message (its callable,
    LOAD_ASSERTION_ERROR's, is not known statically), and an attribute of a dtype read where the
    dtype was (`x.dtype.kind`)."""
    real = [ins for ins in instrs if hasattr(ins, "name")]
    found: set[int] = set()
    for k, ins in enumerate(real):
        if ins.name == "LOAD_ASSERTION_ERROR":
            for j in range(k + 1, min(k + 6, len(real) - 1)):
                if real[j].name == "CALL" and real[j + 1].name == "RAISE_VARARGS":
                    found.add(id(real[j]))
                    break
                if real[j].name == "RAISE_VARARGS":
                    break
        elif ins.name == "LOAD_ATTR" and k and real[k - 1].name == "LOAD_ATTR" \
                and opcodes.attr_parts(real[k - 1])[0] == "dtype" and opcodes.attr_parts(ins)[0] in _DTYPE_ATTRS:
            found.add(id(ins))
    return found


def errstate_sites(code: Any, fn_globals: dict, instrs: Any) -> set[int]:
    """The instructions (by id) of the `with np.errstate(...)` blocks of `code` (compiled/errstate.py):
    the errstate call, BEFORE_WITH, the `__exit__` calls and WITH_EXCEPT_START; none unless every
    `with` of the code is such a block."""
    from bytegrad.compiled import errstate

    if not errstate.blocks(code, fn_globals):
        return set()
    real = [ins for ins in instrs if hasattr(ins, "name") and ins.name != "PRECALL"]
    found: set[int] = set()
    for k, ins in enumerate(real):
        if ins.name in ("BEFORE_WITH", "WITH_EXCEPT_START"):
            found.add(id(ins))
            if ins.name == "BEFORE_WITH" and k and real[k - 1].name in ("CALL", "CALL_KW"):
                found.add(id(real[k - 1]))
        elif ins.name == "CALL" and k >= 3 and all(real[j].name == "LOAD_CONST" and real[j].arg is None
                                                   for j in range(k - 3, k)):
            found.add(id(ins))
    return found


#: builtin exception classes: making one from constants reads and writes nothing else
_EXCEPTIONS = frozenset(v for v in vars(builtins).values() if isinstance(v, type) and issubclass(v, BaseException))


def pure_call(known: Any) -> bool:
    """Whether calling `known` on constants is pure beyond compiled/eligibility.py's own lists."""
    try:
        return known in _EXCEPTIONS
    except TypeError:
        return False


#: what a table's entries may be: things a guard fixes by identity (their calls are recorded or guarded
#: where they happen: a rule by its function, a Python callee by its code)
_ENTRIES = (types.FunctionType, types.BuiltinFunctionType, np.ufunc)


def is_table(value: Any) -> bool:
    """A module-level table of functions (`ACT = {"tanh": np.tanh, "relu": relu}`, read as
    `ACT[name](x)`): a dict of up to 64 functions keyed by strings or ints. A program guards its
    entries (compiled/source.py `static_guards`: keys in order, each value by identity), so an
    entry replaced between calls is seen."""
    return type(value) is dict and 0 < len(value) <= 64 and all(
        type(k) in (str, int) and isinstance(v, _ENTRIES) for k, v in value.items())


_RANDOM_TYPES = (np.random.Generator, np.random.RandomState, np.random.BitGenerator, np.random.SeedSequence,
                 random.Random)


_BOUND = (types.MethodType, types.BuiltinMethodType, types.MethodWrapperType)


def random_reason(value: Any, what: str) -> Optional[str]:
    """Why reading `value` (a global or a module attribute the code reads) keeps the function off the
    tier: a random generator, or a function of `numpy.random` or `random` (a draw, seeded or not, is
    a value the program would replay from the capture, and the analysis cannot see a generator made
    inside the function: `np.random.default_rng()` then `rng.random()`). None for anything else."""
    module = getattr(value, "__module__", None) or ""
    # (`__self__` of a bound method alone: read from any object, it would run a user `__getattr__`)
    owner = value.__self__ if isinstance(value, _BOUND) else None
    if isinstance(value, _RANDOM_TYPES) or isinstance(owner, _RANDOM_TYPES) or module == "random" \
            or module == "numpy.random" or module.startswith("numpy.random.") or value is random \
            or (isinstance(value, types.ModuleType) and value.__name__.startswith("numpy.random")):
        return (f"reads {what}, a random generator or draw (a program would replay the capture's draws; "
                "random draws stay on the general path)")
    return None


_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # (bytegrad's own code)


class RaiseWatch:
    """Watches a capture run for exceptions seen by frames that can handle them: `handled(codes)`
    says which one reached the user's code (`codes`: the differentiated function's and its
    callees') having been raised by an operation rather than by a `raise` statement of that code,
    or None. Only frames whose code has an exception table are traced, without line events. Where
    a tracer is set already (a debugger, coverage) the watch does not replace it: `unseen` then
    tells the capture to refuse code with handlers."""

    def __init__(self, on: bool = True) -> None:
        #: id of each exception seen -> (the exception, held so that its id is not reused; each
        #: (code, opcode name, line) it was seen at, first first)
        self._seen: dict[int, tuple[BaseException, list[tuple[tuple, str, int]]]] = {}
        self._on = on  # (off for a function without handlers: its run pays nothing)
        self._old: Any = None

    def __enter__(self) -> "RaiseWatch":
        self._old = sys.gettrace()
        if self._on and self._old is None:
            sys.settrace(self._global)
        _running.watch = self
        return self

    def __exit__(self, *exc: Any) -> None:
        _running.watch = None
        if self._on and self._old is None:
            sys.settrace(None)

    def start(self) -> None:
        """Watch from now on (a callee with handlers is about to run; the frames running now have none,
        or the watch would be on): its frame, started after this, is traced."""
        if not self._on:
            self._old = sys.gettrace()
            self._on = True
            if self._old is None:
                sys.settrace(self._global)

    def unseen(self, functions: list[Any]) -> Optional[str]:
        """Why a function run with handlers cannot be trusted: the watch was off (the differentiated
        function has none, a callee has) or a tracer was set already (a debugger, coverage)."""
        for f in functions:
            if _has_handlers(f.__code__) and (not self._on or self._old is not None):
                why = "a tracer (a debugger, coverage) is set" if self._on else "its caller has none"
                return f"{f.__qualname__} handles exceptions and the capture could not watch them ({why})"
        return None

    def handled(self, codes: list[Any]) -> Optional[str]:
        keys = {_key(c) for c in codes}
        for exc, sightings in self._seen.values():
            user = [(k, op, line) for k, op, line in sightings if k in keys]
            if not user:
                continue  # raised and handled inside a library: not the user's code's business
            k, op, line = sightings[0]
            if k not in keys or op != "RAISE_VARARGS":
                k, op, line = user[0]
                return (f"{type(exc).__name__} raised by an operation at line {line} of {k[2]} reached code that "
                        "handles exceptions (whether it raises on another call depends on values that no decision "
                        "checks)")
        return None

    def _global(self, frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        if not _has_handlers(code) or code.co_filename.startswith(_OWN_DIR):
            return None
        frame.f_trace_lines = False
        return self._local

    def _local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "exception":
            exc = arg[1]
            code = frame.f_code
            op = dis.opname[code.co_code[frame.f_lasti]] if 0 <= frame.f_lasti < len(code.co_code) else "?"
            self._seen.setdefault(id(exc), (exc, []))[1].append((_key(code), op, frame.f_lineno))
        return self._local


_running = threading.local()  # .watch: the RaiseWatch of this thread's capture run, while it runs


def watch_callee(code: Any) -> None:
    """A capture run is about to call a Python function running `code` (compiled/capture.py
    `Callees`): one with handlers starts the run's watch, if it is not on."""
    watch = getattr(_running, "watch", None)
    if watch is not None and not watch._on and _has_handlers(code):
        watch.start()


def _key(code: Any) -> tuple:
    """A code object as its rewritten copy shares it: file, first line, name."""
    return (code.co_filename, code.co_firstlineno, code.co_name)


def has_handlers(code: Any) -> bool:
    """Whether `code` has an exception table (a `try`, a `with`)."""
    return _has_handlers(code)


_PUSH_EXC_INFO = opcode.opmap["PUSH_EXC_INFO"]
_HANDLERS: dict[Any, bool] = {}


def _has_handlers(code: Any) -> bool:
    """Whether a handler of `code` can catch an exception and carry on: an `except`, a `finally`
    or a `with` block starts with PUSH_EXC_INFO. The exception-table entries CPython adds on its own
    (3.12+: a generator's StopIteration-to-RuntimeError, an inlined comprehension restoring its
    variable) only re-raise, so they do not count."""
    found = _HANDLERS.get(code)
    if found is None:
        found = _HANDLERS[code] = bool(getattr(code, "co_exceptiontable", b"")) and \
            _PUSH_EXC_INFO in code.co_code[::2]
    return found
