"""An array kernel's elementwise statements as calls of shared functions (compiled/lower_numba.py).

Why a large array kernel compiled slowly (an RK4 loop of 8 states, measured here with cProfile:
2 steps, 124 array statements, 7.0 s; 4 steps, 248, 23 s; 8 steps, 496, 72 s): Numba lowers each
array expression (`v8 = x3 + v7`, `t28 = g45 * (1 - v45 ** 2)`) as a function of its own, typed,
lowered and optimised by LLVM apart (about 30 ms each: `_lower_array_expr`, `compile_subroutine`),
then inlines them all into the kernel, whose one function LLVM optimises again, in time that grows
faster than its size (`get_executable`, `_optimize_final_module`: 3.6 s at 2 steps, 9.5 s at 4).

Here each such statement calls a function written once per expression (`a0 * (1 - a1 ** 2)`, its
variables numbered in order of appearance), compiled once per argument types and kept in Numba's
disk cache, so a kernel of many repeated steps compiles a handful of loops and a body of calls:
the same 2, 4, 8 steps in 2.8 s, 5.3 s, 7.4 s (the kernel alone, with one function per operator, the
same mechanism; through bytegrad, 8 steps' first call in a fresh cache took 25 s outlined, Numba's
start and runtime/vmath.py's loops included, against 557 s inline, both on a loaded machine). Each
function computes its expression as the kernel did (the same Numba array expression), so the results
are the same, bit for bit (tests/test_compiled_numba_forms.py).

A kernel's one function still costs LLVM more than linear time past about a thousand statements
(16 steps, 992: over a minute even outlined; cutting it in several functions called from Python or
from a Numba driver measured slower still: each part links and optimises the callees again), so
the back end takes at most `MAX_ARRAY_STATEMENTS`; a larger program keeps the NumPy back end.
"""
from __future__ import annotations

import ast
import hashlib
import math
from typing import Any, Optional

import numpy as np

from bytegrad.runtime import kernels

__all__ = ["MAX_ARRAY_STATEMENTS", "OUTLINE_MIN", "array_statements", "expression", "helper", "outline", "source_of"]

#: array statements from which a kernel's elementwise statements are outlined (below it, Numba's own
#: inline array expressions compile fast enough, and the kernel keeps its code as it was)
OUTLINE_MIN = 100
#: the most array statements an array kernel takes (outlined: 496 compiled in 7.4 s here, 992 in over
#: a minute); past it the NumPy back end runs the program
MAX_ARRAY_STATEMENTS = 600

_ALLOWED = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Name, ast.Constant, ast.Load, ast.operator, ast.unaryop)
_helpers: dict[str, Any] = {}
_sources: dict[str, str] = {}  # a helper's function name -> its expression


def helper(expr: str) -> Any:
    """The `njit` function of `expr` (over a0, a1, ...), or None without Numba."""
    fn = _helpers.get(expr)
    if fn is None:
        n = len({node.id for node in ast.walk(ast.parse(expr, mode="eval")) if isinstance(node, ast.Name)})
        name = f"outlined_{hashlib.sha256(expr.encode()).hexdigest()[:12]}"
        text = f"def {name}({', '.join(f'a{j}' for j in range(n))}):\n    return {expr}\n"
        fn = kernels.jit_program(text, {"np": np, "math": math}, name, constants="")
        if fn is None:
            return None
        _helpers[expr] = fn
        _sources[name] = expr
    return fn


def source_of(fn: Any) -> Optional[str]:
    """The expression of an outlined function (for compiled/numba_kernel.py's constants), or None."""
    expr = _sources.get(getattr(fn, "__name__", ""))
    return expr if expr is not None and _helpers.get(expr) is fn else None


def _expression(line: str, arrays: Any) -> Optional[tuple[str, str, list[str]]]:
    """(target, the expression over a0, a1..., its operands) of an elementwise statement on an
    array, or None."""
    target, eq, rhs = line.partition(" = ")
    if not eq or not target.isidentifier():
        return None
    tree = ast.parse(rhs.strip(), mode="eval")
    nodes = list(ast.walk(tree))
    if not all(isinstance(n, _ALLOWED) for n in nodes) or not any(isinstance(n, (ast.BinOp, ast.UnaryOp)) for n in nodes):
        return None
    if any(isinstance(n, ast.Constant) and type(n.value) not in (int, float) for n in nodes):
        return None
    names: list[str] = []
    for n in nodes:
        if isinstance(n, ast.Name) and n.id not in names:
            names.append(n.id)
    if not any(v in arrays for v in names):
        return None

    class _Number(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            return ast.copy_location(ast.Name(f"a{names.index(node.id)}", ast.Load()), node)
    return target, ast.unparse(_Number().visit(tree)), names


expression = _expression  # (compiled/numba_roll.py outlines its loops' statements)


def array_statements(lines: list[str], arrays: Any) -> int:
    """How many of a kernel's `lines` are elementwise statements on arrays."""
    return sum(1 for ln in lines if _expression(ln, arrays) is not None)


def outline(k: Any) -> list[str]:
    """The lines of the array kernel `k` (lower_numba's `_Kernel`), its elementwise statements on
    arrays as calls of `helper`s when there are OUTLINE_MIN of them or more; raises `Ineligible`
    past MAX_ARRAY_STATEMENTS."""
    from bytegrad.compiled.lower_numpy import Ineligible
    from bytegrad.compiled.source import AST_LOCK

    with AST_LOCK:
        found = [_expression(ln, k.array) if not ln.startswith("#") else None for ln in k.lines]
    count = sum(1 for f in found if f is not None)
    if count > MAX_ARRAY_STATEMENTS:
        raise Ineligible(f"an array kernel of {count} elementwise statements, over the Numba back end's "
                         f"{MAX_ARRAY_STATEMENTS} (its compile time grows faster than its size: NumPy back end only)")
    if count < OUTLINE_MIN:
        return k.lines
    out = []
    for ln, f in zip(k.lines, found):
        fn = helper(f[1]) if f is not None else None
        if f is None or fn is None:
            out.append(ln)
            continue
        target, _, operands = f
        out.append(f"{target} = {k.names.const(fn, 'ex')}({', '.join(operands)})")
    return out
