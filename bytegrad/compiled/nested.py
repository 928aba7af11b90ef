"""Inner functions, closures, lambdas, comprehensions and generators in compiled programs.

The capture run follows every Python function the differentiated code calls with a tracked value
(runtime/dispatch.py `call_python` lists it in `CaptureTape.callees`), whether it is a module
function, a lambda, a comprehension or generator expression (nested code objects on 3.11), an inner
function or a generator: each is checked as the differentiated function is (compiled/eligibility.py),
with the activity its rewrite had. What this module adds:

- which of a callee's closure cells the run made itself (`run_local_cells`): the cells of a frame
  that ran in this capture (the differentiated function's, a callee's), read and written by its inner
  functions. They are that frame's variables: a `nonlocal` write is a write of a local, and what they
  hold comes from recorded operations or from guarded constants, as any local's value does. Every
  other cell (a decorator's `fn`, a module-level closure's state) existed before the call: guarded
  by value, as the differentiated function's own closure is;
- the static check of the nested code objects of a checked function (`nested_reasons`), with all of
  their parameters and cells taken as active (conservatively: a nested function the run calls is
  checked again as a callee with its real activity), so that a refusal names the line in the inner
  function;
- bytegrad's own Python implementations of builtins (rules/_impls.py: `zip`, `max`, `sorted`...)
  are trusted (`trusted`): they are the project's code, pure (tests/test_compiled_callees.py checks
  that each writes no global, attribute or closure variable and imports nothing), and what they
  call of the user's is a callee of its own, checked as any other.
"""
from __future__ import annotations

import inspect
import types
from typing import Any, Iterable, Optional

__all__ = ["GENERATOR_OPS", "REFUSED_FLAGS", "comprehension_on_constants", "generator_intrinsic", "nested_codes", "parents", "run_local_cells", "trusted",
           "trusted_module", "user_site"]

#: code flags a compiled program cannot take: a coroutine's awaits (a generator is followed: what it
#: computes while the run iterates it is recorded in the order it ran)
REFUSED_FLAGS = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE

#: instructions of generators, inner functions and comprehensions that only move values or make a
#: cell (their operands' operations are checked where they are computed)
GENERATOR_OPS = frozenset({"RETURN_GENERATOR", "YIELD_VALUE", "SEND", "END_SEND", "GET_YIELD_FROM_ITER",
                           "MAKE_CELL", "SET_FUNCTION_ATTRIBUTE", "CLEANUP_THROW", "DELETE_FAST",
                           "PUSH_EXC_INFO", "POP_EXCEPT"})

#: CALL_INTRINSIC_1's STOPITERATION_ERROR (3.12+): a generator's handler turning a StopIteration
#: raised inside it into a RuntimeError
_STOPITERATION_ERROR = 3


def generator_intrinsic(ins: Any) -> bool:
    return ins.name == "CALL_INTRINSIC_1" and ins.arg == _STOPITERATION_ERROR


#: the modules of bytegrad's Python implementations of builtins (rules/_impls.py)
_TRUSTED_MODULES = frozenset({"bytegrad.rules._impls"})


def trusted_module(module: Optional[str]) -> bool:
    return module in _TRUSTED_MODULES


def trusted(f: Any) -> bool:
    """Whether `f` is one of bytegrad's own implementations of a builtin (rules/_impls.py), trusted
    to be pure: its code is not checked (what it calls of the user's is, as a callee of its own).
    Known by its code's file, not by the `__module__` a function can be given."""
    from bytegrad.rules import _impls

    return type(f) is types.FunctionType and trusted_module(f.__module__) \
        and f.__code__.co_filename == _impls.__file__ and f.__globals__ is vars(_impls)


def nested_codes(code: types.CodeType) -> Iterable[types.CodeType]:
    """The code objects defined in `code`, directly (lambdas, inner functions, comprehensions,
    generator expressions)."""
    return [c for c in code.co_consts if isinstance(c, types.CodeType)]


def parents(roots: Iterable[types.CodeType]) -> dict[types.CodeType, types.CodeType]:
    """nested code object -> the code that defines it, for the nested codes of `roots` (the codes that
    ran in a capture), at every depth."""
    found: dict[types.CodeType, types.CodeType] = {}
    todo = list(roots)
    seen: set[int] = set()
    while todo:
        code = todo.pop()
        if id(code) in seen:
            continue
        seen.add(id(code))
        for inner in nested_codes(code):
            found.setdefault(inner, code)
            todo.append(inner)
    return found


def run_local_cells(code: types.CodeType, ran: set[types.CodeType],
                    parent_of: dict[types.CodeType, types.CodeType], root: types.CodeType) -> frozenset[str]:
    """The free variables of a function running `code`, made in a capture run, whose cells belong to
    a frame of the run: the cells of the code that defines it, when that code ran in the capture,
    and those it passes on from its own run's frames. (A function made before the call, reached
    through a global or a closure, has none: its caller passes no `code` here.)"""
    names: set[str] = set()
    inner = code
    free = set(code.co_freevars)
    while free and inner is not root:  # (the differentiated function's own closure is older than the call)
        outer = parent_of.get(inner)
        if outer is None or outer not in ran:
            break
        names |= free & set(outer.co_cellvars)
        free &= set(outer.co_freevars)  # passed on from further out
        inner = outer
    return frozenset(names)


def user_site(site: Any) -> bool:
    """Whether a call site is in the user's code (not in bytegrad's implementations of builtins)."""
    from bytegrad.rules import _impls

    return site is not None and site.filename != _impls.__file__


def comprehension_on_constants(instrs: list, k: int) -> Optional[types.CodeType]:
    """The nested code a call at `instrs[k]` runs on an iterator, when it is a comprehension or
    generator expression made just before it without a closure (`[... for i in range(n)]` on 3.11,
    `(... for i in range(n))`): `MAKE_FUNCTION` of that code, the iterable's instructions, `GET_ITER`,
    the call. None for anything else (a jump or a label among them: not followed)."""
    from bytegrad.transform.code import Instr

    from bytegrad.transform import opcodes

    j = k - 1
    while j >= 0 and isinstance(instrs[j], Instr) and instrs[j].name in ("PRECALL", "PUSH_NULL"):
        j -= 1
    if j < 0 or not isinstance(instrs[j], Instr) or instrs[j].name != "GET_ITER":
        return None
    need = 1  # the iterable: walk back over the instructions that leave exactly one value
    j -= 1
    while need > 0 and j >= 0:
        ins = instrs[j]
        if not isinstance(ins, Instr) or ins.has_jump() or ins.name == "MAKE_FUNCTION":
            return None
        pops, pushes = opcodes.stack_effect(ins, False)
        need += pops - pushes
        j -= 1
    if need != 0 or j < 1:
        return None
    make, const = instrs[j], instrs[j - 1]
    if not (isinstance(make, Instr) and make.name == "MAKE_FUNCTION"
            and opcodes.make_function_pops(make) == 1  # (the code alone: no defaults, no closure)
            and isinstance(const, Instr) and const.name == "LOAD_CONST" and isinstance(const.arg, types.CodeType)):
        return None
    code = const.arg
    return None if code.co_freevars else code
