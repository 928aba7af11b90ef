"""`scipy.stats`: logpdf, pdf, logcdf and cdf of norm, t, gamma, beta, expon, laplace and cauchy (in x,
loc, scale and the shape parameters), poisson.logpmf in mu and binom.logpmf in p, and
multivariate_normal.logpdf / pdf in x, the mean and the covariance.

`scipy.stats.norm.logpdf(x, loc, scale)` is a method of a distribution object: rewritten code calls
the class's function (`rv_continuous.logpdf`) with the object first, so the rules are registered on
those functions and look the distribution up by its type. Other distributions are differentiated
through scipy's own Python code, as before these rules. The cdf of t, gamma and beta has no
derivative here in the shape parameters (that of the regularised incomplete beta and gamma
functions in their parameters): asking for one is an error.
"""
from __future__ import annotations

import inspect
import math
import types
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
import scipy.special as sc
import scipy.stats as st

from bytegrad.errors import RuleCaseError
from bytegrad.rules._project import is_float, project, stand_in
from bytegrad.rules._shape import unbroadcast
from bytegrad.rules.numpy.linalg_decomp import onto_triangle
from bytegrad.rules.registry import NO_TANGENT, ZERO, frule, rrule, rrule_via_ad
from bytegrad.rules.scipy._args import params

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_PI = math.log(math.pi)


@dataclass(frozen=True)
class _Standard:
    """A distribution in standard form: the log density of z = (x - loc) / scale, its derivative in z
    and in each shape parameter (`logf(z, *shapes)`, `dz(z, *shapes)`, `dshapes[i](z, *shapes)`)."""

    logf: Callable[..., Any]
    dz: Callable[..., Any]
    dshapes: tuple[Callable[..., Any], ...] = ()


def _t_logf(z: Any, df: Any) -> Any:
    return (sc.gammaln((df + 1) / 2) - sc.gammaln(df / 2) - 0.5 * (np.log(df) + _LOG_PI)
            - (df + 1) / 2 * np.log1p(z * z / df))


def _t_ddf(z: Any, df: Any) -> Any:
    z2 = z * z
    return (0.5 * (sc.digamma((df + 1) / 2) - sc.digamma(df / 2)) - 0.5 / df - 0.5 * np.log1p(z2 / df)
            + (df + 1) / 2 * z2 / (df * (df + z2)))


_CONTINUOUS = {
    type(st.norm): _Standard(lambda z: -0.5 * z * z - _LOG_SQRT_2PI, lambda z: -z),
    type(st.cauchy): _Standard(lambda z: -np.log1p(z * z) - _LOG_PI, lambda z: -2 * z / (1 + z * z)),
    type(st.laplace): _Standard(lambda z: -np.abs(z) - math.log(2.0), lambda z: -np.sign(z)),
    type(st.expon): _Standard(lambda z: np.where(z >= 0, -z, -np.inf), lambda z: np.where(z >= 0, -1.0, 0.0)),
    type(st.t): _Standard(_t_logf, lambda z, df: -(df + 1) * z / (df + z * z), (_t_ddf,)),
    type(st.gamma): _Standard(lambda z, a: sc.xlogy(a - 1, z) - z - sc.gammaln(a), lambda z, a: (a - 1) / z - 1,
                              (lambda z, a: np.log(z) - sc.digamma(a),)),
    type(st.beta): _Standard(
        lambda z, a, b: sc.xlogy(a - 1, z) + sc.xlog1py(b - 1, -z) - sc.betaln(a, b),
        lambda z, a, b: (a - 1) / z - (b - 1) / (1 - z),
        (lambda z, a, b: np.log(z) - sc.digamma(a) + sc.digamma(a + b),
         lambda z, a, b: np.log1p(-z) - sc.digamma(b) + sc.digamma(a + b))),
}


def _covers(table: dict[type, Any], method: str) -> tuple[str, ...]:
    """The public names of `method` of the distributions in `table`: `scipy.stats.norm.logpdf`..."""
    names = {type(getattr(st, n, None)): n for n in dir(st) if not n.startswith("_")}
    return tuple(sorted(f"scipy.stats.{names[t]}.{method}" for t in table if t in names))


def _through(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A copy of the Python function `fn` with no rule: bytegrad differentiates through its code."""
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _signature_for(args: tuple[Any, ...]) -> Optional[inspect.Signature]:
    """The signature the runtime binds keyword arguments with (`norm.logpdf(x, loc=m, scale=s)`):
    x, the distribution's shape parameters, then loc and scale (discrete: loc only)."""
    dist = args[0] if args else None
    if not isinstance(dist, (st.rv_continuous, st.rv_discrete)):
        return None
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    names = ["self", "x"] + [n.strip() for n in (dist.shapes or "").split(",") if n.strip()]
    params = [inspect.Parameter(n, kind) for n in names] + [inspect.Parameter("loc", kind, default=0)]
    if isinstance(dist, st.rv_continuous):
        params.append(inspect.Parameter("scale", kind, default=1))
    return inspect.Signature(params)


def _cotangents(ob: Any, partials: list[Callable[[], Any]], values: tuple[Any, ...]) -> tuple[Any, ...]:
    """One thunk per value: its partial times the output cotangent, summed down to the value's shape."""
    return tuple((lambda p=p, v=v, like=stand_in(v): project(unbroadcast(ob * p(), np.shape(v)), like))
                 if is_float(v) else NO_TANGENT for p, v in zip(partials, values))


def _no_shape_derivative(name: str, method: str) -> Callable[[], Any]:
    def refuse() -> Any:
        raise RuleCaseError(f"the rule of scipy.stats.{name}.{method} has no derivative in the shape "
                                  "parameters (that of the regularised incomplete gamma or beta function); "
                                  "differentiate in x, loc and scale only")
    return refuse


_Thunk = Callable[[], Any]


def _standard_partials(method: str, spec: _Standard, z: Any, shapes: tuple[Any, ...], scale: Any,
                       out: Any) -> tuple[list[Callable[..., Any]], _Thunk, _Thunk, _Thunk]:
    """d method / d (shape parameters, x, loc, scale) as thunks."""
    if method in ("logpdf", "pdf"):
        factor = out if method == "pdf" else 1.0
        g = spec.dz(z, *shapes)
        dshapes = [(lambda d=d: factor * d(z, *shapes)) for d in spec.dshapes]
        return (dshapes, lambda: factor * g / scale, lambda: -factor * g / scale,
                lambda: -factor * (g * z + 1) / scale)
    # cdf: the density of z; logcdf: the density over the cdf, as exp(log f - log F)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        f = np.exp(spec.logf(z, *shapes) - out) if method == "logcdf" else np.exp(spec.logf(z, *shapes))
    return ([], lambda: f / scale, lambda: -f / scale, lambda: -f * z / scale)


def _continuous_partials(method: str, spec: _Standard, dist: Any, x: Any, args: tuple[Any, ...],
                         kwargs: dict[str, Any], out: Any) -> list[Callable[[], Any]]:
    """d method / d (x, *args) as thunks, one per positional argument after the distribution."""
    shapes, loc, scale = dist._parse_args(*args, **kwargs)
    z = (np.asarray(x) - loc) / scale
    with np.errstate(divide="ignore", invalid="ignore"):
        dshapes, dx, dloc, dscale = _standard_partials(method, spec, z, shapes, scale, out)
    if len(dshapes) < len(shapes):  # thunks: the refusal comes only if a shape parameter is differentiated
        dshapes = [_no_shape_derivative(type(dist).__name__[:-4], method)] * len(shapes)
    return ([dx] + dshapes + [dloc, dscale])[:len(args) + 1]


def _continuous_rule(fn: Callable[..., Any], method: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    through = _through(fn)

    def continuous_rrule(dist: Any, x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        spec = _CONTINUOUS.get(type(dist))
        if spec is None:  # another distribution: through scipy's code
            out, pullback = rrule_via_ad(lambda *xs: through(dist, *xs, **kwargs), x, *args)
            return out, lambda out_bar: (NO_TANGENT,) + tuple(pullback(out_bar))
        out = fn(dist, x, *args, **kwargs)

        def continuous_pullback(out_bar: Any) -> tuple[Any, ...]:
            partials = _continuous_partials(method, spec, dist, x, args, kwargs, out)
            bars = _cotangents(out_bar, partials, (x,) + args)
            return (NO_TANGENT,) + bars + (NO_TANGENT,) * (len(args) + 1 - len(bars))

        return out, continuous_pullback

    def continuous_frule(args_dot: tuple[Any, ...], dist: Any, x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        spec = _CONTINUOUS.get(type(dist))
        if spec is None:
            out, pullback = rrule_via_ad(lambda *xs: through(dist, *xs, **kwargs), x, *args)
            return out, _transposed_tangent(pullback, out, args_dot[1:])
        out = fn(dist, x, *args, **kwargs)
        partials = _continuous_partials(method, spec, dist, x, args, kwargs, out)
        return out, _tangent(partials, args_dot[1:], out)

    continuous_rrule.signature_for = _signature_for  # type: ignore[attr-defined]
    continuous_rrule.covers = _covers(_CONTINUOUS, method)  # type: ignore[attr-defined]  # (docs/rules.md's rows)
    continuous_rrule.__name__ = continuous_rrule.__qualname__ = f"{method}_rrule"
    continuous_frule.__name__ = continuous_frule.__qualname__ = f"{method}_frule"
    return continuous_rrule, continuous_frule


def _transposed_tangent(pullback: Callable[[Any], Any], out: Any, dots: tuple[Any, ...]) -> Any:
    """The tangent of `out` from a pullback, one output element at a time (distributions without a rule)."""
    out_dot = np.zeros(np.shape(out))
    for i in np.ndindex(np.shape(out)):
        seed = np.zeros(np.shape(out))
        seed[i] = 1.0
        bars = pullback(seed if seed.ndim else 1.0)
        out_dot[i] = sum(float(np.sum(np.asarray(b) * d)) for b, d in zip(bars, dots)
                         if d is not None and d is not ZERO and d is not NO_TANGENT and b is not None
                         and b is not ZERO and b is not NO_TANGENT)
    return out_dot if out_dot.ndim else float(out_dot)


def _tangent(partials: list[Any], dots: tuple[Any, ...], out: Any) -> Any:
    """The sum of partial * tangent over the arguments that have a tangent."""
    total: Any = ZERO
    for p, dot in zip(partials, dots):
        if p is not None and dot is not None and dot is not ZERO and dot is not NO_TANGENT:
            total = total + p() * dot
    return total if total is ZERO else np.broadcast_to(total, np.shape(out)) + np.zeros_like(out)


for _method in ("logpdf", "pdf", "cdf", "logcdf"):
    _fn = getattr(st.rv_continuous, _method)
    _rule, _frule = _continuous_rule(_fn, _method)
    rrule(_fn)(_rule)
    frule(_fn)(_frule)


# ---- poisson.logpmf in mu, binom.logpmf in p --------------------------------------------------------

def _poisson_dmu(k: Any, mu: Any) -> list[Any]:
    return [lambda: np.asarray(k) / mu - 1]


def _binom_dp(k: Any, n: Any, p: Any) -> list[Any]:
    return [None, lambda: np.asarray(k) / p - (np.asarray(n) - k) / (1 - p)]


_DISCRETE: dict[type, Callable[..., Any]] = {type(st.poisson): _poisson_dmu, type(st.binom): _binom_dp}
_logpmf_through = _through(st.rv_discrete.logpmf)


@rrule(st.rv_discrete.logpmf)
def logpmf_rrule(dist: Any, k: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    partials_of = _DISCRETE.get(type(dist))
    if partials_of is None:  # another distribution: through scipy's code
        out, pullback = rrule_via_ad(lambda *xs: _logpmf_through(dist, *xs, **kwargs), k, *args)
        return out, lambda out_bar: (NO_TANGENT,) + tuple(pullback(out_bar))
    out = st.rv_discrete.logpmf(dist, k, *args, **kwargs)
    shapes, loc = dist._parse_args(*args, **kwargs)[:2]

    def logpmf_pullback(out_bar: Any) -> tuple[Any, ...]:
        partials = partials_of(np.asarray(k) - loc, *shapes)[:len(args)]
        bars = _cotangents(out_bar, partials, args[:len(partials)])
        bars = tuple(NO_TANGENT if p is None else bar for p, bar in zip(partials, bars))
        return (NO_TANGENT, NO_TANGENT) + bars + (NO_TANGENT,) * (len(args) - len(bars))

    return out, logpmf_pullback


logpmf_rrule.signature_for = _signature_for  # type: ignore[attr-defined]
logpmf_rrule.covers = _covers(_DISCRETE, "logpmf")  # type: ignore[attr-defined]


@frule(st.rv_discrete.logpmf)
def logpmf_frule(args_dot: tuple[Any, ...], dist: Any, k: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    partials_of = _DISCRETE.get(type(dist))
    if partials_of is None:
        out, pullback = rrule_via_ad(lambda *xs: _logpmf_through(dist, *xs, **kwargs), k, *args)
        return out, _transposed_tangent(pullback, out, args_dot[1:])
    out = st.rv_discrete.logpmf(dist, k, *args, **kwargs)
    shapes, loc = dist._parse_args(*args, **kwargs)[:2]
    partials = partials_of(np.asarray(k) - loc, *shapes)[:len(args)]
    return out, _tangent(partials, args_dot[2:], out)


# ---- multivariate_normal.logpdf / pdf ------------------------------------------------------------------

def _mvn_parts(x: Any, mean: Any, cov: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the points as rows r = x - mean, shape (..., d), the covariance matrix, its inverse)."""
    c = np.asarray(cov, dtype=float)
    m = np.asarray(0.0 if mean is None else mean, dtype=float)
    d = c.shape[-1] if c.ndim else (m.size if mean is not None else np.shape(x)[-1])
    full = c * np.eye(d) if c.ndim == 0 else (np.diag(c) if c.ndim == 1 else c)
    xa = np.asarray(x, dtype=float)
    if d == 1 and xa.ndim and xa.shape[-1] != 1:
        xa = xa[..., None]  # scipy reads a 1-D x of a 1-D distribution as points
    return xa - m, full, np.linalg.inv(_onto_lower(full))


def _onto_lower(c: np.ndarray) -> np.ndarray:
    """The symmetric matrix scipy factors: it reads the lower triangle (scipy.linalg.eigh's default)."""
    return np.tril(c) + np.swapaxes(np.tril(c, -1), -1, -2)


def _cov_bar(g: np.ndarray, cov: Any) -> Any:
    """The cotangent of the covariance argument (a matrix read by its lower triangle, a diagonal, a
    scalar) from the symmetric cotangent g of the matrix it stands for."""
    c = np.asarray(cov)
    if c.ndim == 0:
        return np.trace(g)
    if c.ndim == 1:
        return np.diagonal(g)
    return onto_triangle(g, lower=True)


def _mvn_rule(fn: Callable[..., Any], density: bool) -> Callable[..., Any]:
    def mvn_rrule(dist: Any, x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        out = fn(dist, x, *args, **kwargs)
        mean, cov = params(args, kwargs, ("mean", "cov"), (None, 1))
        likes = (stand_in(x), stand_in(mean), stand_in(cov))

        def mvn_pullback(out_bar: Any) -> tuple[Any, ...]:
            r, _, inv = _mvn_parts(x, mean, cov)
            ob = np.broadcast_to(out_bar * out if density else out_bar, np.shape(out)).reshape(r.shape[:-1])
            alpha = r @ inv  # inv is symmetric: the rows of Sigma^-1 r
            weighted = ob[..., None] * alpha
            rows = (-1, r.shape[-1])
            # d logpdf = -1/2 tr(Sigma^-1 dSigma) + 1/2 alpha^T dSigma alpha, summed over the points
            g = 0.5 * (weighted.reshape(rows).T @ alpha.reshape(rows) - np.sum(ob) * inv)
            bars = (lambda: project(np.reshape(-weighted, np.shape(x)), likes[0]),
                    lambda: project(unbroadcast(weighted, np.shape(mean)), likes[1]),
                    lambda: project(_cov_bar(g, cov), likes[2]))
            return (NO_TANGENT,) + bars[:len(args) + 1] + (NO_TANGENT,) * (len(args) - 2)

        return out, mvn_pullback

    method = "pdf" if density else "logpdf"
    mvn_rrule.__name__ = mvn_rrule.__qualname__ = f"multivariate_normal_{method}_rrule"
    mvn_rrule.covers = (f"scipy.stats.multivariate_normal.{method}",)  # type: ignore[attr-defined]
    return mvn_rrule


_MVN = type(st.multivariate_normal)
rrule(_MVN.logpdf)(_mvn_rule(_MVN.logpdf, density=False))
rrule(_MVN.pdf)(_mvn_rule(_MVN.pdf, density=True))
