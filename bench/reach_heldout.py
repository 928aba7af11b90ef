"""A second set of everyday programs for the compiled tier's reach (issue 27), held out: written in one
sitting as users write them, without reading the tier's code or its refusals, and measured once before
any change was made for them (31 of 34 compiled under tiers numpy and numba; no disagreement). Kept
apart from bench/reach_programs.py, whose programs the tier was then fixed against, so that this set
stays a fair sample. `bench/reach.py` reports both.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import numpy as np

from bench.reach_programs import Case

__all__ = ["HELDOUT"]

HELDOUT: list[Case] = []


def program(wrt: Any, inputs: Callable[[np.random.Generator], tuple]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def add(fn: Callable[..., Any]) -> Callable[..., Any]:
        HELDOUT.append(Case(fn.__name__, fn, wrt, inputs))
        return fn
    return add


@program(0, lambda r: (r.normal(size=3), r.normal(size=(20, 3)), r.normal(size=20)))
def linear_regression_mse(w, X, y):
    pred = X.dot(w)
    err = pred - y
    return (err ** 2).mean()


@program(0, lambda r: (r.normal(size=4), r.normal(size=(30, 4)), (r.random(30) > 0.5)))
def logistic_bool_labels(w, X, y):
    p = 1 / (1 + np.exp(-(X @ w)))
    return -np.mean(np.where(y, np.log(p), np.log(1 - p)))


@program(0, lambda r: (r.normal(size=(3, 2)),))
def frobenius_and_trace(A):
    G = A.T @ A
    return np.trace(G) + np.linalg.norm(A, "fro")


@program(0, lambda r: (r.normal(size=6),))
def softmax_entropy(z):
    e = np.exp(z - z.max())
    p = e / e.sum()
    return -(p * np.log(p)).sum()


@program(0, lambda r: (r.normal(size=(4, 4)),))
def attention_scores_masked(Q):
    s = Q @ Q.T / math.sqrt(Q.shape[1])
    mask = np.triu(np.ones_like(s), k=1).astype(bool)
    s = np.where(mask, -1e9, s)
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    w = w / w.sum(axis=-1, keepdims=True)
    return (w @ Q).sum()


class Linear:
    def __init__(self, n_in, n_out, rng):
        self.W = rng.normal(size=(n_in, n_out)) * 0.1
        self.b = np.zeros(n_out)
    def __call__(self, x):
        return x @ self.W + self.b


class MLP:
    def __init__(self, sizes, seed=0):
        rng = np.random.default_rng(seed)
        self.layers = [Linear(a, b, rng) for a, b in zip(sizes[:-1], sizes[1:])]
    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = np.maximum(x, 0)
        return x


_NET = MLP([3, 8, 1])


@program(0, lambda r: (r.normal(size=(16, 3)),))
def global_mlp_forward_input_grad(x):
    return float(np.sum(_NET.forward(x) ** 2))


@program(0, lambda r: (r.normal(size=5),))
def python_loop_sum_of_squares(x):
    total = 0.0
    for i in range(len(x)):
        total += x[i] ** 2 * (i + 1)
    return total


@program(0, lambda r: (r.normal(size=5),))
def list_comprehension_then_sum(x):
    terms = [np.sin(xi) * np.cos(xi) for xi in x]
    return sum(terms)


@program(0, lambda r: (float(r.uniform(0.5, 2.0)),))
def scalar_math_module(a):
    return math.exp(-a) * math.sin(3 * a) + math.log1p(a ** 2)


@program(0, lambda r: (r.normal(size=(5, 5)),))
def cholesky_logdet(A):
    S = A @ A.T + 5 * np.eye(5)
    L = np.linalg.cholesky(S)
    return 2 * np.sum(np.log(np.diag(L)))


@program(0, lambda r: (r.normal(size=8),))
def cumulative_returns(r):
    wealth = np.cumprod(1 + 0.01 * r)
    drawdown = wealth / np.maximum.accumulate(wealth) - 1
    return -wealth[-1] + drawdown.min() ** 2


@program(0, lambda r: (r.normal(size=(6, 2)),))
def pairwise_distances_broadcast(P):
    d = P[:, None, :] - P[None, :, :]
    r2 = (d ** 2).sum(-1) + np.eye(len(P))
    return np.sum(1 / r2)

@dataclass


class Hyper:
    lr: float = 0.1
    l2: float = 1e-3
    steps: int = 3


@program(0, lambda r: (r.normal(size=4), r.normal(size=(10, 4)), r.normal(size=10)))
def unrolled_gd_with_dataclass(w0, X, y, hp=Hyper()):
    w = w0
    for _ in range(hp.steps):
        g = X.T @ (X @ w - y) / len(y) + hp.l2 * w
        w = w - hp.lr * g
    return np.mean((X @ w - y) ** 2)


@program(0, lambda r: (r.normal(size=3),))
def lambda_in_dict(x):
    ops = {"a": lambda v: v ** 2, "b": lambda v: np.exp(-v)}
    return sum(np.sum(f(x)) for f in ops.values())


@program(0, lambda r: (r.normal(size=(3, 3)),))
def eigvalsh_sum(A):
    S = (A + A.T) / 2
    return np.sum(np.linalg.eigvalsh(S) ** 2)


@program(0, lambda r: (r.normal(size=10),))
def sort_and_top_k(x):
    top = np.sort(x)[-3:]
    return np.sum(top ** 2)


@program((0, 1), lambda r: (r.normal(size=2), r.normal(size=2)))
def two_argument_dot_and_cross(a, b):
    return np.dot(a, b) ** 2 + (a[0] * b[1] - a[1] * b[0]) ** 2


class Params(NamedTuple):
    w: np.ndarray
    b: float


@program(0, lambda r: (Params(r.normal(size=3), 0.5), r.normal(size=(8, 3))))
def namedtuple_with_float_field(p, X):
    return np.sum(np.tanh(X @ p.w + p.b))


@program(0, lambda r: (r.normal(size=5),))
def numerically_stable_logsumexp(x):
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


@program(0, lambda r: (r.normal(size=(2, 3)),))
def reshape_and_flatten(A):
    v = A.reshape(-1)
    B = v.reshape(3, 2)
    return np.sum(A @ B) + np.sum(A.ravel() ** 3)


@program(0, lambda r: (r.normal(size=5),))
def conditional_penalty_on_norm(x):
    n = np.linalg.norm(x)
    if n > 1.0:
        return n ** 2
    return n


@program(0, lambda r: (r.normal(size=4),))
def string_keyed_config_lookup(x, act="tanh"):
    acts = {"tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v))}
    return np.sum(acts[act](x))


@program(0, lambda r: (r.normal(size=(5, 3)),))
def normalize_rows(X):
    norms = np.sqrt((X ** 2).sum(axis=1, keepdims=True))
    Xn = X / norms
    return np.sum(Xn @ Xn.T)


@program(0, lambda r: (float(r.uniform(0.5, 1.5)),))
def bisection_free_fixed_point(a):
    x = 1.0
    for _ in range(20):
        x = math.cos(a * x)
    return x


@program(0, lambda r: (r.normal(size=6),))
def enumerate_weighted(x):
    s = 0.0
    for i, v in enumerate(x):
        s = s + v * 0.5 ** i
    return s


@program(0, lambda r: (r.normal(size=(3, 4)),))
def concatenate_and_split(A):
    B = np.concatenate([A, A ** 2], axis=0)
    top, bottom = np.split(B, 2)
    return np.sum(top * bottom)


@program(0, lambda r: (r.normal(size=5), r.integers(0, 5, size=3)))
def gather_with_int_index(x, idx):
    return np.sum(x[idx] ** 2)


@program(0, lambda r: (r.normal(size=(4, 4)),))
def matrix_power_and_inverse(A):
    M = A + 4 * np.eye(4)
    return np.sum(np.linalg.inv(M)) + np.sum(np.linalg.matrix_power(M, 3)) * 1e-3


@program(0, lambda r: (r.normal(size=7),))
def variance_std_stats(x):
    return x.var() + x.std(ddof=1) + np.median(x) ** 2


@program(0, lambda r: (r.normal(size=4),))
def abs_and_sign(x):
    return np.sum(np.abs(x) * np.sign(x) ** 2 + np.fabs(x))


@program(0, lambda r: ([r.normal(size=3) for _ in range(3)],))
def list_of_arrays_stack(xs):
    M = np.stack(xs)
    return np.sum(M @ M.T)


@program(0, lambda r: (r.normal(size=3),))
def closure_counter_free_helper(x):
    def sq(v):
        return v * v
    def cube(v):
        return sq(v) * v
    return np.sum(cube(x) + sq(x))


@program(0, lambda r: (r.normal(size=(8,)),))
def max_pooling_reshape(x):
    return np.sum(x.reshape(4, 2).max(axis=1) ** 2)


@program(0, lambda r: (r.normal(size=5),))
def clip_grad_style_norm(x, max_norm=1.0):
    n = np.sqrt(np.sum(x ** 2))
    scale = min(1.0, max_norm / (n + 1e-6))
    return np.sum((x * scale) ** 2)
