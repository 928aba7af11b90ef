"""The systems a benchmark compares: how each one computes the gradient of a `Case`.

`prepare(case, params, data)` returns a zero-argument function that computes the whole
gradient (forward + backward) and returns it as NumPy-comparable leaves, or raises
`Unavailable` when the system is not installed or cannot express the case. Conversions of the
inputs to a system's own arrays happen in `prepare`, outside the timed call.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.cases import Case, rebind

Prepared = Callable[[], Any]


class Unavailable(Exception):
    """The system is not installed here, or does not support this case."""


@dataclass(frozen=True)
class System:
    name: str
    prepare: Callable[[Case, Any, tuple[Any, ...]], Prepared]
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
def prepare_numpy(case: Case, params: Any, data: tuple[Any, ...]) -> Prepared:
    grad = case.grad
    return lambda: grad(params, *data)


# --------------------------------------------------------------------------------- bytegrad
def prepare_bytegrad(case: Case, params: Any, data: tuple[Any, ...]) -> Prepared:
    import bytegrad

    grad = bytegrad.grad(case.loss)
    return lambda: grad(params, *data)


# --------------------------------------------------------------------------------- autograd
def prepare_autograd(case: Case, params: Any, data: tuple[Any, ...]) -> Prepared:
    import autograd
    import autograd.numpy as anp

    grad = autograd.grad(rebind(case.loss, np=anp, math=anp))
    return lambda: grad(params, *data)


# -------------------------------------------------------------------------------------- JAX
def _jax(case: Case, params: Any, data: tuple[Any, ...], *, jit: bool) -> Prepared:
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    def to_jax(value: Any) -> Any:
        return jnp.asarray(value) if isinstance(value, np.ndarray) else value

    loss = rebind(case.loss, np=jnp, math=jnp)
    # int data (loop counts) stays static: it is a trip count, not an input
    static = tuple(i + 1 for i, d in enumerate(data) if isinstance(d, int))
    grad = jax.grad(loss)
    if jit:
        grad = jax.jit(grad, static_argnums=static)
    jparams, jdata = tree_map(to_jax, params), tuple(to_jax(d) for d in data)
    return lambda: jax.block_until_ready(grad(jparams, *jdata))


def prepare_jax_jit(case: Case, params: Any, data: tuple[Any, ...]) -> Prepared:
    return _jax(case, params, data, jit=True)


def prepare_jax(case: Case, params: Any, data: tuple[Any, ...]) -> Prepared:
    return _jax(case, params, data, jit=False)


# ------------------------------------------------------------------------------------ torch
def prepare_torch(case: Case, params: Any, data: tuple[Any, ...]) -> Prepared:
    import torch

    if case.torch_loss is None:
        raise Unavailable("no torch transcription of this case")

    def to_torch(value: Any, requires_grad: bool = False) -> Any:
        if isinstance(value, np.ndarray):
            t = torch.from_numpy(value.copy())
        elif isinstance(value, float):
            t = torch.tensor(value, dtype=torch.float64)
        else:
            return value
        return t.requires_grad_() if requires_grad else t

    tparams = tree_map(lambda v: to_torch(v, requires_grad=True), params)
    tdata = tuple(to_torch(d) for d in data)
    leaves = tree_leaves(tparams)
    loss_fn = case.torch_loss

    def call() -> Any:
        for p in leaves:
            p.grad = None
        loss_fn(tparams, *tdata).backward()
        return tree_map(lambda p: p.grad, tparams)

    return call


SYSTEMS: tuple[System, ...] = (
    System("numpy (hand-written)", prepare_numpy),
    System("bytegrad", prepare_bytegrad, "bytegrad"),
    System("autograd", prepare_autograd, "autograd"),
    System("jax-jit", prepare_jax_jit, "jax"),
    System("jax", prepare_jax, "jax"),
    System("torch", prepare_torch, "torch"),
)
REFERENCE = SYSTEMS[0].name


def torch_threads(n: int | None) -> int | None:
    """Sets torch's intra-op threads to `n` (NumPy's BLAS threads) when torch is loaded."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    if n:
        torch.set_num_threads(n)
    return torch.get_num_threads()
