"""Fused kernels: Numba ufuncs generated from the scalar formulas of a fused site.

For one elementwise tree (see transform/fusion.py), one dtype and one set of differentiated leaves,
`plan()` writes a Python module in one of two shapes:

- two-pass (the backward is cheap arithmetic): a forward ufunc and one backward ufunc per group of
  leaves that share a cotangent (in `act(z + b)`, z and b get the same one). Backward ufuncs take
  only what they read: the output cotangent, the leaves they need and, where the derivatives are
  written in terms of it (tanh, exp, sqrt), the forward output, so a site whose backward needs only
  its output saves only its output.
- one-pass (the backward would call a transcendental function again: `x * sin(x)` needs sin and
  cos): one gufunc computes the output and, per group, the partial derivative of the output by the
  group's leaves, sharing the forward's intermediates; the reverse step is then `ct * partial`.
  Each transcendental is evaluated once per element, as in a forward + backward fused by hand.

Ufuncs broadcast, stride and cast as NumPy's own do; matmul stays in BLAS.

This is the only module that imports Numba, and only inside `compile_kernels`. Generated source
is written into the cache directory so Numba's `cache=True` works across processes; without a
usable cache directory the source is compiled in memory (one warning). Compiled programs' kernels
(compiled/lower_numba.py, `jit_program`) go there too, as modules named by their text's hash. Nothing here decides when to
compile: runtime/fused.py does (the tiering).
"""
from __future__ import annotations

import hashlib
import importlib.util
import operator
import os
import re
import sys
import _thread  # (its RLock: the `threading` module is not loaded for it, a first gradient's ski rental may import this one)
import time
import types
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from bytegrad._config import config as _config
from bytegrad.rules import _kernel, registry
from bytegrad.rules.registry import Formula
from bytegrad.runtime import vmath_sources
from bytegrad.runtime.costs import MODEL as _COSTS

KERNEL_FORMAT = 2
_DTYPES = frozenset({"float64", "float32"})
_LOCK = _thread.RLock()
_MODULES: dict[str, types.ModuleType] = {}
_warned_no_cache = False

_numba_failed: Optional[str] = None


@dataclass(frozen=True)
class Group:
    leaves: tuple[int, ...]     # the leaves this cotangent belongs to
    params: tuple[str, ...]     # "g", "out", or "a<j>" in call order
    name: str                   # function name in the module

    @property
    def sources(self) -> tuple[int, ...]:
        """`params` for the backward pass: -1 the cotangent, -2 the output, j >= 0 leaf j."""
        return tuple(-1 if n == "g" else -2 if n == "out" else int(n[1:]) for n in self.params)


@dataclass(frozen=True)
class Plan:
    """Everything about a kernel module except the compiled functions."""

    key: str
    source: str
    n_leaves: int
    groups: tuple[Group, ...]
    saved_leaves: tuple[int, ...]   # leaves the backward reads
    needs_out: bool
    dtype: str = "float64"
    #: one gufunc returns (output, one partial per group); no backward ufuncs
    onepass: bool = False

    @property
    def n_functions(self) -> int:
        return 1 if self.onepass else 1 + len(self.groups)


@dataclass
class Kernels:
    plan: Plan
    forward: Any                    # one-pass: returns (output, partial per group)
    backward: tuple[Any, ...]       # one per group (none for a one-pass plan)
    #: what the fused site's hot path reads, precomputed: None when no leaf is active, else
    #: (per leaf: saved for the backward?, per group: (its leaves, `Group.sources`), needs the output?)
    backward_plan: Optional[tuple] = None
    # derived from `plan` (read on the hot path without going through it):
    onepass: bool = field(init=False, default=False)
    dtype: Any = field(init=False, default=None)         # the NumPy dtype the kernels compute in
    nothing_saved: tuple = field(init=False, default=())  # (None,) per leaf: what a one-pass kernel keeps

    def __post_init__(self) -> None:
        p = self.plan
        self.onepass = p.onepass
        self.dtype = np.dtype(p.dtype)
        self.nothing_saved = (None,) * p.n_leaves
        if p.groups:
            self.backward_plan = (tuple(j in p.saved_leaves for j in range(p.n_leaves)),
                                  tuple((g.leaves, g.sources) for g in p.groups), p.needs_out)


# ---- source generation -------------------------------------------------------------------------

_NAME = re.compile(r"\b(?:[at]\d+|out|g)\b")


def _formula(node: Any) -> Formula:
    formula = registry.kernel_formula(node.fn, node.args[1][1] if node.fn is operator.pow else None)
    assert formula is not None, f"{node.fn} was fused without a kernel formula"
    return formula


def _ref(ref: tuple[str, Any]) -> str:
    kind, v = ref
    if kind == "L":
        return f"a{v}"
    if kind == "N":
        return f"t{v}"
    return repr(float(v))


def plan(nodes: tuple[Any, ...], n_leaves: int, dtype: str, active: tuple[bool, ...]) -> Plan:
    """Generate the kernel module for a tree (`runtime.fused.Node`s in postfix order)."""
    fwd_lines: list[tuple[str, str]] = []  # (target, expression)
    for k, node in enumerate(nodes):
        f = _formula(node)
        args = [_ref(r) for r in node.args]
        fwd_lines.append((f"t{k}", f.value.format(*args)))
    root = len(nodes) - 1

    # reverse sweep, symbolically: adjoint contributions per node and per leaf
    contrib_nodes: dict[int, list[str]] = {root: ["g"]}
    contrib_leaves: dict[int, list[str]] = {}
    bwd_lines: list[tuple[str, str]] = []
    for k in range(root, -1, -1):
        parts = contrib_nodes.get(k)
        if not parts:
            continue
        adj = parts[0] if len(parts) == 1 else f"u{k}"
        if len(parts) > 1:
            bwd_lines.append((adj, " + ".join(parts)))
        node = nodes[k]
        f = _formula(node)
        args = [_ref(r) for r in node.args]
        out = "out" if k == root else f"t{k}"
        for pos, ref in enumerate(node.args):
            if ref[0] == "C" or pos >= len(f.partials):
                continue
            d = f.partials[pos].format(*args, out=out)
            if d == "1.0":
                term = adj
            elif d == "-1.0":
                term = f"(-{adj})"
            elif d == "0.0":
                continue
            else:
                term = f"({adj} * {d})"
            if ref[0] == "N":
                contrib_nodes.setdefault(ref[1], []).append(term)
            else:
                contrib_leaves.setdefault(ref[1], []).append(term)

    # leaves with textually equal cotangents share one backward ufunc
    by_expr: dict[str, list[int]] = {}
    for j in range(n_leaves):
        if not active[j]:
            continue
        terms = contrib_leaves.get(j) or ["(g * 0.0)"]
        by_expr.setdefault(" + ".join(terms), []).append(j)

    assert dtype in _DTYPES, dtype
    ty = dtype
    body = [f"_T = np.{ty}", "_nan = _T(np.nan)", "_inf = _T(np.inf)", _kernel.HELPERS]
    fparams = [f"a{j}" for j in range(n_leaves)]
    fwd_no_root = fwd_lines[:-1]
    live = {expr: _live(fwd_no_root + bwd_lines, expr) for expr in by_expr}
    # one pass where a backward would call a transcendental function again
    onepass = any(_EXPENSIVE.search(expr) or any(_EXPENSIVE.search(e) for _, e in live[expr])
                  for expr in by_expr)
    if onepass:
        body.append(_onepass(fparams, fwd_no_root + [("out", fwd_lines[-1][1])] + bwd_lines, list(by_expr), ty))
    else:
        body.append(_ufunc("forward", fparams, fwd_no_root, fwd_lines[-1][1], ty))
    groups: list[Group] = []
    saved: set[int] = set()
    needs_out = False
    for n, (expr, leaves) in enumerate(by_expr.items()):
        if onepass:
            groups.append(Group(tuple(leaves), (), f"partial_{n}"))
            continue
        lines = live[expr]
        used = set(_NAME.findall(expr)).union(*(set(_NAME.findall(e)) for _, e in lines))
        params = ["g"] + [p for p in fparams if p in used] + (["out"] if "out" in used else [])
        saved |= {int(p[1:]) for p in params if p.startswith("a")}
        needs_out = needs_out or "out" in params
        name = f"backward_{n}"
        body.append(_ufunc(name, params, lines, expr, ty))
        groups.append(Group(tuple(leaves), tuple(params), name))
    src = _header() + "\n\n".join(body) + "\n"
    key = hashlib.sha256(src.encode()).hexdigest()[:20]
    return Plan(key, src, n_leaves, tuple(groups), tuple(sorted(saved)), needs_out, dtype, onepass)


def _live(lines: list[tuple[str, str]], result: str) -> list[tuple[str, str]]:
    """The statements `result` depends on, in order (dead code removed)."""
    need = set(_NAME.findall(result)) | set(re.findall(r"\bu\d+\b", result))
    keep: list[tuple[str, str]] = []
    for target, expr in reversed(lines):
        if target in need:
            keep.append((target, expr))
            need |= set(_NAME.findall(expr)) | set(re.findall(r"\bu\d+\b", expr))
    keep.reverse()
    return keep


#: calls in a backward that re-evaluate what the forward computed: worth a one-pass kernel
_EXPENSIVE = re.compile(r"\b(?:math\.\w+|_log1p|_log|_sqrt|_pow)\(")
_G = re.compile(r"\bg\b")


def _onepass(params: list[str], lines: list[tuple[str, str]], partials: list[str], ty: str) -> str:
    """The one-pass gufunc `forward(a0, ..., r_out, r_p0, ...)`: the output and, per group, its
    backward expression with the cotangent set to 1 (backward expressions are linear in it)."""
    results = ["out"] + [_G.sub("1.0", e) for e in partials]
    needed = _live([(t, _G.sub("1.0", e)) for t, e in lines], " ".join(results))
    outs = [f"r_{k}" for k in range(len(results))]
    sig = f'"void({", ".join([ty] * len(params) + [ty + "[:]"] * len(outs))})"'
    layout = ",".join(["()"] * len(params)) + "->" + ",".join(["()"] * len(outs))
    src = [f'@guvectorize([{sig}], "{layout}", nopython=True, cache=_CACHE)',
           f"def forward({', '.join(params + outs)}):"]
    src += [f"    {t} = {e}" for t, e in needed]
    src += [f"    {o}[0] = {r}" for o, r in zip(outs, results)]
    return "\n".join(src)


def _ufunc(name: str, params: list[str], lines: list[tuple[str, str]], result: str, ty: str) -> str:
    sig = f'"{ty}({", ".join([ty] * len(params))})"'
    out = [f"@vectorize([{sig}], nopython=True, cache=_CACHE)", f"def {name}({', '.join(params)}):"]
    out += [f"    {t} = {e}" for t, e in lines]
    out.append(f"    return {result}")
    return "\n".join(out)


def _header() -> str:
    return (f"# generated by bytegrad (kernel format {KERNEL_FORMAT}): do not edit\n"
            "import math\n\nimport numpy as np\nfrom numba import guvectorize, njit, vectorize\n\n"
            "_CACHE = __name__ != '__bytegrad_inmemory__'\n")


# ---- compiling and loading ---------------------------------------------------------------------


def disabled() -> bool:
    return _config.disable_numba or _numba_failed is not None


def numba_loaded() -> bool:
    return "numba" in sys.modules


def cost_estimate(p: Plan) -> float:
    """Seconds `compile_kernels(p)` is expected to take now (the ski-rental price: runtime/costs.py)."""
    return _COSTS.kernel_price(p.n_functions, on_disk(p), numba_loaded())


def _source_dir() -> Optional[str]:
    try:
        from bytegrad import diskcache
    except ImportError:
        return None
    try:
        d = diskcache.source_dir("kernels")
    except Exception:  # noqa: BLE001 - a cache problem never stops a gradient
        return None
    return str(d) if d is not None else None


def _module_path(stem: str) -> Optional[str]:
    d = _source_dir()
    return os.path.join(d, f"{stem}.py") if d is not None else None


def on_disk(p: Plan) -> bool:
    """Whether the module's source and a Numba cache index for it exist (a load, not a compile)."""
    return _on_disk(f"bgk_{p.key}")


def _on_disk(stem: str) -> bool:
    path = _module_path(stem)
    if path is None or not os.path.exists(path):
        return False
    pyc = os.path.join(os.path.dirname(path), "__pycache__")
    try:
        return any(n.startswith(f"{stem}.") and n.endswith(".nbi") for n in os.listdir(pyc))
    except OSError:
        return False


def compile_kernels(p: Plan) -> Optional[Kernels]:
    """Compile (or load from Numba's disk cache) the module of `p`; None when Numba is unavailable."""
    global _numba_failed
    with _LOCK:
        mod = _MODULES.get(p.key)
        if mod is None:
            if disabled():
                return None
            t0 = time.perf_counter()
            had_numba = numba_loaded()
            try:
                importlib.import_module("numba")  # the one place Numba is imported
            except Exception as exc:  # noqa: BLE001
                _numba_failed = f"{type(exc).__name__}: {exc}"
                warnings.warn(f"bytegrad: Numba could not be imported ({_numba_failed}); fused sites "
                              "run on NumPy.", RuntimeWarning, stacklevel=2)
                return None
            t1 = time.perf_counter()
            if not had_numba:
                _COSTS.learn_import(t1 - t0)
            cached = on_disk(p)
            mod = _load_module(f"bgk_{p.key}", p.source)
            per = (time.perf_counter() - t1) / p.n_functions
            _COSTS.learn_kernels(per, cached)
            if not had_numba:  # (kept for the next process: runtime/costs.py `remember`)
                _COSTS.remember({"import": t1 - t0, "load" if cached else "compile": per})
            _MODULES[p.key] = mod
        backward = () if p.onepass else tuple(_ufunc_of(getattr(mod, g.name)) for g in p.groups)
        return Kernels(p, _ufunc_of(mod.forward), backward)


def _ufunc_of(f: Any) -> Any:
    """The NumPy ufunc a Numba `vectorize` or `guvectorize` built (their wrappers dispatch in Python
    first)."""
    u = getattr(f, "ufunc", None)
    return u if u is not None else f


def _load_module(stem: str, source: str, warn: bool = True) -> types.ModuleType:
    """The module `source`, from the file `stem`.py of the cache directory (written when missing
    or other: an edited file is replaced, and its new mtime makes Numba compile again), so that its
    functions' `cache=True` works across processes; in memory without a usable cache directory
    (one warning where `warn`)."""
    global _warned_no_cache
    path = _module_path(stem)
    if path is not None:
        try:
            _write_source(path, source)  # (unless it holds `source` already, and is trusted)
            # Numba's cache rebuilds a kernel's environment by importing its module by name
            spec = importlib.util.spec_from_file_location(stem, path)
            assert spec is not None and spec.loader is not None
            mod = importlib.util.module_from_spec(spec)
            sys.modules[stem] = mod
            try:
                spec.loader.exec_module(mod)
            except BaseException:
                sys.modules.pop(stem, None)
                raise
            return mod
        except OSError:
            pass
    if warn and not _warned_no_cache:
        _warned_no_cache = True
        warnings.warn("bytegrad: no usable cache directory for fused kernels; they are compiled in "
                      "memory in every process (set BYTEGRAD_CACHE_DIR to a writable folder).",
                      RuntimeWarning, stacklevel=3)
    mod = types.ModuleType("__bytegrad_inmemory__")
    exec(compile(source, f"<bytegrad kernel {stem}>", "exec"), mod.__dict__)  # noqa: S102
    return mod


def _write_source(path: str, source: str) -> None:
    from bytegrad import diskcache
    written = diskcache.write_source("kernels", os.path.basename(path), source)
    if written is None:
        raise OSError("cache directory not writable")


# ---- compiled programs' kernels (compiled/lower_numba.py) -------------------------------------


def jit_program(source: str, namespace: dict[str, Any], name: str, constants: Optional[str] = None) -> Optional[Any]:
    """A program kernel (`def name(...)` in `source`, its globals in `namespace`) as a Numba `njit`
    function with NumPy's error model (a float division by zero gives inf or NaN, as NumPy's does);
    compiled on its first call. None when Numba is disabled or cannot be imported.

    `constants`: source lines that define every global of the kernel by importing it (see
    compiled/lower_numba.py). The kernel is then a module of the cache directory, named by the hash
    of its text, with Numba's `cache=True`, so a later process that writes the same kernel (a
    precompile's twin) loads it from Numba's cache instead of compiling it. None: in memory."""
    global _numba_failed
    if disabled():
        return None
    try:
        numba = importlib.import_module("numba")
    except Exception as exc:  # noqa: BLE001
        _numba_failed = f"{type(exc).__name__}: {exc}"
        return None
    if constants is not None:
        text = f"{_program_header()}{constants}\n\n\n@njit(error_model=\"numpy\", cache=_CACHE)\n{source.lstrip()}"
        stem = f"{PROGRAM_PREFIX}{hashlib.sha256(text.encode()).hexdigest()[:20]}"
        with _LOCK:
            mod = _MODULES.get(stem)
            if mod is None:
                mod = _MODULES[stem] = _load_module(stem, text, warn=False)
        return getattr(mod, name)
    exec(compile(source, f"<bytegrad program kernel {name}>", "exec"), namespace)  # noqa: S102
    return numba.njit(error_model="numpy")(namespace[name])


PROGRAM_PREFIX = "bgp_"
_program_head: list[str] = []


def _program_header() -> str:
    """The first lines of a program kernel's module. They name the version of what a kernel may call
    and Numba inlines or links into its cached code (runtime/vmath.py, small_matmul, the sums), so
    that a kernel written again after those change is another module, never one whose cache holds
    the old code (or names a small_matmul module this process no longer loads)."""
    if not _program_head:
        from bytegrad.runtime import vmath

        with open(vmath.__file__, "rb") as f:
            callees = f.read() + "".join(getattr(vmath_sources, n) for n in vmath_sources.__all__).encode()
        _program_head.append(f"# generated by bytegrad (program kernel format {KERNEL_FORMAT}, vector math "
                             f"{hashlib.sha256(callees).hexdigest()[:16]}): do not edit\n"
                             "import math\n\nimport numpy as np\nfrom numba import njit\n\n"
                             "_CACHE = __name__ != '__bytegrad_inmemory__'\n")
    return _program_head[0]


_program_prices: dict[tuple[str, ...], Optional[float]] = {}


def program_stem(fn: Any) -> Optional[str]:
    """The module of a program kernel `jit_program` put in the cache directory, or None."""
    stem = getattr(getattr(fn, "py_func", None), "__module__", None)
    return stem if isinstance(stem, str) and stem.startswith(PROGRAM_PREFIX) else None


def program_load_price(stems: tuple[str, ...]) -> Optional[float]:
    """Seconds Numba is expected to take to load the program kernels `stems` from its cache (once it
    is imported); None when one of them is not on disk (a compile). Looked up once a process."""
    if stems not in _program_prices:
        _program_prices[stems] = _COSTS.load_price(len(stems)) if all(map(_on_disk, stems)) else None
    return _program_prices[stems]


def program_from_disk(stems: tuple[str, ...]) -> Optional[bool]:
    """Whether Numba loaded the program kernels `stems` from its cache (True) or compiled one of
    them (False) in this process; None before their first call."""
    hits = misses = 0
    for stem in stems:
        mod = _MODULES.get(stem)
        for fn in vars(mod).values() if mod is not None else ():
            if program_stem(fn) == stem and hasattr(fn, "stats"):
                hits += sum(fn.stats.cache_hits.values())
                misses += sum(fn.stats.cache_misses.values())
    return False if misses else (True if hits else None)


_small_matmul: list[Any] = []


def small_matmul() -> Optional[Any]:
    """An `njit` matrix product of two 2-D arrays of one dtype as three loops (i, l, j: the inner loop
    runs along rows; i, j, l where the right operand is a transposed array), for program kernels: on
    a few hundred multiplications a BLAS call from Numba costs more than the arithmetic. None when
    Numba is disabled or cannot be imported."""
    if not _small_matmul:
        fn = jit_program(vmath_sources.SMALL_MATMUL, {"np": np}, "small_matmul",
                         constants=vmath_sources.SMALL_MATMUL_CONSTANTS)
        if fn is None:
            return None
        _small_matmul.append(fn)
    return _small_matmul[0]


_vector_math: dict[str, Any] = {}


def vector_math() -> dict[str, Any]:
    """runtime/vmath.py's functions as `njit` functions that Numba inlines where a kernel calls them
    (so its element loop vectorises), by name, with `radd`: an addition LLVM may reassociate, for the
    sums a loop accumulates (a vectorised sum adds in another order, as NumPy's pairwise sum does).
    Empty when Numba is disabled or cannot be imported."""
    with _LOCK:
        if not _vector_math and jit_program("def _probe():\n    pass\n", {}, "_probe") is not None:
            _vector_math.update(_compile_vector_math())
    return _vector_math


def _compile_vector_math() -> dict[str, Any]:
    from llvmlite import ir
    from numba import njit, types as nbtypes
    from numba.extending import intrinsic

    from bytegrad.runtime import vmath

    def cast(to: Any) -> Any:  # an LLVM bit cast of the one argument
        return lambda context, builder, sig, args: builder.bitcast(args[0], to)

    @intrinsic
    def _bits(typingctx, x):  # Numba's intrinsic signature
        return nbtypes.int64(nbtypes.float64), cast(ir.IntType(64))

    @intrinsic
    def _float(typingctx, i):
        return nbtypes.float64(nbtypes.int64), cast(ir.DoubleType())

    @intrinsic
    def _bits32(typingctx, x):
        return nbtypes.int32(nbtypes.float32), cast(ir.IntType(32))

    @intrinsic
    def _float32(typingctx, i):  # the low 32 bits of an int as a float32
        def codegen(context, builder, sig, args):
            return builder.bitcast(builder.trunc(args[0], ir.IntType(32)) if i.bitwidth > 32 else args[0],
                                   ir.FloatType())
        return nbtypes.float32(i), codegen

    ns = dict(vars(vmath), _bits=_bits, _float=_float, _bits32=_bits32, _float32=_float32, np=np)
    out = {}
    names = vmath.FUNCTIONS + tuple(vmath.FLOAT32.values())
    for name in vmath.HELPERS + vmath.GUARDS + names:
        f = getattr(vmath, name)
        # exp, expm1, tanh (and float32 sin, cos) compile on their own with fused multiply-adds (`contract`,
        # within these functions only) and LLVM inlines them where they are called, 20-30% faster in a loop
        # than Numba's inlining; log, log1p, sin and cos are too large for LLVM's inliner (3.12): Numba's
        options = dict(inline="never", fastmath={"contract"}) if name in vmath.FUSED else dict(inline="always")
        ns[name] = out[name] = njit(error_model="numpy", **options)(
            types.FunctionType(f.__code__, ns, name, f.__defaults__))
    # (a lambda is a FunctionType, which is what Numba's annotation asks for)
    out["radd"] = njit(inline="never", fastmath={"reassoc"}, error_model="numpy")(lambda a, b: a + b)  # type: ignore[arg-type]
    for name in names:  # on a whole array: a fresh array of its shape and dtype
        exec(compile(vmath_sources.array_math(name, vmath.TRIG), "<bytegrad vector math>", "exec"), ns)  # noqa: S102
        out[f"{name}_array"] = njit(error_model="numpy")(ns[f"{name}_array"])
    exec(compile(vmath_sources.SUMS, "<bytegrad vector math>", "exec"), ns)  # noqa: S102
    ns["radd"] = out["radd"]
    for name in ("sum_rows", "sum_cols", "nonfinite_array"):  # (nonfinite_array: compiled/numba_fpflag.py)
        out[name] = njit(error_model="numpy")(ns[name])
    keep = names + vmath.GUARDS + ("radd", "sum_rows", "sum_cols", "nonfinite_array") + tuple(f"{n}_array" for n in names)
    return {name: out[name] for name in keep}

