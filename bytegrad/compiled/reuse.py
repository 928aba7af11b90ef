"""Compiled programs, NumPy back end: a temporary's buffer reused within one call.

Hand-written NumPy allocates every temporary; a program knows which of its arrays are its own and
when each dies, so an elementwise step may write its result into a dead operand
(`np.tanh(v, out=v)`) and a cotangent may take a contribution in place (`np.add(g, b, out=g)`):
fewer allocations, and the result lands in memory that is already in cache. The values are the
same as without (the same ufunc on the same operands, in the same order), bit for bit.

Three places use it: `forward_alternatives` (an elementwise forward step into an operand),
`accumulate` (a contribution added into a cotangent) and `lower_partial` (a partial's outer
operation into the array its inner one made, and that inner one into a dead forward value).

The rules, each needed (tests/test_program_reuse.py fails when one is left out):

1. *made here*: the operand is the output of one of the program's own ufuncs (an arithmetic
   operator on arrays included) or matrix products: never an argument, never a rule's result
   (which may be a view, a cached array or an argument given back);
2. *same shape and dtype* as the result, at capture (the guards fix both): an operand broadcast
   to a larger result, or one the result's dtype promotes from, is not written into;
3. *dead*: no later statement of the same function reads it (`Source.render` decides, so an
   output, a value the reverse pass or a pullback program's `back` reads, or one that a decision
   checks keeps its buffer);
4. *nothing else holds it*, at run time: `sys.getrefcount` counts the variable and the call's own
   reference only (no view of it, no pullback closure that kept it, no other variable, no
   container), and, for a cotangent, `scalable` (it owns its memory, and the contribution has its
   shape and dtype or is a Python float);
5. *big enough*: the result has at least INPLACE_MIN_SIZE elements (below that, NumPy's call with
   `out=` and the checks cost more than a small allocation saves; runtime/backward.py's threshold).
"""
from __future__ import annotations

import _thread
import ast
import operator
import sys
from typing import Any, Optional

import numpy as np

from bytegrad.runtime.backward import INPLACE_MIN_SIZE

#: held while Python's `ast` module is used (programs are built in several threads at once)
AST_LOCK = _thread.allocate_lock()  # (`threading` costs every process's import)

__all__ = ["accumulate", "dead", "donors", "forward_alternatives", "fresh", "lower_partial", "made_here", "SOLE"]

_ndarray = np.ndarray

#: the operators a program writes inline, as the ufuncs they call on arrays (`a + b` is np.add)
_OPERATOR_UFUNCS = {operator.add: np.add, operator.sub: np.subtract, operator.mul: np.multiply,
                    operator.truediv: np.true_divide, operator.neg: np.negative}
#: matrix products: a new array each (the program writes them `a @ b`)
_PRODUCTS = (operator.matmul, np.matmul)


def _sole_count() -> int:
    """What `sys.getrefcount` gives for an object only one local variable holds (2 on CPython
    3.11-3.13: the variable and the call's argument)."""
    x = object()
    return sys.getrefcount(x)


#: rule 4's count; a Python that counts otherwise gets it here, not a wrong answer
SOLE = _sole_count()
#: rules left out of programs built now ("made_here", "shape", "dead", "sole"): only tests set it,
#: to show that each rule is needed
_RELAXED: frozenset[str] = frozenset()


def dead(var: str, k: int, last: dict[str, int], keep: Any) -> bool:
    """Rule 3: no statement after statement k reads `var` (`last`: each name's last statement), and
    it is not a name of the enclosing function (`keep`: what a pullback program's `back` reads
    from the enclosing call)."""
    return "dead" in _RELAXED or (last.get(var) == k and var not in keep)


def _ufunc_of(rec: Any) -> Optional[tuple[np.ufunc, int]]:
    """(the ufunc an elementwise record computes, how many of its operands it takes), or None."""
    fn = rec.fn
    n = len(rec.args)
    if fn is operator.pow and n == 2 and type(rec.args[1]) in (int, float) and rec.args[1] == 2 \
            and rec.parents[1] is None:
        return np.square, 1  # `v ** 2` is np.square(v) (NumPy's fast path for the exponent 2)
    uf = _OPERATOR_UFUNCS.get(fn)
    if uf is None and isinstance(fn, np.ufunc):
        uf = fn
    if uf is None or uf.nout != 1 or uf.nin != n:
        return None
    return uf, n


def fresh(rec: Any, formed: bool) -> bool:
    """Rule 1 for one record: whether its output is a new array one of the program's own ufuncs or
    matrix products (`formed`: written as its ProgramForm) made, and that array at capture
    (compiled/passes.py `buffer_reuse` asks it of each record)."""
    if type(rec.out) is not _ndarray:
        return False
    if "made_here" in _RELAXED:
        return True
    if rec.out.base is not None:
        return False
    if rec.kind == "elementwise":
        return _ufunc_of(rec) is not None
    return formed and rec.fn in _PRODUCTS


def donors(rec: Any, made: frozenset[int]) -> tuple[int, ...]:
    """Rules 1, 2 and 5 for an elementwise record: its operands (tape indices) among `made` (rule 1)
    with the result's shape and dtype at capture, where the result has at least INPLACE_MIN_SIZE
    elements; in operand order, each once (compiled/passes.py `buffer_reuse`)."""
    out = rec.out
    found = _ufunc_of(rec)
    if found is None or type(out) is not _ndarray or out.size < INPLACE_MIN_SIZE:
        return ()
    into: list[int] = []
    for a, p in zip(rec.args[:found[1]], rec.parents):
        if type(a) is not _ndarray or p is None or p not in made or p in into or \
                ((a.shape != out.shape or a.dtype != out.dtype) and "shape" not in _RELAXED):
            continue
        into.append(p)
    return tuple(into)


def made_here(b: Any, p: Optional[int]) -> bool:
    """Rule 1: whether the value at tape index p is a new array one of the program's own ufuncs or
    matrix products made (and it is that array at capture): the IR pass's `made` records."""
    return p is not None and p in b.plan.made


def forward_alternatives(b: Any, rec: Any, ops: list[str], expr: str) -> Optional[list[tuple[str, list[str]]]]:
    """For an elementwise record written `v = expr`: (operand variable, the statement that writes
    the result into it) for each operand the IR pass `buffer_reuse` allows (rules 1, 2 and 5);
    `Source.render` takes the first that is dead there (rule 3), and the statement checks rule 4
    when it runs."""
    into = b.plan.into.get(rec.idx)
    found = _ufunc_of(rec)
    if not into or found is None:
        return None
    uf, n = found
    v = b.var[rec.idx]
    name = b.src.const(uf, "u")
    alts: list[tuple[str, list[str]]] = []
    for k in range(n):
        if rec.parents[k] not in into:
            continue
        var = ops[k]
        if any(var == alt for alt, _ in alts):
            continue
        call = f"{name}({', '.join(ops[:n])}, out={var})"
        sole = "True" if "sole" in _RELAXED else f"_getrefcount({var}) == {SOLE}"
        alts.append((var, [f"{v} = {call} if {sole} else {expr}"]))
    return alts or None


def accumulate(g: str, bar: str, size: int, src: Any) -> Optional[str]:
    """`g = g + bar` written to add in place into g when rule 4 holds when it runs (g is rebound
    here, so its old value is dead: rule 3), for cotangents of at least INPLACE_MIN_SIZE elements;
    None below that."""
    if size < INPLACE_MIN_SIZE:
        return None
    add = src.const(np.add, "u")
    sole = "" if "sole" in _RELAXED else f" and _getrefcount({g}) == {SOLE}"
    return f"{g} = {add}({g}, {bar}, out={g}) if {g}.__class__ is ndarray{sole} and _scalable({bar}, {g}) else {g} + {bar}"


_BINARY_UFUNCS = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.Div: np.true_divide}


def lower_partial(t: str, expr: str, values: dict[str, Any], src: Any,
                  candidates: Optional[list[tuple[str, str, str]]] = None, made: frozenset[str] = frozenset()) \
        -> list[str]:
    """`t = expr` for an inlined partial (`1 - v ** 2`), as statements that compute its outer
    operation into the array its inner one made (`t = v ** 2`, `t = np.subtract(1, t, out=t)`):
    where the outer operation is an arithmetic operator between that inner operation (a new array,
    rule 1, never read again: rule 3) and a name or a constant, and the inner result has the whole
    partial's shape and dtype on the capture's values (`values`, by variable; rule 2)."""

    with AST_LOCK:
        node = ast.parse(expr, mode="eval").body
        if not isinstance(node, ast.BinOp) or type(node.op) not in _BINARY_UFUNCS:
            return [f"{t} = {expr}"]
        for inner, other in ((node.right, node.left), (node.left, node.right)):
            if isinstance(inner, (ast.BinOp, ast.UnaryOp)) and isinstance(other, (ast.Name, ast.Constant)):
                break
        else:
            return [f"{t} = {expr}"]
        inner_src, other_src = ast.unparse(inner), ast.unparse(other)
    env = dict(src.ns)
    env.update(values)
    try:
        whole, part = eval(expr, env), eval(inner_src, env)  # noqa: S307 - the program's own code
    except Exception:  # noqa: BLE001 - what does not evaluate here is not lowered
        return [f"{t} = {expr}"]
    if type(whole) is not _ndarray or type(part) is not _ndarray or whole.shape != part.shape or \
            whole.dtype != part.dtype or whole.size < INPLACE_MIN_SIZE:
        return [f"{t} = {expr}"]
    uf = src.const(_BINARY_UFUNCS[type(node.op)], "u")
    args = f"{t}, {other_src}" if inner is node.left else f"{other_src}, {t}"
    first = f"{t} = {inner_src}"
    if candidates is not None:
        into = _into_operand(inner, part, values, made, src)
        if into is not None:  # (var, the inner operation written into var): taken by `Source.render`
            # (then the variable lets go of the buffer, which t alone holds: `out=t` below, and the
            # product by the cotangent after it, may write into it)
            candidates.append((into[0], first, f"{t} = {into[1]} if {into[2]} else {inner_src}; {into[0]} = None"))
    return [first, f"{t} = {uf}({args}, out={t})"]


def _into_operand(inner: ast.expr, part: Any, values: dict[str, Any], made: frozenset[str], src: Any) \
        -> Optional[tuple[str, str, str]]:
    """(variable, the inner operation of a partial written into that operand of it, the run-time
    check of rule 4): `v ** 2` as np.square(v, out=v), `-v` as np.negative(v, out=v), `v * w` as
    np.multiply(v, w, out=v), where v is a value of the forward pass (made there: rule 1) with the
    inner result's shape and dtype (rule 2). The caller checks that nothing else in the step reads
    v, and `Source.render` that nothing after it does (rule 3)."""
    if isinstance(inner, ast.UnaryOp) and isinstance(inner.op, ast.USub) and isinstance(inner.operand, ast.Name):
        name, call = inner.operand.id, "{u}({v}, out={v})"
        uf: Any = np.negative
    elif isinstance(inner, ast.BinOp) and isinstance(inner.left, ast.Name) and isinstance(inner.op, ast.Pow) \
            and isinstance(inner.right, ast.Constant) and inner.right.value == 2:
        name, call, uf = inner.left.id, "{u}({v}, out={v})", np.square
    elif isinstance(inner, ast.BinOp) and isinstance(inner.left, ast.Name) and type(inner.op) in _BINARY_UFUNCS \
            and isinstance(inner.right, (ast.Name, ast.Constant)):
        name, uf = inner.left.id, _BINARY_UFUNCS[type(inner.op)]
        call = "{u}({v}, " + ast.unparse(inner.right).replace("{", "{{").replace("}", "}}") + ", out={v})"
    else:
        return None
    value = values.get(name)
    if type(value) is not _ndarray or (name not in made and "made_here" not in _RELAXED):
        return None
    if (value.shape != part.shape or value.dtype != part.dtype) and "shape" not in _RELAXED:
        return None
    sole = "True" if "sole" in _RELAXED else f"_getrefcount({name}) == {SOLE}"
    return name, call.format(u=src.const(uf, "u"), v=name), sole
