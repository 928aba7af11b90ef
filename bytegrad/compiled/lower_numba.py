"""Compiled programs, Numba back end: a program's forward and reverse pass as one `@njit` call.

compiled/lower_numpy.py writes the program's Python wrapper (guards, argument bindings, gradients in
the caller's structure); this module writes the computation in between as a kernel that Numba
compiles (through runtime/kernels.py, the one module that imports Numba). It takes programs
whose every record is an elementwise operation (an operator, a ufunc or a `math` function) whose
partials are one-line lambdas, written inline, or a reverse rule with a `ProgramForm`, so that
the kernel holds no Python objects. Each cotangent is statically an array or a uniform float (the
seed of a sum stays a float, as on the general path), so the reverse pass needs no run-time type
checks. Anything else raises `Ineligible`, and the NumPy back end serves the signature.

Numba's transcendental functions are scalar libm calls, several times slower than NumPy's SIMD
loops, and a loop that calls one is not vectorised: kernels call runtime/vmath.py's exp, expm1, log,
log1p, tanh, sin and cos instead (`vector_calls`: sin and cos with a guard that sends an argument
beyond vmath.TRIG_MAX to the general path, and only in loops where they are faster than libm's; on
whole arrays their `*_array` loops), which LLVM vectorises and which may differ from NumPy's in the
last bits: a kernel is kept only when its first result agrees with the general path's to 1e-12
relative (bytegrad/compiled/policy.py). A program that ends in the sum of an elementwise chain with
broadcast operands is one loop nest (compiled/numba_fused.py). Other array kernels are cut in parts
around each large exp2, log2 or log10 (`_SIMD`, from `HYBRID_MIN` elements): the wrapper calls
NumPy's ufunc between two Numba calls, the same call the general path makes (Numba's own SIMD math,
SVML, needs an llvmlite built with it: not the pip wheels').

A kernel whose constants can be imported by name (compiled/numba_kernel.py) is a module of the cache
directory with Numba's `cache=True`, so a process that writes the same kernel again (a precompiled
twin) loads it from Numba's cache instead of compiling it."""
from __future__ import annotations

import ast
import math
import operator
import re
from typing import Any, Optional, cast

import numpy as np

from bytegrad import _operators
from bytegrad.errors import qualname
from bytegrad.rules._apply import shape_of
from bytegrad.compiled import numba_decide, numba_fpflag, numba_fused as program_fused, numba_outline, numba_roll
from bytegrad.runtime import kernels, vmath
from bytegrad.runtime.backward import partial_uses, singular_partial
from bytegrad.compiled.lower_numpy import Builder, Ineligible
from bytegrad.compiled.numba_kernel import MAX_RECORDS, SPLIT, local_form, module_constants, parts as kernel_parts, case_partial
from bytegrad.compiled.writes import data_indexed
from bytegrad.compiled.parts import Record, python_raises
from bytegrad.compiled.inline import inline_partial
from bytegrad.compiled.source import AST_LOCK, OWNED, SET, Constants, operator_expr

__all__ = ["emit"]

_ndarray = np.ndarray
#: the operators a kernel writes inline (a program with `//` or `%` keeps the NumPy back end)
_BINARY = _operators.symbols(operator.add, operator.sub, operator.mul, operator.truediv, operator.pow, operator.matmul)
_MATH = frozenset(v for v in vars(math).values() if callable(v))


class _Kernel:
    def __init__(self, b: Builder, depends: set[int]) -> None:
        self.b = b
        self.depends = depends
        self.names = Constants({"np": np, "math": math})  # (Numba freezes them at compile time)
        self.lines: list[str] = []
        self.var: dict[int, str] = {}          # tape index -> kernel variable of its value
        self.params: list[str] = []            # the kernel's arguments (wrapper variables)
        self.array: dict[str, tuple] = {}      # kernel variable -> shape, for arrays (others are floats)
        self.set: set[int] = set()             # tape indices whose cotangent is assigned
        #: array kernels: run NumPy's SIMD loops for large transcendental steps between kernel parts
        self.hybrid = False
        self.splits: dict[str, Any] = {}        # the variable a NumPy ufunc gives -> the ufunc
        self.loop = False  # writing the body of an element loop (program_fused.py): every value a float
        self.elements = False  # an elementwise program's loop (`_emit_loop`): its expressions run per element
        #: the kernel checks, in `bad_`, operations that raise on the general path (`python_raises`)
        self.raising = False

    # -- values --

    def value(self, p: int) -> str:
        var = self.var.get(p)
        if var is None:  # an argument leaf: a parameter of the kernel
            var = self.b.var[p]
            self.params.append(var)
            self.var[p] = var
            v = self.b.tape.values[p]
            if type(v) is _ndarray:
                self.array[var] = v.shape
        return var

    def operand(self, a: Any, p: Any, rec: Record) -> str:
        if p is not None:
            return self.value(p)
        if type(a) is _ndarray:
            var = self.b.inputs.untracked.get(id(a))
            if var is None:
                raise Ineligible(f"{qualname(rec.fn)} reads an array that is not an argument", rec.site)
            if var not in self.params and var not in self.array:  # (not a mask made in it: numba_decide.py)
                self.params.append(var)
                self.array[var] = a.shape
            return var
        if type(a) is int or (type(a) is float and math.isfinite(a)):
            return repr(a)
        if type(a) is float or isinstance(a, (np.floating, np.integer)):
            return self.names.const(a)
        raise Ineligible(f"the Numba back end does not take a {type(a).__name__} operand of {qualname(rec.fn)}",
                         rec.site)

    def operands(self, rec: Record) -> list[str]:
        """The record's arguments as kernel source; an index (`x[:, None]`) written out."""
        return [_index_source(a, rec) if k == 1 and rec.fn is operator.getitem else self.operand(a, p, rec)
                for k, (a, p) in enumerate(zip(rec.args, rec.parents + (None,) * len(rec.args)))]

    def forward(self, i: int) -> None:
        rec = self.b.records[i]
        out = rec.out
        if type(out) is _ndarray and out.dtype not in (np.float64, np.float32):
            raise Ineligible(f"{qualname(rec.fn)} gives {out.dtype} values", rec.site)
        ops = self.operands(rec)
        fn = rec.fn
        if rec.kind == "elementwise":
            expr = operator_expr(fn, ops, _BINARY)
            if expr is None:
                if not (isinstance(fn, np.ufunc) or fn in _MATH):
                    raise Ineligible(f"the Numba back end does not take {qualname(fn)}", rec.site)
                expr = f"{self.names.const(fn, 'f')}({', '.join(ops)})"
        else:
            form = self.b.form(rec, self.depends) or local_form(rec, self.depends, self.names)
            if form is None:
                raise Ineligible(f"{qualname(fn)} has no program form for these arguments (Numba back end)",
                                 rec.site)
            self.b.forms[i] = form
            expr = self._loops(rec, self.b.fill(form.forward, rec, ops))
        v = f"v{i}"
        vm = self.hybrid and type(out) is _ndarray and len(ops) == 1 and _VECTOR.get(id(fn)) and kernels.vector_math()
        if vm:  # runtime/vmath.py's loop, vectorised, in place of Numba's libm call per element
            name = _VECTOR[id(fn)] + ("_f32" if out.dtype == np.float32 else "")  # (float32 math for float32)
            self.lines.append(f"{v} = {self.names.const(vm[name + '_array'], 'vm')}({ops[0]})")
        elif self.hybrid and fn in _SIMD and type(out) is _ndarray and out.size >= HYBRID_MIN and len(ops) == 1:
            self.splits[v] = fn
            self.lines.append(f"{SPLIT}{v} = {ops[0]}")
        else:
            self.lines.append(f"{v} = {expr}")
        raises = python_raises(rec)
        if raises is not None:  # where Python raises, the kernel's NaN loss hands the call back (`_finish`)
            self.raising = True
            self.lines.append(f"bad_ = bad_ | ({ops[1]} == 0.0)" if raises == "divisor" else
                              f"bad_ = bad_ | ({v} - {v} != 0.0)")
        self.var[i] = v
        if type(out) is _ndarray:
            self.array[v] = out.shape

    def _loops(self, rec: Record, expr: str) -> str:
        """`(a @ b)` of a small matrix product (its forward and both cotangents do SMALL_MATMUL
        multiplications or fewer) as `kernels.small_matmul(a, b)`: explicit loops, no BLAS call."""
        if rec.fn not in _MATMUL or expr.count(" @ ") != 1 or not expr.startswith("(") or not expr.endswith(")"):
            return expr
        a, b = rec.args[:2]
        if not (type(a) is _ndarray and type(b) is _ndarray and a.ndim == b.ndim == 2 and a.dtype == b.dtype
                and a.dtype in _LOOP_DTYPES and a.shape[0] * a.shape[1] * b.shape[1] <= SMALL_MATMUL):
            return expr
        if (mm := kernels.small_matmul()) is None:
            return expr
        left, right = expr[1:-1].split(" @ ")
        return f"{self.names.const(mm, 'mm')}({left}, {right})"

    # -- cotangents --

    def contribute(self, p: int, bar: str, shape: Any) -> None:
        g = f"g{p}"
        if p in self.set:
            self.lines.append(f"{g} = {g} + {bar}")
            if shape is not None:
                self.array[g] = shape
        else:
            self.lines.append(f"{g} = {bar}")
            self.set.add(p)
            if shape is not None:
                self.array[g] = shape

    def reverse(self, i: int) -> None:
        if i not in self.set:
            return
        rec = self.b.records[i]
        g = f"g{i}"
        # (compiled/passes.py `reverse_schedule`; a list argument's items never reach this back end)
        targets = [(k, p) for k, p in self.b.plan.schedule.targets(i) if type(p) is not tuple]
        if rec.kind == "elementwise":
            self._elementwise(rec, g, targets)
        else:
            self._form(rec, g, targets)

    def _elementwise(self, rec: Record, g: str, targets: list) -> None:
        out = rec.out
        out_shape = out.shape if type(out) is _ndarray else ()
        ops = [self.operand(a, p, rec) for a, p in zip(rec.args, rec.parents)]
        g_shape = self.array.get(g)
        for k, p in targets:
            d = rec.rule.partials[k] if k < len(rec.rule.partials) else None
            if d is None:
                continue
            if d.__class__ is int or d.__class__ is float:
                bar, shape = (g if d == 1 else (f"-{g}" if d == -1 else f"{g} * {d!r}")), g_shape
            else:
                reads = partial_uses(d, len(ops))
                read = [o if j in reads else "None" for j, o in enumerate(ops + [self.var[rec.idx]])]
                inline = inline_partial(d, read, self.names)
                if inline is None and (pp := case_partial(d, k, ops + [self.var[rec.idx]], rec,
                                                          self.loop or self.elements)):
                    inline = (pp, False)
                if inline is None:
                    raise Ineligible(f"a partial of {qualname(rec.fn)} that is not a one-line lambda", rec.site)
                pv = None if self.loop else _partial_value(d, rec)
                p_shape = pv.shape if type(pv) is _ndarray else None
                shape = g_shape if g_shape is not None else p_shape
                if shape is not None and shape != out_shape:
                    raise Ineligible(f"a partial of {qualname(rec.fn)} smaller than its output", rec.site)
                bar = f"{g} * {inline[0]}"
            a = rec.args[k]
            a_shape = a.shape if type(a) is _ndarray else shape_of(a)
            t = f"t{self.b.tmp()[2:]}"
            self.lines.append(f"{t} = {bar}")
            if self.loop:  # one element's contribution: program_fused.py sums it where it broadcast
                self.contribute(p, t, None)
                continue
            self.contribute(p, *_reduce(self.names, t, shape, out_shape, a_shape))

    def _form(self, rec: Record, g: str, targets: list) -> None:
        form = self.b.forms[rec.idx]
        out = rec.out
        if type(out) is _ndarray and g not in self.array:  # a uniform cotangent, as a full array
            dt = self.names.const(np.float64 if out.dtype == np.float64 else np.float32, "dt")
            self.lines.append(f"{g} = np.full({out.shape!r}, {g}, {dt})")
            self.array[g] = out.shape
        ops = self.operands(rec)
        for k, p in targets:
            template = form.cotangents[k]
            t = f"t{self.b.tmp()[2:]}"
            if "{t}" in template:  # statements (a local form's scatter of an index's cotangent)
                self.lines += self.b.fill(template.replace("{t}", t), rec, ops, g)[1:-1].split("\n")
            else:
                self.lines.append(f"{t} = {self._loops(rec, self.b.fill(template, rec, ops, g))}")
            a = rec.args[k]
            shape = self.array.get(g) if template == "{g}" else (a.shape if type(a) is _ndarray else None)
            self.contribute(p, t, shape)


def _partial_value(d: Any, rec: Record) -> Any:
    try:
        return d(*rec.args, rec.out)
    except ZeroDivisionError:
        return singular_partial(d, rec.args, rec.out)


def _reduce(names: Constants, t: str, shape: Any, out_shape: tuple, a_shape: tuple) -> tuple[str, Any]:
    """`unbroadcast` of runtime/_shape.py written out: (the expression, its shape or None for a float)."""
    if shape is None:  # a uniform float: scaled by how many output elements each input fed
        if a_shape == out_shape:
            return t, None
        n_out, n_in = math.prod(out_shape), math.prod(a_shape)
        return f"{t} * {n_out // n_in if n_in else 0}", None
    if shape == a_shape:
        return t, shape
    if a_shape == ():
        return f"{t}.sum()", None
    lead = len(shape) - len(a_shape)
    kept = shape[lead:]
    axes = [j + lead for j, n in enumerate(a_shape) if n == 1 and kept[j] != 1] + list(range(lead))
    vm = kernels.vector_math() if len(shape) == 2 and len(axes) == 1 else None
    if vm:  # a 2-D array summed along one axis: a loop
        return f"{names.const(vm['sum_rows' if axes == [1] else 'sum_cols'], 'vm')}({t}).reshape({a_shape!r})", a_shape
    expr = t
    for ax in sorted(axes, reverse=True):
        expr = f"{expr}.sum(axis={ax})"
    return f"np.ascontiguousarray({expr}).reshape({a_shape!r})", a_shape


def _index_source(key: Any, rec: Record) -> str:
    items = key if type(key) is tuple else (key,)
    parts = []
    for item in items:
        if item is None:
            parts.append("None")
        elif item is Ellipsis:
            parts.append("...")
        elif type(item) is slice and item.step is None and all(v is None or type(v) is int for v in (item.start, item.stop)):
            parts.append(f"{'' if item.start is None else item.start}:{'' if item.stop is None else item.stop}")
        elif type(item) is int or isinstance(item, np.integer):  # (`x[np.argmax(x)]`: the decision checks it)
            parts.append(repr(int(item)))
        else:
            raise Ineligible("an index the Numba back end cannot write", rec.site)
    return ", ".join(parts) + ("," if len(parts) == 1 and type(key) is tuple else "")


# ---- elementwise programs, one loop over the elements ------------------------------------------


def _loop_shape(b: Builder, records: list[int], out_idx: int) -> Any:
    """The one shape of every array of an elementwise program on float64 or float32 arrays that ends
    in a full sum (or on a float): the program can then be one loop over the elements, every value a
    float64 in it. None when it cannot."""
    values = b.tape.values
    shape = None
    narrow = False
    for i in records:
        rec = b.records[i]
        last = i == out_idx
        if rec.kind != "elementwise" and not (last and rec.fn in _SUMS and len(rec.args) == 1):
            return None
        for v in list(rec.args) + [rec.out]:
            if type(v) is _ndarray:
                if v.dtype not in _LOOP_DTYPES or (shape is not None and v.shape != shape):
                    return None
                shape = v.shape
                narrow = narrow or v.dtype == np.float32
            elif not (type(v) in (int, float) or isinstance(v, np.float64) or (last and v is rec.out)):
                return None
    out = values[out_idx]
    if shape is not None and type(out) is _ndarray:
        return None  # an array output: the loop would have to return it whole
    if narrow and any(type(values[p]) is not _ndarray for p in b.wrt_leaves):
        return None  # a float argument's gradient in a float32 program: left to the array kernel
    return shape if shape is not None else ()


#: a float32 loop computes in float64 and rounds what it stores: within float32 rounding of the
#: general path's float32 arithmetic, not bit for bit (bytegrad/compiled/policy.py checks it to that)
_LOOP_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))
_SUMS = (np.sum, np.ndarray.sum)


def _emit_loop(b: Builder, records: list[int], depends: set[int], out_idx: int, shape: tuple) -> Any:
    k = _Kernel(b, depends)
    k.elements = True
    values = b.tape.values
    body: list[str] = []
    k.lines = body
    summed = b.records[out_idx].kind != "elementwise" if out_idx in b.records else False
    arrays: list[str] = []
    narrow: set[str] = set()  # float32 arrays: their elements are computed in float64
    for i in records:
        rec = b.records[i]
        if i == out_idx and summed:
            continue
        for a, p in zip(rec.args, rec.parents + (None,) * len(rec.args)):
            if type(a) is _ndarray and (p is None or b.records.get(p) is None) and p not in k.var:
                var = k.operand(a, p, rec)
                if var not in arrays:
                    arrays.append(var)
                if a.dtype == np.float32:
                    narrow.add(var)
        k.forward(i)
    k.array.clear()  # inside the loop every value is a float
    for v in arrays:  # each array argument's element i
        k.var.update({p: f"{v}_i" for p, var in k.var.items() if var == v})
    body[:] = [_elements(line, arrays) for line in body]
    top = summed and b.records[out_idx].parents[0]
    result = f"v{top}" if summed else k.var.get(out_idx, k.value(out_idx))
    if out_idx in depends:
        seed = top if summed else out_idx
        body.append(f"g{seed} = 1.0")
        k.set.add(seed)
        for i in b.plan.schedule.sweep():  # the reverse schedule (compiled/passes.py)
            if not (summed and i == out_idx):
                k.reverse(i)
    leaves = sorted(p for p in b.wrt_leaves if p in k.set)
    pre: list[str] = []
    for p in leaves:
        if type(values[p]) is _ndarray:
            pre.append(f"r{p} = np.empty({shape!r}, np.{values[p].dtype.name})")
            pre.append(f"f{p} = r{p}.reshape(-1)")
            body.append(f"f{p}[i] = {_elements(f'g{p}', arrays)}")
        else:
            pre.append(f"r{p} = 0.0")
            body.append(f"r{p} += {_elements(f'g{p}', arrays)}")
    lines = list(pre)
    if shape == ():  # floats only: no loop
        lines += body + [f"total = {result}"]
    else:
        body.append(f"total += {_elements(result, arrays)}")
        lines += ["total = 0.0", f"for i in range({math.prod(shape)}):"]
        lines += [f"    {a}_i = float({a}[i])" if a in narrow else f"    {a}_i = {a}[i]" for a in arrays]
        lines += ["    " + ln for ln in vector_calls(body, k.names, narrow=len(narrow) == len(arrays), guard="total",
                                                          size=math.prod(shape))]
    ret = ["total"] + [f"r{p}" for p in leaves]
    params = list(dict.fromkeys(k.params))
    flat = [f"{v}.reshape(-1)" if v in arrays else v for v in params]
    return k, lines, ret, params, flat, leaves


def vector_calls(lines: list[str], names: Constants, narrow: bool = False,
                 float32: Optional[set[str]] = None, guard: Optional[str] = None, size: int = 0) -> list[str]:
    """Element-loop `lines` with their exp, expm1, log, log1p, tanh, sin and cos calls on one float (a ufunc
    or `math` function, or `np.`/`math.` one written by a partial) turned into runtime/vmath.py's,
    which LLVM vectorises, and each `s += x` into `s = radd(s, x)`, a sum it may vectorise (in
    another order of additions, as NumPy's pairwise sum has its own). Unchanged without Numba.
    `narrow`: every array of the loop is float32, so the calls are to the float32 functions (`exp_f32`),
    on their argument rounded to float32, as NumPy's float32 ufunc would compute them. `float32`:
    the loop's elements are float32 values (not float64 ones), and so stay: its number constants,
    its constants' names and these names (float operands) are wrapped in `np.float32` (a Python
    float would make Numba compute in float64), which LLVM folds. sin and cos: only with `guard`, the
    loop's sum, which each one's `trig_guard` is added to (vmath.py), in a loop of `size` elements."""
    vm = kernels.vector_math()
    if not vm:
        return lines
    f32 = names.const(np.float32, "f32") if narrow or float32 is not None else None
    wrap = None if float32 is None else float32 | {
        n for n, v in names.ns.items() if type(v) in (int, float) or isinstance(v, (np.floating, np.integer))}

    def as_f32(node: ast.expr) -> ast.expr:
        assert f32 is not None  # (called only when narrowing to float32)
        return ast.copy_location(ast.Call(ast.Name(f32, ast.Load()), [node], []), node)
    fns = {n: _VECTOR.get(id(v)) for n, v in names.ns.items()}
    mods = {n for n, v in names.ns.items() if v is np or v is math}

    class _Swap(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.AST:
            self.generic_visit(node)
            f = node.func
            name = (fns.get(f.id) if isinstance(f, ast.Name) else
                    f.attr if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                    and f.value.id in mods and f.attr in vm and f.attr != "radd" else None)
            if name is None or len(node.args) != 1 or node.keywords or (name in vmath.TRIG and not trig):
                return node
            args = node.args
            if f32 is not None:
                name = f"{name}_f32"
                args = args if wrap is not None else [as_f32(args[0])]
            if name.removesuffix("_f32") in vmath.TRIG:
                check = vm["trig_guard_f32" if f32 is not None else "trig_guard"]
                guards.append(ast.Call(ast.Name(names.const(check, "vm"), ast.Load()), args, []))
            return ast.copy_location(ast.Call(ast.Name(names.const(vm[name], "vm"), ast.Load()), args, []), node)

        def visit_Constant(self, node: ast.Constant) -> ast.AST:
            number = type(node.value) in (int, float)
            return as_f32(node) if wrap is not None and number else node

        def visit_Name(self, node: ast.Name) -> ast.AST:
            return as_f32(node) if wrap is not None and isinstance(node.ctx, ast.Load) and node.id in wrap else node

        def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
            if isinstance(node.op, ast.Pow) and isinstance(node.right, ast.Constant):  # x ** 2: an int power
                node.left = self.visit(node.left)
                return node
            return self.generic_visit(node)

        def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
            node.value = self.visit(node.value)  # (not its index)
            return node

    guards: list[ast.expr] = []
    radd = names.const(vm["radd"], "radd")

    def swap() -> list[str]:
        out = []
        for ln in lines:
            target, plus, expr = ln.partition(" += ")
            if plus:
                ln = f"{target} = {radd}({target}, {expr})"
            n = len(guards)
            with AST_LOCK:
                out.append(ast.unparse(_Swap().visit(ast.parse(ln))))
                out += [f"{guard} = {radd}({guard}, {ast.unparse(g)})" for g in guards[n:]]
        return out
    trig = guard is not None and size >= TRIG_MIN_SIZE
    out = swap()
    trig = len(guards) <= TRIG_MAX_CALLS  # (else Numba's, in a second pass)
    return out if trig else swap()


#: vmath's sin and cos in an element loop of this many elements or more (on fewer, a chain of them is
#: bound by their latency, longer than libm's: loop50 on array[10] 15 -> 22 us, 100 np.sin on array[1]
#: 6.9 -> 10 us), and in a loop with at most TRIG_MAX_CALLS of them (LLVM compiles each inlined copy:
#: loop50's 200 took 16 s where libm's took 2.7 s)
TRIG_MIN_SIZE = 64
TRIG_MAX_CALLS = 16


#: NumPy ufuncs and `math` functions (by id) with a vectorisable runtime/vmath.py twin, by its name
_VECTOR = {id(f): f.__name__ for f in (np.exp, np.expm1, np.log, np.log1p, np.tanh, np.sin, np.cos, math.exp,
                                       math.expm1, math.log1p, math.tanh, math.sin, math.cos)}


def _elements(line: str, arrays: list[str]) -> str:
    """`line` with each array argument replaced by its element `x_i`."""
    for a in arrays:
        line = re.sub(rf"\b{a}\b(?!_i)", f"{a}_i", line)
    return line


def emit(b: Builder, order: list[int], depends: set[int], out_idx: int) -> tuple[str, dict[int, int], int]:
    """Write the kernel and the wrapper's call of it into `b.src`: (the wrapper's variable holding
    the output, the state of each cotangent for the gradient code, the number of records)."""
    inner = numba_decide.outer(b)  # (decisions on data: checked in the wrapper, or in an array kernel)
    records = [i for i in order if i in b.records]
    if any(b.records[i].kind == "write" or data_indexed(b.records[i]) for i in records):
        raise Ineligible("an in-place write, or an index that is an array or a list: the Numba back end leaves "
                         "them to the NumPy one (compiled/writes.py)")
    if any(b.records[i].kind == "item" for i in records):
        raise Ineligible("a rule that returns a tuple (`np.linalg.slogdet`, `svd`, `eigh`, `qr`): NumPy back end only")
    if not inner and (rolled := numba_roll.find(b)) is not None and len(records) - rolled.saved <= MAX_RECORDS:
        return numba_roll.emit(b, rolled, records, depends, out_idx, _Kernel, _finish)  # as a loop (compiled/roll.py)
    if len(records) > MAX_RECORDS:  # (numba_kernel.MAX_RECORDS: compile time grows faster than the program)
        raise Ineligible(f"{len(records)} operations, over the Numba back end's {MAX_RECORDS} (NumPy back end only)")
    if any(b.records[i].kind == "stepped" for i in records):
        raise Ineligible("`np.where` or a zero-safe elementwise record (a mask made it so): the Numba back end "
                         "does not run their reverse steps; the NumPy back end runs the general path's own")
    if any(b.records[i].nested for i in records):
        raise Ineligible("a list of differentiated values passed to a function (`np.stack([a, b])`): the Numba "
                         "back end takes arrays and floats")
    loop = None if inner else _loop_shape(b, records, out_idx)
    if loop is not None:
        k, lines, ret, params, flat, leaves = _emit_loop(b, records, depends, out_idx, loop)
        owned = frozenset(f"r{p}" for p in leaves if type(b.tape.values[p]) is _ndarray)
        return _finish(b, k, lines, ret, params, flat, leaves, out_idx, len(records), owned)
    k = _Kernel(b, depends)
    fused = None if inner else program_fused.emit(k, records, out_idx, vector_calls)  # (passed: no import back)
    if fused is not None:
        params = list(dict.fromkeys(k.params))
        return _finish(b, k, fused[0], fused[1], params, params, fused[2], out_idx, len(records), fused[3])
    k = _Kernel(b, depends)
    k.hybrid = True
    flag = numba_decide.forward(k, records, inner)
    out_var = k.value(out_idx)
    if out_idx in depends:
        k.lines.append(f"g{out_idx} = 1.0")
        k.set.add(out_idx)
        for i in b.plan.schedule.sweep():  # the reverse schedule (compiled/passes.py)
            k.reverse(i)
    leaves = sorted(p for p in b.wrt_leaves if p in k.set)
    params = list(dict.fromkeys(k.params))
    return _finish(b, k, numba_outline.outline(k), [out_var] + [f"g{p}" for p in leaves] + flag, params, params, leaves,
                   out_idx, len(records))


def _finish(b: Builder, k: _Kernel, lines: list[str], returns: list[str], params: list[str], call: list[str],
            leaves: list[int], out_idx: int, n_records: int, owned: frozenset = frozenset()
            ) -> tuple[str, dict[int, int], int]:
    """The kernel compiled and its call written; an array cotangent it returns is `owned` (made there, held nowhere
    else) or returned as a copy, so the wrapper hands it over uncopied (a kernel's array always has a base)."""
    src = b.src
    out = b.tape.values[out_idx]
    if k.raising:  # an operation that raises on the general path met a raising case: a NaN loss
        if type(out) is _ndarray:
            raise Ineligible("Python's float division or a `math` function whose exceptions a kernel with an "
                             "array output cannot report")
        lines = ["bad_ = False", *lines, f"{returns[0]} = np.nan if bad_ else {returns[0]}"]
    decided = returns[-1:] if returns[-1] == numba_decide.FLAG else []  # (numba_decide's flag, returned last)
    lines, returns = numba_fpflag.flag(k, lines, returns[:len(returns) - len(decided)])  # (after() below)
    returns += decided
    state = {p: SET for p in leaves}
    if not k.splits:
        for n, p in enumerate(leaves, 1):
            if returns[n] not in owned and returns[n] in k.array:
                returns[n] = f"{returns[n]}.copy()"
            if returns[n] in owned or returns[n].endswith(".copy()"):
                state[p] = OWNED
    parts = kernel_parts(lines, returns, set(k.names.ns)) if k.splits else [(lines, params, [])]
    result = f"v{out_idx}_out"
    sources = []
    targets = f"{result}, {''.join(f'g{p}, ' for p in leaves)}{numba_fpflag.TARGET}, {''.join(f'{d}, ' for d in decided)}"
    numba_fpflag.before(src)
    for n, (body, reads, gives) in enumerate(parts):
        last = n == len(parts) - 1
        if body[0].startswith(SPLIT):  # a NumPy ufunc between two kernel parts
            v, arg = body[0][len(SPLIT):].split(" = ")
            src.emit(f"{v} = {src.const(k.splits[v], 'f')}({arg})")
            if last:
                src.emit(f"{targets}= {', '.join(returns)},")
            continue
        if not (last or gives):
            continue  # nothing a later part reads
        args = reads if n else [call[params.index(r)] if r in params else r for r in reads]
        name = "kernel" if len(parts) == 1 else f"kernel{n}"
        source = "\n".join([f"def {name}({', '.join(reads)}):"] + ["    " + ln for ln in body]
                           + [f"    return {', '.join(returns if last else gives)}{'' if last else ','}"]) + "\n"
        fn = kernels.jit_program(source, k.names.ns, name, module_constants(k.names.ns))
        if fn is None:
            raise Ineligible("Numba is disabled (BYTEGRAD_DISABLE_NUMBA) or cannot be imported")
        sources.append(source)
        gets = targets if last else "".join(f"{g}, " for g in gives)
        src.emit(f"{gets}= {src.const(fn, 'K')}({', '.join(args)})")
    if decided:  # a decision came out otherwise: before the kernel's results are read
        src.emit(f"if {numba_decide.FLAG}: return DECIDED")
    numba_fpflag.after(src)
    if type(out) is not _ndarray:  # the general path's scalar type (np.float64 from a sum); an inf or NaN loss
        src.emit(f"if {result} - {result} != 0.0: return MISS")
        src.emit(f"if value: {result} = {src.const(type(out), 'T')}({result})")  # (grad drops it)
    src.kernel_source = "\n".join(sources)
    stems = tuple(kernels.program_stem(fn) for fn in src.ns.values() if hasattr(fn, "py_func"))
    src.kernel_stems = cast("tuple[str, ...]", stems) if stems and all(stems) else None  # (None: a kernel compiled in memory)
    return result, state, n_records


_MATMUL = (np.matmul, operator.matmul)
#: multiplications of a matrix product below which an array kernel writes it as loops
SMALL_MATMUL = 4096

#: NumPy ufuncs whose loops are SIMD (a few ns per element where Numba calls scalar libm at 10-25 ns):
#: an array kernel leaves them to NumPy from HYBRID_MIN elements, split in parts around them
_SIMD = frozenset((np.tanh, np.exp, np.log, np.expm1, np.log1p, np.exp2, np.log2, np.log10))
HYBRID_MIN = 128
