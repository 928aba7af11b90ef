"""A Numba program's kernel source on its way to Numba (compiled/lower_numba.py): cut in parts around
the NumPy steps a hybrid kernel leaves to NumPy (`parts`), and its constants named by imports
(`module_constants`), so that Numba's disk cache can rebuild the kernel in another process
(runtime/kernels.py `jit_program`).
"""
from __future__ import annotations

import ast
import builtins
import math
from typing import Any, Optional

import numpy as np

from bytegrad.runtime import kernels

__all__ = ["SPLIT", "module_constants", "parts"]

#: the prefix of a kernel line that is a NumPy step between two kernel parts
SPLIT = "#numpy "


def parts(lines: list[str], returns: list[str], consts: set[str]) -> list[tuple[list[str], list[str], list[str]]]:
    """`lines` cut at each NumPy step: per part, its lines, the variables it reads that an earlier
    part (or the wrapper) gives, and those it gives that a later part or the result reads."""
    chunks: list[list[str]] = [[]]
    for ln in lines:
        if ln.startswith(SPLIT):
            chunks += [[ln], []]
        else:
            chunks[-1].append(ln)
    chunks = [c for c in chunks if c]
    parts = []
    for c in chunks:
        reads: list[str] = []
        made: set[str] = set()
        for ln in c:
            target, expr = ln[len(SPLIT):].split(" = ", 1) if ln.startswith(SPLIT) else ln.split(" = ", 1)
            for name in _names(expr):
                if name not in made and name not in consts and name not in reads:
                    reads.append(name)
            made.add(target)
        parts.append((c, reads, made))
    later = set(returns)
    out = []
    for c, reads, made in reversed(parts):
        out.append((c, reads, sorted(made & later)))
        later |= set(reads)
    return out[::-1]


def _names(expr: str) -> list[str]:
    return [n.id for n in ast.walk(ast.parse(expr, mode="eval")) if isinstance(n, ast.Name)]


def module_constants(ns: dict[str, Any]) -> Optional[str]:
    """Source lines that give a kernel's constants their names by importing them (NumPy, `math`, their
    functions, float and NumPy scalars, `kernels.small_matmul`), so that Numba's cache can rebuild
    the kernel in another process (runtime/kernels.py `jit_program`); None when one is another object
    (the kernel is then compiled in memory)."""
    lines = []
    for name, value in ns.items():
        expr = _by_name(value)
        if expr is None:
            return None
        if expr != name:
            lines.append(f"{name} = {expr}")
    if any("_kernels." in ln for ln in lines):
        lines.insert(0, "from bytegrad.runtime import kernels as _kernels")
    return "\n".join(lines)


def _by_name(v: Any) -> Optional[str]:
    t = type(v)
    if v is np or v is math:
        return "np" if v is np else "math"
    if t is float:
        return repr(v) if math.isfinite(v) else f"float({repr(v)!r})"
    if t is int or t is bool:
        return repr(v)
    if t in _SCALARS:
        return f"np.{t.__name__}({_by_name(v.item())})"
    name = getattr(v, "__name__", None)
    if not isinstance(name, str):
        return None
    if (isinstance(v, np.ufunc) or (t is type and v in _SCALARS)) and getattr(np, name, None) is v:
        return f"np.{name}"
    if getattr(math, name, None) is v:
        return f"math.{name}"
    if getattr(builtins, name, None) is v:
        return name
    if name == "small_matmul" and kernels.program_stem(v) is not None and v is kernels.small_matmul():
        return "_kernels.small_matmul()"
    for key, f in kernels.vector_math().items() if hasattr(v, "py_func") else ():
        if f is v:  # (runtime/vmath.py's functions, as `kernels.vector_math` compiles them)
            return f"_kernels.vector_math()[{key!r}]"
    return None


#: the NumPy scalar types a kernel's constants may have (the types themselves too, as `np.full`'s dtype)
_SCALARS = frozenset((np.float64, np.float32, np.int64, np.int32, np.bool_))
