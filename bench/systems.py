"""The systems a benchmark compares: how each one computes the loss and the gradient of a `Case`.

`prepare(case, params, data, direction)` returns a zero-argument function, or raises
`Unavailable` when the system is not installed or cannot express the case. With direction
"reverse" the function computes the whole gradient (forward + backward) and returns it as
NumPy-comparable leaves; with "forward" it is the system's plain loss call (torch under
`no_grad`, JAX jitted for jax-jit) and returns the loss. Conversions of the inputs to a system's
own arrays happen in `prepare`, outside the timed call.

"bytegrad (no numba)" runs in a worker process started with `BYTEGRAD_DISABLE_NUMBA=1`, since
the variable is read when bytegrad loads (see bench/worker.py); the parent times it through the
same interleaved batches as everyone else.
"""
from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.cases import Case, rebind

Prepared = Callable[[], Any]
DIRECTIONS = ("reverse", "forward")


class Unavailable(Exception):
    """The system is not installed here, or does not support this case."""


@dataclass(frozen=True)
class System:
    name: str
    prepare: Callable[[Case, Any, tuple[Any, ...], str], Prepared]
    module: str | None = None  # importable module the system needs

    def available(self) -> bool:
        return self.module is None or importlib.util.find_spec(self.module) is not None


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: tree_map(fn, v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(tree_map(fn, v) for v in tree)
    return fn(tree)


def tree_leaves(tree: Any) -> list[Any]:
    if isinstance(tree, dict):
        return [leaf for v in tree.values() for leaf in tree_leaves(v)]
    if isinstance(tree, (list, tuple)):
        return [leaf for v in tree for leaf in tree_leaves(v)]
    return [tree]


# ------------------------------------------------------------------------------------ NumPy
def prepare_numpy(case: Case, params: Any, data: tuple[Any, ...], direction: str) -> Prepared:
    fn = case.grad if direction == "reverse" else case.loss
    return lambda: fn(params, *data)


# --------------------------------------------------------------------------------- bytegrad
def prepare_bytegrad(case: Case, params: Any, data: tuple[Any, ...], direction: str) -> Prepared:
    import bytegrad

    f = bytegrad.differentiate(case.loss)
    if direction == "reverse" and os.environ.get("BYTEGRAD_BENCH_TIER_UP") == "1":
        # steady state: the fused sites have tiered up (kernels compiled, or loaded from the disk
        # cache); each then keeps, per size class, whichever of kernel and NumPy rules gives the
        # faster gradients (decided over the harness's calibration calls)
        bytegrad.precompile(f, params, *data)
    fn = f.grad if direction == "reverse" else f   # forward: the plain call of the decorated function
    if direction == "reverse":
        _warm_up(lambda: fn(params, *data))
    return lambda: fn(params, *data)


#: seconds of gradients the default tier gets before it is timed: what a training loop's first
#: steps give it (a capture on the third call, then a move to Numba once that pays: see
#: bytegrad/compiled/policy.py); without them the harness's calibration would time the capture itself
WARM_UP_S = 2.0


def _warm_up(call: Callable[[], Any]) -> None:
    import time

    deadline = time.perf_counter() + WARM_UP_S
    while time.perf_counter() < deadline:
        call()


def _prepare_tier(tier: str) -> Callable[[Case, Any, tuple[Any, ...], str], Prepared]:
    """bytegrad with its tier pinned (bytegrad/compiled/policy.py): "general" (a hook per operation and a
    tape, every call), "numpy" or "numba" (a compiled program from the first call, by that back
    end where it can be written; the Numba tier falls back to the NumPy back end elsewhere)."""
    def prepare(case: Case, params: Any, data: tuple[Any, ...], direction: str) -> Prepared:
        import bytegrad

        f = bytegrad.differentiate(case.loss, tier=tier)
        fn = f.grad if direction == "reverse" else f
        return lambda: fn(params, *data)
    return prepare


def prepare_numba_fused(case: Case, params: Any, data: tuple[Any, ...], direction: str) -> Prepared:
    if case.numba_grad is None or direction != "reverse":
        raise Unavailable("no hand-fused Numba reference for this case")
    fn = case.numba_grad
    fn(params, *data)  # compile outside the timing
    return lambda: fn(params, *data)


def prepare_bytegrad_no_numba(case: Case, params: Any, data: tuple[Any, ...], direction: str) -> Prepared:
    from bench.worker import Remote

    return Remote.prepare("bytegrad", {"BYTEGRAD_DISABLE_NUMBA": "1"}, case, params, data, direction)


# --------------------------------------------------------------------------------- autograd
def prepare_autograd(case: Case, params: Any, data: tuple[Any, ...], direction: str) -> Prepared:
    import autograd
    import autograd.numpy as anp

    loss = rebind(case.loss, np=anp, math=anp)
    fn = autograd.grad(loss) if direction == "reverse" else loss
    return lambda: fn(params, *data)


# -------------------------------------------------------------------------------------- JAX
def _jax_sliding_window_view(x: Any, window_shape: tuple[int, ...], axis: tuple[int, ...]) -> Any:
    """`sliding_window_view` for JAX arrays (which have none): the windows stacked on new last axes."""
    import jax.numpy as jnp

    out = [x.shape[a] - w + 1 for a, w in zip(axis, window_shape)]
    slices = []
    for offset in np.ndindex(*window_shape):
        index = [slice(None)] * x.ndim
        for a, o, n in zip(axis, offset, out):
            index[a] = slice(o, o + n)
        slices.append(x[tuple(index)])
    return jnp.stack(slices, axis=-1).reshape(slices[0].shape + tuple(window_shape))


def _jax_inline_dispatch(jax: Any) -> None:
    """Runs JAX's CPU computations on the calling thread (`jax_cpu_enable_async_dispatch=False`).

    By default a jitted call hands its computation to a dispatch thread and returns at once; the
    timed call then blocks on the result, so each call pays a wake-up of that thread. On a loaded
    2-core machine the wake-up waits for a core: Dense(2) measured 3 to 5 times slower (105-120 µs
    a call against 26-37 µs inline, bench/results/jax-fairness.md). A benchmark that blocks on
    every result gains nothing from asynchrony, so JAX is timed at its best, inline.
    `BENCH_JAX_ASYNC_DISPATCH=1` keeps JAX's default, to reproduce the old figures.
    """
    if os.environ.get("BENCH_JAX_ASYNC_DISPATCH") == "1":
        return
    try:
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    except (AttributeError, KeyError, ValueError):  # an older JAX without the flag: its default
        pass


def _jax(case: Case, params: Any, data: tuple[Any, ...], direction: str, *, jit: bool) -> Prepared:
    import jax

    jax.config.update("jax_enable_x64", True)
    _jax_inline_dispatch(jax)
    import jax.numpy as jnp

    def to_jax(value: Any) -> Any:
        return jnp.asarray(value) if isinstance(value, np.ndarray) else value

    loss = rebind(case.loss, np=jnp, math=jnp, sliding_window_view=_jax_sliding_window_view)
    # int data (loop counts) stays static: it is a trip count, not an input
    static = tuple(i + 1 for i, d in enumerate(data) if isinstance(d, int))
    fn = jax.grad(loss) if direction == "reverse" else loss
    if jit:
        fn = jax.jit(fn, static_argnums=static)
    jparams, jdata = tree_map(to_jax, params), tuple(to_jax(d) for d in data)
    return lambda: jax.block_until_ready(fn(jparams, *jdata))


def prepare_jax_jit(case: Case, params: Any, data: tuple[Any, ...], direction: str) -> Prepared:
    return _jax(case, params, data, direction, jit=True)


def prepare_jax(case: Case, params: Any, data: tuple[Any, ...], direction: str) -> Prepared:
    return _jax(case, params, data, direction, jit=False)


# ------------------------------------------------------------------------------------ torch
def prepare_torch(case: Case, params: Any, data: tuple[Any, ...], direction: str) -> Prepared:
    import torch

    if case.torch_loss is None:
        raise Unavailable("no torch transcription of this case")
    if os.environ.get(TORCH_THREADS_VAR):  # a worker (bench.alone): the threads the main run gave torch
        torch.set_num_threads(int(os.environ[TORCH_THREADS_VAR]))

    def to_torch(value: Any, requires_grad: bool = False) -> Any:
        if isinstance(value, np.ndarray):
            t = torch.from_numpy(value.copy())
        elif isinstance(value, float):
            t = torch.tensor(value, dtype=torch.float64)
        else:
            return value
        return t.requires_grad_() if requires_grad else t

    tparams = tree_map(lambda v: to_torch(v, requires_grad=direction == "reverse"), params)
    tdata = tuple(to_torch(d) for d in data)
    leaves = tree_leaves(tparams)
    loss_fn = case.torch_loss

    def call() -> Any:
        for p in leaves:
            p.grad = None
        loss_fn(tparams, *tdata).backward()
        return tree_map(lambda p: p.grad, tparams)

    def forward() -> Any:
        with torch.no_grad():
            return loss_fn(tparams, *tdata)

    return call if direction == "reverse" else forward


SYSTEMS: tuple[System, ...] = (
    System("numpy (hand-written)", prepare_numpy),
    System("bytegrad", prepare_bytegrad, "bytegrad"),
    System("bytegrad (no numba)", prepare_bytegrad_no_numba, "bytegrad"),
    System("bytegrad (general)", _prepare_tier("general"), "bytegrad"),
    System("bytegrad (numpy program)", _prepare_tier("numpy"), "bytegrad"),
    System("bytegrad (numba program)", _prepare_tier("numba"), "bytegrad"),
    System("numba (hand-fused)", prepare_numba_fused, "numba"),
    System("autograd", prepare_autograd, "autograd"),
    System("jax-jit", prepare_jax_jit, "jax"),
    System("jax", prepare_jax, "jax"),
    System("torch", prepare_torch, "torch"),
)
REFERENCE = SYSTEMS[0].name


#: torch's intra-op thread count of the main run, for its worker processes (bench.alone)
TORCH_THREADS_VAR = "BENCH_TORCH_THREADS"


def torch_threads(n: int | None) -> int | None:
    """Sets torch's intra-op threads to `n` (NumPy's BLAS threads) when torch is loaded; worker
    processes started later (bench.worker) inherit the count through `BENCH_TORCH_THREADS`."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    if n:
        torch.set_num_threads(n)
    os.environ[TORCH_THREADS_VAR] = str(torch.get_num_threads())
    return torch.get_num_threads()
