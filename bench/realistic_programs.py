"""Realistic programs, written as a user writes them (issue 27): each in NumPy for bytegrad and,
where a JAX version of the same code is natural, in `jax.numpy` beside it.

Each program is a `Program`: a loss over arrays, the positions it is differentiated at, inputs made
from a seed, and the JAX twin (None where it would not be the same code). Nothing here is shaped
to suit the compiled tier: closures, inner functions, a model class with `__call__`/`loss`, a list
of layers, as they come.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

__all__ = ["PROGRAMS", "Program"]


@dataclass
class Program:
    name: str
    what: str
    loss: Callable[..., Any]
    wrt: Any
    inputs: Callable[[np.random.Generator], tuple]
    jax_loss: Optional[Callable[[Any], Callable[..., Any]]] = None  # jnp -> the same loss in JAX


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


def _ode_jax(jnp: Any) -> Callable[..., Any]:
    def ode_rk4_jax(A, k, y0):
        dt = 0.05

        def rhs(y):
            return jnp.tanh(A @ y) - k * y

        y = y0
        for _ in range(40):
            k1 = rhs(y)
            k2 = rhs(y + 0.5 * dt * k1)
            k3 = rhs(y + 0.5 * dt * k2)
            k4 = rhs(y + dt * k3)
            y = y + dt / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        return jnp.sum(y ** 2)
    return ode_rk4_jax


# ---- an RNN: 20 steps, hidden 32 -----------------------------------------------------------------


def rnn(W, U, b, xs, target):
    h = np.zeros(32)
    for t in range(20):
        h = np.tanh(W @ h + U @ xs[t] + b)
    return np.sum((h - target) ** 2)


def _rnn_inputs(rng: np.random.Generator) -> tuple:
    return (rng.standard_normal((32, 32)) / 6.0, rng.standard_normal((32, 8)) / 3.0, rng.standard_normal(32) / 10.0,
            rng.standard_normal((20, 8)), rng.standard_normal(32) / 2.0)


def _rnn_jax(jnp: Any) -> Callable[..., Any]:
    def rnn_jax(W, U, b, xs, target):
        h = jnp.zeros(32)
        for t in range(20):
            h = jnp.tanh(W @ h + U @ xs[t] + b)
        return jnp.sum((h - target) ** 2)
    return rnn_jax


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


def _attention_jax(jnp: Any) -> Callable[..., Any]:
    def attention_jax(Wq, Wk, Wv, X):
        Q = X @ Wq
        K = X @ Wk
        V = X @ Wv
        scores = Q @ K.T / jnp.sqrt(32.0)
        scores = scores - scores.max(axis=1, keepdims=True)
        p = jnp.exp(scores)
        p = p / p.sum(axis=1, keepdims=True)
        out = p @ V
        return jnp.sum(out ** 2) / out.size
    return attention_jax


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


def _model_jax(jnp: Any) -> Callable[..., Any]:
    class DenseJ:
        def __init__(self, W, b, activation=True):
            self.W, self.b, self.activation = W, b, activation

        def __call__(self, x):
            z = x @ self.W + self.b
            return jnp.tanh(z) if self.activation else z

    class ModelJ:
        def __init__(self, W1, b1, W2, b2):
            self.layers = [DenseJ(W1, b1), DenseJ(W2, b2, activation=False)]

        def __call__(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

        def loss(self, x, y):
            return jnp.mean((self(x) - y) ** 2)

    def model_loss_jax(W1, b1, W2, b2, x, y):
        return ModelJ(W1, b1, W2, b2).loss(x, y)
    return model_loss_jax


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


def _train_jax(jnp: Any) -> Callable[..., Any]:
    def train_loss_jax(layers, x, y):
        h = x
        for W, b in layers[:-1]:
            h = jnp.tanh(h @ W + b)
        W, b = layers[-1]
        out = h @ W + b
        return jnp.mean((out - y) ** 2)
    return train_loss_jax


PROGRAMS = [
    Program("ode_rk4", "RK4, 40 steps, 8 states; the right-hand side an inner function", ode_rk4, (0, 1),
            _ode_inputs, _ode_jax),
    Program("rnn", "RNN, 20 steps, hidden 32, input 8: h = tanh(W @ h + U @ x[t] + b)", rnn, (0, 1, 2),
            _rnn_inputs, _rnn_jax),
    Program("attention", "self-attention, 16 tokens x 32", attention, (0, 1, 2), _attention_inputs,
            _attention_jax),
    Program("model_class", "a model class (Dense layers in a list, __call__ and loss), batch 64, 16-32-4",
            model_loss, (0, 1, 2, 3), _model_inputs, _model_jax),
    Program("train_layers", "a training step's loss over a list of (W, b) layers, batch 64, 16-32-32-1",
            train_loss, 0, _train_inputs, _train_jax),
]
