"""`scipy.special`: its ufuncs as `scalar_rule` tables (partials in terms of the inputs and `out`),
and rules for the Python functions logsumexp, softmax, log_softmax, polygamma and multigammaln.

Integer orders (polygamma's n, multigammaln's d) have no derivative. Partials at the edge of a
domain are the limits NumPy gives (+-inf), as for NumPy's own ufuncs.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import scipy.special as sc

from bytegrad.errors import RuleCaseError
from bytegrad.rules._project import project, stand_in
from bytegrad.rules._shape import unbroadcast
from bytegrad.rules.registry import NO_TANGENT, ZERO, frule, rrule, scalar_rule

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_SQRT_2PI = math.sqrt(2.0 * math.pi)


def _errstate() -> Any:
    return np.errstate(divide="ignore", invalid="ignore", over="ignore")


def _x_over(x: Any, d: Any) -> Any:
    """x / d, and 0 where x == 0 even if d == 0 (xlogy(0, y) is 0 for every y, so flat in y). The
    denominator is replaced only where both are 0, so that d/dx (x / d) = 1 / d stays exact at x == 0
    (a nested derivative differentiates this partial)."""
    with _errstate():
        return x / np.where(np.equal(x, 0) & np.equal(d, 0), 1.0, d)


def _like_out(value: Any, out: Any) -> Any:
    """`value` in `out`'s dtype: polygamma computes in float64 whatever its argument's precision."""
    dtype = getattr(out, "dtype", None)
    if dtype is None or getattr(value, "dtype", dtype) == dtype:
        return value
    return value.astype(dtype)


# ---- logistic, error function, normal distribution ------------------------------------------------

scalar_rule(sc.expit, lambda x, out: out * (1 - out))
scalar_rule(sc.logit, lambda x, out: 1 / (x * (1 - x)))
scalar_rule(sc.erf, lambda x, out: _TWO_OVER_SQRT_PI * np.exp(-x * x))
scalar_rule(sc.erfc, lambda x, out: -_TWO_OVER_SQRT_PI * np.exp(-x * x))
scalar_rule(sc.erfinv, lambda x, out: np.exp(out * out) / _TWO_OVER_SQRT_PI)
scalar_rule(sc.ndtr, lambda x, out: np.exp(-0.5 * x * x) / _SQRT_2PI)
# the normal density over ndtr, as exp(-x^2/2 - log_ndtr(x)): no 0/0 far in the left tail
scalar_rule(sc.log_ndtr, lambda x, out: np.exp(-0.5 * x * x - out) / _SQRT_2PI)
scalar_rule(sc.ndtri, lambda p, out: _SQRT_2PI * np.exp(0.5 * out * out))

# ---- gamma and beta functions ---------------------------------------------------------------------

#: Bernoulli numbers B_2, B_4, ..., B_20 (the asymptotic series of the polygamma functions)
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510, 43867 / 798, -174611 / 330)
#: where the asymptotic series takes over: with ten terms its error is below 1e-25 relative at |z| >= 20
_ASYMPTOTIC_FROM = 20.0


def polygamma(n: Any, x: Any) -> Any:
    """`scipy.special.polygamma(n, x)`, for complex `x` too: SciPy's takes real `x` only, and the
    derivative of `digamma` (SciPy's is complex) at complex `z` is `polygamma(1, z)`, so a nested
    derivative of `gamma`, `digamma` or `polygamma` needs it."""
    if not np.iscomplexobj(x):
        return sc.polygamma(n, x)
    orders, z = np.broadcast_arrays(np.asarray(n), np.asarray(x, dtype=np.complex128))
    out = np.empty(z.shape, np.complex128)
    for k in np.unique(orders):
        at = orders == k
        out[at] = sc.digamma(z[at]) if k == 0 else _complex_polygamma(int(k), z[at])
    return out if out.ndim else out[()]


def _complex_polygamma(k: int, z: Any) -> Any:
    """psi^(k)(z) for k >= 1 and complex `z`: the recurrence psi^(k)(z) = psi^(k)(z + 1) + (-1)^(k+1)
    k! / z^(k+1) moves every point to Re z >= 20, where the asymptotic series (-1)^(k+1) [(k-1)!/w^k +
    k!/(2 w^(k+1)) + sum_j B_2j (2j+k-1)!/(2j)! / w^(2j+k)] holds. At the poles (0, -1, -2, ...) the
    result is not finite (nan, as SciPy's complex digamma gives there)."""
    shifts = np.ceil(np.maximum(0.0, _ASYMPTOTIC_FROM - z.real))
    near = np.zeros_like(z)
    with _errstate():
        for j in range(int(shifts.max(initial=0.0))):
            near += np.where(j < shifts, 1.0 / (z + j) ** (k + 1), 0.0)
        w = z + shifts
        far = math.factorial(k - 1) / w ** k + math.factorial(k) / (2 * w ** (k + 1))
        for j, b in enumerate(_BERNOULLI, start=1):
            far += b * (math.factorial(2 * j + k - 1) / math.factorial(2 * j)) / w ** (2 * j + k)
        return (1.0 if k % 2 else -1.0) * (far + math.factorial(k) * near)


scalar_rule(sc.gamma, lambda x, out: out * sc.digamma(x))
scalar_rule(sc.gammaln, lambda x, out: sc.digamma(x))
scalar_rule(sc.digamma, lambda x, out: _like_out(polygamma(1, x), out))  # scipy.special.psi is the same ufunc
scalar_rule(sc.polygamma, None, lambda n, x, out: _like_out(polygamma(np.add(n, 1), x), out))
scalar_rule(sc.beta, lambda a, b, out: out * (sc.digamma(a) - sc.digamma(a + b)),
            lambda a, b, out: out * (sc.digamma(b) - sc.digamma(a + b)))
scalar_rule(sc.betaln, lambda a, b, out: sc.digamma(a) - sc.digamma(a + b),
            lambda a, b, out: sc.digamma(b) - sc.digamma(a + b))


def _multigammaln_da(a: Any, d: int, out: Any) -> Any:
    # multigammaln(a, d) = sum_{j=1..d} gammaln(a + (1 - j) / 2) + a constant
    return sum(sc.digamma(np.add(a, (1 - j) / 2)) for j in range(1, int(d) + 1))


scalar_rule(sc.multigammaln, _multigammaln_da, None)

# ---- x log y and entropies ------------------------------------------------------------------------

scalar_rule(sc.xlogy, lambda x, y, out: np.log(y), lambda x, y, out: _x_over(x, y))
scalar_rule(sc.xlog1py, lambda x, y, out: np.log1p(y), lambda x, y, out: _x_over(x, 1 + y))
scalar_rule(sc.entr, lambda x, out: -(np.log(x) + 1))
scalar_rule(sc.rel_entr, lambda x, y, out: np.log(x / y) + 1, lambda x, y, out: -x / y)
scalar_rule(sc.kl_div, lambda x, y, out: np.log(x / y), lambda x, y, out: 1 - x / y)

# ---- modified Bessel functions of orders 0 and 1 --------------------------------------------------


def _i1_over_x(x: Any, i1: Any) -> Any:
    """i1(x) / x, with its limit 1/2 at x == 0."""
    with _errstate():
        return np.where(np.equal(x, 0), 0.5, i1 / np.where(np.equal(x, 0), 1, x))


scalar_rule(sc.i0, lambda x, out: sc.i1(x))
scalar_rule(sc.i1, lambda x, out: sc.i0(x) - _i1_over_x(x, out))
# i0e = exp(-|x|) i0, i1e = exp(-|x|) i1
scalar_rule(sc.i0e, lambda x, out: sc.i1e(x) - np.sign(x) * out)
scalar_rule(sc.i1e, lambda x, out: sc.i0e(x) - _i1_over_x(x, out) - np.sign(x) * out)

# ---- logsumexp, softmax, log_softmax --------------------------------------------------------------


def _kept(value: Any, shape: tuple[int, ...], axis: Any, keepdims: bool) -> Any:
    """`value` (of a reduction's output) with the reduced axes kept as length 1, for broadcasting."""
    if keepdims or not shape:
        return np.asarray(value)
    axes = range(len(shape)) if axis is None else np.atleast_1d(axis)
    return np.expand_dims(value, tuple(int(a) % len(shape) for a in axes))


def _lse_args(a: Any, axis: Any = None, b: Any = None, keepdims: bool = False,
              return_sign: bool = False) -> tuple[Any, Any, bool]:
    if return_sign:
        raise RuleCaseError("the scipy.special.logsumexp rule covers return_sign=False only; take "
                                  "the sign apart (np.sign of the weighted sum) or keep b >= 0")
    return axis, b, keepdims


@rrule(sc.logsumexp)
def logsumexp_rrule(a: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    axis, b, keepdims = _lse_args(a, *args, **kwargs)
    out = sc.logsumexp(a, *args, **kwargs)
    like_a, like_b = stand_in(a), stand_in(b)

    def logsumexp_pullback(out_bar: Any) -> tuple[Any, ...]:
        xa = np.asarray(a)
        shape = np.broadcast_shapes(xa.shape, np.shape(b)) if b is not None else xa.shape
        ob = _kept(np.broadcast_to(out_bar, np.shape(out)), shape, axis, keepdims)
        e = np.exp(xa - _kept(out, shape, axis, keepdims))  # exp(a) / sum(b exp(a))
        a_bar = project(unbroadcast(ob * (e if b is None else e * b), xa.shape), like_a)
        rest = [NO_TANGENT] * len(args)
        b_bar = project(unbroadcast(ob * e, np.shape(b)), like_b) if b is not None else NO_TANGENT
        if len(args) >= 2:
            rest[1] = b_bar
        return (a_bar, *rest)

    return out, logsumexp_pullback


@frule(sc.logsumexp)
def logsumexp_frule(args_dot: tuple[Any, ...], a: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    axis, b, keepdims = _lse_args(a, *args, **kwargs)
    out = sc.logsumexp(a, *args, **kwargs)
    xa = np.asarray(a)
    shape = np.broadcast_shapes(xa.shape, np.shape(b)) if b is not None else xa.shape
    e = np.exp(xa - _kept(out, shape, axis, keepdims))
    a_dot = args_dot[0]
    b_dot = args_dot[2] if len(args_dot) > 2 else ZERO
    terms = 0.0
    if a_dot is not ZERO and a_dot is not None:
        terms = terms + (e if b is None else e * b) * a_dot
    if b is not None and b_dot is not ZERO and b_dot is not None:
        terms = terms + e * b_dot
    return out, np.sum(np.broadcast_to(terms, shape), axis=axis, keepdims=keepdims)


def _axis(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return kwargs.get("axis", args[0] if args else None)


def _normalized_rule(fn: Any, vjp: Callable[[Any, Any, Any], Any], jvp: Callable[[Any, Any, Any], Any]) -> None:
    """Register the rules of softmax-like `fn(x, axis=None)`: `vjp(g, out, axis)` and `jvp(t, out, axis)`
    apply the Jacobian's transpose and the Jacobian, written with `out`."""
    def normalized_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        axis = _axis(args, kwargs)
        out = fn(x, *args, **kwargs)
        like = stand_in(x)

        def normalized_pullback(out_bar: Any) -> tuple[Any, ...]:
            return (project(vjp(np.broadcast_to(out_bar, out.shape), out, axis), like),) + (NO_TANGENT,) * len(args)

        return out, normalized_pullback

    def normalized_frule(args_dot: tuple[Any, ...], x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        out = fn(x, *args, **kwargs)
        return out, jvp(np.broadcast_to(args_dot[0], out.shape), out, _axis(args, kwargs))

    normalized_rrule.__name__ = normalized_rrule.__qualname__ = f"{fn.__name__}_rrule"
    normalized_frule.__name__ = normalized_frule.__qualname__ = f"{fn.__name__}_frule"
    rrule(fn)(normalized_rrule)
    frule(fn)(normalized_frule)


def _softmax_vjp(g: Any, s: Any, axis: Any) -> Any:  # the Jacobian diag(s) - s s^T is symmetric
    gs = g * s
    return gs - s * np.sum(gs, axis=axis, keepdims=True)


def _log_softmax_vjp(g: Any, out: Any, axis: Any) -> Any:  # J = I - 1 s^T, J^T g = g - s sum(g)
    return g - np.exp(out) * np.sum(g, axis=axis, keepdims=True)


def _log_softmax_jvp(t: Any, out: Any, axis: Any) -> Any:
    return t - np.sum(np.exp(out) * t, axis=axis, keepdims=True)


_normalized_rule(sc.softmax, _softmax_vjp, _softmax_vjp)
_normalized_rule(sc.log_softmax, _log_softmax_vjp, _log_softmax_jvp)
