"""The parts of a compiled program (compiled/lower_numpy.py) that its builder, the disk store and the
generated code share: a tape record as code generation reads it (`Record`), the checks of what a
program can reproduce (`check_shapes`), its steps that only the value reads (`value_only`), how
much of its time a Numba twin could save (`savable_share`), and the compile of a program's source
into the function `program`, with the helpers generated code calls (`program_code`,
`program_from_code`).
"""
from __future__ import annotations

import ast
import functools
import gc
import math
import operator
import sys
import types
from typing import Any, Callable, Collection, Optional, Sequence

import numpy as np

from bytegrad.compiled.guards import same_state, same_value
from bytegrad.errors import qualname
from bytegrad.rules import registry
from bytegrad.rules._shape import materialize, unbroadcast
from bytegrad.rules.registry import NO_TANGENT, ZERO
from bytegrad.runtime import pytree
from bytegrad.runtime.backward import ELEMENTWISE, RULE, RULE_TRUSTED, TUPLE_ITEM, UNARY, scalable, singular_partial
from bytegrad.runtime.costs import MODEL as COSTS
from bytegrad.runtime.records import IDENTITY, TupleOut
from bytegrad.runtime.writes import WRITE_KINDS
from bytegrad.runtime.zerosafe import WHERE
from bytegrad.compiled.source import (
    AST_LOCK, DECIDED, FLOAT_TYPES, MISS, MISSING, Ineligible, Source, decided,
)

__all__ = ["MAX_RECORDS", "Record", "flat_items", "item_pairs", "check_shapes", "compile_program", "paused_and_sized", "program_code",
           "program_from_code", "python_raises", "savable_share", "value_only"]

_ndarray = np.ndarray
_FunctionType = types.FunctionType


_WRITE_KINDS = WRITE_KINDS | {IDENTITY}
_ZERO_SAFE = frozenset({ELEMENTWISE.safe, UNARY.safe})


class Record:
    """One tape record, read into the form code generation needs."""

    __slots__ = ("idx", "kind", "parents", "args", "fn", "rule", "kwargs", "site", "out", "trusted", "nested", "step")

    def __init__(self, idx: int, node: tuple, out: Any) -> None:
        kind = node[0]
        self.idx = idx
        self.out = out
        self.site = node[2]
        if kind is ELEMENTWISE or kind is UNARY:
            self.kind = "elementwise"
            self.parents = (node[1],) if kind is UNARY else node[1]
            self.rule = node[3]
            self.args = node[4]
            self.fn = node[5]
            self.kwargs = None
        elif kind is WHERE or kind in _ZERO_SAFE:  # `np.where`, or an elementwise record's zero-safe twin
            # (made so by a mask recorded later): a reverse step the program runs as the general
            # path's own (compiled/lower_stepped.py)
            self.kind = "stepped"
            self.parents = (node[1],) if kind is UNARY.safe else node[1]
            self.rule, self.args, self.fn, self.kwargs = node[3], node[4], node[5], None
            self.step = kind  # (the record's kind, whose reverse step the program calls)
        elif kind is RULE or kind is RULE_TRUSTED:
            self.kind = "rrule"
            self.parents = tuple(node[1])
            self.args = node[4]
            self.fn = node[5]
            self.rule = _rule_of(self.fn)
            self.kwargs = node[6] if len(node) > 6 else None
            self.trusted = kind is RULE_TRUSTED
            if self.rule is None or self.rule.rrule is None:
                raise Ineligible(f"no reverse rule found again for {qualname(self.fn)}", self.site)
        elif kind in _WRITE_KINDS:  # an in-place write, a view after one, a copy (compiled/writes.py)
            self.kind = "write"
            self.parents = tuple(node[1])
            self.args = ()  # (what it reads is the previous version: see compiled/writes.py)
            self.fn = kind
            self.rule = None
            self.kwargs = None
            self.trusted = True
            self.nested: dict[int, tuple] = {}
            if not (type(out) is _ndarray and out.dtype.kind == "f"):
                raise Ineligible(f"a write into an array of {getattr(out, 'dtype', type(out).__name__)}", self.site)
            return
        elif kind is TUPLE_ITEM:  # element k of a rule's tuple output (compiled/lower_tuples.py)
            self.kind, self.parents, self.fn, self.rule, self.kwargs = "item", tuple(node[1]), tuple_item, None, None
            self.args = (None, node[3])  # (the tuple: set by compiled/ir.py's `read`, the position)
            self.trusted = True
        else:
            raise Ineligible(f"a {kind.name} record "
                             "(in-place writes, fused kernels and nested derivatives stay on the general path)",
                             self.site)
        to = type(out)
        if to is TupleOut and self.kind == "rrule":
            pass  # its float items are records of their own, checked as any value
        elif not (to in FLOAT_TYPES or (to is _ndarray and out.dtype.kind == "f")):
            what = f"ndarray of {out.dtype}" if to is _ndarray else to.__name__
            raise Ineligible(f"{qualname(self.fn)} gives a {what} (compiled programs handle real float "
                             "values)", self.site)
        #: argument position -> the tape indices (or None) of a list or tuple argument's items, for a
        #: rule that takes differentiated values in a list (`np.stack([a, b])`); `parents` holds None
        #: there, so code that reads `parents` sees only values passed as themselves
        self.nested = {}
        for k, p in enumerate(self.parents):
            if p is None or type(p) is int:
                continue
            items = _item_tree(p, self.args[k]) if self.kind == "rrule" else None
            if items is None:
                raise Ineligible(f"a nested structure of differentiated values passed to {qualname(self.fn)}",
                                 self.site)
            self.nested[k] = items
        if self.nested:
            self.parents = tuple(None if k in self.nested else p for k, p in enumerate(self.parents))

    def inputs(self) -> list[int]:
        """The tape indices this record reads: its parents and the items of its list arguments."""
        found = [p for p in self.parents if p is not None]
        for items in self.nested.values():
            found += [q for q in flat_items(items) if q is not None]
        return found


def _item_tree(p: Any, a: Any) -> Optional[tuple]:
    """The tape indices of a list or tuple argument `a`'s items (`p`, from the record), as nested
    tuples of ints and None that follow `a`'s nesting (`np.array([[a, b], [b, 1.0]])`); None
    where `p` does not follow `a`."""
    if type(p) not in (list, tuple) or type(a) not in (list, tuple) or len(p) != len(a):
        return None
    out: list[Any] = []
    for q, x in zip(p, a):
        if q is not None and type(q) is not int:
            q = _item_tree(q, x)
            if q is None:
                return None
        out.append(q)
    return tuple(out)


def flat_items(items: tuple) -> list[Any]:
    """A list argument's tape indices (`Record.nested`), its nested lists flattened."""
    found: list[Any] = []
    for q in items:
        found += flat_items(q) if type(q) is tuple else [q]
    return found


def item_pairs(items: tuple, a: Any) -> list[tuple[Any, Any]]:
    """(tape index, value) of each item of a list argument `a`, its nested lists flattened."""
    found: list[tuple[Any, Any]] = []
    for q, x in zip(items, a):
        found += item_pairs(q, x) if type(q) is tuple else [(q, x)]
    return found


#: Python's operators that raise ZeroDivisionError on a zero divisor of Python numbers
_DIVISIONS = frozenset((operator.truediv, operator.itruediv, operator.floordiv, operator.ifloordiv, operator.mod,
                        operator.imod))
_POWERS = frozenset((operator.pow, operator.ipow))
#: `math`'s functions raise ValueError or OverflowError where their result would be NaN or infinite
_MATH = frozenset(v for v in vars(math).values() if callable(v))
_PY_NUMBERS = (int, float, bool)


def tuple_item(t: Any, k: int) -> Any:
    """Element k of a rule's tuple output (a tuple item record's operation, for its name)."""
    return t[k]


def python_raises(rec: Record) -> Optional[str]:
    """How the general path's operation of `rec` may raise where NumPy's arithmetic gives inf or NaN:
    "divisor" (`/`, `//`, `%` of Python numbers: ZeroDivisionError at a zero divisor), "result" (a
    `math` function, or `**` of Python numbers: ValueError, OverflowError or ZeroDivisionError where
    the result would be NaN or infinite, or complex for `**`), or None. A program computes such an
    operation even when no output reads it, and a Numba kernel checks it (compiled/lower_numba.py)."""
    fn = rec.fn
    if rec.kind != "elementwise" and rec.kind != "stepped":
        return None
    if fn in _MATH:
        return "result"
    if (fn in _DIVISIONS or fn in _POWERS) and all(type(a) in _PY_NUMBERS for a in rec.args[:2]):
        return "divisor" if fn in _DIVISIONS else "result"
    return None


def _rule_of(fn: Any) -> Any:
    rule = registry.lookup(fn)
    if rule is None and type(fn) is types.MethodWrapperType:  # `desc.__get__` of `.T`, `.real`
        rule = registry.lookup(fn.__self__)
    return rule


#: contractions BLAS computes: a Numba kernel calls the same BLAS (or, below a size, loops that are no faster)
_CONTRACTIONS = (np.matmul, operator.matmul, np.dot, np.vdot, np.inner, np.tensordot, np.einsum)


def savable_share(records: Sequence[Record]) -> float:
    """The share of a NumPy program's time that its Numba twin could save, estimated from its
    records by the cost model (runtime/costs.py `savable_share`): all of it but its contractions
    (matrix products, tensordot, einsum), which the twin runs in the same BLAS."""
    steps = []
    for rec in records:
        sizes = [a.size for a in rec.args[:2] if type(a) is _ndarray]
        size = rec.out.size if type(rec.out) is _ndarray else 1
        if len(sizes) == 2 and any(rec.fn is f for f in _CONTRACTIONS):  # (m k)(k n)(m n): m k n multiply-adds
            steps.append((True, (sizes[0] * sizes[1] * size) ** 0.5))
        else:
            steps.append((False, float(size)))
    return COSTS.savable_share(steps)


def value_only(src: Source, stmt_of: dict[int, int], out_idx: int, keep: frozenset[int] = frozenset(),
               allowed: Optional[Collection[int]] = None) -> list[int]:
    """The forward steps only the output's value reads (the loss, and what only it reads): a
    gradient asked alone (`program(args, False)`, `grad`) skips them, and gets None for the value.
    `allowed`: the records the IR pass found so (compiled/passes.py `value_only`); among them, a
    step that a statement of the program reads (the reverse pass, a decision, a guard the lowering
    added, a kept step) is kept, and so are the records `keep` (those that may raise as Python
    does, `python_raises`). `stmt_of`: each record's statement in `src` (compiled/lower_numpy.py's
    Builder). Returns the records skipped (compiled/passes.py `dump_lowering` lists them)."""
    stmts = src.stmts
    readers: dict[str, set[int]] = {}
    for k, (_, names) in enumerate(stmts):
        for n in names:
            readers.setdefault(n, set()).add(k)
    skipped: set[int] = set()
    records: list[int] = []
    for i in sorted(stmt_of, reverse=True):  # readers before what they read
        k = stmt_of[i]
        lines, names = stmts[k]
        others = readers.get(f"v{i}", set()) - {k}
        if (allowed is not None and i not in allowed) or len(lines) != 1 or f"p{i}" in names \
                or not others <= skipped or (not others and i != out_idx) or i in keep:
            continue
        skipped.add(k)
        records.append(i)
        stmts[k] = (_unless_value(lines), names)
        if k in src.reuse:
            src.reuse[k] = [(var, _unless_value(alt)) for var, alt in src.reuse[k]]
    return sorted(records)


def _unless_value(lines: list[str]) -> list[str]:
    var = lines[0].split(" = ", 1)[0]
    return [f"if value: {lines[0]}", f"else: {var} = None"]


#: functions whose output shape depends on the values of their input (a program fixes shapes)
_DATA_SHAPED = {np.nonzero, np.flatnonzero, np.argwhere, np.unique, np.compress, np.extract, np.trim_zeros,
                np.ndarray.nonzero, np.ndarray.compress}


def check_shapes(rec: Record) -> None:
    if rec.fn in _DATA_SHAPED:
        raise Ineligible(f"{qualname(rec.fn)} (its output's shape depends on data)", rec.site)
    if rec.fn is operator.getitem:
        key = rec.args[1]
        keys = key if type(key) is tuple else (key,)
        for k in keys:
            if (type(k) is _ndarray and k.dtype.kind == "b") or type(k) is list:
                raise Ineligible("indexing with a boolean mask or a list (its shape depends on data)", rec.site)


def _acc(old: Any, new: Any) -> Any:
    if old is None:
        return new
    if new is None:
        return old
    return old + new


def _untrusted(ct: Any, node: tuple, pullback: Any, like: Any) -> Any:
    """A plugin rule's reverse step, checked as the general path checks it (runtime/backward.py)."""
    return RULE.backward(ct, node[:3] + (pullback,) + node[4:], like)


def compile_program(source: str, user_lines: Sequence[int], filename: str, constants: dict[str, Any]) \
        -> Callable[[tuple], Any]:
    """The function `program` of a program's `source`, each line at the user's line it replays (in
    `filename`), with `constants` and the helpers programs call as its globals."""
    return program_from_code(program_code(source, user_lines, filename), constants)


def program_code(source: str, user_lines: Sequence[int], filename: str) -> types.CodeType:
    """The module code of a program's `source`, each line at the user's line it replays."""
    with AST_LOCK:
        tree = ast.parse(source)
        for node in ast.walk(tree):  # each statement at the user's line it replays
            if hasattr(node, "lineno") and hasattr(node, "end_lineno"):  # (every node with one has both)
                node.lineno = user_lines[node.lineno - 1]
                node.end_lineno = user_lines[(node.end_lineno or node.lineno) - 1] if node.end_lineno else node.lineno
                if node.end_lineno < node.lineno:
                    node.end_lineno = node.lineno
        return compile(tree, filename, "exec")


#: operations (tape records) of the largest program built: Python takes about 0.2-0.5 ms an operation to
#: write, parse and compile a program of 6-7 lines an operation, which a capture must pay back: a 2,000-step
#: loop of 4 operations on array[1000] takes 0.12-0.3 s a gradient, and its 54,000-line program took 4-5 s
#: to build (a 500-step loop, 2,002 operations, about 1 s: 10x its gradient)
MAX_RECORDS = 2000


def paused_and_sized(build: Callable[..., Any]) -> Callable[..., Any]:
    """`build(tape, ...)` (compiled/lower_numpy.py) refused (`Ineligible`) for a tape of more than
    MAX_RECORDS operations, and run with Python's cyclic garbage collector paused: a program's build
    allocates many objects that live until it is compiled (AST nodes, strings), and each collection
    visited them all, which made a build grow as the square of its operations. NumPy's
    floating-point errors are ignored: a build computes partials on the capture's values to read
    their shapes, and reports nothing of the call (its program reports its own, runtime/fpwarn.py)."""
    @functools.wraps(build)
    def sized(tape: Any, *args: Any, **kwargs: Any) -> Any:
        records = sum(node is not None for node in tape.nodes)
        if records > MAX_RECORDS:
            raise Ineligible(f"its capture recorded {records} operations, more than a program takes ({MAX_RECORDS}): "
                             "compiling one would cost more than many gradients; the signature stays on the "
                             "general path")
        was = gc.isenabled()
        gc.disable()
        try:
            with np.errstate(all="ignore"):
                return build(tape, *args, **kwargs)
        finally:
            if was:
                gc.enable()
    return sized


def _program_version() -> int:
    registry.settled_version()  # (the rules of the modules imported so far, loaded first)
    return registry.program_version()


def program_from_code(code: types.CodeType, constants: dict[str, Any]) -> Callable[[tuple], Any]:
    """The function `program` that `code` (from `program_code`) defines, with `constants` and the
    helpers programs call as its globals (compiled/store.py loads stored code through it)."""
    namespace = dict(constants)
    namespace.update(MISS=MISS, DECIDED=DECIDED, ndarray=_ndarray, FunctionType=_FunctionType, ZERO=ZERO,
                     NO_TANGENT=NO_TANGENT, _acc=_acc, _decided=decided, _cotangent_leaves=pytree.cotangent_leaves,
                     _singular=singular_partial, _unbroadcast=unbroadcast, _materialize=materialize,
                     _untrusted=_untrusted, _project=pytree.project, _multiply=np.multiply,
                     _getrefcount=sys.getrefcount, _scalable=scalable, _unalias=pytree.unalias,
                     _version=registry.program_version, _VERSION=_program_version(), _MISSING=MISSING, _same_state=same_state,
                     _same_value=same_value, _copysign=math.copysign)
    exec(code, namespace)  # noqa: S102
    return namespace["program"]
