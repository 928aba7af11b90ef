"""A catalogue of end-to-end programs for bytegrad: plain Python + NumPy, written as a new user would.

Each program is a `Case(fn, make_args, wrt=...)`. `make_args(rng)` returns the positional
arguments from a seeded Generator; when it is None the arguments are made from the parameters'
names (`ARG_MAKERS`). Inputs keep away from kinks and branch thresholds, so central differences
are valid. `CASES` is the whole catalogue; `FLOAT32_CASES` the subset also run in float32.
"""
from __future__ import annotations

import abc
import collections
import dataclasses
import functools
import inspect
import itertools
import math
from collections import namedtuple
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import numpy as np

__all__ = ["Case", "CASES", "FLOAT32_CASES", "ARG_MAKERS", "args_by_name", "away", "to_float32"]

Rng = np.random.Generator


# ---- how inputs are made ------------------------------------------------------------------------


def away(rng: Rng, shape: Any, points: tuple[float, ...] = (0.0,), margin: float = 0.1,
         scale: float = 1.0, loc: float = 0.0) -> np.ndarray:
    """Normal samples (loc, scale) none of which lies within `margin` of any of `points`."""
    x = rng.normal(loc, scale, size=shape)
    for _ in range(1000):
        bad = np.zeros(np.shape(x), dtype=bool)
        for p in points:
            bad |= np.abs(x - p) < margin
        if not bad.any():
            return x
        x = np.where(bad, rng.normal(loc, scale, size=shape), x)
    raise RuntimeError("could not sample away from the given points")


def positive(rng: Rng, shape: Any, low: float = 0.5, high: float = 2.0) -> np.ndarray:
    return rng.uniform(low, high, size=shape)


ARG_MAKERS: dict[str, Callable[[Rng], Any]] = {
    "x": lambda rng: rng.normal(size=5),
    "y": lambda rng: rng.normal(size=5),
    "z": lambda rng: rng.normal(size=5),
    "v": lambda rng: rng.normal(size=4),
    "w": lambda rng: rng.normal(size=3),
    "A": lambda rng: rng.normal(size=(3, 4)),
    "X": lambda rng: rng.normal(size=(4, 3)),
    "W": lambda rng: rng.normal(size=(3, 3)) / 2,
    "b": lambda rng: rng.normal(size=3),
    "a": lambda rng: float(rng.uniform(0.5, 1.5)),
    "n": lambda rng: 3,
}


def args_by_name(fn: Callable[..., Any]) -> Callable[[Rng], tuple]:
    """A `make_args` that builds each positional parameter of `fn` from its name (`ARG_MAKERS`)."""
    names = [p.name for p in inspect.signature(fn).parameters.values()
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]

    def make_args(rng: Rng) -> tuple:
        return tuple(ARG_MAKERS[name](rng) for name in names)

    return make_args


@dataclass(frozen=True)
class Case:
    """One catalogue program: the function, how to make its inputs, what to differentiate."""

    fn: Callable[..., Any]
    make_args: Optional[Callable[[Rng], tuple]] = None
    wrt: Union[int, str, tuple] = 0
    make_kwargs: Optional[Callable[[Rng], dict]] = None
    float32: bool = False
    rtol: float = 1e-5
    atol: float = 1e-6
    name: str = ""

    @property
    def id(self) -> str:
        return self.name or self.fn.__name__

    def args(self, rng: Rng) -> tuple:
        make = self.make_args or args_by_name(self.fn)
        return tuple(make(rng))

    def kwargs(self, rng: Rng) -> dict:
        return dict(self.make_kwargs(rng)) if self.make_kwargs else {}


def to_float32(x: Any) -> Any:
    """Every float64 array leaf of `x` as float32 (containers rebuilt; other leaves as they are)."""
    if isinstance(x, np.ndarray):
        return x.astype(np.float32) if x.dtype == np.float64 else x
    if isinstance(x, dict):
        return type(x)((k, to_float32(v)) for k, v in x.items())
    if isinstance(x, tuple) and hasattr(type(x), "_fields"):
        return type(x)(*(to_float32(v) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(to_float32(v) for v in x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return dataclasses.replace(x, **{f.name: to_float32(getattr(x, f.name)) for f in dataclasses.fields(x) if f.init})
    return x


# ---- arithmetic ---------------------------------------------------------------------------------


def binary_operators(x, y):
    return np.sum(x + y - x * y + x / y + x ** 2 + (x @ y) * x - (-y) + 2.0 / y - 1.0)


def python_float_arith(a, b):
    c = a * b + a / b - b ** 2 + (-a) + 2.0 ** a + a ** 3 - 1.5 + a ** b
    return c * c / (1.0 + b * b)


def numpy_scalar_arith(x):
    s = x.sum()
    t = np.sqrt(s * s + np.float64(1.0))
    u = x[1] * np.float32(0.5) + t / x[0]
    return u * s + 3 * t - np.float64(2.0) ** x[2]


def matmul_quadratic(A, x):
    y = A @ x
    return y @ y + x @ (A.T @ A) @ x - np.sum(A @ A.T)


def powers(x, p):
    return np.sum(x ** p + x ** 2 + x ** -1 + x ** 0.5 + p ** x + 2.0 ** x + x ** 3)


def mod_and_floordiv(x):
    return np.sum((x % 2.0) * x + (x // 1.0) * x ** 2 + np.mod(x, 1.0))


def unary_operators(x):
    return np.sum(-x * (+x) + abs(x) * np.abs(x ** 3)) + (-x).max() + np.sum(np.negative(x))


def inplace_on_locals(x):
    acc = 0.0
    for i in range(len(x)):
        acc += x[i] ** 2
    acc *= 0.5
    acc -= x[0]
    acc /= 2.0
    out = np.zeros_like(x)
    out += x
    out *= x
    out -= 0.25 * x
    out /= 1.5
    return acc + out.sum()


def inplace_on_own_arrays(x):
    y = x.copy()
    y *= 2.0
    y += np.sin(x)
    y **= 2
    z = x * 1.0
    z -= x.mean()
    z[0] += 1.0
    return y.sum() + (z * z).sum()


def broadcasting(X, b, c, t):
    Y = X * c[:, None] + b - t
    return np.sum(np.tanh(Y)) + np.sum(X / (1.0 + b ** 2)) * t


# ---- control flow -------------------------------------------------------------------------------


def if_elif_else(x):
    total = 0.0
    for v in x:
        if v > 0.5:
            total = total + v ** 2
        elif v < -0.5:
            total = total - v ** 3
        else:
            total = total + np.sin(v)
    return total


def comparisons_on_data(x, y):
    s = x.sum()
    t = y.sum()
    if s > t:
        big, small = s, t
    else:
        big, small = t, s
    out = big * 2.0 - small
    if x[0] >= 0.0 and y[0] != 0.0:
        out = out + x[0] * y[0]
    if not (x.max() <= 10.0):
        out = out * 0.0
    return out + (1.0 if s == t else 0.0) + (x[1] if x[1] < y[1] else y[1]) ** 2


def for_range_steps(x, n):
    y = x
    for _ in range(n):
        y = np.sin(y) + 0.5 * y
    return np.sum(y ** 2)


def while_data_dependent(x):
    y = x
    steps = 0
    while np.sum(y * y) > 0.05:
        y = 0.6 * y + 0.01 * np.tanh(y)
        steps += 1
    return np.sum(y) * (steps + 1)


def break_and_continue(x):
    total = 0.0
    for i in range(len(x)):
        if x[i] < 0.0:
            continue
        total = total + np.exp(x[i]) * (i + 1)
        if total > 6.0:
            break
    return total + x[-1]


def _raise_if_negative(v):
    if v < 0:
        raise ValueError("negative")
    return v


def try_except_finally(x):
    try:
        y = np.log(x)
        if y.sum() > 100.0:
            raise ValueError("too large")
    except ValueError:
        y = x
    finally:
        z = y * 2.0
    return np.sum(z * x)


def exception_taken(x):
    try:
        a = x[len(x)]
    except IndexError:
        a = x[0]
    try:
        b = _raise_if_negative(x[1] - 10.0)
    except ValueError:
        b = x[1] ** 2
    finally:
        c = np.cos(x[2])
    return a * b + c


def with_errstate(x):
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.log(x) / x
    return np.sum(y)


def nested_loops_scalars(A):
    total = 0.0
    n, m = A.shape
    for i in range(n):
        for j in range(m):
            total += A[i, j] * np.cos(A[i, j]) * (i + 1) - A[i, j] * A[j % n, i % m]
    return total


def conditional_expression(x):
    s = np.sum(x)
    scale = 2.0 if s > 0 else -3.0
    y = x * scale if x[0] > 0 else np.exp(x)
    return np.sum(y ** 2) + (s if s > 0 else s ** 2)


def asserts_and_shapes(x):
    assert np.all(np.isfinite(x)), "x must be finite"
    assert isinstance(x, np.ndarray) and type(x) is np.ndarray and x.dtype.kind == "f"
    assert x.shape == (5,) and len(x) == 5 and x.ndim == 1
    n = x.shape[0]
    total = 0.0
    for i in range(n // 2):
        total = total + x[i] * x[n - 1 - i]
    return total * x.size


def walrus_and_chained_comparison(x):
    total = 0.0
    if 0.0 < (s := np.sum(x ** 2)) < 1e6:
        total = total + s
    for v in x:
        if -0.5 < v <= 0.5:
            total = total + np.sin(v)
        elif (w := v * 2.0) > 1.0:
            total = total + w ** 2
    return total


def match_statement(params, x):
    match params:
        case {"w": w, "b": b}:
            z = x @ w + b
        case _:
            z = x
    match z.shape:
        case (n,) if n > 1:
            return np.sum(np.tanh(z) ** 2)
        case _:
            return np.sum(z)


# ---- unpacking and iteration ------------------------------------------------------------------------


def unpack_array(x):
    a, b = x
    return a * b + np.sin(a) - b ** 2


def _mean_and_spread(x):
    m = x.mean()
    return m, np.sqrt(((x - m) ** 2).mean())


def unpack_call(x):
    m, s = _mean_and_spread(x)
    (p, q), r = (m, s), m * s
    first, *rest = x
    return p ** 2 + q + r + first * np.sum(np.array(rest))


def iterate_rows(X, w):
    total = 0.0
    for row in X:
        total = total + np.tanh(row @ w) ** 2
    return total


def zip_arrays(x, y):
    total = 0.0
    for a, b in zip(x, y):
        total += a * np.exp(b)
    return total + sum(a - b for a, b in zip(x, y))


def enumerate_weights(x):
    acc = 0.0
    for i, v in enumerate(x):
        acc = acc + (i + 1) * v ** 2
    for i, row in enumerate(np.stack([x, x ** 2])):
        acc = acc + i * row.sum()
    return acc


def _pairs(x):
    for i in range(len(x) - 1):
        yield x[i], x[i + 1]


def user_generator(x):
    return sum(a * b for a, b in _pairs(x)) + sum(np.sin(a) for a, _ in _pairs(x))


# ---- subscripts ---------------------------------------------------------------------------------


def slices_and_negative_indices(x):
    return (np.sum(x[1:-1] * x[:-2] - x[2:]) + x[-1] * x[::2].sum() + x[-2]
            - x[3:0:-1] @ x[:3] + np.sum(x[::-1] * x))


def none_index_outer(x, y):
    return np.sum(np.tanh(x[:, None] * y[None, :]) + x[:, np.newaxis] - y)


def fancy_index_repeats(x):
    idx = np.array([0, 2, 2, 1, 0, 4])
    w = np.arange(len(idx), dtype=float)
    return np.sum(x[idx] ** 2 * w) + x[[1, 1, 3]].sum()


def fancy_index_2d(X):
    rows = np.array([0, 1, 1, 2])
    cols = np.array([2, 0, 2, 2])
    return (np.sum(X[rows, cols] ** 2) + np.sum(X[[0, 0], :] * X[1]) + X[1:, [0, 2]].sum() + X[-1, -2]
            + np.sum(X[..., 0] * X[:, -1]) + np.sum(X[np.array([True, False, True])] ** 3))


def boolean_mask(x):
    mask = x > 0
    return np.sum(x[mask] ** 3) + np.sum(np.exp(x[~mask])) + np.sum(x[x < -0.5])


# ---- methods and NumPy functions ---------------------------------------------------------------


def array_methods(X):
    s = X.sum(axis=0, keepdims=True)
    Y = (X / s).T.reshape(-1)
    Z = X.T.reshape(2, -1)
    return ((Y ** 2).mean() + X.max(axis=1).sum() + X.sum() + Z.mean(axis=1) @ np.ones(2) + X.mean()
            + X.sum(0)[:3] @ X.sum(1) + np.sum(X ** 2, axis=(0, 1)))


def more_array_methods(X, v):
    a = X.std() + X.var(axis=1).sum() + X.min() + X.prod()
    b = X.ravel() @ X.flatten() + X.dot(v).sum() + X.copy().sum()
    c = np.cumsum(X, axis=1).sum() + X.astype(np.float64).squeeze().sum() + X[None].squeeze(0).sum()
    return a + b + c


def numpy_functions(x, y):
    a = np.mean(x ** 2, axis=0, keepdims=True).sum() + np.sum(x, axis=None) + np.prod(y)
    b = np.max(x) + np.min(y) + np.std(x) + np.var(y) + np.dot(x, y) + np.sum(np.outer(x, y))
    c = np.sum(np.concatenate([x, y, x * y])) + np.sum(np.stack([x, y], axis=1) ** 2)
    d = np.sum(np.transpose(np.reshape(x, (1, -1)))) + np.sum(np.expand_dims(y, 0) ** 3)
    e = np.sum(np.exp(-x ** 2)) + np.sum(np.log1p(y ** 2)) + np.sum(np.tanh(x)) + np.sum(np.sqrt(y ** 2 + 1))
    return a + b + c + d + e


def numpy_products(A, X, w):
    a = np.einsum("ij,jk->ik", A, X).sum() + np.inner(w, w) + np.trace(A @ X)
    b = np.linalg.norm(w) + np.linalg.norm(A) ** 2 + np.vdot(w, w)
    return a + b


_WEIGHTS = np.array([0.5, -1.0, 2.0, 0.25, 1.5])


def module_constants(x):
    return np.sum(_WEIGHTS * np.sin(x)) + math.pi * np.sum(x ** 2) + np.e


def formatting_side_effects(x):
    s = np.sum(x ** 2)
    label = f"loss={s:.3f}"
    text = str(s) + repr(x[0])
    if len(label) > 0 and len(text) > 0:
        return s * 2.0
    return s


# ---- calls --------------------------------------------------------------------------------------


def _affine(x, scale=1.0, shift=0.0, *, power=1):
    return scale * x ** power + shift


def keyword_arguments(x):
    a = _affine(x, shift=0.5, scale=2.0)
    b = _affine(x, 3.0, power=2)
    c = _affine(scale=x, x=2.0)
    return np.sum(a * b + c)


def _sum_squares(*arrays):
    return sum(np.sum(a ** 2) for a in arrays)


def star_args(x, y):
    parts = (x, 2.0 * y)
    return _sum_squares(*parts) + _sum_squares(x, *[y, x * y])


def _combine(first, **terms):
    return first * terms["a"] + terms["b"] ** 2


def star_kwargs(x, y):
    d = {"a": x, "b": y}
    return np.sum(_combine(1.5, **d)) + np.sum(_combine(x, a=y, **{"b": x}))


def variadic_signature(x, *rest, scale=1.0, **options):
    total = scale * np.sum(x ** 2)
    for r in rest:
        total = total + np.sum(r * x)
    return total + options.get("offset", 0.0) * np.sum(x)


def _logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


@_logged
def _decorated_helper(x, k=2.0):
    return np.sin(k * x)


def user_decorator(x):
    return np.sum(_decorated_helper(x) + _decorated_helper(x, k=0.5) ** 2)


def functools_partial(x):
    double = functools.partial(_affine, scale=2.0)
    return np.sum(double(x) * x) + np.sum(functools.partial(np.power, x)(3))


# ---- classes, lambdas, closures, recursion ---------------------------------------------------------


class Linear:
    def __init__(self, W, b):
        self.W = W
        self.b = b

    def forward(self, x):
        return np.tanh(self.W @ x + self.b)

    def __call__(self, x):
        return self.forward(x)

    @property
    def weight_norm(self):
        return np.sum(self.W ** 2)

    @staticmethod
    def square(h):
        return h * h


class ScaledLinear(Linear):
    def __init__(self, W, b, scale):
        super().__init__(W, b)
        self.scale = scale

    def forward(self, x):
        return self.scale * super().forward(x)


def class_method(W, b, x):
    layer = Linear(W, b)
    return np.sum(Linear.square(layer.forward(x))) + 0.1 * layer.weight_norm


def callable_object(W, b, x):
    layer = ScaledLinear(W, b, 0.5)
    return np.sum(layer(layer(x)))


def lambdas(x):
    sq = lambda v: v * v  # noqa: E731
    wave = lambda v, k=2.0: np.sin(k * v)  # noqa: E731
    return np.sum(sq(x) + wave(x) + wave(x, k=0.5)) + (lambda t: np.sum(t ** 3))(x)


def builtin_map(x):
    return sum(map(lambda v: v ** 3, x)) + np.sum(np.array(list(map(np.sin, x))))


def builtin_sorted_reversed(x):
    total = 0.0
    for i, v in enumerate(reversed(x)):
        total = total + i * v
    return total + sorted(x)[-1] * 2.0 + max(x) - min(x)


def closures(x, y):
    def scaled(t):
        return t * x + y

    total = np.sum(scaled(2.0)) + np.sum(scaled(x))
    k = np.sum(y)
    adder = lambda t: t + k  # noqa: E731
    return total + np.sum(adder(x) ** 2)


def closure_nonlocal(x):
    acc = 0.0

    def add(v):
        nonlocal acc
        acc = acc + v ** 2

    for v in x:
        add(v)
    return acc


def closure_late_binding(x):
    y = x
    doubled = lambda: y * 2.0  # noqa: E731
    y = y + 1.0
    def with_default(v, w=x):
        return v * w
    return np.sum(doubled()) + np.sum(with_default(x)) + np.sum(with_default(x, y))


def nested_functions(x):
    def outer(y):
        def inner(z):
            return np.exp(-z ** 2)

        return inner(y) * y

    return np.sum(outer(x) + outer(2.0 * x))


def _rpow(x, n):
    if n == 0:
        return np.ones_like(x)
    return x * _rpow(x, n - 1)


def _horner(coeffs, x, i=0):
    if i == len(coeffs) - 1:
        return coeffs[i] + 0.0 * x
    return coeffs[i] + x * _horner(coeffs, x, i + 1)


def recursive_power(x):
    return np.sum(_rpow(x, 4)) + _rpow(1.5, 2) * x[0]


def recursive_horner(coeffs, x):
    return np.sum(_horner(coeffs, x))


def self_recursive(x, n):
    if n <= 1:
        return np.sum(np.sin(x))
    return 0.5 * self_recursive(x * 1.1, n - 1) + np.sum(x ** 2) / n


# ---- comprehensions and containers built inside ------------------------------------------------------


def list_comprehension(x):
    terms = [x[i] * x[i + 1] for i in range(len(x) - 1)]
    squares = [v ** 2 for v in x if v > 0]
    return sum(terms) + sum(squares) + np.sum(np.array([np.sin(v) for v in x]))


def generator_in_sum(x, y):
    return sum(np.exp(v) for v in x) + sum(a * b for a, b in zip(x, y)) + sum((v ** 2 for v in y), 0.5)


def dict_comprehension(x):
    d = {k: x[i] * (i + 1) for i, k in enumerate("abc")}
    e = {k: np.cos(v) for k, v in d.items()}
    return d["a"] * d["b"] + d["c"] + sum(e.values())


def append_then_stack(x):
    rows = []
    h = x
    for k in range(3):
        h = np.tanh(h + k)
        rows.append(h)
    out = np.stack(rows)
    outputs = {}
    outputs["last"] = rows[-1]
    outputs["mean"] = out.mean(axis=0)
    return np.sum(out ** 2) + np.sum(outputs["last"] * outputs["mean"])


def array_from_scalars(x):
    a = x[0] * 2.0
    b = np.sin(x[1])
    v = np.array([a, b, a * b, 1.0])
    M = np.array([[a, b], [b, a]])
    return v @ v + np.sum(M @ M)


def array_from_floats(a, b):
    v = np.array([a, b, a * b])
    return float(v @ v) + np.asarray([a, 2.0]).sum()


def allocate_then_fill(x):
    n = len(x)
    out = np.zeros(n)
    for i in range(n):
        prev = out[i - 1] if i > 0 else 0.0
        out[i] = 0.5 * prev + x[i] ** 2
    return np.sum(out * x)


def fill_rows_and_slices(x):
    out = np.empty((3, len(x)))
    out[0] = x
    out[1, :] = np.sin(x)
    out[2, 1:] = x[:-1] * x[1:]
    out[2, 0] = 1.0
    out[:, 0] *= 2.0
    return np.sum(out ** 2)


def fill_then_overwrite(x):
    buf = np.zeros(len(x))
    buf[:] = x
    buf[0] = 3.0
    buf[1] = buf[1] * buf[2]
    buf[x > 1.0] = 0.0
    return np.sum(buf ** 2)


# ---- pytree inputs ------------------------------------------------------------------------------


def list_of_arrays(arrs):
    total = 0.0
    for w, a in zip([1.0, 2.0, 3.0], arrs):
        total = total + w * np.sum(np.sin(a))
    return total + np.sum(arrs[0] * arrs[2])


def tuple_input(pair):
    a, b = pair
    return np.sum(a * b) + np.sum(a ** 2) + pair[1][0]


Point = namedtuple("Point", ["x", "y", "label"])


def namedtuple_input(p):
    return np.sum(p.x ** 2 * p.y) + np.sum(p[1]) * len(p.label)


@dataclass
class Params:
    w: np.ndarray
    b: float
    name: str = "params"
    steps: int = 2


def dataclass_input(params, X):
    z = X @ params.w + params.b
    for _ in range(params.steps):
        z = np.tanh(z)
    return np.sum(z ** 2)


def nested_tree(tree):
    h = np.ones(3)
    for W in tree["layers"]:
        h = np.tanh(W @ h)
    tag, bias = tree["meta"]
    return tree["scale"] * np.sum(h) * tree["n"] + bias ** 2 + len(tag)


# ---- Python floats, math and builtins -------------------------------------------------------------


def math_on_floats(a, b):
    return (math.sin(a) * math.exp(b) + math.log(a * a + 1.0) + math.sqrt(b * b + 1.0)
            + math.tanh(a) + math.cos(b) ** 2 + math.pow(a, 3) + math.atan(a * b) + math.pi * a)


def builtins_on_floats(a, b):
    s = sum([a, b, a * b])
    return abs(a - b) + min(a, b) * max(a * a, b) + s + float(a) * 2.0 + abs(-b) ** 2


def float_of_numpy(x):
    s = float(np.sum(x ** 2))
    t = float(x[0])
    return s * t + math.exp(t) + math.sqrt(s)


def spring_euler(k, x0, v0, n, dt=0.05):
    x, v = x0, v0
    energy = 0.0
    for _ in range(n):
        a = -k * x - 0.1 * v
        x, v = x + dt * v, v + dt * a
        energy += 0.5 * v * v + 0.5 * k * x * x
    return energy / n + x


def spring_chain(x0, k, steps):
    x = x0.copy()
    v = np.zeros_like(x0)
    for _ in range(steps):
        f = np.zeros_like(x)
        stretch = x[1:] - x[:-1] - 1.0
        f[1:] -= k * stretch
        f[:-1] += k * stretch
        v = v + 0.1 * f
        x = x + 0.1 * v
    return np.sum(x ** 2) + np.sum(v ** 2)


# ---- models ---------------------------------------------------------------------------------------


def logistic_regression(w, b, X, y):
    z = X @ w + b
    p = 1.0 / (1.0 + np.exp(-z))
    eps = 1e-12
    return -np.mean(y * np.log(p + eps) + (1.0 - y) * np.log(1.0 - p + eps)) + 0.01 * np.sum(w ** 2)


def mlp_cross_entropy(params, X, labels):
    h = np.tanh(X @ params["W1"] + params["b1"])
    logits = h @ params["W2"] + params["b2"]
    m = logits.max(axis=1, keepdims=True)
    z = logits - m
    log_probs = z - np.log(np.sum(np.exp(z), axis=1, keepdims=True))
    n = X.shape[0]
    return -np.mean(log_probs[np.arange(n), labels])


RNNParams = namedtuple("RNNParams", ["Wx", "Wh", "b", "w_out"])


def rnn_unrolled(params, xs, T):
    h = np.zeros(params.Wh.shape[0])
    for t in range(T):
        h = np.tanh(params.Wx @ xs[t] + params.Wh @ h + params.b)
    return params.w_out @ h


def layer_norm(x, gamma, beta, target):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + 1e-5)
    return np.sum((y * gamma + beta) * target)


def gaussian_nll(mu, log_sigma, y):
    sigma = np.exp(log_sigma)
    return np.sum(0.5 * ((y - mu) / sigma) ** 2 + log_sigma + 0.5 * np.log(2 * np.pi))


def polynomial_fit(coef, x, y):
    V = x[:, None] ** np.arange(len(coef))
    resid = V @ coef - y
    return np.mean(resid ** 2)


def polynomial_fit_stacked(coef, x, y):
    V = np.stack([x ** k for k in range(len(coef))], axis=1)
    return np.mean((V @ coef - y) ** 2)


def where_piecewise(x):
    return np.sum(np.where(x > 0, x ** 2, np.sin(x)) + np.where(x < -0.5, -x, 0.0))


def relu_and_clip(x, W):
    h = np.maximum(W @ x, 0.0)
    c = np.clip(x, -0.5, 0.5)
    return np.sum(h ** 2) + np.sum(c * x) + np.sum(np.minimum(x, 0.2))


def attention(Q, K, V):
    d = Q.shape[-1]
    scores = Q @ K.T / np.sqrt(d)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights = weights / weights.sum(axis=-1, keepdims=True)
    out = weights @ V
    return np.sum(out ** 2)


# ---- harder programs: aliasing, in-place methods, views, NumPy's Python-level functions -----------


def powers_negative_base(x):
    return np.sum(x ** 2.0 + x ** 3 + np.power(x, 2) + np.square(x) + x ** -2 + np.power(x, 3.0))


def inplace_methods_on_own_copy(x):
    y = x.copy()
    y.sort()
    M = np.outer(x, x)
    np.fill_diagonal(M, 1.0)
    z = x * 2.0
    z.fill(0.5)
    return y[-1] * 3.0 + y[0] + np.sum(M ** 2) + np.sum(z * x)


def ufunc_out_into_own_buffer(x):
    buf = np.empty_like(x)
    np.multiply(x, 2.0, out=buf)
    np.tanh(buf, out=buf)
    acc = np.zeros(len(x))
    np.add(acc, buf ** 2, out=acc)
    return np.sum(acc * x)


def write_through_view(x):
    buf = np.zeros(6)
    M = buf.reshape(2, 3)
    M[0, 1] = x[0]
    row = M[1]
    row[:] = x[1:4]
    buf[5] *= x[4]
    mask = buf > 0.5
    buf[mask] = buf[mask] * 2.0
    return np.sum(buf ** 2) + np.sum(M[:, 1])


def view_made_before_write(x):
    buf = np.zeros(4)
    M = buf.reshape(2, 2)
    buf[0] = x[0]
    buf[3] = x[1] * x[2]
    return np.sum(M ** 2)


def write_through_reshape_view(x):
    buf = np.zeros(4)
    M = buf.reshape(2, 2)
    M[0, 0] = x[0]
    M[1] = x[1:3]
    return np.sum(buf ** 2)


def write_through_slice_view(x):
    buf = np.zeros(4)
    row = buf[2:]
    row[:] = x[1:3]
    buf[0] += x[3]
    return np.sum(buf ** 3)


def strided_setitem(x):
    out = np.zeros(8)
    out[::-2] = x
    out[0:4:2] += x[:2] ** 2
    return np.sum(out * np.arange(1.0, 9.0))


def fancy_iadd_repeats(x):
    out = np.zeros(3)
    out[[0, 0, 2]] += x[:3]
    out[np.array([1, 1])] = x[3:5]
    return np.sum(out ** 2) + out[0] * x[0]


def add_at_repeats(x):
    out = np.zeros(3)
    np.add.at(out, [0, 0, 2, 1], x[:4])
    return np.sum(out ** 2)


def item_and_tolist(x):
    s = np.sum(x ** 2)
    first = x[0].item()
    values = x.tolist()
    return s.item() * first + sum(v * v for v in values)


def array_copies(x):
    a = np.array(x)
    b = np.asarray(x)
    c = np.copy(x)
    d = x.astype(float)
    e = np.array([x, x * 2.0])
    return np.sum(a * b) + np.sum(c ** 3) + np.sum(d) + np.sum(e ** 2)


def math_on_numpy_scalars(x):
    return math.exp(x[0]) + math.sin(x[1]) * math.sqrt(x[2] ** 2 + 1.0) + math.log(np.sum(x ** 2))


def list_operations(x):
    items = list(x)
    items.append(x[0] * 2.0)
    items.insert(0, x[1] ** 2)
    last = items.pop()
    items.extend([last, x[2]])
    items.sort()
    rows = [x[:2], x[2:4]]
    cols = list(zip(*rows))
    pairs = tuple(items[:2])
    return sum(items) + items[-1] * pairs[0] + sum(a * b for a, b in cols)


class _Suppress:
    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        return kind is not None and issubclass(kind, ValueError)


def user_context_manager(x):
    y = x ** 2
    with _Suppress():
        y = y + np.sin(x)
        if y.sum() > -1e9:
            raise ValueError("suppressed")
        y = y * 100.0
    return np.sum(y)


def lambdas_in_comprehension(x):
    scales = [lambda v, k=k: v * (k + 1) for k in range(3)]
    return sum(np.sum(f(x) ** 2) for f in scales)


class _Accumulator:
    def __init__(self, n):
        self.total = np.zeros(n)
        self.count = 0.0

    def add(self, v):
        self.total += v
        self.count = self.count + np.sum(v)


def accumulate_in_object(x):
    acc = _Accumulator(len(x))
    for k in range(3):
        acc.add(np.sin(x * (k + 1)))
    return np.sum(acc.total ** 2) + acc.count


def long_loop(x):
    h = x
    for _ in range(200):
        h = h + 0.01 * np.tanh(h) * x
    return np.sum(h ** 2)


def numpy_helpers_shift(x):
    return (np.sum(np.diff(x) ** 2) + np.sum(np.roll(x, 1) * x) + np.sum(np.tile(x, 2) ** 3)
            + np.sum(np.repeat(x, 2) * np.arange(2 * len(x))))


def numpy_helpers_shape(X):
    return (np.sum(np.pad(X, 1) ** 2) + np.sum(np.triu(X) * X) + np.average(X, weights=np.arange(1.0, 4.0), axis=0).sum()
            + np.sum(np.kron(X, X[:1, :1])))


def numpy_helpers_values(x, a):
    grid = np.linspace(0.0, a, 4)
    return np.sum(np.polyval(x, grid)) + np.sum(np.cumprod(x)) + np.sum(np.convolve(x, x))


def numpy_keywords(X, c):
    a = np.sum(X, axis=-1, keepdims=True) * c
    b = np.mean(X ** 2, axis=1, where=np.array([True, False, True]))
    d = np.clip(X, a_min=-0.5, a_max=0.5)
    e = np.max(X, axis=1, initial=-10.0)
    return np.sum(a ** 2) + np.sum(b) + np.sum(d * X) + np.sum(e) + np.sum(X, dtype=np.float64)


def broadcast_size_one_dims(X, r, c, s):
    return np.sum(np.tanh(X * r + c) * s) + np.sum((X - r) ** 2 / (1.0 + c ** 2))


def linear_regression_solve(X, y, lam):
    A = X.T @ X + lam * np.eye(X.shape[1])
    w = np.linalg.solve(A, X.T @ y)
    return np.sum((X @ w - y) ** 2) + lam * (w @ w)


def gaussian_logdet(L, x):
    S = L @ L.T + np.eye(len(x))
    sign, logdet = np.linalg.slogdet(S)
    return 0.5 * x @ np.linalg.inv(S) @ x + 0.5 * logdet + np.linalg.det(S) * 0.01


def varying_shapes(X, w):
    n = X.shape[0]
    h = np.tanh(X @ w)
    if n > 3:
        h = h[:-1] * h[1:]
    return np.sum(h ** 2) / n


@dataclass
class MLPModel:
    W1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    activation: str = "tanh"

    def __call__(self, X):
        h = X @ self.W1 + self.b1
        h = np.tanh(h) if self.activation == "tanh" else np.maximum(h, 0.0)
        return h @ self.w2

    def loss(self, X, y):
        return np.mean((self(X) - y) ** 2)


def dataclass_with_methods(model, X, y):
    return model.loss(X, y) + 0.01 * np.sum(model.W1 ** 2)


def loop_else(x):
    total = 0.0
    for v in x:
        if v > 10.0:
            break
        total = total + v ** 2
    else:
        total = total * 2.0
    k = 0
    while k < 2:
        total = total + x[k]
        k += 1
    else:
        total = total + np.sum(x)
    return total


def _chunks(x):
    yield from (x[i:i + 2] for i in range(0, len(x), 2))
    yield x[-1:] * 2.0


def yield_from(x):
    return sum(np.sum(c ** 2) for c in _chunks(x))


class Vec:
    """A tiny user vector type with its own operators."""

    def __init__(self, data):
        self.data = data

    def __add__(self, other):
        return Vec(self.data + (other.data if isinstance(other, Vec) else other))

    __radd__ = __add__

    def __mul__(self, k):
        return Vec(self.data * k)

    __rmul__ = __mul__

    def __matmul__(self, other):
        return self.data @ other.data

    def __neg__(self):
        return Vec(-self.data)

    def __getitem__(self, i):
        return self.data[i]

    def __len__(self):
        return len(self.data)

    def __iter__(self):
        return iter(self.data)


def user_operator_overloading(x, y):
    u, v = Vec(x), Vec(y)
    w = 2.0 * u + v * 3.0 + (-u) + 1.0
    total = w @ w + w[0] * len(w)
    for e in v:
        total = total + e ** 2
    return total + sum([u, v], 0.0) @ Vec(np.ones(len(x)))


class Acc:
    """A user accumulator whose `+=` is written in Python."""

    def __init__(self, data):
        self.data = data

    def __iadd__(self, other):
        self.data = self.data + other
        return self


def user_operators_with_arrays(x, y):
    """A user class's operators with a differentiated array or NumPy scalar on the other side."""
    u = Vec(x) * y            # Vec.__mul__ with an array
    v = y[0] * Vec(x)         # a NumPy scalar's operator hands Vec to Vec.__rmul__
    w = u + y                 # Vec.__add__ with an array
    acc = Acc(np.zeros(len(x)))
    acc += x * y              # Acc.__iadd__ with an array
    acc += y
    return np.sum(u.data * v.data) + np.sum(w.data) + np.sum(acc.data ** 2)


def refused_before_now(x):
    """Code that runs fine undifferentiated and was refused: str.format of a value, x.view(), a
    builtin exception holding a value."""
    v = x.view()
    label = "{:.2f}".format(x[0])
    try:
        raise ValueError(x * 2.0)
    except ValueError as e:
        y = e.args[0]
    return np.sum(v * y) + len(label)


def covariance_and_correlation(X):
    """np.cov and np.corrcoef run through NumPy's own code (X_T.conj(), np.average, in-place centring)."""
    return np.sum(np.cov(X) ** 2) + np.sum(np.corrcoef(X) * np.arange(9.0).reshape(3, 3))


def _four(a, b, c, d):
    return a * b + c * d


def star_unpacking(x):
    """A differentiated array unpacked into calls, lists, tuples and sets."""
    total = _four(*x) + math.hypot(*x) + sum([*x]) + _four(1.0, *x[1:])
    total = total + np.sum(np.array((*x, 1.0)) ** 2) + np.sum(np.add(*x.reshape(2, 2)))
    return total + sum({*x[:2]})


def list_operands(x):
    """NumPy arithmetic between an array and a list or tuple holding differentiated scalars."""
    total = np.sum(np.ones(2) * [x[2], x[3]]) + np.sum(x[:2] + [x[2], x[3] ** 2])
    total = total + x[2:] @ [x[0], x[1]] + np.sum(x[:2] * (x[2], 1.0)) + np.sum([x[0], 2.0] - x[2:])
    return total + np.sum(x[0] - [x[1], x[2] ** 2]) + np.sum(x[1] / (x[2], 2.0))


class _Base(abc.ABC):
    """An abstract base class: its subclasses are built by ABCMeta, which keeps type.__call__."""

    def __init__(self, w):
        self.w = w * 2.0

    @abc.abstractmethod
    def apply(self, v): ...


class _Scale(_Base):
    def apply(self, v):
        return self.w * v


class _Halves:
    """An iterator class written in Python."""

    def __init__(self, data):
        self.data = data
        self.i = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.i >= len(self.data):
            raise StopIteration
        self.i += 1
        return self.data[self.i - 1] * 0.5


class _Setters:
    """A property setter and a `__setitem__` written in Python."""

    def __init__(self):
        self.store = {}

    @property
    def w(self):
        return self._w

    @w.setter
    def w(self, v):
        self._w = v * 2.0

    def __setitem__(self, k, v):
        self.store[k] = v * 3.0

    def __getitem__(self, k):
        return self.store[k]


class _Doubling:
    def __setattr__(self, k, v):
        object.__setattr__(self, k, v * 2.0)


class _Made:
    def __new__(cls, a):
        obj = super().__new__(cls)
        obj.b = a * 4.0
        return obj


def implicit_dunders(x):
    """Methods the interpreter calls implicitly: an ABC subclass's `__init__`, a Python `__next__`
    (a for loop and next()), a property setter, `__setitem__`, `__setattr__`, `__new__`."""
    total = np.sum(_Scale(x).apply(x))
    for h in _Halves(x):
        total = total + h ** 2
    total = total + next(_Halves(x)) * 3.0
    s = _Setters()
    s.w = x
    s["k"] = x ** 2
    total = total + np.sum(s.w * s["k"])
    d = _Doubling()
    d.a = x
    return total + np.sum(d.a) + np.sum(_Made(x).b ** 2)


class _Registry:
    latest = None


_SCRATCH = np.zeros(3)


def module_level_state(x):
    """Module-level objects written and read back in one call: a class attribute, a module array,
    a function attribute; and a write through `.flat` (of a transposed array: C order of the view)."""
    _Registry.latest = x * 3.0
    _SCRATCH[:] = x ** 2
    module_level_state.cache = np.sin(x)
    grid = np.zeros((3, 2))
    grid.T.flat[:3] = x * 5.0
    total = np.sum(_Registry.latest * _SCRATCH) + np.sum(module_level_state.cache)
    return total + np.sum(grid * np.arange(6.0).reshape(3, 2))


class Signal:
    """A user container: indexing, iteration, float() and `with` run the user's own methods."""

    def __init__(self, data):
        self.data = data

    def __getitem__(self, i):
        return self.data[i] * 3.0

    def __iter__(self):
        for v in self.data:
            yield v * 2.0

    def __len__(self):
        return len(self.data)

    def __float__(self):
        return float(np.sum(self.data ** 2))

    def __enter__(self):
        return self.data * 5.0

    def __exit__(self, *exc_info):
        return False


def user_container_protocols(x):
    sig = Signal(x)
    total = sig[1] + sum(sig) + float(sig) * len(sig)
    with sig as scaled:
        total = total + np.sum(scaled ** 2)
    return total


class ParamBag:
    """Attribute access that runs user code: __getattr__, a cached_property, a descriptor."""

    class Tripled:
        def __get__(self, obj, owner):
            return obj.w * 3.0

    tripled = Tripled()

    def __init__(self, w, extra):
        self.w = w
        self._extra = {"b": extra}

    def __getattr__(self, name):
        return self._extra[name] * 1.0

    @functools.cached_property
    def w2(self):
        return self.w ** 2


def user_attribute_hooks(w, b):
    bag = ParamBag(w, b)
    return np.sum(bag.b ** 2) + np.sum(bag.w2 * bag.tripled) + np.sum(bag.w2)


def itertools_and_collections(x):
    pairs = sum(a * b for a, b in itertools.pairwise(x))
    chained = sum(v * v for v in itertools.chain(x[:1], x[2:]))
    first_two = sum(itertools.islice(x, 2))
    window = collections.deque(x, maxlen=2)
    return pairs + chained + first_two * 2.0 + sum(window) ** 2


def dict_params_manipulation(params):
    stepped = {k: v - 0.1 * v ** 2 for k, v in params.items()}
    merged = {**stepped, "extra": 1.5}
    merged.update(bias=stepped["b"] * 2.0)
    total = merged.get("missing", 0.0)
    for name in sorted(merged):
        total = total + np.sum(merged[name] ** 2)
    return total + sum(np.sum(v) for v in params.values())


def random_noise_inside(x):
    rng = np.random.default_rng(1234)
    noise = rng.normal(size=x.shape)
    keep = rng.random(x.shape) > 0.3
    return np.sum(np.tanh(x + 0.1 * noise) * keep) + np.sum((x * noise) ** 2)


class Counter:
    __slots__ = ("w", "scale")

    def __init__(self, w, scale):
        self.w = w
        self.scale = scale

    @classmethod
    def from_params(cls, params):
        return cls(params[0], params[1])

    def energy(self, x):
        return self.scale * np.sum((self.w * x) ** 2)


def classmethod_and_slots(w, x):
    c = Counter.from_params((w, 0.5))
    return c.energy(x) + Counter(x, 2.0).energy(w)


def sorted_with_key(x):
    ordered = sorted(x, key=abs)
    smallest = min(x, key=lambda v: v ** 2)
    return ordered[-1] * 2.0 + ordered[0] + smallest ** 2 + max(x, key=abs) * 0.5


# ---- code compiled from a string -----------------------------------------------------------------

EXEC_SOURCE = '''
def exec_defined(x, y):
    z = np.sin(x) * y
    for i in range(2):
        z = z + SCALE * x ** 2
    return np.sum(z)
'''
_exec_namespace: dict[str, Any] = {"np": np, "SCALE": 0.5}
exec(compile(EXEC_SOURCE, "<catalogue-exec>", "exec"), _exec_namespace)  # noqa: S102
exec_defined = _exec_namespace["exec_defined"]


# ---- the catalogue ------------------------------------------------------------------------------


def _mlp_args(rng: Rng) -> tuple:
    params = {
        "W1": rng.normal(size=(3, 4)) / 2, "b1": rng.normal(size=4) / 2,
        "W2": rng.normal(size=(4, 3)) / 2, "b2": rng.normal(size=3) / 2,
    }
    return params, rng.normal(size=(5, 3)), rng.integers(0, 3, size=5)


def _rnn_args(rng: Rng) -> tuple:
    params = RNNParams(rng.normal(size=(3, 2)) / 2, rng.normal(size=(3, 3)) / 2,
                       rng.normal(size=3) / 2, rng.normal(size=3))
    return params, rng.normal(size=(4, 2)), 4


def _comparisons_args(rng: Rng) -> tuple:
    while True:
        x = away(rng, 5)
        y = away(rng, 5)
        if abs(x.sum() - y.sum()) > 0.3 and abs(x[1] - y[1]) > 0.1:
            return x, y


def _conditional_args(rng: Rng) -> tuple:
    x = away(rng, 5, points=(0.0,), margin=0.2)
    if abs(x.sum()) < 0.3:
        x = x + 0.3 * np.sign(x.sum() + 1e-9)
    while abs(x[0]) < 0.2:
        x[0] += 0.5
    return (x,)


def _break_args(rng: Rng) -> tuple:
    x = away(rng, 6, points=(0.0,), margin=0.1)
    return (x,)


def _mod_args(rng: Rng) -> tuple:
    return (rng.integers(0, 4, size=5) + 0.2 + 0.6 * rng.random(5),)


CASES: list[Case] = [
    # arithmetic
    Case(binary_operators, lambda rng: (rng.normal(size=5), positive(rng, 5)), wrt=(0, 1), float32=True),
    Case(python_float_arith, lambda rng: (float(rng.uniform(0.5, 1.5)), float(rng.uniform(0.5, 1.5))), wrt=(0, 1)),
    Case(numpy_scalar_arith, lambda rng: (positive(rng, 4),)),
    Case(matmul_quadratic, wrt=(0, 1), float32=True, rtol=1e-5, atol=1e-5, make_args=lambda rng: (rng.normal(size=(3, 4)), rng.normal(size=4))),
    Case(powers, lambda rng: (positive(rng, 4), float(rng.uniform(1.2, 2.0))), wrt=(0, 1)),
    Case(mod_and_floordiv, _mod_args),
    Case(unary_operators, lambda rng: (away(rng, 5),)),
    Case(inplace_on_locals),
    Case(inplace_on_own_arrays),
    Case(broadcasting, lambda rng: (rng.normal(size=(4, 3)), rng.normal(size=3), rng.normal(size=4),
                                    np.array(rng.normal())), wrt=(0, 1, 2, 3), float32=True),
    # control flow
    Case(if_elif_else, lambda rng: (away(rng, 6, points=(0.5, -0.5), margin=0.05),)),
    Case(comparisons_on_data, _comparisons_args, wrt=(0, 1)),
    Case(for_range_steps),
    Case(while_data_dependent, lambda rng: (rng.normal(size=4),)),
    Case(break_and_continue, _break_args),
    Case(try_except_finally, lambda rng: (positive(rng, 5),)),
    Case(exception_taken, lambda rng: (rng.normal(size=4),)),
    Case(with_errstate, lambda rng: (positive(rng, 5),)),
    Case(nested_loops_scalars, lambda rng: (rng.normal(size=(3, 4)),)),
    Case(conditional_expression, _conditional_args),
    Case(asserts_and_shapes),
    Case(walrus_and_chained_comparison, lambda rng: (away(rng, 6, points=(-0.5, 0.5), margin=0.05),)),
    Case(match_statement, lambda rng: ({"w": rng.normal(size=3), "b": float(rng.normal())}, rng.normal(size=(4, 3))),
         wrt=(0, 1)),
    # unpacking and iteration
    Case(unpack_array, lambda rng: (rng.normal(size=2),)),
    Case(unpack_call),
    Case(iterate_rows),
    Case(zip_arrays, wrt=(0, 1)),
    Case(enumerate_weights),
    Case(user_generator),
    # subscripts
    Case(slices_and_negative_indices, lambda rng: (rng.normal(size=7),)),
    Case(none_index_outer, lambda rng: (rng.normal(size=3), rng.normal(size=4)), wrt=(0, 1)),
    Case(fancy_index_repeats),
    Case(fancy_index_2d, lambda rng: (rng.normal(size=(3, 3)),)),
    Case(boolean_mask, lambda rng: (away(rng, 8, points=(0.0, -0.5), margin=0.05),)),
    # methods and NumPy functions
    Case(array_methods, lambda rng: (positive(rng, (3, 4)),)),
    Case(more_array_methods, lambda rng: (positive(rng, (3, 4)), rng.normal(size=4)), wrt=(0, 1)),
    Case(numpy_functions, lambda rng: (rng.normal(size=4), rng.normal(size=4)), wrt=(0, 1)),
    Case(numpy_products, lambda rng: (rng.normal(size=(3, 4)), rng.normal(size=(4, 3)), rng.normal(size=3)), wrt=(0, 1, 2)),
    Case(module_constants),
    Case(formatting_side_effects),
    # calls
    Case(keyword_arguments, lambda rng: (positive(rng, 4),)),
    Case(star_args, wrt=(0, 1)),
    Case(star_kwargs, wrt=(0, 1)),
    Case(variadic_signature, lambda rng: (rng.normal(size=3), rng.normal(size=3), rng.normal(size=3)),
         make_kwargs=lambda rng: {"scale": 2.0, "offset": 1.5}),
    Case(user_decorator),
    Case(functools_partial),
    # classes, lambdas, closures, recursion
    Case(class_method, wrt=(0, 1, 2), make_args=lambda rng: (rng.normal(size=(3, 3)) / 2, rng.normal(size=3), rng.normal(size=3))),
    Case(callable_object, wrt=(0, 1, 2), make_args=lambda rng: (rng.normal(size=(3, 3)) / 2, rng.normal(size=3), rng.normal(size=3))),
    Case(lambdas),
    Case(builtin_map),
    Case(builtin_sorted_reversed),
    Case(closures, wrt=(0, 1)),
    Case(closure_nonlocal),
    Case(closure_late_binding),
    Case(nested_functions),
    Case(recursive_power),
    Case(recursive_horner, lambda rng: (rng.normal(size=4), rng.normal(size=5)), wrt=(0, 1)),
    Case(self_recursive, lambda rng: (rng.normal(size=3), 4)),
    # comprehensions and containers built inside
    Case(list_comprehension, lambda rng: (away(rng, 5),)),
    Case(generator_in_sum, wrt=(0, 1)),
    Case(dict_comprehension, lambda rng: (rng.normal(size=3),)),
    Case(append_then_stack),
    Case(array_from_scalars, lambda rng: (rng.normal(size=2),)),
    Case(array_from_floats, lambda rng: (float(rng.normal()), float(rng.normal())), wrt=(0, 1)),
    Case(allocate_then_fill, float32=True),
    Case(fill_rows_and_slices),
    Case(fill_then_overwrite, lambda rng: (away(rng, 6, points=(1.0,)),)),
    # pytree inputs
    Case(list_of_arrays, lambda rng: ([rng.normal(size=3), rng.normal(size=2), rng.normal(size=3)],)),
    Case(tuple_input, lambda rng: ((rng.normal(size=3), rng.normal(size=3)),)),
    Case(namedtuple_input, lambda rng: (Point(rng.normal(size=3), rng.normal(size=3), "pt"),)),
    Case(dataclass_input, lambda rng: (Params(rng.normal(size=3), float(rng.normal()), "p", 2),
                                       rng.normal(size=(4, 3))), float32=True),
    Case(nested_tree, lambda rng: ({"layers": [rng.normal(size=(3, 3)), rng.normal(size=(3, 3))],
                                    "scale": 2.0, "n": 3, "meta": ("tag", float(rng.normal()))},)),
    # Python floats, math and builtins
    Case(math_on_floats, lambda rng: (float(rng.uniform(0.5, 1.5)), float(rng.uniform(0.5, 1.5))), wrt=(0, 1)),
    Case(builtins_on_floats, lambda rng: (float(rng.uniform(0.5, 0.9)), float(rng.uniform(1.5, 2.5))), wrt=(0, 1)),
    Case(float_of_numpy),
    Case(spring_euler, lambda rng: (float(rng.uniform(0.5, 2.0)), float(rng.normal()), float(rng.normal()), 20),
         wrt=(0, 1, 2)),
    Case(spring_chain, lambda rng: (np.arange(4.0) + 0.2 * rng.normal(size=4), float(rng.uniform(0.5, 1.5)), 5),
         wrt=(0, 1)),
    # models
    Case(logistic_regression, lambda rng: (rng.normal(size=3), float(rng.normal()), rng.normal(size=(6, 3)),
                                           rng.integers(0, 2, size=6).astype(float)), wrt=(0, 1), float32=True),
    Case(mlp_cross_entropy, _mlp_args, wrt="params", float32=True),
    Case(rnn_unrolled, _rnn_args, wrt=(0, 1)),
    Case(layer_norm, lambda rng: (rng.normal(size=(3, 4)), rng.normal(size=4), rng.normal(size=4),
                                  rng.normal(size=(3, 4))), wrt=(0, 1, 2), float32=True),
    Case(gaussian_nll, lambda rng: (rng.normal(size=4), rng.normal(size=4) / 2, rng.normal(size=4)), wrt=(0, 1)),
    Case(polynomial_fit, lambda rng: (rng.normal(size=4), away(rng, 6, margin=0.2), rng.normal(size=6)), wrt=(0, 1)),
    Case(polynomial_fit_stacked, lambda rng: (rng.normal(size=4), rng.normal(size=6), rng.normal(size=6)), wrt=(0, 1)),
    Case(where_piecewise, lambda rng: (away(rng, 6, points=(0.0, -0.5), margin=0.05),), float32=True),
    Case(relu_and_clip, lambda rng: (away(rng, 4, points=(-0.5, 0.5, 0.2), margin=0.05), rng.normal(size=(3, 4))),
         wrt=(0, 1), float32=True),
    Case(attention, lambda rng: (rng.normal(size=(3, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2))),
         wrt=(0, 1, 2), float32=True),
    # harder programs
    Case(powers_negative_base, lambda rng: (-positive(rng, 4),)),
    Case(inplace_methods_on_own_copy, lambda rng: (rng.normal(size=4),)),
    Case(ufunc_out_into_own_buffer),
    Case(write_through_view, lambda rng: (away(rng, 5, points=(0.5, 0.0, -0.5), margin=0.05),)),
    Case(view_made_before_write, lambda rng: (rng.normal(size=3),)),
    Case(write_through_reshape_view, lambda rng: (rng.normal(size=3),)),
    Case(write_through_slice_view, lambda rng: (rng.normal(size=4),)),
    Case(strided_setitem, lambda rng: (rng.normal(size=4),)),
    Case(fancy_iadd_repeats),
    Case(add_at_repeats),
    Case(item_and_tolist, lambda rng: (rng.normal(size=3),)),
    Case(array_copies, lambda rng: (rng.normal(size=3),)),
    Case(math_on_numpy_scalars, lambda rng: (rng.normal(size=3),)),
    Case(list_operations, lambda rng: (rng.normal(size=4),)),
    Case(user_context_manager),
    Case(lambdas_in_comprehension, lambda rng: (rng.normal(size=3),)),
    Case(accumulate_in_object, lambda rng: (rng.normal(size=3),)),
    Case(long_loop, lambda rng: (rng.normal(size=3) / 2,)),
    Case(numpy_helpers_shift, lambda rng: (rng.normal(size=4),)),
    Case(numpy_helpers_shape, lambda rng: (rng.normal(size=(3, 3)),)),
    Case(numpy_helpers_values, lambda rng: (rng.normal(size=3), float(rng.uniform(0.5, 2.0))), wrt=(0, 1)),
    Case(numpy_keywords, lambda rng: (away(rng, (2, 3), points=(-0.5, 0.5), margin=0.05), float(rng.normal())),
         wrt=(0, 1)),
    Case(broadcast_size_one_dims, lambda rng: (rng.normal(size=(4, 3)), rng.normal(size=(1, 3)), rng.normal(size=(4, 1)),
                                               np.array(rng.normal())), wrt=(0, 1, 2, 3), float32=True),
    Case(linear_regression_solve, lambda rng: (rng.normal(size=(6, 3)), rng.normal(size=6), float(rng.uniform(0.5, 1.5))),
         wrt=(0, 1, 2)),
    Case(gaussian_logdet, lambda rng: (rng.normal(size=(3, 3)) / 2, rng.normal(size=3)), wrt=(0, 1)),
    Case(varying_shapes, lambda rng: (rng.normal(size=(int(rng.integers(2, 7)), 3)), rng.normal(size=3)), wrt=(0, 1)),
    Case(dataclass_with_methods, lambda rng: (MLPModel(rng.normal(size=(3, 4)) / 2, rng.normal(size=4) / 2,
                                                       rng.normal(size=4)), rng.normal(size=(5, 3)), rng.normal(size=5))),
    Case(loop_else, lambda rng: (rng.normal(size=4),)),
    Case(yield_from),
    Case(user_operator_overloading, lambda rng: (rng.normal(size=3), rng.normal(size=3)), wrt=(0, 1)),
    Case(user_operators_with_arrays, lambda rng: (rng.normal(size=3), rng.normal(size=3)), wrt=(0, 1)),
    Case(star_unpacking, lambda rng: (rng.normal(size=4),)),
    Case(refused_before_now, lambda rng: (rng.normal(size=3),)),
    Case(covariance_and_correlation, lambda rng: (rng.normal(size=(3, 5)),)),
    Case(list_operands, lambda rng: (rng.normal(size=4),)),
    Case(implicit_dunders, lambda rng: (rng.normal(size=3),)),
    Case(module_level_state, lambda rng: (rng.normal(size=3),)),
    Case(user_container_protocols, lambda rng: (rng.normal(size=3),)),
    Case(user_attribute_hooks, lambda rng: (rng.normal(size=3), rng.normal(size=2)), wrt=(0, 1)),
    Case(itertools_and_collections, lambda rng: (rng.normal(size=4),)),
    Case(dict_params_manipulation, lambda rng: ({"w": rng.normal(size=3), "b": rng.normal(size=2)},)),
    Case(random_noise_inside, lambda rng: (rng.normal(size=4),)),
    Case(classmethod_and_slots, lambda rng: (rng.normal(size=3), rng.normal(size=3)), wrt=(0, 1)),
    Case(sorted_with_key, lambda rng: (rng.normal(size=5),)),
    # code compiled from a string
    Case(exec_defined, wrt=(0, 1)),
]

FLOAT32_CASES: list[Case] = [c for c in CASES if c.float32]

assert len({c.id for c in CASES}) == len(CASES), "catalogue ids must be unique"
