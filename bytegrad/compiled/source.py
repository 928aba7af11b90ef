"""Compiled gradient programs: the generated function's source, its arguments and its constants.

compiled/lower_numpy.py (the records, the forward and reverse steps) and compiled/lower_numba.py
write a program through a `Source`: statements with the user's line of each, constants by name,
guards by kind. `Inputs` walks the call's arguments beside their capture specs and writes the
guards on them; `static_guards` those on the globals and module attributes the code reads;
`gradient_code` the expression of each argument's gradient; `inline_partial` a rule's one-line
lambda partial as an expression in place of a call to it.
"""
from __future__ import annotations

import builtins
import operator
import re
import types
from typing import Any, Optional

import numpy as np

from bytegrad import _operators
from bytegrad.errors import qualname
from bytegrad.rules._shape import stand_in
from bytegrad.runtime import pytree
from bytegrad.compiled import objects
from bytegrad.compiled.constructs import is_table
from bytegrad.compiled.guards import KINDS, Guard, callable_state, decided as decided, number_condition
from bytegrad.compiled.program import Program as Program  # (re-exported: its home before)
from bytegrad.compiled.reuse import AST_LOCK as AST_LOCK, dead as operand_dead  # (AST_LOCK re-exported)

__all__ = ["Program", "operator_expr", "DECIDED", "FLOAT_TYPES", "GUARD_KINDS", "MAYBE", "MISS", "OWNED", "MISSING", "SCALAR_CONSTS", "SET", "UNSET", "Constants", "Ineligible", "Inputs", "Source", "gradient_code",
           "static_guards"]

_ndarray = np.ndarray
#: CPython 3.11's `ast` is not safe in threads ("AST constructor recursion depth mismatch" when two
#: threads parse at once): programs parse and unparse under this lock
#: a cotangent's state while a program is written: no step wrote it, one did, one may have
UNSET, SET, MAYBE = 0, 1, 2
#: a cotangent the program made itself, an array no one else holds (a Numba kernel's copy)
OWNED = 3

from bytegrad.runtime.sentinels import DECIDED as DECIDED, MISS as MISS  # noqa: E402  (re-exported)
MISSING = object()  # (the generated code calls it _MISSING)
#: the kinds of guards a program checks
GUARD_KINDS = KINDS
#: the guard a pullback program's `back` adds: each cotangent shaped as the output was at capture
COTANGENT_GUARD = "cotangent"
#: the check of a decision on data (a comparison, a function without a derivative) made again
DECISION_GUARD = "decision"
#: guard kinds left out of programs built now: only tests set it (each kind must be needed)
_OMITTED: frozenset[str] = frozenset()


class Ineligible(Exception):
    """This computation cannot be a compiled program; the message says why (for explain/stats)."""

    def __init__(self, why: str, site: Any = None) -> None:
        where = f" (line {site.lineno} of {site.function})" if site is not None and site.lineno else ""
        super().__init__(why + where)



FLOAT_TYPES = (float, np.float64, np.float32)
SCALAR_CONSTS = (int, float, bool, str, bytes, type(None), complex, slice, type(Ellipsis), np.generic, np.dtype,
                  type, types.FunctionType, types.BuiltinFunctionType, np.ufunc, types.ModuleType,
                  types.MethodDescriptorType, types.WrapperDescriptorType, types.MethodWrapperType,
                  types.GetSetDescriptorType, types.BuiltinMethodType)


#: the generated code's variables: x (arguments), v (values), p (pullbacks), g (cotangents),
#: q (gradients);
#: temporaries (`_t`) live within one reverse step, constants have other names
_VARIABLE = r"\b[xvpgq][0-9]+\b"  # compiled on first use (re caches it), not at import


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
        self.guards: list[Guard] = []
        self.kernel_source: Optional[str] = None  # the Numba kernel the program calls (program_numba.py)
        self.kernel_stems: Optional[tuple[str, ...]] = None  # its modules in the cache directory
        self.back_from: Optional[int] = None  # a pullback program: statements from here on are `back`
        self.returns = "out_, back"  # what a pullback program returns (`out_, back, aux_` with has_aux)
        #: statement -> [(variable, the statement written to reuse its buffer)] (compiled/reuse.py)
        self.reuse: dict[int, list[tuple[str, list[str]]]] = {}
        #: the alternatives `render` took: (statement, variable whose buffer it reuses, its first line)
        self.reused: list[tuple[int, str, str]] = []
        self.parts: tuple[str, tuple[int, ...], str] = ("", (), "")  # rendered: source, user lines, file
        #: statement -> (filename, lineno, what, derivative) of the record whose step it is (its
        #: floating-point warnings name it: runtime/fpwarn.py); the statement of each rendered line
        self.origin: dict[int, tuple[str, int, str, bool]] = {}
        self.line_stmt: list[Optional[int]] = []

    def emit(self, lines: list[str] | str, line: Optional[int] = None,
             reuse: Optional[list[tuple[str, list[str]]]] = None) -> None:
        """Add a statement; `line`: the user's source line it stands for (tracebacks show it).
        `reuse`: (variable, statement) alternatives that write the result into the variable's
        buffer; `render` writes the first whose variable no later statement reads."""
        lines = [lines] if isinstance(lines, str) else lines
        if reuse:
            self.reuse[len(self.stmts)] = reuse
        self.stmts.append((lines, set(re.findall(_VARIABLE, "\n".join(lines)))))
        self.lines.append(line)

    def guard(self, kind: str, cond: str, what: str) -> None:
        """A check of kind `kind` (one of GUARD_KINDS, COTANGENT_GUARD or DECISION_GUARD): the
        program returns MISS (DECIDED for a decision) when it fails."""
        if kind in _OMITTED:  # tests only: proves each kind of guard is needed
            return
        self.emit(f"if not ({cond}): return {'DECIDED' if kind == DECISION_GUARD else 'MISS'}")
        self.guards.append(Guard(kind, cond, what))

    def array_guard(self, expr: str, value: np.ndarray, label: str = "") -> None:
        """An array's type, shape and dtype guards, checked in one statement (described as `label`,
        the argument's name and path, where it has one)."""
        dt = self.const(value.dtype, "dt")
        name = label or expr
        checks = [(kind, cond, what) for kind, cond, what in (
            ("type", f"{expr}.__class__ is ndarray", f"{name}: ndarray"),
            ("shape", f"{expr}.shape == {value.shape!r}", f"{name}.shape == {value.shape!r}"),
            ("dtype", f"({expr}.dtype is {dt} or {expr}.dtype == {dt})", f"{name}.dtype is {value.dtype}"))
            if kind not in _OMITTED]
        if checks:
            self.emit(f"if not ({' and '.join(cond for _, cond, _ in checks)}): return MISS")
            self.guards += [Guard(kind, cond, what) for kind, cond, what in checks]

    def render(self, name: str, first_line: int) -> tuple[str, list[int]]:
        """The function's source, every variable deleted after its last use, and the user's line of
        each line of it (the first line of the user's function for guards and bookkeeping). A
        pullback program's statements from `back_from` on become `def back(ob)`, nested in it:
        what `back` reads stays alive in the enclosing call, and `back` deletes only its own names."""
        split = len(self.stmts) if self.back_from is None else self.back_from
        out = [f"def {name}(args, value=True):"]  # value=False: the gradient alone (program_parts.value_only)
        user = [first_line]
        self.line_stmt = [None]
        self._block(range(split), "    ", self.back_from is None, frozenset(), out, user)
        if self.back_from is not None:
            outer = set().union(*(names for _, names in self.stmts[:split]))
            out.append("    def back(ob):")
            user.append(first_line)
            self.line_stmt.append(None)
            self._block(range(split, len(self.stmts)), "        ", True, outer, out, user)
            out.append(f"    return {self.returns}")
            user.append(first_line)
            self.line_stmt.append(None)
        return "\n".join(out) + "\n", user

    def _block(self, ks: range, indent: str, ends: bool, keep: frozenset[str] | set[str], out: list[str],
               user: list[int]) -> None:
        """Statements `ks` at `indent`, each name deleted after its last use among them unless it is
        in `keep` (or read by a later statement outside `ks`); `ends`: the last statement returns."""
        last: dict[str, int] = {}
        for k, (_, names) in enumerate(self.stmts):
            for n in names:
                last[n] = k
        ending: dict[int, list[str]] = {}  # statement -> the names it is the last to read
        for n, at in last.items():
            ending.setdefault(at, []).append(n)
        for k in ks:
            lines = self.stmts[k][0]
            for var, alt in self.reuse.get(k, ()):
                if operand_dead(var, k, last, keep):
                    lines = alt
                    self.reused.append((k, var, next((ln for ln in alt if f"out={var}" in ln), alt[0]).strip()))
                    break
            out += [indent + ln for ln in lines]
            user += [self.lines[k] or user[0]] * len(lines)
            self.line_stmt += [k] * len(lines)
            if ends and k == ks[-1]:
                break  # the return
            dead = sorted(n for n in ending.get(k, ()) if n not in self.scalars and n not in keep)
            if dead:
                out.append(f"{indent}del {', '.join(dead)}")
                user.append(user[-1])
                self.line_stmt.append(None)


# ---- arguments: guards and bindings ------------------------------------------------------------


class Inputs:
    """Walks the call's arguments beside their capture specs: guards, and a variable per leaf."""

    def __init__(self, src: Source) -> None:
        self.src = src
        self.leaf_var: dict[int, str] = {}      # tape index of a tracked leaf -> variable
        self.untracked: dict[int, str] = {}     # id of an untracked argument array -> variable
        self.fresh: dict[int, str] = {}         # tape index of a differentiated argument array -> variable
        #: variable -> what the user calls it (`W`, `params['b1']`), for the guards' descriptions
        self.labels: dict[str, str] = {}
        self._n = 0

    def label(self, expr: str) -> str:
        return self.labels.get(expr, expr)

    def temp(self) -> str:
        self._n += 1
        return f"x{self._n}"

    def walk(self, expr: str, value: Any, spec: Any, fresh: bool) -> None:
        """`expr` reads `value` (the caller's object) whose capture spec is `spec`. `fresh`: the
        argument is differentiated, its arrays enter as fresh views as on the general path."""
        src = self.src
        t = type(value)
        if type(spec) is pytree.Leaf:
            var = expr if re.fullmatch(_VARIABLE, expr) else self.temp()  # (a variable already: no copy of it)
            if t is _ndarray:
                src.array_guard(expr, value, self.label(expr))
                if var != expr:
                    src.emit(f"{var} = {expr}")
                if fresh:  # a gradient is never the caller's array itself (see `gradient_code`)
                    self.fresh[spec.idx] = var
            elif t in FLOAT_TYPES:
                src.guard("type", f"{expr}.__class__ is {src.const(t, 'T')}", f"{self.label(expr)}: {t.__name__}")
                if var != expr:
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
        if type(spec) is objects.Node or isinstance(spec[0], str):  # an object, a dataclass, a registered pytree
            objects.walk_argument(self, expr, value, spec, fresh, Ineligible)
            return
        kind, subs = spec
        if kind is not t:
            raise Ineligible(f"an argument of type {t.__name__}")
        tn = src.const(t, "T")
        if isinstance(subs, dict):  # its keys in their order: a loop over the dict follows it
            keys = src.const(tuple(subs), "K")
            src.guard("type", f"{expr}.__class__ is {tn} and tuple({expr}) == {keys}",
                      f"{self.label(expr)}: {t.__name__} with keys {tuple(subs)!r} in this order")
        else:
            src.guard("type", f"{expr}.__class__ is {tn} and len({expr}) == {len(subs)}",
                      f"{self.label(expr)}: {t.__name__} of {len(subs)}")
        items = subs.items() if isinstance(subs, dict) else enumerate(subs)
        for key, sub in items:
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                raise Ineligible(f"a dict argument with a key of type {type(key).__name__}")
            var = self.temp()
            self.labels[var] = f"{self.label(expr)}[{key!r}]"
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
            src.array_guard(expr, value, self.label(expr))
            src.emit(f"{var} = {expr}")
            self.untracked[id(value)] = var
        elif value is None:
            src.guard("value", f"{expr} is None", f"{self.label(expr)} is None")
        elif t in (int, bool, str, bytes) or (isinstance(value, np.generic) and value.dtype.kind in "biu"):
            c = src.const(value)
            src.guard("value", f"{expr}.__class__ is {src.const(t, 'T')} and {expr} == {c}", f"{self.label(expr)} == {value!r}")
        elif t is tuple or t is list:
            src.guard("type", f"{expr}.__class__ is {src.const(t, 'T')} and len({expr}) == {len(value)}",
                      f"{self.label(expr)}: {t.__name__} of {len(value)}")
            for k, item in enumerate(value):
                var = self.temp()
                self.labels[var] = f"{self.label(expr)}[{k}]"
                src.emit(f"{var} = {expr}[{k}]")
                self._untracked(var, item)
        else:
            raise Ineligible(f"an argument of type {t.__name__} (compiled programs take arrays, numbers, "
                             "strings and dicts, lists and tuples of them)")


def gradient_code(src: Source, spec: Any, state: dict[int, int], lines: list[str], fresh: dict[int, str]) -> str:
    """The expression of one argument's gradient, mirroring its spec as `pytree.gradient` does; each
    array leaf's cotangent is handed over as it is when `pytree.project` would (a fresh array of the
    primal's shape and dtype), else projected."""
    if spec is None:  # an argument with no derivative (an int, a string)
        return "None"
    if type(spec) is pytree.Leaf:
        g = f"g{spec.idx}" if state.get(spec.idx, UNSET) != UNSET else "None"
        primal = spec.primal
        name = f"q{spec.idx}"
        if type(primal) is _ndarray:
            like = src.const(stand_in(primal), "like")
            dt = src.const(primal.dtype, "dt")
            owned = state.get(spec.idx) == OWNED
            # (a Numba kernel loaded from its cache gives arrays whose dtype equals NumPy's, another object)
            lines.append(f"{name} = {g} if {g}.__class__ is ndarray{'' if owned else f' and {g}.base is None'} and "
                         f"{g}.dtype {'==' if owned else 'is'} {dt} and {g}.shape == {primal.shape!r}"
                         f"{'' if owned else f' and {g}.flags.writeable'} else _project({g}, {like})")
            if spec.idx in fresh:  # the general path differentiates a fresh view of the caller's array
                lines.append(f"if {name} is {fresh[spec.idx]}: {name} = {name}.copy()")
        else:
            lines.append(f"{name} = _project({g}, {src.const(primal)})")
        return name
    if spec[0] == "dataclass":  # a copy with each field its gradient, as pytree.gradient makes it
        entries = ", ".join(f"{k!r}: {gradient_code(src, v, state, lines, fresh)}" for k, v in spec[2].items())
        return f"{src.const(objects.dataclass_gradient, 'F')}({src.const(spec[1], 'O')}, {{{entries}}})"
    if spec[0] == "pytree":  # rebuilt by the registered unflatten, as pytree.gradient does
        children = ", ".join(gradient_code(src, v, state, lines, fresh) for v in spec[3])
        return f"{src.const(objects.pytree_gradient, 'F')}({src.const(spec[1], 'N')}, {src.const(spec[2], 'A')}, [{children}])"
    t, subs = spec
    if isinstance(subs, dict):
        entries = ", ".join(f"{k!r}: {gradient_code(src, v, state, lines, fresh)}" for k, v in subs.items())
        return f"{{{entries}}}" if t is dict else f"{src.const(t, 'T')}({{{entries}}}.items())"
    items = [gradient_code(src, v, state, lines, fresh) for v in subs]
    if t is list:
        return f"[{', '.join(items)}]"
    if t is tuple:
        return f"({''.join(i + ', ' for i in items)})"
    return f"{src.const(t, 'T')}({', '.join(items)})" if hasattr(t, "_fields") else \
        f"{src.const(t, 'T')}(({''.join(i + ', ' for i in items)}))"


def read_arrays(entries: list[tuple]) -> list[Any]:
    """The arrays and objects of plain classes eligibility's entries read (from globals, module
    attributes and closure cells), as they are now: a capture tracks the arrays, and takes the objects
    apart as it does object arguments (`CaptureTape.track_read`), so that what it computes from them
    is recorded."""
    arrays = []
    for kind, owner, name, value in entries:
        if (type(value) is _ndarray or _walked(value)) and kind != "code":
            try:
                arrays.append(_current(kind, owner, name, value))
            except Ineligible:
                pass  # (the build refuses it)
    return arrays


def static_guards(src: Source, entries: list[tuple], inputs: Optional[Inputs] = None,
                  tracked: Optional[dict[int, int]] = None, taken: Optional[dict[int, Any]] = None) -> None:
    """The guards of eligibility's entries (compiled/eligibility.py): a global, module attribute or
    closure variable is fixed by value or identity, except an array, which is read at call time and
    walked as an input (`inputs`; a leaf where the capture tracked it, `tracked`: the tape's ids):
    type, shape and dtype guarded, its values the call's; and an object of a plain class, walked as
    an object argument is (`taken`: the capture's spec of each, by id)."""
    for kind, owner, name, value in entries:
        if kind == "class":  # the class of an object the call builds (compiled/objects.py): its attributes
            src.guard("object", f"{src.const(objects.same_class, 'F')}({src.const(owner, 'T')}, {src.const(value, 'S')})",
                      f"{name}'s attributes unchanged")
            continue
        if kind == "config":  # a configuration object as a default argument value (objects.config_default)
            if not objects.config_default(owner):  # (its state as the capture read it, not as the check saw it)
                raise Ineligible(f"reads {name}, which no longer holds only numbers, strings and flags")
            src.guard("object", f"{src.const(objects.same_config, 'F')}({src.const(objects.Live(owner), 'D')}, "
                      f"{src.const(objects.config_state(owner), 'S')})", f"{name} keeps its attributes")
            continue
        if kind == "code":  # a Python callee (owner), fixed by its caller's guards: its body too
            f = src.const(owner, "F")
            src.guard("code", f"_same_state({f}, {src.const(callable_state(owner), 'S')})",
                      f"{qualname(owner)} keeps its code, defaults and keyword defaults")
            continue
        if kind == "global":
            g = src.const(owner, "G")
            if name in owner:
                read = f"{g}[{name!r}]"  # (a KeyError fails the call over to the general path)
            else:  # a builtin: it must stay unshadowed
                b = src.const(_builtins_of(owner), "B")
                read = f"({g}.get({name!r}, _MISSING) is _MISSING and {b}.get({name!r}))"
        elif kind == "cell":
            read = f"{src.const(owner, 'Z')}.cell_contents"  # (an emptied cell fails over to the general path)
        else:
            m = src.const(owner.__dict__, "M")
            read = f"{m}[{name!r}]"
        value = _current(kind, owner, name, value)
        if type(value) is _ndarray:
            if inputs is None:
                raise Ineligible(f"reads {name}, an array, where a program takes none")
            _array_read(src, inputs, name, read, value, (tracked or {}).get(id(value)))
        elif _walked(value):
            _object_read(src, inputs, name, read, value, (taken or {}).get(id(value)))
        elif isinstance(value, (int, float, str, bytes, bool, complex)) or value is None:
            c = src.const(value)
            src.guard(kind, f"{read}.__class__ is {src.const(type(value), 'T')} and "
                      f"{number_condition(read, value, c)}", f"{name} == {value!r}")
        else:
            state = callable_state(value)
            if is_table(value):  # a table of functions: the same dict, holding the same entries
                src.guard(kind, f"{read} is {src.const(value)} and _same_value({read}, {src.const(dict(value), 'S')})",
                          f"{name} holds the same functions under the same keys")
            elif state is None:
                src.guard(kind, f"{read} is {src.const(value)}", f"{name} is {_describe(value)}")
            else:  # a function or partial: the state that shapes its call too (a "code" guard)
                src.guard(kind, f"{read} is {src.const(value)}", f"{name} is {_describe(value)}")
                src.guard("code", f"_same_state({read}, {src.const(state, 'S')})",
                          f"{name} keeps its code, defaults and arguments")


def _current(kind: str, owner: Any, name: str, value: Any) -> Any:
    """The value a capture just read (eligibility's entries are kept per function, so `value` may be
    older): the program's constants are the capture's, and so must its guards be. A value that is
    no longer of the entry's type was not checked as guardable: the program is refused."""
    try:
        now = owner.cell_contents if kind == "cell" else (owner if kind == "global" else owner.__dict__)[name]
    except (KeyError, ValueError):
        return value  # (a builtin: guarded as unshadowed; an emptied cell fails its guard)
    if type(now) is not type(value) or (type(now) is _ndarray and now.dtype.kind not in "biuf"):
        raise Ineligible(f"reads {name}, which is no longer a {type(value).__name__}")
    return now


def _array_read(src: Source, inputs: Inputs, name: str, read: str, value: Any, leaf: Optional[int]) -> None:
    """An array the code reads from a global, a module attribute or a closure cell: an input read at
    call time, walked as the capture read it (tape index `leaf` where it tracked it)."""
    if id(value) in inputs.untracked:
        raise Ineligible(f"reads {name}, the same array as an argument or another variable it reads")
    if leaf is not None and leaf in inputs.leaf_var:
        raise Ineligible(f"reads {name}, the same array as another variable it reads")
    var = inputs.temp()
    src.emit(f"{var} = {read}")
    inputs.walk(var, value, None if leaf is None else pytree.Leaf(leaf, value), fresh=False)


def _walked(value: Any) -> bool:
    """An object read from a global that a program walks as an object argument (a partial is guarded
    by its state instead, as functions are)."""
    return objects.takes_apart(value) and callable_state(value) is None


def _object_read(src: Source, inputs: Optional[Inputs], name: str, read: str, value: Any, spec: Any) -> None:
    """An object of a plain class the code reads from a global, a module attribute or a closure cell
    (a model at module level): walked at call time as an object argument is (compiled/objects.py)."""
    if inputs is None or spec is None:
        raise Ineligible(f"reads {name}, an object the capture did not take apart")
    var = inputs.temp()
    inputs.labels[var] = name
    src.emit(f"{var} = {read}")
    objects.walk(inputs, var, value, spec)


def _builtins_of(fn_globals: dict[str, Any]) -> dict[str, Any]:
    b = fn_globals.get("__builtins__", builtins)
    return b.__dict__ if isinstance(b, types.ModuleType) else b


def _describe(value: Any) -> str:
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    return qualname(value) if callable(value) else type(value).__name__


# ---- decisions on data -----------------------------------------------------------------------------


class Decision:
    """A decision read as a record, for the messages of `Builder.operand`."""

    __slots__ = ("fn", "site")

    def __init__(self, fn: Any, site: Any) -> None:
        self.fn = fn
        self.site = site


def short(value: Any) -> str:
    if type(value) is _ndarray:
        return f"an array of {value.dtype}{list(value.shape)}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
