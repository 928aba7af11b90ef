"""Compiled gradient programs, NumPy back end: a capture tape becomes one generated Python function.

A capture run (bytegrad/compiled/policy.py) executes the rewritten function with every float argument
tracked, on a `CaptureTape`, so the tape holds every operation whose result depends on any
argument. `build` turns that tape into straight-line Python source:

- guards on the arguments (container types and lengths, dict keys, array types, shapes and
  dtypes, the values of ints, strings, flags), on the globals and module attributes the code
  reads, and on the rule registry's version; any guard that fails returns `MISS` and the call
  goes to the general path;
- the forward operations: each record's primal (`np.tanh(v3)`, `v1 @ v2`), or its rrule where
  the reverse pass needs the pullback; records no output depends on are dropped; each decision
  the capture recorded on data (a comparison, a call without a derivative) is computed again at
  its place and checked (`DECIDED` when it comes out otherwise);
- the reverse pass the records imply, for the differentiated arguments only: cotangents are
  local variables, accumulated in the order the tape's sweep accumulates them (so results are
  the general path's, bit for bit), broadcasting is undone with the shapes seen at capture
  (fixed by the guards), and every value is deleted after its last use;
- buffers reused within the call where nothing else can see them (compiled/reuse.py: a
  step's result written into a dead temporary of the program's own, a cotangent accumulated in
  place, tanh's `1 - out**2` computed into out), and a bias's gradient summed straight to its shape;
- `program(args, value=False)` (`grad`) skips the steps only the output's value reads.

Anything such a program cannot reproduce raises `Ineligible` with the reason, and the signature
stays on the general path. The program has no hooks, no tape and no identity lookups.

The generated function's source, its argument guards, constants and gradient expressions are
written through compiled/source.py; a record as code generation reads it, and the compile of
the source with the helpers generated code calls, are compiled/parts.py's; pullback programs
and `has_aux` outputs are compiled/pullback.py's; the Numba back end is
compiled/lower_numba.py; programs on disk are compiled/store.py's.
"""
from __future__ import annotations

import operator
import re
import types
from typing import Any, Callable, Optional, Union

import numpy as np

from bytegrad.errors import qualname
from bytegrad.rules._apply import shape_of
from bytegrad.rules._shape import stand_in, unbroadcast_plan
from bytegrad.runtime import fpwarn
from bytegrad.runtime.backward import INPLACE_MIN_SIZE, partial_uses
from bytegrad.compiled import ir as _ir, lower_stepped, lower_tuples, passes
from bytegrad.compiled.parts import Record, check_shapes, compile_program
from bytegrad.compiled.inline import inline_partial
from bytegrad.compiled.source import (
    DECIDED, DECISION_GUARD, MAYBE, MISS, SCALAR_CONSTS, SET, UNSET, Decision, Ineligible, Inputs, Program, Source,
    operator_expr, short,
)
from bytegrad.compiled.reuse import accumulate, forward_alternatives, lower_partial, made_here
from bytegrad.compiled.reach_consts import made_view
from bytegrad.compiled.writes import (
    count_guard, data_indexed, decided_array, forward_write, known_index, reverse_write,
)
from bytegrad.runtime.tape import Tape

__all__ = ["DECIDED", "MISS", "Builder", "Ineligible", "Program", "compile_source", "emit"]

_ndarray = np.ndarray
_FunctionType = types.FunctionType


# ---- code generation ---------------------------------------------------------------------------


#: how a contribution `bar` joins cotangent `g`: (bar may be None, g's state) -> (statement, new state)
_ACCUMULATE = {
    (False, UNSET): ("{g} = {bar}", SET),
    (False, SET): ("{g} = {g} + {bar}", SET),
    (False, MAYBE): ("{g} = {bar} if {g} is None else {g} + {bar}", SET),
    (True, UNSET): ("{g} = {bar}", MAYBE),
    (True, SET): ("if {bar} is not None: {g} = {g} + {bar}", SET),
    (True, MAYBE): ("{g} = _acc({g}, {bar})", MAYBE),
}


class Builder:
    def __init__(self, tape: Tape, src: Source, inputs: Inputs, wrt_leaves: set[int]) -> None:
        self.tape = tape
        self.src = src
        self.inputs = inputs
        self.var: dict[int, str] = dict(inputs.leaf_var)
        self.wrt_leaves = wrt_leaves
        self.records: dict[int, Record] = {}
        self.ir: Any = None  # the capture's IR (compiled/ir.py), once `read`
        self.plan: Any = None  # what the IR's passes give (compiled/passes.py), once `read`
        self.state: dict[int, int] = {}
        self.forms: dict[int, Any] = {}  # records written as their rule's ProgramForm
        self.squeezed: set[int] = set()  # new-axes getitems whose cotangent is summed to their argument
        self.stmt_of: dict[int, int] = {}  # record -> the statement of its forward step
        #: (variable, line, the line computing into the variable) of the reverse step being written
        self.into: list[tuple[str, str, str]] = []
        #: cotangent variables known when the program is written to hold the float 1.0 (the seed of
        #: a full sum and its copies), and to hold an array of their record's output shape
        self.ones: set[str] = set()
        self.arrays: set[str] = set()
        self._t = 0
        #: the capture's decisions (CaptureTape.checks): computed again and checked, in tape order
        self.checks: list[tuple] = list(getattr(tape, "checks", ()))
        self.raising: frozenset[int] = frozenset()  # records that may raise as Python does (`read`)
        self.code: Any = None  # the function's code, where build.py sets it (compiled/writes.py reads it)

    # -- forward --

    def read(self, outs: list[int]) -> tuple[list[int], set[int]]:
        """The records the outputs (tape indices) need, in tape order, and the tape indices that
        depend on a differentiated leaf: the capture's IR (compiled/ir.py) after the passes
        (compiled/passes.py: dead code, the reverse schedule, the summed biases), kept as `self.ir`
        and `self.plan`."""
        self.plan = passes.plan(_ir.read(self.tape, outs, self.wrt_leaves, set(self.var)))
        self.ir = self.plan.ir
        self.records = self.ir.ops
        # what raises on the general path (Python's float division, `math`) is computed, read or not
        self.raising = self.ir.raising
        for i, (fn, args, kwargs) in self.ir.made.items():
            if i not in self.var:
                self._make(i, fn, args, kwargs)
        return self.ir.order, self.ir.depends

    def _made_var(self, a: np.ndarray) -> Optional[str]:
        """The variable of `a` if the capture saw it made from constants (an index array, say, not a
        recorded operation's parent): made where first read."""
        made: Any = getattr(self.tape, "made", None)  # a capturing tape's
        i = self.tape.ids.get(id(a)) if made else None
        if i is None or self.tape.values[i] is not a or i not in made:
            return None
        if i not in self.var:
            self._make(i, *made[i])
        return self.var[i]

    def _make(self, i: int, fn: Any, args: tuple, kwargs: Optional[dict]) -> None:
        """An array the capture saw made from constants (`CaptureTape.make`), made again per call."""
        ops = [self.src.const(a) for a in args] + [f"{k}={self.src.const(v)}" for k, v in (kwargs or {}).items()]
        v = self.var[i] = f"v{i}"
        self.src.emit(f"{v} = {self.src.const(fn, 'f')}({', '.join(ops)})")

    def operand(self, a: Any, p: Optional[int], rec: Union[Record, Decision]) -> str:
        if p is not None:
            return self.var[p]
        t = type(a)
        if t is _ndarray:
            var = self.inputs.untracked.get(id(a)) or self._made_var(a) or made_view(self, a, rec)
            if var is None:
                raise Ineligible(f"{qualname(rec.fn)} reads an array computed without the arguments (by a "
                                 "function called on constants alone, as `basis(n)` returning `0.1 * np.eye(n)`, "
                                 "or from a global, as `W.T`)", rec.site)
            return var
        if t is tuple and any(type(x) is _ndarray for x in a):  # an index `x[:, idx]` with an argument array
            return "(" + "".join(self.operand(x, None, rec) + ", " for x in a) + ")"
        self._check_const(a, rec)
        return self.src.const(a)

    def _items_literal(self, a: Any, items: tuple, rec: Record) -> str:
        """A list or tuple argument holding values of the tape (`np.stack([a, b])`), rebuilt as a literal."""
        made = "".join((self._items_literal(x, q, rec) if type(q) is tuple else self.operand(x, q, rec)) + ", "
                       for x, q in zip(a, items))
        return f"[{made}]" if type(a) is list else f"({made})"

    def _check_const(self, a: Any, rec: Union[Record, Decision]) -> None:
        t = type(a)
        if t is tuple or t is list or t is frozenset:
            for x in a:
                self._check_const(x, rec)
        elif t is dict:
            for x in a.values():
                self._check_const(x, rec)
        elif t is _ndarray:
            raise Ineligible(f"{qualname(rec.fn)} reads an array that is not an argument", rec.site)
        elif not isinstance(a, SCALAR_CONSTS):
            raise Ineligible(f"{qualname(rec.fn)} reads a {t.__name__} that is not an argument", rec.site)

    def forward(self, i: int, depends: set[int]) -> None:
        rec = self.records[i]
        if rec.kind == "write":  # an in-place write, replayed as a new version (compiled/writes.py)
            forward_write(self, rec)
            return
        if rec.kind == "item":
            return lower_tuples.forward_item(self, rec)
        if rec.kind == "stepped":
            return lower_stepped.forward_stepped(self, rec)
        indexed = data_indexed(rec)  # a mask or an index array: the shape it gives is checked below
        if indexed:
            known_index(self, rec)
        else:
            check_shapes(rec)
        ops = [self.operand(a, p, rec) if k not in rec.nested else self._items_literal(a, rec.nested[k], rec)
               for k, (a, p) in enumerate(zip(rec.args, rec.parents + (None,) * len(rec.args)))]
        v = self.var[i] = f"v{i}"
        self.stmt_of[i] = len(self.src.stmts)  # (the statement emitted below)
        if type(rec.out) is not _ndarray:
            self.src.scalars.update((v, f"g{i}"))
        fn = rec.fn
        if rec.kind == "elementwise":
            expr = operator_expr(fn, ops) or f"{self.src.const(fn, 'f')}({', '.join(ops)})"
            self.src.emit(f"{v} = {expr}", rec.site.lineno, reuse=forward_alternatives(self, rec, ops, expr))
            if i in self.raising and type(rec.out) is float and (fn is operator.pow or fn is operator.ipow):
                self.src.emit(f"if {v}.__class__ is not float: return MISS", rec.site.lineno)  # ((-1.0) ** 0.5)
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
            as_operator = None if kw else operator_expr(fn, ops)
            self.src.emit(f"{v} = {as_operator or self.src.const(fn, 'f') + '(' + call_args + ')'}", rec.site.lineno)
        if indexed:
            count_guard(self, v, rec.out.shape, rec.site.lineno)

    def forward_all(self, order: list[int], depends: set[int]) -> int:
        """Every needed record's forward step, each decision checked where the capture made it;
        returns the number of records."""
        pending = sorted(self.checks, key=lambda c: c[0])
        n = 0
        stmts = self.src.stmts
        for i in order:
            while pending and pending[0][0] <= i:
                start = len(stmts)
                self.decide(pending[0])
                self.mark(start, pending.pop(0)[-1], False)
            if i in self.records:
                start = len(stmts)
                self.forward(i, depends)
                self.mark(start, self.records[i].site, False)
                n += 1
        for check in pending:
            start = len(stmts)
            self.decide(check)
            self.mark(start, check[-1], False)
        return n

    def mark(self, start: int, site: Any, derivative: bool) -> None:
        """The statements from `start` on are the forward step (or the reverse step: `derivative`) of
        the record or decision made at `site`: their floating-point warnings name it (runtime/fpwarn.py)."""
        lineno = getattr(site, "lineno", None)
        if lineno is None:
            return
        callee = getattr(site, "callee", None)
        what = qualname(callee) if callee is not None else f"this line's {getattr(site, 'what', 'operation')}"
        for k in range(start, len(self.src.stmts)):
            self.src.origin.setdefault(k, (site.filename, lineno, what, derivative))

    def decide(self, check: tuple) -> None:
        """A decision of the capture (`fn(*args)` gave `result` on tracked values), computed again:
        the program returns MISS where it comes out otherwise. An array result (a mask) is then
        read from its variable."""
        _, fn, args, kwargs, result, site = check
        rec = Decision(fn, site)
        ids = self.tape.ids
        ops = [self.operand(a, p, rec) for a, p in zip(args, _ir.operand_ids(self.tape, args, check[0]))]  # (as it was then)
        kw = ""
        if kwargs:
            for key, x in kwargs.items():
                if ids.get(id(x)) is not None:
                    raise Ineligible(f"a differentiated value passed by keyword to {qualname(fn)}", site)
                self._check_const(x, rec)
            kw = f", **{self.src.const(kwargs, 'kw')}"
        var = self.inputs.temp()
        self.src.emit(f"{var} = {self.src.const(fn, 'f')}({', '.join(ops)}{kw})", site.lineno)
        if not decided_array(self, check, var):  # (a mask, an index array: its shape alone)
            self.src.guard(DECISION_GUARD, f"_decided({var}, {self.src.const(result, 'k')})",
                           f"line {site.lineno}: {qualname(fn)} gives {short(result)}")
        if type(result) is _ndarray:
            self.inputs.untracked[id(result)] = var

    # -- reverse --

    def reverse(self, i: int, depends: set[int]) -> None:
        """The reverse step of record i: cotangents for its parents that depend on a leaf."""
        start = len(self.src.stmts)
        self._reverse(i, depends)
        self.mark(start, self.records[i].site, True)

    def _reverse(self, i: int, depends: set[int]) -> None:
        st = self.state.get(i, UNSET)
        if st == UNSET:
            return
        rec = self.records[i]
        if rec.kind == "stepped":
            return lower_stepped.reverse_stepped(self, rec, depends)
        if rec.kind == "item" or lower_tuples.is_tuple_rule(rec):
            return (lower_tuples.reverse_item(self, rec) if rec.kind == "item"
                    else lower_tuples.reverse_tuple(self, rec, depends))
        g = f"g{i}"
        targets = self.plan.schedule.targets(i)  # (compiled/passes.py `reverse_schedule`)
        pre: list[str] = []
        body: list[str] = []
        cond = st == MAYBE
        if rec.kind == "elementwise":
            self._elementwise_step(rec, g, targets, body, pre, cond)
        elif rec.kind == "write":
            reverse_write(self, rec, g, targets, body, pre, cond)
        else:
            self._rrule_step(rec, g, targets, body, pre, cond)
        if not body:
            return
        temps = sorted(set(re.findall(r"\b_t[0-9]+\b", "\n".join(body))))
        if temps and (type(rec.out) is _ndarray or rec.kind == "rrule"):  # a step's temporaries (partials,
            # pullback results) go when it ends; an elementwise step on floats has only floats
            body.append(f"del {', '.join(temps)}")
        lines = pre + ([f"if {g} is not None:"] + ["    " + b for b in body] if cond else body)
        self.src.emit(lines, rec.site.lineno, reuse=self._into_alternatives(lines))

    def _into_alternatives(self, lines: list[str]) -> Optional[list[tuple[str, list[str]]]]:
        """The step written to compute a partial's inner operation into a value of the forward pass
        (program_reuse.lower_partial's candidates), for each such value no other line of the step
        reads; `Source.render` takes one that no later statement reads."""
        found, self.into = self.into, []
        # (a `_singular` line runs on ZeroDivisionError only, which operations on arrays never raise:
        # it reads what its partial's own line reads, counted there)
        text = "\n".join(ln for ln in lines if "_singular(" not in ln)
        alts = []
        for var, line, alt in found:
            if len(re.findall(rf"\b{var}\b", text)) == 1 and text.count(line) == 1:
                alts.append((var, [ln.replace(line, alt) for ln in lines]))
        return alts or None

    def _contribute(self, p: int, bar: str, may_be_none: bool, body: list[str], pre: list[str], cond: bool) -> None:
        g = f"g{p}"
        st = self.state.get(p, UNSET)
        if cond and st == UNSET:
            pre.append(f"{g} = None")
            st = MAYBE
        statement, new = _ACCUMULATE[may_be_none, st]
        value = self.tape.values[p]
        inplace = accumulate(g, bar, value.size, self.src) if st == SET and type(value) is _ndarray else None
        if inplace is not None:  # `g + bar` written into g where nothing else holds it
            statement = ("if {bar} is not None: " if may_be_none else "") + inplace
        body.append(statement.format(g=g, bar=bar))
        first = st == UNSET and not cond and not may_be_none
        for known in (self.ones, self.arrays):  # a first assignment copies what is known of `bar`
            if first and bar in known:
                known.add(g)
            elif known is self.ones or bar not in known:
                known.discard(g)
        self.state[p] = MAYBE if cond and new == SET and self.state.get(p, UNSET) != SET else new

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
                known_array = g in self.arrays
            else:
                known_array = _array_partial(d, rec)  # a float array of the output's shape
                dn = self.src.const(d, "d")
                # what the partial does not read is not kept alive for it (`1 - out**2` reads out only)
                reads = partial_uses(d, len(ops))
                read = [o if k in reads else "None" for k, o in enumerate(ops + [v])]
                inline = inline_partial(d, read, self.src)  # the partial's expression itself, when it is a lambda
                expr = inline[0] if inline is not None else f"{dn}({', '.join(read)})"
                bar = self.tmp()
                # a partial only this step holds is scaled in place from INPLACE_MIN_SIZE elements, as
                # runtime/backward.py does (the same products: results stay bit for bit the same)
                big = type(out) is _ndarray and out.size >= INPLACE_MIN_SIZE

                def computed(t: str) -> list[str]:  # `t = expr`, written into buffers it owns where it can
                    if inline is None or not big:
                        return [f"{t} = {expr}"]
                    made = frozenset(o for o, q in zip(ops + [v], rec.parents + (rec.idx,)) if made_here(self, q))
                    return lower_partial(t, expr, dict(zip(ops + [v], (*rec.args, out))), self.src, self.into, made)

                if g in self.ones and known_array:  # 1.0 * partial is the partial: no product
                    body += (computed(bar) if inline is not None and not inline[1] else
                             ["try:", *("    " + c for c in computed(bar)), "except ZeroDivisionError:",
                              f"    {bar} = _singular({dn}, ({''.join(o + ', ' for o in read[:-1])}), {read[-1]})"])
                elif inline is not None and not inline[1] and not big:
                    body.append(f"{bar} = {g} * {expr}")  # no division, no call: no ZeroDivisionError
                else:
                    t = self.tmp()
                    body += ["try:", *("    " + c for c in computed(t)), "except ZeroDivisionError:",
                             f"    {t} = _singular({dn}, ({''.join(o + ', ' for o in read[:-1])}), {read[-1]})"]
                    body.append(f"{bar} = _multiply({g}, {t}, out={t}) if {t}.__class__ is ndarray and "
                                f"_getrefcount({t}) == 2 and _scalable({g}, {t}) else {g} * {t}" if big
                                else f"{bar} = {g} * {t}")
            a = rec.args[k]
            a_shape = a.shape if type(a) is _ndarray else shape_of(a)
            if a_shape != out_shape:
                b = self.tmp()
                squeezed = None if cond else self._squeezed_sum(p, bar, a_shape, out_shape, known_array)
                body.append(f"{b} = {squeezed or self._unbroadcast(bar, a_shape, out_shape, known_array)}")
                bar = b
            elif bar != g and not bar.startswith("_t"):  # `-g`, `g * 2.0`
                b = self.tmp()
                body.append(f"{b} = {bar}")
                bar = b
            if known_array and a_shape == out_shape:
                self.arrays.add(bar)
            self._contribute(p, bar, False, body, pre, cond)

    def _unbroadcast(self, bar: str, a_shape: tuple, out_shape: tuple, known_array: bool) -> str:
        """`unbroadcast` of a cotangent; written out as its sums where `bar` is known to be an array
        of the output's shape (the same reductions, without the call and its checks)."""
        if not known_array or len(a_shape) > len(out_shape):
            return f"_unbroadcast({bar}, {a_shape!r}, {out_shape!r})"
        lead, axes = unbroadcast_plan(out_shape, a_shape)
        total = self.src.const(np.add.reduce, "sum")
        expr = f"{total}({bar}, axis={lead!r})" if lead else bar
        return f"{total}({expr}, axis={axes!r}, keepdims=True)" if axes else expr

    def _squeezed_sum(self, p: int, bar: str, a_shape: tuple, out_shape: tuple, known_array: bool) -> Optional[str]:
        """The cotangent of a bias `b[:, None]` (a new-axes getitem, p) summed straight to b's shape:
        `sum(g, axis=1)`, a new array handed over as b's gradient, in place of `sum(g, axis=1,
        keepdims=True).reshape(...)` and the copy of that view (the same sums). Only where this is
        p's only contribution and the sum keeps an axis (an array, not a scalar)."""
        axes = self.plan.bias.get(p)  # (compiled/passes.py `summed_bias`: read once, by a broadcast)
        if axes is None or p not in self.forms or not known_array or self.state.get(p, UNSET) != UNSET:
            return None
        self.squeezed.add(p)
        return f"{self.src.const(np.add.reduce, 'sum')}({bar}, axis={axes!r})"

    def form(self, rec: Record, depends: set[int]) -> Any:
        """The rule's ProgramForm when it holds for these arguments and gives every needed cotangent."""
        return passes.program_form(rec, depends)  # (compiled/passes.py: the passes ask it too)

    def fill(self, template: str, rec: Record, ops: list[str], g: str = "") -> str:
        shapes = {f"shape{k}": repr(a.shape if type(a) is _ndarray else shape_of(a)) for k, a in enumerate(rec.args)}
        return "(" + template.format(*ops, g=g, **shapes) + ")"

    def _rrule_step(self, rec: Record, g: str, targets: list, body: list[str], pre: list[str],
                    cond: bool) -> None:
        if not targets:
            return
        form = self.forms.get(rec.idx)
        if rec.idx in self.squeezed:  # its cotangent came summed to its argument's shape (_squeezed_sum)
            self._contribute(targets[0][1], g, False, body, pre, cond)
            return
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
                if form.cotangents[k] == "{g}" and g in self.ones:  # the seed passed on (a full sum's)
                    self.ones.add(b)
                self._contribute(p, b, False, body, pre, cond)
            return
        pb = f"p{rec.idx}"
        bars = self.tmp()
        if rec.trusted:
            body.append(f"{bars} = {pb}({g})")
        else:
            out_like = stand_in(rec.out) if type(rec.out) is _ndarray else rec.out
            shaped = tuple(stand_in(a) if type(a) is _ndarray else a for a in rec.args)
            node = self.src.const((None, rec.parents, rec.site, None, shaped, rec.fn), "node")
            body.append(f"{bars} = _untrusted({g}, {node}, {pb}, {self.src.const(out_like, 'like')})")
        for k, p in targets:
            b = self.tmp()
            body += [f"{b} = {bars}[{k}]", f"if {b}.__class__ is FunctionType: {b} = {b}()",
                     f"if {b} is ZERO or {b} is NO_TANGENT: {b} = None"]
            if type(p) is tuple:  # a list argument: one cotangent per item, routed as runtime/tape.py does
                self._items(p, b, body, pre, cond)
            else:
                self._contribute(p, b, True, body, pre, cond)

    def _items(self, items: tuple, b: str, body: list[str], pre: list[str], cond: bool) -> None:
        """The cotangents of a list argument's items, from its cotangent `b` (a list or tuple, or
        None); a pullback that gives another number of items leaves the call to the general path,
        which reports it."""
        body.append(f"if {b} is not None and len({b}) != {len(items)}: return MISS")
        for j, q in enumerate(items):
            if q is None:
                continue
            e = self.tmp()
            body += [f"{e} = None if {b} is None else {b}[{j}]", f"if {e}.__class__ is FunctionType: {e} = {e}()",
                     f"if {e} is ZERO or {e} is NO_TANGENT: {e} = None"]
            if type(q) is tuple:  # a nested list's items
                self._items(q, e, body, pre, cond)
            else:
                self._contribute(q, e, True, body, pre, cond)

    def tmp(self) -> str:
        self._t += 1
        return f"_t{self._t}"


def _array_partial(d: Any, rec: Record) -> bool:
    """Whether partial `d` gives, on the record's values, a new float array of the output's shape (so
    `g * partial` is an array of that shape when `g` is one or a float). `1.0 * partial` is then the
    partial itself, dtype included (a Python float does not widen a float array under NumPy 2's
    rules; a bool or int partial it does), and not an argument (`x * w`'s partial for w is x: a
    gradient must never be the caller's array). The program's guards fix the shapes and dtypes."""
    out = rec.out
    if type(out) is not _ndarray:
        return False
    try:
        pv = d(*rec.args, out)
    except Exception:  # noqa: BLE001 - a partial that raises here is not written without its product
        return False
    return (type(pv) is _ndarray and pv.shape == out.shape and pv.dtype.kind == "f"
            and pv.base is None and pv is not out and all(pv is not a for a in rec.args))



def emit(b: Builder, order: list[int], depends: set[int], out_idx: int) -> tuple[str, dict[int, int], int]:
    """The NumPy back end: each record's primal, then the reverse steps, as Python statements."""
    n = b.forward_all(order, depends)
    if out_idx in depends:
        b.src.emit(f"g{out_idx} = 1.0")
        b.state[out_idx] = SET
        b.ones.add(f"g{out_idx}")
        for i in b.plan.schedule.sweep():  # the reverse schedule (compiled/passes.py), in the sweep's order
            b.reverse(i, depends)
    return b.var[out_idx], b.state, n


def compile_source(src: Source, code: types.CodeType) -> tuple[Callable[[tuple], Any], str]:
    source, user_lines = src.render("program", code.co_firstlineno)
    # what each line computes, for its floating-point warnings (runtime/fpwarn.py `_program_site`)
    src.ns[fpwarn.PROGRAM_SITES] = (source, code.co_filename,
                                   tuple(None if k is None else src.origin.get(k) for k in src.line_stmt))
    src.parts = (source, tuple(user_lines), code.co_filename)
    return compile_program(source, user_lines, code.co_filename, src.ns), source
