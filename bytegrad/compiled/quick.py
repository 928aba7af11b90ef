"""The standalone form of a stored NumPy program, which a fresh process's first call runs
without loading the general path (bytegrad/_quick.py reads it; this module writes it).

It is the module `bytegrad.export` writes for the program (compiled/export.py: NumPy and `math`
only, the argument guards raising `ValueError`), compiled, beside the guards that export leaves
out because they read the process: those on globals and module attributes (`global`, `attr`),
and on the code of the Python functions it inlined (`code`: a function without defaults, compared by
its marshalled code), written as one function over references that the loading process resolves by
name without importing anything (the function's own globals, a module, a module's `__dict__`, an
object by its module and qualified name, a plain value). The registry version's guard becomes the loader's own
condition (no rules loaded, so nothing registered), which holds for a program only where the
storing process had registered nothing of its own either (`store.foreign_state`). A program with
any other such guard (a closure cell, a callee with defaults, an object's state) or a reference that
cannot be named has no standalone form, and its first call runs the general path.
"""
from __future__ import annotations

import ast
import marshal
import re
import sys
import types
from typing import Any, Optional

from bytegrad import _quick
from bytegrad.compiled.export import ExportRefused, module_source
from bytegrad.compiled.source import AST_LOCK

__all__ = ["payload"]

#: guards export leaves out that the standalone form checks itself
_CHECKED = frozenset({"global", "attr"})
#: guards export leaves out that have no standalone check (the version: the loader's own condition)
_UNCHECKABLE = frozenset({"cell", "object"})
_PLAIN = (int, float, str, bytes, bool, type(None))
_NAMES_OK = frozenset({"_copysign", "_same_code"})
#: a callee's `code` guard, `_same_state(f, S3)`, where S3 is (code, None, None): a function without defaults
_CODE_GUARD = re.compile(r"_same_state\((.+), (S[0-9]+)\)")


def payload(prog: Any, fn: types.FunctionType, foreign: tuple) -> Optional[bytes]:
    """The standalone form of NumPy program `prog` of `fn` (see the module's docstring), or None
    where it has none. `foreign`: what the process registered of its own (`store.foreign_state()`)."""
    if prog.backend != "numpy" or prog.parts is None or prog.pullback or foreign != ((), ()):
        return None
    ns = prog.parts[0]
    code = fn.__code__
    try:
        source = module_source(prog, code.co_qualname, list(code.co_varnames[:code.co_argcount]), [])
    except ExportRefused:
        return None
    checks: list[str] = []
    refs: dict[str, tuple] = {}
    for guard in prog.guards:
        if guard.kind in _UNCHECKABLE:
            return None
        check = guard.check
        if guard.kind == "code":
            check = _code_check(check, ns, refs)
            if check is None:
                return None
        elif guard.kind not in _CHECKED:
            continue
        for name in _names(check):
            if name in _NAMES_OK or name in refs:
                continue
            ref = _ref(ns[name], fn) if name in ns else None
            if ref is None:
                return None
            refs[name] = ref
        checks.append(f"({check})")
    checks_source = "def checks():\n    return " + (" and ".join(checks) or "True") + "\n"
    where = f"<bytegrad's stored program of {code.co_qualname}>"
    try:
        module_code = compile(source, where, "exec")
        checks_code = compile(checks_source, where, "exec")
        return marshal.dumps((_quick.FORMAT, marshal.dumps(module_code), marshal.dumps(checks_code),
                              tuple(sorted(refs.items()))))
    except (SyntaxError, ValueError):
        return None


def _code_check(check: str, ns: dict[str, Any], refs: dict[str, tuple]) -> Optional[str]:
    """A callee's `code` guard as the loader checks it (`_same_code`: the function's marshalled code, and no
    defaults), its state a reference by value; None for a function with defaults, or any other state."""
    m = _CODE_GUARD.fullmatch(check)
    state = ns.get(m.group(2)) if m else None
    if m is None or type(state) is not tuple or len(state) != 3 or type(state[0]) is not types.CodeType \
            or state[1] is not None or state[2] is not None:
        return None
    try:
        refs[m.group(2)] = ("value", marshal.dumps(state[0], 2))
    except ValueError:
        return None
    return f"_same_code({m.group(1)}, {m.group(2)})"


def _names(check: str) -> list[str]:
    with AST_LOCK:
        tree = ast.parse(check, mode="eval")
    return sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)})


def _ref(value: Any, fn: types.FunctionType) -> Optional[tuple]:
    """How a loading process finds `value` again (bytegrad/_quick.py `_resolve`), or None."""
    if value is fn.__globals__:
        return ("globals",)
    t = type(value)
    if t in _PLAIN or (t is tuple and all(type(v) in _PLAIN for v in value)):
        return ("value", value)
    if t is types.ModuleType:
        name = getattr(value, "__name__", "")
        return ("module", name) if sys.modules.get(name) is value else None
    if t is dict:
        owner = next((name for name, m in list(sys.modules.items()) if m is not None and vars(m) is value), None)
        return None if owner is None else ("dict", owner)
    path = _quick.path_of(value)
    return None if path is None else ("path", *path)
