"""Partials inlined: a rule's partial written as a one-line lambda in a rules file becomes its
expression in place of a call to it (compiled/lower_numpy.py, compiled/lower_numba.py, compiled/export.py).
"""
from __future__ import annotations

import ast
import builtins
import re
from typing import TYPE_CHECKING, Any, Optional

from bytegrad.compiled.reuse import AST_LOCK

if TYPE_CHECKING:
    from bytegrad.compiled.source import Constants

__all__ = ["inline_partial", "lambda_parts"]

_LAMBDAS: dict[Any, Optional[tuple[ast.expr, tuple[str, ...], dict[str, Any]]]] = {}
_FILE_LAMBDAS: dict[str, list[ast.Lambda]] = {}


def _lambda_ast(d: Any) -> Optional[tuple[ast.expr, tuple[str, ...], dict[str, Any]]]:
    """(body, parameter names, the values of its other names) of a partial written as a one-line
    lambda in a rules file, found in the file by the columns its instructions come from; None
    when it is anything else."""
    if d in _LAMBDAS:
        return _LAMBDAS[d]
    found = None
    code = getattr(d, "__code__", None)
    if code is not None and code.co_name == "<lambda>" and not code.co_freevars and not code.co_flags & 0x0C:
        cols = [(c0, c1) for ln, _, c0, c1 in code.co_positions() if ln == code.co_firstlineno and c0 and c1]
        if cols:
            lo, hi = min(c for c, _ in cols), max(c for _, c in cols)
            for node in _lambdas_of(code.co_filename):
                body = node.body
                if body.lineno == code.co_firstlineno == body.end_lineno and body.col_offset <= lo and \
                        body.end_col_offset >= hi and node.col_offset < body.col_offset:
                    found = _resolved(node, d)
                    break
    _LAMBDAS[d] = found
    return found


def lambda_parts(d: Any) -> Optional[tuple[ast.expr, tuple[str, ...], dict[str, Any]]]:
    """(body, parameter names, the values of its other names) of a rule's one-line lambda partial,
    or None (compiled/export.py writes it into a module)."""
    return _lambda_ast(d)


def _lambdas_of(filename: str) -> list[ast.Lambda]:
    nodes = _FILE_LAMBDAS.get(filename)
    if nodes is None:
        import linecache

        try:
            with AST_LOCK:
                tree = ast.parse("".join(linecache.getlines(filename)))
            nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda)]
        except (SyntaxError, ValueError):
            nodes = []
        _FILE_LAMBDAS[filename] = nodes
    return nodes


def _resolved(node: ast.Lambda, d: Any) -> Optional[tuple[ast.expr, tuple[str, ...], dict[str, Any]]]:
    a = node.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults:
        return None
    params = tuple(x.arg for x in a.args)
    if params != d.__code__.co_varnames[:d.__code__.co_argcount]:
        return None  # not this lambda after all
    names: dict[str, Any] = {}
    bltns = vars(builtins)
    for n in ast.walk(node.body):
        if isinstance(n, (ast.Lambda, ast.comprehension, ast.NamedExpr)):
            return None
        if isinstance(n, ast.Name) and n.id not in params:
            if n.id in d.__globals__:
                names[n.id] = d.__globals__[n.id]
            elif n.id in bltns:
                names[n.id] = bltns[n.id]
            else:
                return None
    return node.body, params, names


def inline_partial(d: Any, operands: list[str], src: Constants) -> Optional[tuple[str, bool]]:
    """(the expression of partial `d` applied to `operands`, whether evaluating it may raise
    ZeroDivisionError): the same operations in the same order as calling `d`, without the call.
    `operands` are variables, or "None" for what `d` does not read. None: `d` is not a lambda."""
    found = _lambda_ast(d)
    if found is None:
        return None
    body, params, names = found
    subst = {p: o for p, o in zip(params, operands)}
    subst.update({n: src.const(v) for n, v in names.items()})
    with AST_LOCK:
        return _inlined(body, subst)


def _inlined(body: ast.expr, subst: dict[str, str]) -> tuple[str, bool]:
    template = _TEMPLATES.get(id(body))
    if template is None:  # the body written once with a mark for each name, filled in per use
        class _Mark(ast.NodeTransformer):
            def visit_Name(self, n: ast.Name) -> ast.AST:
                return ast.copy_location(ast.Name(id=f"\x00{n.id}\x00", ctx=n.ctx), n)

        expr = _Mark().visit(ast.parse(ast.unparse(body), mode="eval").body)
        risky = any(isinstance(n, ast.Call) or (isinstance(n, ast.BinOp) and isinstance(n.op, _DIVIDING))
                    for n in ast.walk(expr))
        template = _TEMPLATES[id(body)] = ("(" + ast.unparse(expr) + ")", risky, body)
    return _MARK.sub(lambda m: subst[m.group(1)], template[0]), template[1]


#: id of a lambda's body -> (its text with marked names, whether it may raise, the body, kept alive)
_TEMPLATES: dict[int, tuple[str, bool, ast.expr]] = {}
_MARK = re.compile("\x00([^\x00]*)\x00")


_DIVIDING = (ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
