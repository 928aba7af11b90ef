"""`with np.errstate(...)` in a compiled program.

`np.errstate` changes only how NumPy reports floating-point errors (ignore, warn, raise, print)
while its block runs: the values are the same. A program must report them as the general path
does, so the forward steps of the records made inside the block run under the same
`np.errstate` (`wrap`); the reverse pass runs after the function returns, outside the block, on
both paths.

`blocks(code, globals)` reads the function's `with` statements from its bytecode; each must be
`np.errstate(key="mode", ...)` with constant keywords, a mode other than "call" and "log" (which
call the user's functions), and a body left only at its end (no `return`, `break` or `continue`
inside: the number of `__exit__` calls equals the number of blocks). A block's lines are those
of its body's instructions; a record belongs to it when its site is in this code at one of those
lines. A Python callee called inside a block would run under it as well: the capture refuses
that (compiled/capture.py). The Numba back end and pullback programs decline such programs.
"""
from __future__ import annotations

import dis
import types
from typing import Any, Optional

import numpy as np

__all__ = ["blocks", "refused_callees", "wrap"]

_MODES = frozenset({"ignore", "warn", "raise", "print"})
_KEYS = frozenset({"all", "divide", "over", "under", "invalid"})


def _instructions(code: types.CodeType) -> list[dis.Instruction]:
    return [i for i in dis.get_instructions(code) if i.opname not in ("CACHE", "EXTENDED_ARG", "PRECALL")]


def _is_exit(ins: list, k: int) -> bool:
    """`__exit__(None, None, None)`: three None constants, then a call of two arguments (and self)."""
    return k >= 3 and ins[k].opname == "CALL" and ins[k].arg == 2 and all(
        ins[j].opname == "LOAD_CONST" and ins[j].argval is None for j in range(k - 3, k))


def blocks(code: types.CodeType, fn_globals: dict) -> Optional[list[tuple[frozenset[int], dict]]]:
    """Each `with` block of `code` as (its body's lines, the errstate keywords), outermost first; None
    when one is not a plain `np.errstate` block (see the module's docstring)."""
    ins = _instructions(code)
    starts = [k for k, i in enumerate(ins) if i.opname == "BEFORE_WITH"]
    exits = [k for k in range(len(ins)) if _is_exit(ins, k)]
    if len(exits) != len(starts):
        return None
    found = []
    for k in starts:
        kwargs = _errstate_call(code, ins, k, fn_globals)
        if kwargs is None:
            return None
        depth, end = 0, None
        for m in range(k + 1, len(ins)):
            if ins[m].opname == "BEFORE_WITH":
                depth += 1
            elif m in exits:
                if depth == 0:
                    end = m - 3
                    break
                depth -= 1
        if end is None:
            return None
        lines = frozenset(i.positions.lineno for i in ins[k + 1:end] if i.positions and i.positions.lineno)
        found.append((lines, kwargs))
    return found


def _errstate_call(code: types.CodeType, ins: list, k: int, fn_globals: dict) -> Optional[dict]:
    """The keywords of the `np.errstate(...)` call whose result BEFORE_WITH at `k` enters, or None."""
    j = k - 1
    call = ins[j]
    if call.opname not in ("CALL", "CALL_KW"):
        return None
    j -= 1
    if ins[j].opname == "KW_NAMES":
        names = code.co_consts[ins[j].arg]
        j -= 1
    elif call.opname == "CALL_KW" and ins[j].opname == "LOAD_CONST":
        names = ins[j].argval
        j -= 1
    else:
        names = ()
    if type(names) is not tuple or len(names) != call.arg:
        return None  # (a positional argument: errstate's `call`)
    values = []
    for _ in range(call.arg):
        if ins[j].opname != "LOAD_CONST":
            return None
        values.append(ins[j].argval)
        j -= 1
    if ins[j].opname == "PUSH_NULL":
        j -= 1
    kwargs = dict(zip(names, reversed(values)))
    if not all(n in _KEYS and v in _MODES for n, v in kwargs.items()):
        return None
    if ins[j].opname == "LOAD_ATTR" and ins[j].argval == "errstate" and j and ins[j - 1].opname == "LOAD_GLOBAL":
        owner = fn_globals.get(ins[j - 1].argval)
        return kwargs if owner is np and getattr(owner, "errstate", None) is np.errstate else None
    if ins[j].opname == "LOAD_GLOBAL" and fn_globals.get(ins[j].argval) is np.errstate:
        return kwargs
    return None


def _inside(site: Any, code: types.CodeType, found: list) -> list[dict]:
    if site is None or site.filename != code.co_filename or site.function != code.co_name:
        return []
    return [kw for lines, kw in found if site.lineno in lines]


def refused_callees(code: types.CodeType, fn_globals: dict, callees: list) -> Optional[str]:
    """Why the capture cannot be a program: a Python callee called inside an errstate block (its
    operations run under it too), or a callee with errstate blocks of its own; None if neither."""
    from bytegrad.compiled.reach_with import unpaired

    found = blocks(code, fn_globals) or []
    why = unpaired(callees)  # (`with obj:` left other than by its end: compiled/reach_with.py)
    if why is not None:
        return why
    for f, _, _, site in callees:
        if found and _inside(site, code, found):
            return f"it calls {f.__qualname__} inside `with np.errstate(...)` (line {site.lineno})"
        if blocks(f.__code__, f.__globals__):
            return f"it calls {f.__qualname__}, which uses `with np.errstate(...)`"
    return None


def wrap(b: Any, code: types.CodeType, fn_globals: dict) -> bool:
    """Each forward step of a record made inside an errstate block, run under the same errstate (the
    NumPy back end's `Builder` b); returns whether the code has such blocks."""
    found = blocks(code, fn_globals)
    if not found:
        return False
    src = b.src
    errstate = src.const(np.errstate, "f")
    for i, k in b.stmt_of.items():
        inside = _inside(b.records[i].site, code, found)
        if not inside:
            continue
        lines, names = src.stmts[k]
        for kw in reversed(inside):  # (the innermost block's keywords over the outer's)
            lines = [f"with {errstate}(**{src.const(kw, 'kw')}):"] + ["    " + ln for ln in lines]
        src.stmts[k] = (lines, names)
        src.reuse.pop(k, None)
    return True
