"""A Numba program's kernel source on its way to Numba (compiled/lower_numba.py): cut in parts around
the NumPy steps a hybrid kernel leaves to NumPy (`parts`), and its constants named by imports
(`module_constants`), so that Numba's disk cache can rebuild the kernel in another process
(runtime/kernels.py `jit_program`).

Also the forms only the Numba back end writes (`local_form`): a small matrix-vector product (an RNN's
`W @ h`) as explicit loops (`small_matvec`, `small_vecmat`: no BLAS call, as small matrix products
are), basic indexing with ints and slices (`xs[t]`), and the partials of `**`, `np.maximum` and `np.minimum`
(`case_partial`), which are functions with cases rather than one-line lambdas.
"""
from __future__ import annotations

import ast
import builtins
import math
import operator
import types
from typing import Any, NamedTuple, Optional

import numpy as np

from bytegrad.compiled import numba_outline, numba_reduce
from bytegrad.runtime import kernels

__all__ = ["SPLIT", "case_partial", "local_form", "module_constants", "parts"]

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
    if any("_numba_outline." in ln for ln in lines):
        lines.insert(0, "from bytegrad.compiled import numba_outline as _numba_outline")
    if any("_numba_reduce." in ln for ln in lines):
        # (the loops' version: a kernel written again after they change is another module)
        lines.insert(0, f"from bytegrad.compiled import numba_reduce as _numba_reduce  # {numba_reduce.VERSION}")
    if any("_numba_kernel." in ln for ln in lines):
        lines.insert(0, "from bytegrad.compiled import numba_kernel as _numba_kernel")
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
    if name.startswith("outlined_") and (expr := numba_outline.source_of(v)) is not None:
        return f"_numba_outline.helper({expr!r})"
    if name in numba_reduce.HELPERS and kernels.program_stem(v) is not None and v is numba_reduce.helper(name):
        return f"_numba_reduce.helper({name!r})"
    if name in _SMALL and kernels.program_stem(v) is not None and v is small(name):
        return f"_numba_kernel.small({name!r})"
    for key, f in kernels.vector_math().items() if hasattr(v, "py_func") else ():
        if f is v:  # (runtime/vmath.py's functions, as `kernels.vector_math` compiles them)
            return f"_kernels.vector_math()[{key!r}]"
    return None


#: the NumPy scalar types a kernel's constants may have (the types themselves too, as `np.full`'s dtype)
_SCALARS = frozenset((np.float64, np.float32, np.int64, np.int32, np.bool_))


# ---- forms only the Numba back end writes ---------------------------------------------------------

#: a matrix-vector product (`a @ x`, `x @ a`) as loops, as runtime/vmath_sources.py's small_matmul: a
#: BLAS call from a kernel costs more than a few hundred multiplications
_SMALL = {
    "small_matvec": """
def small_matvec(a, x):
    m, k = a.shape
    out = np.empty(m, a.dtype)
    for i in range(m):
        s = 0.0
        for j in range(k):
            s = _radd(s, a[i, j] * x[j])
        out[i] = s
    return out
""",
    "small_vecmat": """
def small_vecmat(x, a):
    m, k = a.shape
    acc = np.zeros(k, np.float64)
    for i in range(m):
        xi = x[i]
        for j in range(k):
            acc[j] += xi * a[i, j]
    return acc.astype(a.dtype)
""",
    "small_outer": """
def small_outer(x, y):
    out = np.empty((x.shape[0], y.shape[0]), x.dtype)
    for i in range(x.shape[0]):
        for j in range(y.shape[0]):
            out[i, j] = x[i] * y[j]
    return out
""",
}
_SMALL_CONSTANTS = "from bytegrad.runtime import kernels as _kernels\n_radd = _kernels.vector_math()['radd']"
_small: dict[str, Any] = {}
#: multiplications of a matrix-vector product up to which a kernel takes it (as loops); a larger one
#: keeps the NumPy back end, whose BLAS call is then the better one
SMALL_MATVEC = 16384
#: the most forward operations a Numba program takes (the bench's 50-step float loop, 251, compiles in
#: seconds); what an array kernel costs to compile is its elementwise statements, which
#: compiled/numba_outline.py outlines and caps (MAX_ARRAY_STATEMENTS: an RK4 loop of 8 states, 8 steps,
#: ~230 operations, 496 statements, compiled in 72 s inline and 7.4 s outlined; 40 steps, 1,162, stay
#: on the NumPy back end)
MAX_RECORDS = 600
_MATMUL = (np.matmul, operator.matmul)
_FLOATS = (np.dtype(np.float64), np.dtype(np.float32))


def small(name: str) -> Any:
    """The `njit` function `name` of `_SMALL` (compiled once, cached on disk), or None without Numba."""
    fn = _small.get(name)
    if fn is None:
        fn = kernels.jit_program(_SMALL[name], {"np": np}, name, constants=_SMALL_CONSTANTS)
        if fn is not None:
            _small[name] = fn
    return fn


class LocalForm(NamedTuple):
    """A ProgramForm (bytegrad/rules/_types.py) the Numba back end writes for a record whose rule has
    none for these arguments; a cotangent template holding `{t}` is statements that assign `{t}`."""

    forward: str
    cotangents: tuple


def local_form(rec: Any, depends: set, names: Any) -> Optional[LocalForm]:
    """The form of `rec` (a matrix-vector product, or an index of ints and slices, a reduction along an
    axis: compiled/numba_reduce.py), or None."""
    if rec.kwargs:
        return _reduction(rec, names)
    if not rec.trusted or rec.nested or rec.kwargs:
        return None
    fn, args = rec.fn, rec.args
    if any(fn is f for f in _MATMUL) and len(args) == 2:
        a, b = args
        if not (type(a) is np.ndarray and type(b) is np.ndarray and a.dtype == b.dtype and a.dtype in _FLOATS
                and {a.ndim, b.ndim} == {1, 2} and a.size * b.size // max(min(a.size, b.size), 1) <= SMALL_MATVEC):
            return None
        mv, vm, outer = (small(n) for n in ("small_matvec", "small_vecmat", "small_outer"))
        if mv is None or vm is None or outer is None:
            return None
        mv, vm, outer = (names.const(f, "mv") for f in (mv, vm, outer))
        if a.ndim == 2:  # a @ x: the gradient of a is the outer product g x, of x it is g @ a
            return LocalForm(f"{mv}({{0}}, {{1}})", (f"{outer}({{g}}, {{1}})", f"{vm}({{g}}, {{0}})"))
        return LocalForm(f"{vm}({{0}}, {{1}})", (f"{mv}({{1}}, {{g}})", f"{outer}({{0}}, {{g}})"))
    if (fn is np.mean or fn is np.ndarray.mean) and len(args) == 1 and type(args[0]) is np.ndarray and args[0].dtype == np.float64 and args[0].size:
        # mean_rrule's full mean: x.mean(), and out_bar / n everywhere (here as an array)
        return LocalForm("{0}.mean()", (f"np.full({{shape0}}, {{g}} / {args[0].size})",))
    if type(fn) is types.MethodWrapperType and fn.__self__ is np.ndarray.T and len(args) >= 1 and \
            type(args[0]) is np.ndarray and args[0].ndim == 2 and args[0].dtype in _FLOATS:
        return LocalForm("{0}.T", ("{g}.T",) + (None,) * (len(args) - 1))
    if fn is operator.getitem and len(args) == 2 and type(args[0]) is np.ndarray and args[0].dtype in _FLOATS:
        keys = args[1] if type(args[1]) is tuple else (args[1],)
        if not all(type(k) is int or isinstance(k, np.integer) or (type(k) is slice and k.step is None and all(
                v is None or type(v) is int for v in (k.start, k.stop))) for k in keys):
            return None
        dt = names.const(args[0].dtype.type, "dt")
        return LocalForm("{0}[{1}]", (f"{{t}} = np.zeros({{shape0}}, {dt})\n{{t}}[{{1}}] = {{g}}", None))
    return _reduction(rec, names)


def _reduction(rec: Any, names: Any) -> Optional[LocalForm]:
    form = numba_reduce.reduce_form(rec, names)
    return None if form is None else LocalForm(*form)


def case_partial(d: Any, k: int, ops: list[str], rec: Any, loop: bool) -> Optional[str]:
    """The partial `d` of `x ** y` or of `np.maximum`/`np.minimum` (bytegrad/rules/numpy/ufuncs.py's
    `power_dx`, `power_dy`, and np.maximum's two partials: functions with cases) at operand `k` as an
    expression that takes the same cases, or None. `ops`: the operands, then the output; `loop`: the
    expression is computed element by element (an element loop), not on whole arrays."""
    from bytegrad.rules import registry
    from bytegrad.rules.numpy import ufuncs

    if len(rec.args) != 2 or len(ops) != 3:
        return None
    rule = registry.lookup(np.maximum)  # its partials: x's (1 where x > y), y's (1 where x < y); np.minimum's, swapped
    max_dx, max_dy = rule.partials[:2] if rule is not None and len(rule.partials) == 2 else (None, None)
    if d is not None and (d is max_dx or d is max_dy):  # 1 where it is the one picked, 0.5 at a tie, 0 else (NaN: 0)
        if not (loop or all(type(a) is float for a in rec.args)):
            return None
        x, y = (ops[0], ops[1]) if d is max_dx else (ops[1], ops[0])
        return f"(1.0 if {x} > {y} else 0.5 if {x} == {y} else 0.0)"
    if d is not ufuncs.power_dx and d is not ufuncs.power_dy:
        return None
    x, y = rec.args
    constant = (tuple(rec.parents) + (None, None))[1] is None  # (a tracked exponent changes between calls)
    if d is ufuncs.power_dx and k == 0 and type(x) is float and type(y) in (int, float):  # its cases, at run time
        x_, y_ = ops[0], ops[1]
        return (f"(2 * {x_} if {y_} == 2 else 1.0 if {y_} == 1 else 0.0 if {y_} == 0 else "
                f"(0.0 if {y_} > 1 else math.copysign(math.inf, {y_})) if {x_} == 0 else {y_} * {x_} ** ({y_} - 1))")
    if d is ufuncs.power_dx and k == 0 and type(y) in (int, float) and constant:  # on arrays: as power_dx's
        if y == 2:  # array case, y * x ** (y - 1) (no case at x == 0), 0 where y == 0
            return f"(2 * {ops[0]})"
        if y == 1 or y == 0:  # (a float: only where computed per element, not as ones_like and zeros_like)
            return repr(float(y)) if loop else None
        return f"({y!r} * {ops[0]} ** {y - 1!r})"
    if d is ufuncs.power_dy and k == 1 and type(x) is float and type(y) is float:
        return f"({ops[2]} * math.log({ops[0]}) if {ops[0]} > 0.0 else 0.0)"
    return None
