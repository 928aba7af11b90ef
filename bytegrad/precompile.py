"""Ahead-of-time work, so a fresh process reaches its first gradient without rewriting or compiling.

`precompile(f, *example_args, wrt=...)` takes one gradient of `f` with every fused site compiling
its kernels at once (instead of when ski rental says so): the rewritten code goes into the disk
cache of rewritten code and the kernels into Numba's disk cache, both under `BYTEGRAD_CACHE_DIR`.
It then captures the compiled program (bytegrad/compiled/policy.py) of those arguments and stores it
(compiled/store.py), with its Numba twin's kernels in Numba's disk cache where the signature
can have one (`_twins`): a fresh process's first gradient runs the stored program, and its tier-up
to Numba loads the twin instead of compiling it.
`precompile_standard()` compiles bytegrad's own standard kernels: the dense patterns
`act(z + b)` for tanh, sigmoid, relu and softplus, in float32 and float64. The command line:

    python -m bytegrad precompile module:function --example "np.ones((3, 4))" ... [--wrt 0]
    python -m bytegrad precompile --standard

A precompiled kernel still waits for ski rental in a later process (importing Numba costs about
half a second there), but the price is then a load, not a compile.
"""
from __future__ import annotations

import contextlib
import importlib
import time
from typing import Any, Iterator

import numpy as np

from bytegrad import _lazy_tiers
from bytegrad.api import Differentiated, differentiate
from bytegrad.compiled.lower_numpy import MISS, Program
from bytegrad.runtime import fused, kernels

__all__ = ["precompile", "precompile_standard"]


@contextlib.contextmanager
def _policy(policy: str) -> Iterator[None]:
    old = fused.POLICY
    fused.POLICY = policy
    try:
        yield
    finally:
        fused.POLICY = old


def precompile(fn: Any, *example_args: Any, wrt: Any = 0, **example_kwargs: Any) -> dict[str, Any]:
    """Rewrite `fn` for these example arguments and compile the fused kernels its gradient uses.

    The rewritten code goes into the disk cache of rewritten code and the kernels into Numba's
    disk cache, so that a later process loads them instead of rewriting and compiling. A
    function whose output is not a scalar is run through `.pullback` with a cotangent of ones
    (all positional arguments differentiated). The command line does the same:
    `bytegrad precompile module:function --example EXPR ...`.

    Parameters
    ----------
    fn : callable or Differentiated
        The function, plain or decorated with `differentiate` (its `wrt` is then used).
    *example_args : Any
        Example positional arguments, of the types, dtypes and shapes the real calls will have.
    wrt : int, str or tuple of them, default 0
        The argument(s) the gradients will differentiate, when `fn` is a plain function.
    **example_kwargs : Any
        Example keyword arguments.

    Returns
    -------
    dict
        The function's `stats()` after the run, with `precompile_s` (seconds it took).
    """
    fn = _lazy_tiers.resolved(fn)  # (a `differentiate` made before the general path loaded: its Differentiated)
    d = fn if isinstance(fn, Differentiated) else differentiate(fn, wrt=wrt)
    t0 = time.perf_counter()
    from bytegrad.errors import NonScalarOutputError

    with _policy("always"):
        for _ in range(2):  # the first call tiers the sites up, the second compiles their kernels
            try:
                d.grad(*example_args, **example_kwargs)
            except NonScalarOutputError:
                out, back = d.pullback(*example_args, **example_kwargs)[:2]  # (out, back, aux) with has_aux
                back(_ones_like(out))
        stored = _precompile_programs(d, example_args) if not example_kwargs else 0
    result = d.stats()
    result["precompile_s"] = time.perf_counter() - t0
    result["programs_stored"] = stored
    return result


def _precompile_programs(d: Differentiated, args: tuple) -> int:
    """Capture the compiled program (bytegrad/compiled/policy.py) of these arguments, for gradients or,
    for a function whose output is not a scalar, for pullbacks, and store it on disk, so that a
    fresh process's first gradient of the signature runs it; returns the programs stored."""
    from bytegrad.errors import NonScalarOutputError

    if d._tiers is None:
        return 0
    try:
        d._tiers.call(d._target, args, d._capture, now=True)
        return d._tiers.store(_twins(d._tiers, args, d._capture), tuple(map(type, args)), d._target)
    except NonScalarOutputError:
        pass
    tiers = d._pb_tiers  # (made by the pullbacks above)
    if tiers is None:
        return 0
    result = tiers.call(d._target, args, d._capture_pullback, now=True)
    if result is not MISS:
        result[1](_ones_like(result[0]))  # a pullback program is checked when its back() first runs
    return tiers.store()


def _twins(tiers: Any, args: tuple, capture: Any) -> list[Program]:
    """The NumPy programs of this signature, to store, each with its Numba twin: the twin is captured
    (where Numba is enabled and the signature eligible), so its kernel module lands in the cache
    directory and its compiled code in Numba's cache; the NumPy program keeps the modules' names. A
    fresh process runs the NumPy program, and its tier-up (bytegrad/compiled/policy.py) pays Numba's load
    price, not its compile price: the twin's capture then writes the same module, which Numba loads."""
    sig = tuple(map(type, args))
    progs = [r.program for r in tiers.runs if r.signature == sig]
    numpy = [p for p in progs if p.backend == "numpy"]
    if not numpy:  # (BYTEGRAD_TIER=numba made the Numba program): the NumPy one is what loads
        result = capture(args, ("numpy",))[1]
        numpy = [result] if isinstance(result, Program) else []
    if len(numpy) != 1 or kernels.disabled():
        return numpy  # (several programs: which one a twin of these arguments belongs to is unclear)
    twin = next((p for p in progs if p.backend == "numba"), None)
    if twin is None:
        twin = capture(args, ("numba",))[1]
    if isinstance(twin, Program):  # (programs are immutable: the one the tiers run is replaced by its copy)
        old, numpy[0] = numpy[0], numpy[0].replace(twin=twin.twin)
        for r in tiers.runs:
            if r.program is old:
                r.program = numpy[0]
    return numpy


def _ones_like(out: Any) -> Any:
    if isinstance(out, np.ndarray):
        return np.ones_like(out)
    if isinstance(out, (tuple, list)):
        return type(out)(_ones_like(o) for o in out)
    return 1.0


def _dense_tanh(z: Any, b: Any) -> Any:
    return np.tanh(z + b)


def _dense_sigmoid(z: Any, b: Any) -> Any:
    return 1.0 / (1.0 + np.exp(-(z + b)))


def _dense_relu(z: Any, b: Any) -> Any:
    return np.maximum(z + b, 0.0)


def _dense_softplus(z: Any, b: Any) -> Any:
    return np.log1p(np.exp(z + b))


STANDARD = (_dense_tanh, _dense_sigmoid, _dense_relu, _dense_softplus)


def standard_sites() -> list[fused.FusedSite]:
    """The fused sites of the standard patterns (their trees are what user code of the same
    shape, e.g. `np.tanh(W @ x + b[:, None])`, fuses into: the kernels are shared)."""
    from bytegrad import transform
    sites = []
    for f in STANDARD:
        code = transform.rewrite_code(f.__code__, frozenset({"z", "b"}), f.__globals__)
        sites += [c for c in code.co_consts if isinstance(c, fused.FusedSite)]
    return sites


def precompile_standard(dtypes: tuple[str, ...] = ("float64", "float32")) -> dict[str, float]:
    """Compile (or load) the standard dense kernels; returns seconds per pattern."""
    times: dict[str, float] = {}
    for fs in standard_sites():
        t0 = time.perf_counter()
        for dtype in dtypes:
            for active in ((True, True), (True, False)):
                kernels.compile_kernels(kernels.plan(fs.nodes, fs.n_leaves, dtype, active))
        times[fs.expr] = time.perf_counter() - t0
    return times


def resolve(target: str) -> tuple[Any, Any]:
    """`package.module:function` (or `module:Class.method`) to `(the object, its module)`.

    Raises LookupError with a one-line message when the target is malformed, its module cannot be
    found, or the module has no such attribute. An error raised by the module's own code while it
    is imported propagates as it is.
    """
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise LookupError(f"expected module:function (for example mymodel:loss), got {target!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise  # the module was found, and an import inside it failed: its own traceback says where
        raise LookupError(f"no module named {module_name!r} (looked in the current directory, then the "
                          "installed packages)") from None
    obj: Any = module
    for depth, part in enumerate(attr.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            where = module_name if depth == 0 else f"{module_name}:{'.'.join(attr.split('.')[:depth])}"
            names = [n for n in dir(obj) if not n.startswith("_") and callable(getattr(obj, n, None))]
            hint = f"; it has {', '.join(names[:8])}{', ...' if len(names) > 8 else ''}" if names else ""
            raise LookupError(f"{where} ({getattr(module, '__file__', module_name)}) has no {part!r}{hint}") from None
    return obj, module
