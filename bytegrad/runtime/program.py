"""Compiled gradient programs, NumPy back end: a capture tape becomes one generated Python function.

A capture run (bytegrad/compiled.py) executes the rewritten function with every float argument
tracked, on a `CaptureTape`, so the tape holds every operation whose result depends on any
argument. `build` turns that tape into straight-line Python source:

- guards on the arguments (container types and lengths, dict keys, array types, shapes and
  dtypes, the values of ints, strings, flags), on the globals and module attributes the code
  reads, and on the rule registry's version; any guard that fails returns `MISS` and the call
  goes to the general path;
- the forward operations: each record's primal (`np.tanh(v3)`, `v1 @ v2`), or its rrule where
  the reverse pass needs the pullback; records no output depends on are dropped;
- the reverse pass the records imply, for the differentiated arguments only: cotangents are
  local variables, accumulated in the order the tape's sweep accumulates them (so results are
  the general path's, bit for bit), broadcasting is undone with the shapes seen at capture
  (fixed by the guards), and every value is deleted after its last use.

Anything such a program cannot reproduce raises `Ineligible` with the reason, and the signature
stays on the general path. The program has no hooks, no tape and no identity lookups.
"""
from __future__ import annotations

import ast
import builtins
import operator
import re
import sys
import types
from typing import Any, Callable, Optional

import numpy as np

from bytegrad import _operators
from bytegrad.errors import qualname
from bytegrad.rules import registry
from bytegrad.rules._apply import shape_of
from bytegrad.rules._shape import materialize, stand_in, unbroadcast
from bytegrad.rules.registry import NO_TANGENT, ZERO
from bytegrad.runtime import pytree
from bytegrad.runtime.backward import (
    INPLACE_MIN_SIZE, _bw_elementwise, _bw_rrule, _bw_rrule_trusted, _bw_unary, _partial_uses, _scalable,
    singular_partial,
)
from bytegrad.runtime.tape import Tape

__all__ = ["MISS", "Ineligible", "Program", "build"]

_ndarray = np.ndarray
_FunctionType = types.FunctionType


class _Miss:
    def __repr__(self) -> str:
        return "MISS"


#: what a program returns when a guard fails: the call runs on the general path
MISS = _Miss()
_MISSING = object()
#: the kinds of guards a program checks
GUARD_KINDS = ("type", "shape", "dtype", "value", "global", "attr", "version")
#: guard kinds left out of programs built now: only tests set it (each kind must be needed)
_OMITTED: frozenset[str] = frozenset()


class Ineligible(Exception):
    """This computation cannot be a compiled program; the message says why (for explain/stats)."""

    def __init__(self, why: str, site: Any = None) -> None:
        where = f" (line {site.lineno} of {site.function})" if site is not None and site.lineno else ""
        super().__init__(why + where)


class Program:
    """A compiled gradient program: `fn(args)` is `(value, gradient)` or `MISS`."""

    __slots__ = ("fn", "source", "guards", "records", "backend", "calls", "seconds", "upgraded", "why_not_numba")

    def __init__(self, fn: Callable[[tuple], Any], source: str, guards: list[str], records: int) -> None:
        self.fn = fn
        self.source = source
        self.guards = guards      # one line per guard, for explain
        self.records = records    # forward operations in the program
        self.backend = "numpy"
        self.calls = 0            # calls it answered
        self.seconds = 0.0        # time spent in it (estimated from a sample), for the tier policy
        self.upgraded = False     # whether its Numba twin was tried (bytegrad/compiled.py)
        self.why_not_numba = ""   # what came of that

    def __repr__(self) -> str:
        return f"<bytegrad program ({self.backend}, {self.records} operations, {len(self.guards)} guards)>"


#: operators written inline in the generated code (`v1 * v2` costs less than `operator.mul(v1, v2)`)
_INLINE_BINARY = _operators.symbols(operator.add, operator.sub, operator.mul, operator.truediv, operator.pow,
                                    operator.matmul, operator.floordiv, operator.mod)
_INLINE_UNARY = _operators.UNARY


def operator_expr(fn: Any, ops: list[str], binary: dict[Any, str] = _INLINE_BINARY) -> Optional[str]:
    """`fn` applied to `ops` written as its operator (`v1 * v2`, `-v1`), or None for other functions."""
    if len(ops) == 2 and fn in binary:
        return f"{ops[0]} {binary[fn]} {ops[1]}"
    if len(ops) == 1 and fn in _INLINE_UNARY:
        return f"{_INLINE_UNARY[fn]}{ops[0]}"
    return None
_FLOAT_TYPES = (float, np.float64, np.float32)
_SCALAR_CONSTS = (int, float, bool, str, bytes, type(None), complex, slice, type(Ellipsis), np.generic, np.dtype,
                  type, types.FunctionType, types.BuiltinFunctionType, np.ufunc, types.ModuleType,
                  types.MethodDescriptorType, types.WrapperDescriptorType, types.MethodWrapperType,
                  types.GetSetDescriptorType, types.BuiltinMethodType)


#: the generated code's variables: x (arguments), v (values), p (pullbacks), g (cotangents),
#: q (gradients);
#: temporaries (`_t`) live within one reverse step, constants have other names
_VARIABLE = re.compile(r"\b[xvpgq][0-9]+\b")


class Constants:
    """The globals of a generated function: each value once, by name."""

    def __init__(self, ns: Optional[dict[str, Any]] = None) -> None:
        self.ns: dict[str, Any] = dict(ns or {})
        self._by_id: dict[int, str] = {}

    def const(self, value: Any, hint: str = "c") -> str:
        name = self._by_id.get(id(value))
        if name is None:
            name = f"{hint}{len(self.ns)}"
            self.ns[name] = value
            self._by_id[id(value)] = name
        return name


class Source(Constants):
    """The generated function: statements with the names each reads, constants by name."""

    def __init__(self) -> None:
        super().__init__()
        self.stmts: list[tuple[list[str], set[str]]] = []   # (lines, names read or written)
        self.lines: list[Optional[int]] = []                # the user's line of each statement
        self.scalars: set[str] = set()  # variables that hold floats: not worth a `del`
        self.guards: list[str] = []
        self.kernel_source: Optional[str] = None  # the Numba kernel the program calls (program_numba.py)

    def emit(self, lines: list[str] | str, line: Optional[int] = None) -> None:
        """Add a statement; `line`: the user's source line it stands for (tracebacks show it)."""
        lines = [lines] if isinstance(lines, str) else lines
        self.stmts.append((lines, set(_VARIABLE.findall("\n".join(lines)))))
        self.lines.append(line)

    def guard(self, kind: str, cond: str, what: str) -> None:
        """A check of kind `kind` (one of GUARD_KINDS): the program returns MISS when it fails."""
        if kind in _OMITTED:  # tests only: proves each kind of guard is needed
            return
        self.emit(f"if not ({cond}): return MISS")
        self.guards.append(what)

    def array_guard(self, expr: str, value: np.ndarray) -> None:
        dt = self.const(value.dtype, "dt")
        self.guard("type", f"{expr}.__class__ is ndarray", f"{expr}: ndarray")
        self.guard("shape", f"{expr}.shape == {value.shape!r}", f"{expr}.shape == {value.shape!r}")
        self.guard("dtype", f"{expr}.dtype is {dt}", f"{expr}.dtype is {value.dtype}")

    def render(self, name: str, first_line: int) -> tuple[str, list[int]]:
        """The function's source, every variable deleted after its last use, and the user's line of
        each line of it (the first line of the user's function for guards and bookkeeping)."""
        last: dict[str, int] = {}
        for k, (_, names) in enumerate(self.stmts):
            for n in names:
                last[n] = k
        out = [f"def {name}(args):"]
        user = [first_line]
        for k, (lines, _) in enumerate(self.stmts):
            out += ["    " + ln for ln in lines]
            user += [self.lines[k] or first_line] * len(lines)
            if k == len(self.stmts) - 1:
                break  # the return
            dead = sorted(n for n, at in last.items() if at == k and n not in self.scalars)
            if dead:
                out.append(f"    del {', '.join(dead)}")
                user.append(user[-1])
        return "\n".join(out) + "\n", user


# ---- arguments: guards and bindings ------------------------------------------------------------


class Inputs:
    """Walks the call's arguments beside their capture specs: guards, and a variable per leaf."""

    def __init__(self, src: Source) -> None:
        self.src = src
        self.leaf_var: dict[int, str] = {}      # tape index of a tracked leaf -> variable
        self.untracked: dict[int, str] = {}     # id of an untracked argument array -> variable
        self.fresh: dict[int, str] = {}         # tape index of a differentiated argument array -> variable
        self._n = 0

    def temp(self) -> str:
        self._n += 1
        return f"x{self._n}"

    def walk(self, expr: str, value: Any, spec: Any, fresh: bool) -> None:
        """`expr` reads `value` (the caller's object) whose capture spec is `spec`. `fresh`: the
        argument is differentiated, its arrays enter as fresh views as on the general path."""
        src = self.src
        t = type(value)
        if type(spec) is pytree.Leaf:
            var = f"x{self._n + 1}"
            self._n += 1
            if t is _ndarray:
                src.array_guard(expr, value)
                src.emit(f"{var} = {expr}")
                if fresh:  # a gradient is never the caller's array itself (see `gradient_code`)
                    self.fresh[spec.idx] = var
            elif t in _FLOAT_TYPES:
                src.guard("type", f"{expr}.__class__ is {src.const(t, 'T')}", f"{expr}: {t.__name__}")
                src.emit(f"{var} = {expr}")
                src.scalars.update((var, f"g{spec.idx}"))
            else:
                raise Ineligible(f"a differentiated argument of type {t.__name__} (complex values stay on the "
                                 "general path)")
            self.leaf_var[spec.idx] = var
            return
        if spec is None:
            self._untracked(expr, value)
            return
        if isinstance(spec[0], str):  # "dataclass", "pytree"
            raise Ineligible(f"a {spec[0]} argument (compiled programs take arrays, floats and dicts, lists "
                             "and tuples of them)")
        kind, subs = spec
        if kind is not t:
            raise Ineligible(f"an argument of type {t.__name__}")
        tn = src.const(t, "T")
        src.guard("type", f"{expr}.__class__ is {tn} and len({expr}) == {len(subs)}",
                  f"{expr}: {t.__name__} of {len(subs)}")
        items = subs.items() if isinstance(subs, dict) else enumerate(subs)
        for key, sub in items:
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                raise Ineligible(f"a dict argument with a key of type {type(key).__name__}")
            var = self.temp()
            if isinstance(subs, dict):
                src.emit(f"{var} = {expr}.get({key!r}, MISS)")
            else:
                src.emit(f"{var} = {expr}[{key!r}]")
            self.walk(var, value[key], sub, fresh)

    def _untracked(self, expr: str, value: Any) -> None:
        src = self.src
        t = type(value)
        if t is _ndarray:
            if value.dtype.kind == "O":
                raise Ineligible("an object array argument")
            var = self.temp()
            src.array_guard(expr, value)
            src.emit(f"{var} = {expr}")
            self.untracked[id(value)] = var
        elif value is None:
            src.guard("value", f"{expr} is None", f"{expr} is None")
        elif t in (int, bool, str, bytes) or (isinstance(value, np.generic) and value.dtype.kind in "biu"):
            c = src.const(value)
            src.guard("value", f"{expr}.__class__ is {src.const(t, 'T')} and {expr} == {c}", f"{expr} == {value!r}")
        elif t is tuple or t is list:
            src.guard("type", f"{expr}.__class__ is {src.const(t, 'T')} and len({expr}) == {len(value)}",
                      f"{expr}: {t.__name__} of {len(value)}")
            for k, item in enumerate(value):
                var = self.temp()
                src.emit(f"{var} = {expr}[{k}]")
                self._untracked(var, item)
        else:
            raise Ineligible(f"an argument of type {t.__name__} (compiled programs take arrays, numbers, "
                             "strings and dicts, lists and tuples of them)")


# ---- the records -------------------------------------------------------------------------------


class Record:
    """One tape record, read into the form code generation needs."""

    __slots__ = ("idx", "kind", "parents", "args", "fn", "rule", "kwargs", "site", "out", "trusted")

    def __init__(self, idx: int, node: tuple, out: Any) -> None:
        bw = node[0]
        self.idx = idx
        self.out = out
        self.site = node[2]
        if bw is _bw_elementwise or bw is _bw_unary:
            self.kind = "elementwise"
            self.parents = (node[1],) if bw is _bw_unary else node[1]
            self.rule = node[3]
            self.args = node[4]
            self.fn = node[5]
            self.kwargs = None
        elif bw is _bw_rrule or bw is _bw_rrule_trusted:
            self.kind = "rrule"
            self.parents = tuple(node[1])
            self.args = node[4]
            self.fn = node[5]
            self.rule = _rule_of(self.fn)
            self.kwargs = node[6] if len(node) > 6 else None
            self.trusted = bw is _bw_rrule_trusted
            if self.rule is None or self.rule.rrule is None:
                raise Ineligible(f"no reverse rule found again for {qualname(self.fn)}", self.site)
        else:
            raise Ineligible(f"a {getattr(bw, '__name__', bw).lstrip('_bw_').replace('_', ' ')} record "
                             "(in-place writes, fused kernels and nested derivatives stay on the general path)",
                             self.site)
        to = type(out)
        if not (to in _FLOAT_TYPES or (to is _ndarray and out.dtype.kind == "f")):
            what = f"ndarray of {out.dtype}" if to is _ndarray else to.__name__
            raise Ineligible(f"{qualname(self.fn)} gives a {what} (compiled programs handle real float "
                             "values)", self.site)
        for p in self.parents:
            if p is not None and type(p) is not int:
                raise Ineligible(f"a list of differentiated values passed to {qualname(self.fn)}", self.site)


def _rule_of(fn: Any) -> Any:
    rule = registry.lookup(fn)
    if rule is None and type(fn) is types.MethodWrapperType:  # `desc.__get__` of `.T`, `.real`
        rule = registry.lookup(fn.__self__)
    return rule


#: functions whose output shape depends on the values of their input (a program fixes shapes)
_DATA_SHAPED = {np.nonzero, np.flatnonzero, np.argwhere, np.unique, np.compress, np.extract, np.trim_zeros,
                np.ndarray.nonzero, np.ndarray.compress}


def _check_shapes(rec: Record) -> None:
    if rec.fn in _DATA_SHAPED:
        raise Ineligible(f"{qualname(rec.fn)} (its output's shape depends on data)", rec.site)
    if rec.fn is operator.getitem:
        key = rec.args[1]
        keys = key if type(key) is tuple else (key,)
        for k in keys:
            if (type(k) is _ndarray and k.dtype.kind == "b") or type(k) is list:
                raise Ineligible("indexing with a boolean mask or a list (its shape depends on data)", rec.site)


# ---- code generation ---------------------------------------------------------------------------


_UNSET, _SET, _MAYBE = 0, 1, 2
#: how a contribution `bar` joins cotangent `g`: (bar may be None, g's state) -> (statement, new state)
_ACCUMULATE = {
    (False, _UNSET): ("{g} = {bar}", _SET),
    (False, _SET): ("{g} = {g} + {bar}", _SET),
    (False, _MAYBE): ("{g} = {bar} if {g} is None else {g} + {bar}", _SET),
    (True, _UNSET): ("{g} = {bar}", _MAYBE),
    (True, _SET): ("if {bar} is not None: {g} = {g} + {bar}", _SET),
    (True, _MAYBE): ("{g} = _acc({g}, {bar})", _MAYBE),
}


class Builder:
    def __init__(self, tape: Tape, src: Source, inputs: Inputs, wrt_leaves: set[int]) -> None:
        self.tape = tape
        self.src = src
        self.inputs = inputs
        self.var: dict[int, str] = dict(inputs.leaf_var)
        self.wrt_leaves = wrt_leaves
        self.records: dict[int, Record] = {}
        self.state: dict[int, int] = {}
        self.forms: dict[int, Any] = {}  # records written as their rule's ProgramForm
        self._t = 0

    # -- forward --

    def read(self, out_idx: int) -> tuple[list[int], set[int]]:
        """The records the output needs, in tape order, and the tape indices that depend on a
        differentiated leaf."""
        tape = self.tape
        nodes, values = tape.nodes, tape.values
        for i, node in enumerate(nodes):
            if node is None:
                if i not in self.var:
                    raise Ineligible("a value entered the tape without an operation (a nested derivative)")
                continue
            rec = Record(i, node, values[i])
            for p, a in zip(rec.parents, rec.args):
                if p is not None and values[p] is not a:
                    raise Ineligible(f"an argument of {qualname(rec.fn)} was overwritten in place", rec.site)
            self.records[i] = rec
        needed: set[int] = set()
        todo = [out_idx]
        while todo:
            i = todo.pop()
            if i in needed:
                continue
            needed.add(i)
            rec = self.records.get(i)
            if rec is not None:
                todo.extend(p for p in rec.parents if p is not None)
        depends = set(self.wrt_leaves)
        order = sorted(needed)
        for i in order:
            rec = self.records.get(i)
            if rec is not None and any(p in depends for p in rec.parents if p is not None):
                depends.add(i)
        return order, depends

    def operand(self, a: Any, p: Optional[int], rec: Record) -> str:
        if p is not None:
            return self.var[p]
        t = type(a)
        if t is _ndarray:
            var = self.inputs.untracked.get(id(a))
            if var is None:
                raise Ineligible(f"{qualname(rec.fn)} reads an array that is not an argument (made inside the "
                                 "function, or read from a global, a closure or an attribute)", rec.site)
            return var
        if t is tuple and any(type(x) is _ndarray for x in a):  # an index `x[:, idx]` with an argument array
            return "(" + "".join(self.operand(x, None, rec) + ", " for x in a) + ")"
        self._check_const(a, rec)
        return self.src.const(a)

    def _check_const(self, a: Any, rec: Record) -> None:
        t = type(a)
        if t is tuple or t is list:
            for x in a:
                self._check_const(x, rec)
        elif t is dict:
            for x in a.values():
                self._check_const(x, rec)
        elif t is _ndarray:
            raise Ineligible(f"{qualname(rec.fn)} reads an array that is not an argument", rec.site)
        elif not isinstance(a, _SCALAR_CONSTS):
            raise Ineligible(f"{qualname(rec.fn)} reads a {t.__name__} that is not an argument", rec.site)

    def forward(self, i: int, depends: set[int]) -> None:
        rec = self.records[i]
        _check_shapes(rec)
        ops = [self.operand(a, p, rec) for a, p in zip(rec.args, rec.parents + (None,) * len(rec.args))]
        v = self.var[i] = f"v{i}"
        if type(rec.out) is not _ndarray:
            self.src.scalars.update((v, f"g{i}"))
        fn = rec.fn
        if rec.kind == "elementwise":
            expr = operator_expr(fn, ops) or f"{self.src.const(fn, 'f')}({', '.join(ops)})"
            self.src.emit(f"{v} = {expr}", rec.site.lineno)
            return
        kw = ""
        if rec.kwargs:
            for x in rec.kwargs.values():
                if type(x) is _ndarray and id(x) in self.inputs.untracked:
                    raise Ineligible(f"an argument array passed by keyword to {qualname(fn)}", rec.site)
                self._check_const(x, rec)
            kw = f", **{self.src.const(rec.kwargs, 'kw')}"
        call_args = ", ".join(ops) + kw
        form = self.form(rec, depends)
        if form is not None:  # the rule as code (its ProgramForm): no rule call, no pullback closure
            self.forms[i] = form
            self.src.emit(f"{v} = {self.fill(form.forward, rec, ops)}", rec.site.lineno)
        elif i in depends:
            pb = f"p{i}"
            self.src.emit(f"{v}, {pb} = {self.src.const(rec.rule.rrule, 'r')}({call_args})", rec.site.lineno)
        else:
            expr = None if kw else operator_expr(fn, ops)
            self.src.emit(f"{v} = {expr or self.src.const(fn, 'f') + '(' + call_args + ')'}", rec.site.lineno)

    # -- reverse --

    def reverse(self, i: int, depends: set[int]) -> None:
        """The reverse step of record i: cotangents for its parents that depend on a leaf."""
        st = self.state.get(i, _UNSET)
        if st == _UNSET:
            return
        rec = self.records[i]
        g = f"g{i}"
        targets = [(k, p) for k, p in enumerate(rec.parents) if p is not None and p in depends]
        pre: list[str] = []
        body: list[str] = []
        cond = st == _MAYBE
        if rec.kind == "elementwise":
            self._elementwise_step(rec, g, targets, body, pre, cond)
        else:
            self._rrule_step(rec, g, targets, body, pre, cond)
        if not body:
            return
        temps = sorted(set(re.findall(r"\b_t[0-9]+\b", "\n".join(body))))
        if temps and (type(rec.out) is _ndarray or rec.kind == "rrule"):  # a step's temporaries (partials,
            # pullback results) go when it ends; an elementwise step on floats has only floats
            body.append(f"del {', '.join(temps)}")
        lines = pre + ([f"if {g} is not None:"] + ["    " + b for b in body] if cond else body)
        self.src.emit(lines, rec.site.lineno)

    def _contribute(self, p: int, bar: str, may_be_none: bool, body: list[str], pre: list[str], cond: bool) -> None:
        g = f"g{p}"
        st = self.state.get(p, _UNSET)
        if cond and st == _UNSET:
            pre.append(f"{g} = None")
            st = _MAYBE
        statement, new = _ACCUMULATE[may_be_none, st]
        body.append(statement.format(g=g, bar=bar))
        self.state[p] = _MAYBE if cond and new == _SET and self.state.get(p, _UNSET) != _SET else new

    def _elementwise_step(self, rec: Record, g: str, targets: list, body: list[str], pre: list[str],
                          cond: bool) -> None:
        partials = rec.rule.partials
        out = rec.out
        out_shape = out.shape if type(out) is _ndarray else ()
        ops = [self.operand(a, p, rec) for a, p in zip(rec.args, rec.parents)]
        v = self.var[rec.idx]
        for k, p in targets:
            d = partials[k] if k < len(partials) else None
            if d is None:
                continue
            if d.__class__ is int or d.__class__ is float:
                bar = g if d == 1 else (f"-{g}" if d == -1 else f"{g} * {d!r}")
            else:
                dn = self.src.const(d, "d")
                # what the partial does not read is not kept alive for it (`1 - out**2` reads out only)
                reads = _partial_uses(d, len(ops))
                read = [o if k in reads else "None" for k, o in enumerate(ops + [v])]
                inline = inline_partial(d, read, self.src)  # the partial's expression itself, when it is a lambda
                expr = inline[0] if inline is not None else f"{dn}({', '.join(read)})"
                bar = self.tmp()
                # a partial only this step holds is scaled in place from INPLACE_MIN_SIZE elements, as
                # runtime/backward.py does (the same products: results stay bit for bit the same)
                big = type(out) is _ndarray and out.size >= INPLACE_MIN_SIZE
                if inline is not None and not inline[1] and not big:
                    body.append(f"{bar} = {g} * {expr}")  # no division, no call: no ZeroDivisionError
                else:
                    t = self.tmp()
                    body += ["try:", f"    {t} = {expr}", "except ZeroDivisionError:",
                             f"    {t} = _singular({dn}, ({''.join(o + ', ' for o in read[:-1])}), {read[-1]})"]
                    body.append(f"{bar} = _multiply({g}, {t}, out={t}) if {t}.__class__ is ndarray and "
                                f"_getrefcount({t}) == 2 and _scalable({g}, {t}) else {g} * {t}" if big
                                else f"{bar} = {g} * {t}")
            a = rec.args[k]
            a_shape = a.shape if type(a) is _ndarray else shape_of(a)
            if a_shape != out_shape:
                b = self.tmp()
                body.append(f"{b} = _unbroadcast({bar}, {a_shape!r}, {out_shape!r})")
                bar = b
            elif bar != g and not bar.startswith("_t"):  # `-g`, `g * 2.0`
                b = self.tmp()
                body.append(f"{b} = {bar}")
                bar = b
            self._contribute(p, bar, False, body, pre, cond)

    def form(self, rec: Record, depends: set[int]) -> Any:
        """The rule's ProgramForm when it holds for these arguments and gives every needed cotangent."""
        form = getattr(rec.rule.rrule, "program_form", None)
        if form is None or not rec.trusted or not form.when(*rec.args, **(rec.kwargs or {})):
            return None
        for k, p in enumerate(rec.parents):
            if p is not None and p in depends and (k >= len(form.cotangents) or form.cotangents[k] is None):
                return None
        return form

    def fill(self, template: str, rec: Record, ops: list[str], g: str = "") -> str:
        shapes = {f"shape{k}": repr(a.shape if type(a) is _ndarray else shape_of(a)) for k, a in enumerate(rec.args)}
        return "(" + template.format(*ops, g=g, **shapes) + ")"

    def _rrule_step(self, rec: Record, g: str, targets: list, body: list[str], pre: list[str],
                    cond: bool) -> None:
        if not targets:
            return
        form = self.forms.get(rec.idx)
        if form is not None or rec.trusted:
            if type(rec.out) is _ndarray:  # as runtime/backward.py gives a trusted rule's pullback
                like = self.src.const(stand_in(rec.out), "like")
                body.append(f"if {g}.__class__ is not ndarray or {g}.shape != {rec.out.shape!r}: "
                            f"{g} = _materialize({g}, {like})")
        if form is not None:
            ops = [self.operand(a, p, rec) for a, p in zip(rec.args, rec.parents)]
            for k, p in targets:
                b = self.tmp()
                body.append(f"{b} = {self.fill(form.cotangents[k], rec, ops, g)}")
                self._contribute(p, b, False, body, pre, cond)
            return
        pb = f"p{rec.idx}"
        bars = self.tmp()
        if rec.trusted:
            body.append(f"{bars} = {pb}({g})")
        else:
            like = stand_in(rec.out) if type(rec.out) is _ndarray else rec.out
            shaped = tuple(stand_in(a) if type(a) is _ndarray else a for a in rec.args)
            node = self.src.const((None, rec.parents, rec.site, None, shaped, rec.fn), "node")
            body.append(f"{bars} = _untrusted({g}, {node}, {pb}, {self.src.const(like, 'like')})")
        for k, p in targets:
            b = self.tmp()
            body += [f"{b} = {bars}[{k}]", f"if {b}.__class__ is FunctionType: {b} = {b}()",
                     f"if {b} is ZERO or {b} is NO_TANGENT: {b} = None"]
            self._contribute(p, b, True, body, pre, cond)

    def tmp(self) -> str:
        self._t += 1
        return f"_t{self._t}"


# ---- partials inlined: a lambda's expression in place of a call to it ----------------------------


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


def _lambdas_of(filename: str) -> list[ast.Lambda]:
    nodes = _FILE_LAMBDAS.get(filename)
    if nodes is None:
        import linecache

        try:
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


def inline_partial(d: Any, operands: list[str], src: Source) -> Optional[tuple[str, bool]]:
    """(the expression of partial `d` applied to `operands`, whether evaluating it may raise
    ZeroDivisionError): the same operations in the same order as calling `d`, without the call.
    `operands` are variables, or "None" for what `d` does not read. None: `d` is not a lambda."""
    found = _lambda_ast(d)
    if found is None:
        return None
    body, params, names = found
    subst = {p: o for p, o in zip(params, operands)}
    subst.update({n: src.const(v) for n, v in names.items()})

    class _Rename(ast.NodeTransformer):
        def visit_Name(self, n: ast.Name) -> ast.AST:
            return ast.copy_location(ast.Name(id=subst[n.id], ctx=n.ctx), n)

    expr = _Rename().visit(ast.parse(ast.unparse(body), mode="eval").body)
    risky = any(isinstance(n, ast.Call) or (isinstance(n, ast.BinOp) and isinstance(n.op, _DIVIDING))
                for n in ast.walk(expr))
    return "(" + ast.unparse(expr) + ")", risky


_DIVIDING = (ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)


def _acc(old: Any, new: Any) -> Any:
    if old is None:
        return new
    if new is None:
        return old
    return old + new


def _untrusted(ct: Any, node: tuple, pullback: Any, like: Any) -> Any:
    """A plugin rule's reverse step, checked as the general path checks it (runtime/backward.py)."""
    return _bw_rrule(ct, node[:3] + (pullback,) + node[4:], like)


def gradient_code(src: Source, spec: Any, state: dict[int, int], lines: list[str], fresh: dict[int, str]) -> str:
    """The expression of one argument's gradient, mirroring its spec as `pytree.gradient` does; each
    array leaf's cotangent is handed over as it is when `pytree.project` would (a fresh array of the
    primal's shape and dtype), else projected."""
    if type(spec) is pytree.Leaf:
        g = f"g{spec.idx}" if state.get(spec.idx, _UNSET) != _UNSET else "None"
        primal = spec.primal
        name = f"q{spec.idx}"
        if type(primal) is _ndarray:
            like = src.const(stand_in(primal), "like")
            dt = src.const(primal.dtype, "dt")
            lines.append(f"{name} = {g} if {g}.__class__ is ndarray and {g}.base is None and {g}.dtype is {dt} and "
                         f"{g}.shape == {primal.shape!r} and {g}.flags.writeable else _project({g}, {like})")
            if spec.idx in fresh:  # the general path differentiates a fresh view of the caller's array
                lines.append(f"if {name} is {fresh[spec.idx]}: {name} = {name}.copy()")
        else:
            lines.append(f"{name} = _project({g}, {src.const(primal)})")
        return name
    t, subs = spec
    if isinstance(subs, dict):
        items = ", ".join(f"{k!r}: {gradient_code(src, v, state, lines, fresh)}" for k, v in subs.items())
        return f"{{{items}}}" if t is dict else f"{src.const(t, 'T')}({{{items}}}.items())"
    items = [gradient_code(src, v, state, lines, fresh) for v in subs]
    if t is list:
        return f"[{', '.join(items)}]"
    if t is tuple:
        return f"({''.join(i + ', ' for i in items)})"
    return f"{src.const(t, 'T')}({', '.join(items)})" if hasattr(t, "_fields") else \
        f"{src.const(t, 'T')}(({''.join(i + ', ' for i in items)}))"


def build(tape: Tape, call_args: tuple, specs: list, wrt: tuple[int, ...], out: Any, wrt_tuple: bool,
          static_guards_: list[tuple], code: types.CodeType, backend: str = "numpy") -> Program:
    """The program for the computation recorded on `tape` (a capture run of `call_args`, every
    positional argument `p` with a spec in `specs[p]`), differentiated with respect to positions
    `wrt`. `static_guards_`: ("global", globals dict, name, value) and ("attr", module, name, value)
    entries the code's reads were resolved against; `code`: the user's function, whose file and
    lines the program's operations carry (an error raised in one shows the user's line).
    `backend`: "numpy" (this module) or "numba" (runtime/program_numba.py). Raises `Ineligible`."""
    src = Source()
    inputs = Inputs(src)
    src.guard("type", f"len(args) == {len(call_args)}", f"{len(call_args)} positional arguments")
    for p, value in enumerate(call_args):
        var = inputs.temp()
        src.emit(f"{var} = args[{p}]")
        inputs.walk(var, value, specs[p], fresh=p in wrt)
    static_guards(src, static_guards_)
    src.guard("version", f"_version() == {registry.version()}", f"rule registry version {registry.version()}")
    out_idx = tape.ids.get(id(out))
    if out_idx is None or tape.values[out_idx] is not out:
        raise Ineligible("the output does not depend on the arguments")
    wrt_leaves = {leaf.idx for p in wrt for leaf in pytree.leaves(specs[p])}
    b = Builder(tape, src, inputs, wrt_leaves)
    order, depends = b.read(out_idx)
    if backend == "numba":
        from bytegrad.runtime import program_numba

        result_var, state, forward_records = program_numba.emit(b, order, depends, out_idx)
    else:
        result_var, state, forward_records = _emit_numpy(b, order, depends, out_idx)
    lines: list[str] = []
    grads = [gradient_code(src, specs[p], state, lines, inputs.fresh) for p in wrt]
    if len(grads) > 1:
        lines.append(f"grads = _unalias(({', '.join(grads)},))")
        result = "grads" if wrt_tuple else "grads[0]"
    else:
        result = f"({grads[0]},)" if wrt_tuple else grads[0]
    src.emit(lines + [f"return {result_var}, {result}"])
    fn, source = _compile(src, code)
    if src.kernel_source is not None:
        source += "\n# the Numba kernel it calls\n" + src.kernel_source
    prog = Program(fn, source, src.guards, forward_records)
    prog.backend = backend
    return prog


def _emit_numpy(b: Builder, order: list[int], depends: set[int], out_idx: int) -> tuple[str, dict[int, int], int]:
    """The NumPy back end: each record's primal, then the reverse steps, as Python statements."""
    for i in order:
        if i in b.records:
            b.forward(i, depends)
    if out_idx in depends:
        b.src.emit(f"g{out_idx} = 1.0")
        b.state[out_idx] = _SET
        for i in reversed(order):
            if i in b.records and i in depends:
                b.reverse(i, depends)
    return b.var[out_idx], b.state, sum(1 for i in order if i in b.records)


def _compile(src: Source, code: types.CodeType) -> tuple[Callable[[tuple], Any], str]:
    source, user_lines = src.render("program", code.co_firstlineno)
    namespace = dict(src.ns)
    namespace.update(MISS=MISS, ndarray=_ndarray, FunctionType=_FunctionType, ZERO=ZERO, NO_TANGENT=NO_TANGENT,
                     _acc=_acc, _singular=singular_partial, _unbroadcast=unbroadcast, _materialize=materialize,
                     _untrusted=_untrusted, _project=pytree.project, _multiply=np.multiply,
                     _getrefcount=sys.getrefcount, _scalable=_scalable, _unalias=pytree.unalias,
                     _version=registry.version, _MISSING=_MISSING)
    tree = ast.parse(source)
    for node in ast.walk(tree):  # each statement at the user's line it replays
        if hasattr(node, "lineno"):
            node.lineno = user_lines[node.lineno - 1]
            node.end_lineno = user_lines[(node.end_lineno or node.lineno) - 1] if node.end_lineno else node.lineno
            if node.end_lineno < node.lineno:
                node.end_lineno = node.lineno
    exec(compile(tree, code.co_filename, "exec"), namespace)  # noqa: S102
    return namespace["program"], source


def static_guards(src: Source, entries: list[tuple]) -> None:
    for kind, owner, name, value in entries:
        if kind == "global":
            g = src.const(owner, "G")
            if name in owner:
                read = f"{g}[{name!r}]"  # (a KeyError fails the call over to the general path)
            else:  # a builtin: it must stay unshadowed
                b = src.const(_builtins_of(owner), "B")
                read = f"({g}.get({name!r}, _MISSING) is _MISSING and {b}.get({name!r}))"
        else:
            m = src.const(owner.__dict__, "M")
            read = f"{m}[{name!r}]"
        if isinstance(value, (int, float, str, bytes, bool, complex)) or value is None:
            c = src.const(value)
            src.guard(kind, f"{read} == {c} and {read}.__class__ is {src.const(type(value), 'T')}",
                      f"{name} == {value!r}")
        else:
            src.guard(kind, f"{read} is {src.const(value)}", f"{name} is {_describe(value)}")


def _builtins_of(fn_globals: dict[str, Any]) -> dict[str, Any]:
    b = fn_globals.get("__builtins__", builtins)
    return b.__dict__ if isinstance(b, types.ModuleType) else b


def _describe(value: Any) -> str:
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    return qualname(value) if callable(value) else type(value).__name__
