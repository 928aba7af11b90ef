"""Realistic programs, written as a user writes them (issue 27): each in NumPy for bytegrad and,
where a JAX version of the same code is natural, in `jax.numpy` beside it.

Each program is a `Program`: a loss over arrays, the positions it is differentiated at, inputs made
from a seed, and the JAX twin (None where it would not be the same code). Nothing here is shaped
to suit the compiled tier: closures, inner functions, a model class with `__call__`/`loss`, a list
of layers, as they come.

The JAX twin is the NumPy code itself, with `np` read as `jax.numpy` (`in_jax`): the loss, the
functions it defines inside, and the classes it names are the same functions over other globals,
so the two versions cannot drift apart. (Each loss reads only what `jax.numpy` has under NumPy's
names and never writes into an array.)
"""
from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

__all__ = ["PROGRAMS", "Program", "in_jax"]


@dataclass
class Program:
    name: str
    what: str
    loss: Callable[..., Any]
    wrt: Any
    inputs: Callable[[np.random.Generator], tuple]
    jax_loss: Optional[Callable[[Any], Callable[..., Any]]] = None  # jnp -> the same loss in JAX


def in_jax(loss: Callable[..., Any], *classes: type) -> Callable[[Any], Callable[..., Any]]:
    """`jnp -> loss` with `np` read as `jnp`: the same code over a copy of its module's globals, in
    which `np` is `jnp` and each of `classes` (the loss builds them) is a copy whose methods read
    the same copy."""
    def twin(jnp: Any) -> Callable[..., Any]:
        names = dict(loss.__globals__, np=jnp)
        for cls in classes:
            names[cls.__name__] = type(cls.__name__, cls.__bases__, {
                k: _over(v, names) if isinstance(v, types.FunctionType) else v
                for k, v in vars(cls).items() if k not in ("__dict__", "__weakref__")})
        return _over(loss, names)
    return twin


def _over(fn: types.FunctionType, names: dict) -> types.FunctionType:
    """`fn` reading its globals from `names`."""
    return types.FunctionType(fn.__code__, names, fn.__name__, fn.__defaults__, fn.__closure__)


# ---- an ODE integrator: RK4, 40 steps, the right-hand side an inner function ----------------------


def ode_rk4(A, k, y0):
    dt = 0.05

    def rhs(y):
        return np.tanh(A @ y) - k * y

    y = y0
    for _ in range(40):
        k1 = rhs(y)
        k2 = rhs(y + 0.5 * dt * k1)
        k3 = rhs(y + 0.5 * dt * k2)
        k4 = rhs(y + dt * k3)
        y = y + dt / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
    return np.sum(y ** 2)


def _ode_inputs(rng: np.random.Generator) -> tuple:
    return (rng.standard_normal((8, 8)) / 3.0, rng.uniform(0.1, 0.5, 8), rng.standard_normal(8))


# ---- an RNN: 20 steps, hidden 32 -----------------------------------------------------------------


def rnn(W, U, b, xs, target):
    h = np.zeros(32)
    for t in range(20):
        h = np.tanh(W @ h + U @ xs[t] + b)
    return np.sum((h - target) ** 2)


def _rnn_inputs(rng: np.random.Generator) -> tuple:
    return (rng.standard_normal((32, 32)) / 6.0, rng.standard_normal((32, 8)) / 3.0, rng.standard_normal(32) / 10.0,
            rng.standard_normal((20, 8)), rng.standard_normal(32) / 2.0)


# ---- attention: 16 tokens, width 32 ---------------------------------------------------------------


def attention(Wq, Wk, Wv, X):
    Q = X @ Wq
    K = X @ Wk
    V = X @ Wv
    scores = Q @ K.T / np.sqrt(32.0)
    scores = scores - scores.max(axis=1, keepdims=True)
    p = np.exp(scores)
    p = p / p.sum(axis=1, keepdims=True)
    out = p @ V
    return np.sum(out ** 2) / out.size


def _attention_inputs(rng: np.random.Generator) -> tuple:
    return tuple(rng.standard_normal((32, 32)) / 6.0 for _ in range(3)) + (rng.standard_normal((16, 32)),)


# ---- a model class with layers (a plain Python class, `__call__` and `loss`) ----------------------


class Dense:
    def __init__(self, W, b, activation=True):
        self.W = W
        self.b = b
        self.activation = activation

    def __call__(self, x):
        z = x @ self.W + self.b
        return np.tanh(z) if self.activation else z


class Model:
    def __init__(self, W1, b1, W2, b2):
        self.layers = [Dense(W1, b1), Dense(W2, b2, activation=False)]

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def loss(self, x, y):
        return np.mean((self(x) - y) ** 2)


def model_loss(W1, b1, W2, b2, x, y):
    return Model(W1, b1, W2, b2).loss(x, y)


def _model_inputs(rng: np.random.Generator) -> tuple:
    return (rng.standard_normal((16, 32)) / 4.0, np.zeros(32), rng.standard_normal((32, 4)) / 6.0, np.zeros(4),
            rng.standard_normal((64, 16)), rng.standard_normal((64, 4)))


# ---- a training step over a list of layers --------------------------------------------------------


def train_loss(layers, x, y):
    h = x
    for W, b in layers[:-1]:
        h = np.tanh(h @ W + b)
    W, b = layers[-1]
    out = h @ W + b
    return np.mean((out - y) ** 2)


def _train_inputs(rng: np.random.Generator) -> tuple:
    sizes = [16, 32, 32, 1]
    layers = [(rng.standard_normal((m, n)) / np.sqrt(m), np.zeros(n)) for m, n in zip(sizes[:-1], sizes[1:])]
    return (layers, rng.standard_normal((64, 16)), rng.standard_normal((64, 1)))


PROGRAMS = [
    Program("ode_rk4", "RK4, 40 steps, 8 states; the right-hand side an inner function", ode_rk4, (0, 1),
            _ode_inputs, in_jax(ode_rk4)),
    Program("rnn", "RNN, 20 steps, hidden 32, input 8: h = tanh(W @ h + U @ x[t] + b)", rnn, (0, 1, 2),
            _rnn_inputs, in_jax(rnn)),
    Program("attention", "self-attention, 16 tokens x 32", attention, (0, 1, 2), _attention_inputs,
            in_jax(attention)),
    Program("model_class", "a model class (Dense layers in a list, __call__ and loss), batch 64, 16-32-4",
            model_loss, (0, 1, 2, 3), _model_inputs, in_jax(model_loss, Dense, Model)),
    Program("train_layers", "a training step's loss over a list of (W, b) layers, batch 64, 16-32-32-1",
            train_loss, 0, _train_inputs, in_jax(train_loss)),
]
