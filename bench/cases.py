"""The benchmark cases: each a plain NumPy loss, its hand-written NumPy gradient, and inputs.

A loss is written as a user would write it for bytegrad: `loss(params, *data) -> scalar`, with
the module globals `np` and `math`. Peers that need their own NumPy (autograd, JAX) run the very
same code object with those globals rebound (`rebind`); torch gets its own transcription.

The hand-written gradient (`*_grad`) is the reference every system's gradient is checked
against and the denominator of every reverse ratio: one forward pass that keeps what the backward
pass needs, then the hand-derived backward pass, as a careful NumPy user would write it. The
forward direction times the plain loss call of each system (`loss` itself for NumPy).

Every case with array inputs also runs in float32 (`float32(case)`: same code, inputs cast).

To add a case: write `foo_loss`, `foo_grad`, `foo_inputs` (and `foo_torch` for torch), then add
a `Case` to `CASES`.
"""
from __future__ import annotations

import math
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

Inputs = tuple[Any, tuple[Any, ...]]  # (params, data): the gradient is taken w.r.t. params


@dataclass(frozen=True)
class Case:
    key: str                                   # short id, for --cases and the JSON
    name: str                                  # what the tables show
    loss: Callable[..., Any]                   # loss(params, *data), plain NumPy
    grad: Callable[..., Any]                   # hand-written gradient w.r.t. params
    inputs: Callable[[np.random.Generator], Inputs]
    torch_loss: Callable[..., Any] | None = None
    numba_grad: Callable[..., Any] | None = None   # a hand-fused Numba reference (elem10 only)
    quick: bool = False                        # part of `make bench` (else only `make bench-full`)
    target: float | None = None                # bytegrad must stay at or below this ratio to NumPy
    rtol: float = 1e-6                         # gradient check: np.allclose(rtol, atol=atol_rel * max|ref|)
    atol_rel: float = 1e-12
    dtype: str = "float64"


def rebind(fn: Callable[..., Any], **globals_: Any) -> Callable[..., Any]:
    """`fn` with some of its module globals replaced (`np=autograd.numpy`), same code object.

    Every function of this module is rebound into the same new namespace, so helpers that a
    loss calls see the replacement too.
    """
    namespace = dict(fn.__globals__)
    namespace.update(globals_)
    for name, value in fn.__globals__.items():
        if isinstance(value, types.FunctionType) and value.__globals__ is fn.__globals__:
            namespace[name] = types.FunctionType(value.__code__, namespace, value.__name__,
                                                 value.__defaults__, value.__closure__)
    return namespace[fn.__name__]


# -------------------------------------------------------------------------- Dense(n => n), tanh
def dense_loss(params, x):
    W, b = params
    return np.sum(np.tanh(W @ x + b[:, None]))


def dense_grad(params, x):
    W, b = params
    y = np.tanh(W @ x + b[:, None])
    d = 1.0 - y * y
    return d @ x.T, np.sum(d, axis=1)


def dense_torch(params, x):
    import torch
    W, b = params
    return torch.sum(torch.tanh(W @ x + b[:, None]))


def dense_inputs(n: int, batch: int = 128, dtype: Any = np.float64) -> Callable[[np.random.Generator], Inputs]:
    def make(rng: np.random.Generator) -> Inputs:
        W = (rng.standard_normal((n, n)) / math.sqrt(n)).astype(dtype)
        b = (0.1 * rng.standard_normal(n)).astype(dtype)
        x = rng.standard_normal((n, batch)).astype(dtype)
        return (W, b), (x,)
    return make


# ------------------------------------------- Conv((3, 3), c => c), tanh, 64x64 valid, NCHW
# Written as a NumPy user would: the 3x3 windows as a strided view, contracted with the kernel by
# `tensordot` (cross-correlation, as in deep-learning convolutions; output NHWC). The gradient is
# with respect to the kernel and the bias; x is data.
def conv_loss(params, x):
    W, b = params
    windows = sliding_window_view(x, (3, 3), axis=(2, 3))              # (B, C, H-2, W-2, 3, 3)
    y = np.tensordot(windows, W, axes=([1, 4, 5], [1, 2, 3]))          # (B, H-2, W-2, C_out)
    return np.sum(np.tanh(y + b))


def conv_grad(params, x):
    W, b = params
    windows = sliding_window_view(x, (3, 3), axis=(2, 3))
    cols = windows.transpose(0, 2, 3, 1, 4, 5).reshape(-1, W[0].size)   # im2col: one copy, used twice
    y = np.tanh(cols @ W.reshape(W.shape[0], -1).T + b)                 # (B*(H-2)*(W-2), C_out)
    d = 1.0 - y * y
    return (cols.T @ d).T.reshape(W.shape), np.sum(d, axis=0)


def conv_torch(params, x):
    import torch
    W, b = params
    return torch.sum(torch.tanh(torch.nn.functional.conv2d(x, W, b)))


def conv_inputs(c: int, batch: int, size: int = 64) -> Callable[[np.random.Generator], Inputs]:
    def make(rng: np.random.Generator) -> Inputs:
        W = rng.standard_normal((c, c, 3, 3)) / math.sqrt(9 * c)
        b = 0.1 * rng.standard_normal(c)
        x = rng.standard_normal((batch, c, size, size))
        return (W, b), (x,)
    return make


# ----------------------------------------------------- MLP 784-256-256-10, tanh, softmax-CE
def mlp_loss(params, x, y):
    h1 = np.tanh(params["W1"] @ x + params["b1"][:, None])
    h2 = np.tanh(params["W2"] @ h1 + params["b2"][:, None])
    z = params["W3"] @ h2 + params["b3"][:, None]
    z = z - np.max(z, axis=0, keepdims=True)
    logp = z - np.log(np.sum(np.exp(z), axis=0, keepdims=True))
    return -np.sum(y * logp) / x.shape[1]


def mlp_grad(params, x, y):
    W1, W2, W3 = params["W1"], params["W2"], params["W3"]
    h1 = np.tanh(W1 @ x + params["b1"][:, None])
    h2 = np.tanh(W2 @ h1 + params["b2"][:, None])
    z = W3 @ h2 + params["b3"][:, None]
    e = np.exp(z - np.max(z, axis=0, keepdims=True))
    z_bar = (e / np.sum(e, axis=0, keepdims=True) - y) / x.shape[1]    # softmax - onehot
    a2_bar = (W3.T @ z_bar) * (1.0 - h2 * h2)
    a1_bar = (W2.T @ a2_bar) * (1.0 - h1 * h1)
    return {
        "W1": a1_bar @ x.T, "b1": np.sum(a1_bar, axis=1),
        "W2": a2_bar @ h1.T, "b2": np.sum(a2_bar, axis=1),
        "W3": z_bar @ h2.T, "b3": np.sum(z_bar, axis=1),
    }


def mlp_torch(params, x, y):
    import torch
    h1 = torch.tanh(params["W1"] @ x + params["b1"][:, None])
    h2 = torch.tanh(params["W2"] @ h1 + params["b2"][:, None])
    z = params["W3"] @ h2 + params["b3"][:, None]
    z = z - torch.amax(z, dim=0, keepdim=True)
    logp = z - torch.log(torch.sum(torch.exp(z), dim=0, keepdim=True))
    return -torch.sum(y * logp) / x.shape[1]


def mlp_inputs(sizes: tuple[int, ...] = (784, 256, 256, 10), batch: int = 128) -> Callable[[np.random.Generator], Inputs]:
    def make(rng: np.random.Generator) -> Inputs:
        params = {}
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
            params[f"W{i}"] = rng.standard_normal((n_out, n_in)) / math.sqrt(n_in)
            params[f"b{i}"] = 0.1 * rng.standard_normal(n_out)
        x = rng.standard_normal((sizes[0], batch))
        y = np.eye(sizes[-1])[:, rng.integers(0, sizes[-1], batch)]   # one-hot columns
        return params, (x, y)
    return make


# ------------------------------------------------------------ sin chain: x = sin(x), n times
def sin_chain_loss(x, n):
    for _ in range(n):
        x = np.sin(x)
    return x.sum()


def sin_chain_grad(x, n):
    cos = []
    for _ in range(n):
        cos.append(np.cos(x))
        x = np.sin(x)
    x_bar = np.ones_like(x)
    for c in reversed(cos):
        x_bar *= c
    return x_bar


def sin_chain_torch(x, n):
    import torch
    for _ in range(n):
        x = torch.sin(x)
    return x.sum()


def sin_chain_inputs(n: int, size: int = 1) -> Callable[[np.random.Generator], Inputs]:
    def make(rng: np.random.Generator) -> Inputs:
        return rng.uniform(0.5, 1.5, size), (n,)
    return make


# -------------------------------------- Python loop: x = x * sin(x) + 0.1 * cos(x), n times
def loop_loss(x, n):
    for _ in range(n):
        x = x * np.sin(x) + 0.1 * np.cos(x)
    return np.sum(x)


def loop_grad(x, n):
    dx = []
    for _ in range(n):
        s, c = np.sin(x), np.cos(x)
        dx.append(0.9 * s + x * c)          # d/dx (x sin x + 0.1 cos x)
        x = x * s + 0.1 * c
    x_bar = np.ones_like(x)
    for d in reversed(dx):
        x_bar *= d
    return x_bar


def loop_torch(x, n):
    import torch
    for _ in range(n):
        x = x * torch.sin(x) + 0.1 * torch.cos(x)
    return torch.sum(x)


def loop_scalar_loss(x, n):
    for _ in range(n):
        x = x * math.sin(x) + 0.1 * math.cos(x)
    return x


def loop_scalar_grad(x, n):
    dx = []
    for _ in range(n):
        s, c = math.sin(x), math.cos(x)
        dx.append(0.9 * s + x * c)
        x = x * s + 0.1 * c
    x_bar = 1.0
    for d in reversed(dx):
        x_bar *= d
    return x_bar


def loop_inputs(n: int, size: int | None) -> Callable[[np.random.Generator], Inputs]:
    def make(rng: np.random.Generator) -> Inputs:
        x = rng.uniform(0.5, 1.5, size) if size is not None else 0.8
        return x, (n,)
    return make


# ------------------------------------------------------------------------------------ CASES
def cast(tree: Any, source: Any, target: Any) -> Any:
    """`tree` with its arrays of dtype `source` cast to `target` (dicts, lists and tuples mirrored)."""
    if isinstance(tree, dict):
        return {k: cast(v, source, target) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(cast(v, source, target) for v in tree)
    if isinstance(tree, np.ndarray) and tree.dtype == source:
        return tree.astype(target)
    return tree


def float32(case: Case, *, quick: bool | None = None, rtol: float = 1e-4, atol_rel: float = 1e-5) -> Case:
    """`case` with its float64 arrays cast to float32.

    Every system's result, the hand-written NumPy one included, is checked against the float64
    result of the same (float32-rounded) inputs, with float32 tolerances.
    """
    inputs = case.inputs

    def make(rng: np.random.Generator) -> Inputs:
        params, data = inputs(rng)
        return cast(params, np.float64, np.float32), cast(data, np.float64, np.float32)

    return Case(case.key + "f32", case.name + ", float32", case.loss, case.grad, make, case.torch_loss,
                quick=case.quick if quick is None else quick, rtol=rtol, atol_rel=atol_rel, dtype="float32")


# ---------------------------- a straight-line elementwise expression of ten operations
def elem10_loss(x):
    return np.sum(np.tanh(x) * np.exp(-x * x) + np.sin(x) / (1.0 + x * x) - 0.5 * x)


def elem10_grad(x):
    t = np.tanh(x)
    e = np.exp(-x * x)
    q = 1.0 + x * x
    return (1.0 - t * t) * e - 2.0 * x * t * e + (np.cos(x) * q - 2.0 * x * np.sin(x)) / (q * q) - 0.5


def elem10_torch(x):
    import torch
    return torch.sum(torch.tanh(x) * torch.exp(-x * x) + torch.sin(x) / (1.0 + x * x) - 0.5 * x)


_ELEM10_NUMBA: list[Any] = []


def elem10_numba(x):
    """Forward and backward in one compiled loop: what a user fusing by hand with Numba writes."""
    if not _ELEM10_NUMBA:
        import numba

        @numba.njit(cache=False, fastmath=False)
        def kernel(x, g):
            total = 0.0
            for i in range(x.shape[0]):
                xi = x[i]
                t = math.tanh(xi)
                e = math.exp(-xi * xi)
                q = 1.0 + xi * xi
                s = math.sin(xi)
                total += t * e + s / q - 0.5 * xi
                g[i] = (1.0 - t * t) * e - 2.0 * xi * t * e + (math.cos(xi) * q - 2.0 * xi * s) / (q * q) - 0.5
            return total

        _ELEM10_NUMBA.append(kernel)
    g = np.empty_like(x)
    _ELEM10_NUMBA[0](x, g)
    return g


def elem10_inputs(size: int = 1000) -> Callable[[np.random.Generator], Inputs]:
    def make(rng: np.random.Generator) -> Inputs:
        return rng.uniform(-2.0, 2.0, size), ()
    return make


_BASE: tuple[Case, ...] = (
    Case("dense2", "Dense(2=>2, tanh), batch 128", dense_loss, dense_grad, dense_inputs(2),
         dense_torch, quick=True, target=2.0),
    Case("dense20", "Dense(20=>20, tanh), batch 128", dense_loss, dense_grad, dense_inputs(20),
         dense_torch, quick=True, target=1.4),
    Case("dense200", "Dense(200=>200, tanh), batch 128", dense_loss, dense_grad, dense_inputs(200),
         dense_torch),
    Case("dense2000", "Dense(2000=>2000, tanh), batch 128", dense_loss, dense_grad, dense_inputs(2000),
         dense_torch),
    Case("conv1", "Conv(3x3, 1=>1, tanh), 64x64 valid, batch 128", conv_loss, conv_grad, conv_inputs(1, 128),
         conv_torch),
    Case("conv3", "Conv(3x3, 3=>3, tanh), 64x64 valid, batch 128", conv_loss, conv_grad, conv_inputs(3, 128),
         conv_torch),
    # batch 32, not 128: a hand-written NumPy gradient takes about 1 s per call at batch 128
    Case("conv16", "Conv(3x3, 16=>16, tanh), 64x64 valid, batch 32 (not 128)", conv_loss, conv_grad,
         conv_inputs(16, 32), conv_torch),
    Case("mlp", "MLP 784-256-256-10 tanh + softmax-CE, batch 128", mlp_loss, mlp_grad, mlp_inputs(),
         mlp_torch, quick=True, target=1.1),
    Case("elem10", "elementwise expression, 10 ops, x: array[1000]", elem10_loss, elem10_grad,
         elem10_inputs(), elem10_torch, numba_grad=elem10_numba, quick=True),
    Case("sin10", "sin chain, 10 ops, x: array[1]", sin_chain_loss, sin_chain_grad, sin_chain_inputs(10),
         sin_chain_torch),
    Case("sin100", "sin chain, 100 ops, x: array[1]", sin_chain_loss, sin_chain_grad, sin_chain_inputs(100),
         sin_chain_torch, quick=True, target=1.5),
    Case("loop50", "Python loop x50: x=x*sin(x)+0.1*cos(x), x: array[10]", loop_loss, loop_grad,
         loop_inputs(50, 10), loop_torch, quick=True),
    Case("loop50f", "Python loop x50, x: Python float", loop_scalar_loss, loop_scalar_grad,
         loop_inputs(50, None), loop_torch, quick=True),
)
_FLOAT32 = {"dense2", "dense20", "dense200", "dense2000", "conv1", "conv3", "conv16", "mlp", "sin100",
            "loop50", "elem10"}
_QUICK_FLOAT32 = {"mlp"}
# float32 tolerances where rounding legitimately adds up: conv's bias gradient sums ~500 000 float32
# terms (NumPy's column sum `np.sum(d, axis=0)` of a tall array is off by ~2e-4 of the float64
# result there; autograd and JAX by ~1e-6, torch by ~6e-5), and the loop multiplies 50 derivatives
# (errors of 2e-5 to 1.2e-4 depending on the system).
_FLOAT32_TOLERANCES = {"conv1": (1e-3, 1e-4), "conv3": (1e-3, 1e-4), "conv16": (1e-3, 1e-4),
                       "loop50": (1e-3, 1e-4)}

CASES: tuple[Case, ...] = tuple(
    c for base in _BASE
    for c in ((base, float32(base, quick=base.key in _QUICK_FLOAT32,
                             **dict(zip(("rtol", "atol_rel"), _FLOAT32_TOLERANCES.get(base.key, (1e-4, 1e-5))))))
              if base.key in _FLOAT32 else (base,))
)


# ------------------------------------------- the seed's example: sum of squared singular values
def svd_loss(A):
    s = np.linalg.svd(A, compute_uv=False)
    return np.sum(s ** 2)


def svd_grad(A):
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    return (U * (2.0 * s)) @ Vt


def svd_inputs(n: int) -> Callable[[np.random.Generator], Inputs]:
    def make(rng: np.random.Generator) -> Inputs:
        return rng.standard_normal((n, n)), ()
    return make


#: the seed's own example (bench/ttfg.py's second case; not one of `CASES`, whose steady state
#: bench.core times: a 20x20 SVD is LAPACK's time, whoever calls it)
SVD = Case("svd", "sum of squared singular values, A: 20x20", svd_loss, svd_grad, svd_inputs(20),
           rtol=1e-8)


def by_key(key: str) -> Case:
    """A case of `CASES`, or `SVD`, by its key."""
    return next(c for c in CASES + (SVD,) if c.key == key)


def get_cases(keys: list[str] | None = None, *, quick: bool = False) -> list[Case]:
    """The cases named by `keys` (in `CASES` order), else the quick ones or all of them."""
    if keys:
        unknown = set(keys) - {c.key for c in CASES}
        if unknown:
            raise SystemExit(f"unknown case(s) {sorted(unknown)}; known: {[c.key for c in CASES]}")
        return [c for c in CASES if c.key in keys]
    return [c for c in CASES if c.quick or not quick]
