"""Everyday programs for the compiled tier's reach (issue 27), written as users write them, apart from
the test catalogue (tests/functions.py): nothing here was shaped to suit the tier. `bench/reach.py`
reports which of them the tier compiles, and checks every program against the general path.

Each entry: a name, the loss, the positions it is differentiated at, and its inputs (from a seed).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import numpy as np

__all__ = ["PROGRAMS", "Case"]


@dataclass
class Case:
    name: str
    loss: Callable[..., Any]
    wrt: Any
    inputs: Callable[[np.random.Generator], tuple]


PROGRAMS: list[Case] = []


def program(wrt: Any, inputs: Callable[[np.random.Generator], tuple]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def add(fn: Callable[..., Any]) -> Callable[..., Any]:
        PROGRAMS.append(Case(fn.__name__, fn, wrt, inputs))
        return fn
    return add


def _xy(rng: np.random.Generator, n: int = 32, d: int = 5) -> tuple:
    return rng.normal(size=(n, d)), (rng.random(n) > 0.5).astype(float)


# ---- regression and classification --------------------------------------------------------------


@program(0, lambda r: (r.normal(size=5), *_xy(r)))
def logistic_l2(w, X, y, lam=0.01):
    z = X @ w
    p = 1.0 / (1.0 + np.exp(-z))
    eps = 1e-12
    nll = -np.mean(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps))
    return nll + lam * np.dot(w, w)


@program(0, lambda r: (r.normal(size=(5, 3)), r.normal(size=(32, 5)), r.integers(0, 3, 32)))
def softmax_regression(W, X, labels):
    logits = X @ W
    logits = logits - logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -np.mean(logp[np.arange(len(labels)), labels])


@program(0, lambda r: (r.normal(size=5), r.normal(size=(40, 5)), r.normal(size=40)))
def huber_regression(w, X, y, delta=1.0):
    r = X @ w - y
    small = np.abs(r) <= delta
    return np.sum(np.where(small, 0.5 * r ** 2, delta * (np.abs(r) - 0.5 * delta)))


@program(0, lambda r: (0.1 * r.normal(size=4), r.normal(size=(30, 4)), r.poisson(2.0, 30).astype(float)))
def poisson_regression(w, X, counts):
    rate = np.exp(X @ w)
    return np.sum(rate - counts * np.log(rate))


def make_loss(X, y):
    def loss(w):
        resid = X @ w - y
        return 0.5 * np.sum(resid ** 2) / len(y)
    return loss


_rng0 = np.random.default_rng(0)
_factory_loss = make_loss(_rng0.normal(size=(20, 3)), _rng0.normal(size=20))


@program(0, lambda r: (r.normal(size=3),))
def closure_factory(w):
    return _factory_loss(w)


def ridge(w, X, y, *, alpha=0.5):
    return np.sum((X @ w - y) ** 2) + alpha * np.sum(w ** 2)


_ridge = functools.partial(ridge, alpha=0.1)


@program(0, lambda r: (r.normal(size=4), r.normal(size=(25, 4)), r.normal(size=25)))
def partial_of_a_loss(w, X, y):
    return _ridge(w, X, y)


@program(0, lambda r: (r.normal(size=4), r.normal(size=(25, 4)), r.normal(size=25)))
def keyword_only_helper(w, X, y):
    return ridge(w, X, y, alpha=0.3) + ridge(w, X, y)


# ---- neural networks -----------------------------------------------------------------------------


def _mlp_params(r: np.random.Generator) -> list:
    sizes = [6, 16, 8, 1]
    return [{"W": 0.3 * r.normal(size=(m, n)), "b": np.zeros(n)} for m, n in zip(sizes[:-1], sizes[1:])]


@program(0, lambda r: (_mlp_params(r), r.normal(size=(10, 6)), r.normal(size=(10, 1))))
def mlp_dict_layers(params, x, y):
    h = x
    for i, layer in enumerate(params):
        h = h @ layer["W"] + layer["b"]
        if i < len(params) - 1:
            h = np.tanh(h)
    return np.mean((h - y) ** 2)


ACTIVATIONS = {"relu": lambda z: np.maximum(z, 0.0), "tanh": np.tanh, "linear": lambda z: z}


@program(0, lambda r: (_mlp_params(r), r.normal(size=(10, 6)), r.normal(size=(10, 1))))
def mlp_activation_table(params, x, y, acts=("tanh", "relu", "linear")):
    h = x
    for layer, act in zip(params, acts):
        h = ACTIVATIONS[act](h @ layer["W"] + layer["b"])
    return np.mean((h - y) ** 2)


class Params(NamedTuple):
    W: np.ndarray
    b: np.ndarray


@program(0, lambda r: (Params(r.normal(size=(4, 2)), np.zeros(2)), r.normal(size=(12, 4)), r.normal(size=(12, 2))))
def namedtuple_params(p, x, y):
    pred = x @ p.W + p.b
    return np.mean((pred - y) ** 2)


def layer_norm(h, eps=1e-5):
    mu = h.mean(axis=-1, keepdims=True)
    var = h.var(axis=-1, keepdims=True)
    return (h - mu) / np.sqrt(var + eps)


@program(0, lambda r: (0.3 * r.normal(size=(8, 8)), r.normal(size=(5, 8))))
def residual_block_layer_norm(W, x):
    h = layer_norm(x)
    h = x + np.tanh(h @ W)
    return np.sum(layer_norm(h) ** 2)


class Linear:
    def __init__(self, W, b):
        self.W = W
        self.b = b

    def __call__(self, x):
        return x @ self.W + self.b


class Net:
    def __init__(self, layers, activation=np.tanh):
        self.layers = layers
        self.activation = activation

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x)

    @staticmethod
    def mse(pred, y):
        return np.mean((pred - y) ** 2)


@program((0, 1), lambda r: (0.3 * r.normal(size=(4, 8)), 0.3 * r.normal(size=(8, 1)), r.normal(size=(16, 4)),
                            r.normal(size=(16, 1))))
def model_with_staticmethod(W1, W2, x, y):
    net = Net([Linear(W1, np.zeros(8)), Linear(W2, np.zeros(1))])
    return Net.mse(net.forward(x), y)


@program(0, lambda r: (0.3 * r.normal(size=(3, 6, 6)), r.normal(size=(5, 6))))
def sum_over_generator(Ws, x):
    return sum(np.sum(np.tanh(x @ W) ** 2) for W in Ws)


@program(0, lambda r: (0.2 * r.normal(size=(6, 6)), 0.2 * r.normal(size=(3, 6)), r.normal(size=(10, 3))))
def gru_like_cell(W, U, xs):
    h = np.zeros(6)
    for x in xs:
        z = 1.0 / (1.0 + np.exp(-(W @ h + x @ U)))
        cand = np.tanh(W @ h * 0.5 + x @ U)
        h = (1 - z) * h + z * cand
    return np.sum(h ** 2)


# ---- statistics and probabilistic models -------------------------------------------------------


@program(0, lambda r: (np.array([0.3, -0.2, 0.5]), r.normal(size=(15, 2)), r.normal(size=15)))
def gp_negative_log_likelihood(log_params, X, y):
    length, signal, noise = np.exp(log_params)
    d2 = np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
    K = signal ** 2 * np.exp(-0.5 * d2 / length ** 2) + noise ** 2 * np.eye(len(X))
    L = np.linalg.cholesky(K)
    alpha = np.linalg.solve(K, y)
    return 0.5 * y @ alpha + np.sum(np.log(np.diag(L))) + 0.5 * len(X) * math.log(2 * math.pi)


@program(0, lambda r: (r.normal(size=(3, 2)), r.normal(size=(40, 2))))
def gmm_soft_assignment(means, X):
    d2 = ((X[:, None, :] - means[None, :, :]) ** 2).sum(-1)
    logw = -0.5 * d2
    m = logw.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(logw - m).sum(axis=1))
    return -np.sum(lse)


@program(0, lambda r: (np.array([0.1, 0.5]), r.normal(1.0, 2.0, size=50)))
def normal_log_likelihood(theta, data):
    mu, log_sigma = theta
    sigma = np.exp(log_sigma)
    z = (data - mu) / sigma
    return -np.sum(-0.5 * z ** 2 - np.log(sigma) - 0.5 * np.log(2 * np.pi))


@program(0, lambda r: (r.normal(size=4), np.cov(r.normal(size=(4, 30)))))
def portfolio_variance(w, cov, target=1.0):
    risk = w @ cov @ w
    budget = np.sum(w) - target
    return risk + 10.0 * budget ** 2 + 0.1 * np.sum(np.maximum(-w, 0.0))


@program(0, lambda r: (r.normal(size=(4, 4)),))
def log_det_and_trace(A):
    S = A @ A.T + np.eye(4)
    sign, logdet = np.linalg.slogdet(S)
    return logdet - 0.5 * np.trace(S)


# ---- simulation ----------------------------------------------------------------------------------


@program((0, 1), lambda r: (0.8, 0.3))
def damped_spring_euler(k, c, steps=100, dt=0.01):
    x, v = 1.0, 0.0
    for _ in range(steps):
        a = -k * x - c * v
        x, v = x + dt * v, v + dt * a
    return x * x + v * v


@program(0, lambda r: (np.array([1.1, 0.4, 0.4, 0.1]),))
def lotka_volterra(theta):
    alpha, beta, delta, gamma = theta
    prey, pred = 10.0, 5.0
    dt = 0.01
    traj = []
    for _ in range(50):
        dprey = alpha * prey - beta * prey * pred
        dpred = delta * prey * pred - gamma * pred
        prey, pred = prey + dt * dprey, pred + dt * dpred
        traj.append(prey)
    return np.mean(np.array(traj))


@program(0, lambda r: (np.array([0.9, 0.1]), r.normal(size=(20, 1))))
def kalman_filter(q, zs):
    F = np.array([[1.0, 1.0], [0.0, 1.0]])
    H = np.array([[1.0, 0.0]])
    Q = np.diag(q ** 2)
    R = np.array([[0.5]])
    x, P = np.zeros(2), np.eye(2)
    nll = 0.0
    for z in zs:
        x, P = F @ x, F @ P @ F.T + Q
        S = H @ P @ H.T + R
        K = P @ H.T @ np.linalg.inv(S)
        resid = z - H @ x
        nll = nll + 0.5 * (resid @ np.linalg.solve(S, resid) + np.log(np.linalg.det(S)))
        x = x + K @ resid
        P = (np.eye(2) - K @ H) @ P
    return nll


@program(0, lambda r: (np.array([1.0, 0.5, -0.3]), np.linspace(-1, 1, 20), r.normal(size=20)))
def polynomial_fit(coeffs, t, y):
    pred = np.polyval(coeffs, t)
    return np.mean((pred - y) ** 2)


# ---- plain Python and scalar code ------------------------------------------------------------------


@program(0, lambda r: (r.normal(size=6),))
def rosenbrock_comprehension(x):
    return sum(100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


@program(0, lambda r: (1.3,))
def scalar_newton_sqrt(a, iterations=8):
    x = a
    for _ in range(iterations):
        x = 0.5 * (x + a / x)
    return x


@program(0, lambda r: (r.normal(size=5),))
def clipped_loss_with_min_max(w):
    total = 0.0
    for wi in w:
        total += min(max(wi, -1.0), 1.0) ** 2
    return total


@program(0, lambda r: (r.normal(size=(6, 3)),))
def pairwise_repulsion(points):
    energy = 0.0
    n = len(points)
    for i in range(n):
        for j in range(i + 1, n):
            d = points[i] - points[j]
            energy += 1.0 / (np.dot(d, d) + 0.1)
    return energy


def _safe_log(x):
    try:
        return math.log(x)
    except ValueError:
        return -1e3


@program(0, lambda r: (np.array([0.5, 1.5, 2.5]),))
def helper_with_try(x):
    return sum(_safe_log(float(v)) * v for v in x)


@program(0, lambda r: (r.normal(size=8),))
def sort_then_weight(x):
    s = np.sort(x)
    weights = np.linspace(0.0, 1.0, len(s))
    return np.sum(weights * s)


@program(0, lambda r: (r.normal(size=8),))
def clip_and_normalise(x):
    y = np.clip(x, -1.0, 1.0)
    return np.linalg.norm(y) + np.max(np.abs(x))


@program(0, lambda r: (r.normal(size=(5, 5)),))
def softplus_dataclass_config(W, cfg=None):
    cfg = cfg or Config()
    h = np.log1p(np.exp(cfg.scale * W))
    return np.sum(h) / cfg.temperature


@dataclass
class Config:
    scale: float = 0.5
    temperature: float = 2.0


@program(0, lambda r: (r.normal(size=16),))
def one_d_convolution(signal):
    kernel = np.array([0.25, 0.5, 0.25])
    smooth = np.convolve(signal, kernel, mode="same")
    return np.sum(np.diff(smooth) ** 2)


@program(0, lambda r: (r.normal(size=10), np.linspace(0.0, 1.0, 10)))
def interpolation_and_cumsum(v, t):
    path = np.cumsum(v) * (t[1] - t[0])
    return float(np.interp(0.55, t, path)) + np.sum(path ** 2)


@program(0, lambda r: (r.normal(size=(4, 3)),))
def einsum_and_transpose(A):
    G = np.einsum("ij,kj->ik", A, A)
    return np.sum(np.tril(G) ** 2) + np.trace(A.T @ A)


# ---- more everyday styles -----------------------------------------------------------------------


@program(0, lambda r: (r.normal(size=(4, 4)),))
def matrix_exponential_series(A, terms=8):
    out = np.eye(4)
    term = np.eye(4)
    for k in range(1, terms):
        term = term @ A / k
        out = out + term
    return np.sum(out ** 2)


@program(0, lambda r: (r.normal(size=5), r.normal(size=(20, 5)), r.integers(0, 2, 20)))
def hinge_loss_with_labels(w, X, labels):
    signs = 2.0 * labels - 1.0
    margins = 1.0 - signs * (X @ w)
    return np.mean(np.maximum(margins, 0.0)) + 0.01 * w @ w


@program(0, lambda r: (r.normal(size=3), r.normal(size=(10, 3))))
def tuple_return_helper(w, X):
    def stats(v):
        return v.mean(), v.std()
    m, s = stats(X @ w)
    return (m - 1.0) ** 2 + (s - 2.0) ** 2


@program(0, lambda r: ({"mu": r.normal(size=2), "log_s": np.zeros(2)}, r.normal(size=(30, 2))))
def dict_of_parameters(params, data):
    mu, s = params["mu"], np.exp(params["log_s"])
    return np.sum(((data - mu) / s) ** 2) / 2 + len(data) * np.sum(np.log(s))


@program(0, lambda r: (r.normal(size=(2, 3)), r.normal(size=(4, 3))))
def while_loop_until_small(W, x):
    h = x
    steps = 0
    while np.max(np.abs(h)) > 0.1 and steps < 20:
        h = 0.5 * np.tanh(h)
        steps += 1
    return np.sum(h ** 2) + np.sum(W) * steps


@program(0, lambda r: (r.normal(size=6),))
def sorted_python_list(x):
    values = sorted([float(v) ** 2 for v in x])
    return sum(v * (i + 1) for i, v in enumerate(values))


@program(0, lambda r: (r.normal(size=(3, 3)), r.normal(size=3)))
def linear_solve_and_norm(A, b):
    M = A @ A.T + 3.0 * np.eye(3)
    x = np.linalg.solve(M, b)
    return np.linalg.norm(x) ** 2 + np.log(np.linalg.det(M))


@program(0, lambda r: (r.normal(size=10),))
def stack_and_concatenate(x):
    parts = [x[:3], x[3:7] * 2.0, x[7:] ** 2]
    y = np.concatenate(parts)
    z = np.stack([y, y[::-1]])
    return np.sum(z[0] * z[1])


@program(0, lambda r: (r.normal(size=8),))
def running_mean_with_append(x):
    means = []
    total = 0.0
    for i, v in enumerate(x):
        total = total + v
        means.append(total / (i + 1))
    return np.sum(np.array(means) ** 2)


def _step(state, params):
    pos, vel = state
    acc = -params["k"] * pos - params["c"] * vel
    return pos + 0.1 * vel, vel + 0.1 * acc


@program(0, lambda r: ({"k": 1.3, "c": 0.2},))
def simulation_with_state_tuple(params):
    state = (1.0, 0.0)
    for _ in range(30):
        state = _step(state, params)
    return state[0] ** 2


@program(0, lambda r: (r.normal(size=(5, 3)), r.normal(size=(3, 5))))
def where_and_boolean_mask(A, B):
    C = A @ B
    positive = C[C > 0]
    return np.sum(positive ** 2) + np.sum(np.where(C < -1.0, C, 0.0))


@program(0, lambda r: (r.normal(size=4),))
def recursion_depth_three(x):
    def poly(v, depth):
        if depth == 0:
            return v
        return poly(v * v * 0.5 + v, depth - 1)
    return np.sum(poly(x, 3))


class Scaler:
    def __init__(self, factor):
        self.factor = factor

    def apply(self, x):
        return self.factor * x


_scaler = Scaler(1.5)


@program(0, lambda r: (r.normal(size=4),))
def bound_method_of_a_global(x):
    return np.sum(_scaler.apply(x) ** 2)


@program(0, lambda r: (r.normal(size=4), 0.7))
def keyword_arguments_in_calls(x, t):
    return np.sum(np.clip(x, a_min=-t, a_max=t) ** 2) + np.linalg.norm(x, ord=1)


@program(0, lambda r: (r.normal(size=(3, 4)),))
def reductions_with_axes(A):
    return np.sum(A.mean(axis=0) ** 2) + np.sum(np.max(A, axis=1)) + np.prod(A[0, :2]) + np.var(A)


@program(0, lambda r: (r.normal(size=5),))
def format_and_log_progress(x, log=None):
    log = [] if log is None else log
    loss = np.sum(x ** 2)
    log.append(f"loss={float(loss):.3f}")
    return loss
