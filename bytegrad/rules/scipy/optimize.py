"""Derivatives through `scipy.optimize`'s solvers, by the implicit function theorem at the solution.

`root`, `root_scalar`, `fsolve`, `brentq`, `brenth`, `ridder`, `bisect`, `toms748` and `newton` solve F(z, p) = 0;
`minimize` (without bounds or constraints) and `least_squares` (linear loss, no bounds) solve
grad_z phi(z, p) = 0. SciPy's solver runs unchanged on plain values; the solution is recorded as one
operation whose inputs are the differentiated values p the user's function reads (`args=`, closure,
defaults, globals), and its pullback is dz*/dp = -F_z^{-1} F_p at z*, with F_z and F_p from bytegrad's
reverse mode on the user's function (rules/scipy/_implicit.py). See docs/solvers.md.
"""
from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any, Optional

import numpy as np
import scipy.optimize as so

from bytegrad.rules.registry import (
    differentiate_through,
    non_differentiable,
    rrule_via_ad,
)
from bytegrad.rules.scipy._implicit import Problem, expose, refusal, solved

def _bind(original: Callable[..., Any], a: tuple, kw: dict) -> dict[str, Any]:
    """The call's arguments by name, defaults filled in (SciPy's own signature)."""
    bound = _SIGNATURES[original].bind(*a, **kw)
    bound.apply_defaults()
    return dict(bound.arguments)


def _as_tuple(args: Any) -> tuple:
    return args if isinstance(args, tuple) else (args,)


#: SciPy's signatures, read once (a table, not a cache: filled here and never written again)
_SIGNATURES: dict[Any, inspect.Signature] = {
    f: inspect.signature(f) for f in (
        so.root, so.root_scalar, so.fsolve, so.brentq, so.brenth, so.ridder, so.bisect, so.toms748, so.newton,
        so.minimize, so.least_squares, so.minimize_scalar, so.golden, so.brent, so.fminbound, so.fmin,
        so.fmin_powell, so.fmin_bfgs, so.fmin_cg, so.fmin_ncg, so.shgo, so.dual_annealing, so.basinhopping,
        so.differential_evolution, so.brute, so.fmin_cobyla, so.fmin_slsqp)
}


# ---- F(z, p) = 0 ----------------------------------------------------------------------------------

def _plain_residual(fn: Any, args: tuple, kwargs: dict, z: Any) -> Any:
    return fn(z, *args, **kwargs)


def _first_of_pair(fn: Any, args: tuple, kwargs: dict, z: Any) -> Any:
    return fn(z, *args, **kwargs)[0]  # `jac=True`: the function returns (F, its Jacobian)


def _bracketing(original: Callable[..., Any]) -> Callable[..., Any]:
    """brentq, brenth, ridder, bisect, toms748: a scalar root in a bracket."""
    def problem_of(a: tuple, kw: dict) -> tuple[Problem, tuple]:
        b = _bind(original, a, kw)
        full = b["full_output"]

        def solve(fn: Any, args: tuple, kwargs: dict) -> tuple[Any, Any]:
            out = original(**{**b, "f": fn, "args": args, "full_output": True})
            return out[0], (out[1] if full else None)

        problem, params = expose((b["f"], _as_tuple(b["args"]), {}), solve, f"scipy.optimize.{original.__name__}")
        problem.residual = _plain_residual
        return problem, params

    return problem_of


def _scalar_output(problem: Problem, z: Any) -> Any:
    return z if problem.result is None else (z, problem.result)


def _newton(a: tuple, kw: dict) -> tuple[Problem, tuple]:
    b = _bind(so.newton, a, kw)
    full = b["full_output"]

    def solve(fn: Any, args: tuple, kwargs: dict) -> tuple[Any, Any]:
        out = so.newton(**{**b, "func": fn, "args": args})
        if full:
            return out[0], tuple(out[1:])
        return out, None

    problem, params = expose((b["func"], _as_tuple(b["args"]), {}), solve, "scipy.optimize.newton")
    problem.residual = _plain_residual
    return problem, params


def _newton_output(problem: Problem, z: Any) -> Any:
    return z if problem.result is None else (z, *problem.result)


def _root(a: tuple, kw: dict) -> tuple[Problem, tuple]:
    b = _bind(so.root, a, kw)

    def solve(fn: Any, args: tuple, kwargs: dict) -> tuple[Any, Any]:
        res = so.root(**{**b, "fun": fn, "args": args})
        return res.x, res

    problem, params = expose((b["fun"], _as_tuple(b["args"]), {}), solve, "scipy.optimize.root")
    problem.residual = _first_of_pair if b["jac"] is True else _plain_residual
    return problem, params


def _root_scalar(a: tuple, kw: dict) -> tuple[Problem, tuple]:
    b = _bind(so.root_scalar, a, kw)

    def solve(fn: Any, args: tuple, kwargs: dict) -> tuple[Any, Any]:
        res = so.root_scalar(**{**b, "f": fn, "args": args})
        return res.root, res

    problem, params = expose((b["f"], _as_tuple(b["args"]), {}), solve, "scipy.optimize.root_scalar")
    problem.residual = _first_of_pair if b["fprime"] is True else _plain_residual
    return problem, params


def _with_root(problem: Problem, z: Any) -> Any:
    """SciPy's RootResults with the differentiated root (a copy)."""
    res = copy.copy(problem.result)
    res.root = z
    return res


def _with_x(problem: Problem, z: Any) -> Any:
    """SciPy's OptimizeResult with the differentiated solution as `x` (a copy: SciPy's is not changed)."""
    res = so.OptimizeResult(problem.result)
    res["x"] = z
    return res


def _fsolve(a: tuple, kw: dict) -> tuple[Problem, tuple]:
    b = _bind(so.fsolve, a, kw)
    full = b["full_output"]

    def solve(fn: Any, args: tuple, kwargs: dict) -> tuple[Any, Any]:
        out = so.fsolve(**{**b, "func": fn, "args": args, "full_output": True})
        return out[0], (tuple(out[1:]) if full else None)

    problem, params = expose((b["func"], _as_tuple(b["args"]), {}), solve, "scipy.optimize.fsolve")
    problem.residual = _plain_residual
    return problem, params


# ---- grad_z phi(z, p) = 0: minimize, least_squares --------------------------------------------------

def _gradient_of(objective: Callable[..., Any]) -> Callable[..., Any]:
    """(fn, args, kwargs, z) -> grad_z phi, by bytegrad's reverse mode (a nested derivative when the
    implicit derivative differentiates it again: its Jacobian is the Hessian)."""
    def gradient(fn: Any, args: tuple, kwargs: dict, z: Any) -> Any:
        _, pullback = rrule_via_ad(lambda zz: objective(fn, args, kwargs, zz), z)
        return pullback(1.0)[0]

    return gradient


def _scalar_objective(fn: Any, args: tuple, kwargs: dict, z: Any) -> Any:
    return fn(z, *args, **kwargs)


def _half_sum_of_squares(fn: Any, args: tuple, kwargs: dict, z: Any) -> Any:
    r = fn(z, *args, **kwargs)
    return 0.5 * np.sum(r * r)


_CONSTRAINED = {"slsqp", "trust-constr", "cobyla", "cobyqa"}


def _minimize(a: tuple, kw: dict) -> tuple[Problem, tuple]:
    b = _bind(so.minimize, a, kw)
    method = b["method"]
    name = method if isinstance(method, str) else getattr(method, "__name__", "a custom method")
    has = [what for what, present in (("bounds", b["bounds"] is not None),
                                      ("constraints", b["constraints"] not in ((), [], None)),
                                      (f"the custom method {name}", not isinstance(method, (str, type(None)))))
           if present]
    if has:
        raise refusal(
            f"differentiating scipy.optimize.minimize with {' and '.join(has)} is not supported: the derivative "
            "of a constrained minimum needs the active constraints (KKT conditions).",
            "minimize without bounds or constraints (reparametrise: x = exp(u) for x > 0), or take the "
            "derivative by finite differences.")

    def solve(fn: Any, args: tuple, kwargs: dict) -> tuple[Any, Any]:
        res = so.minimize(**{**b, "fun": fn, "args": args})
        return res.x, res

    problem, params = expose((b["fun"], _as_tuple(b["args"]), {}), solve,
                             f"scipy.optimize.minimize (method {name or 'default'})")
    objective = _scalar_objective if b["jac"] is not True else (lambda fn, args, kwargs, z: fn(z, *args)[0])
    problem.residual = _gradient_of(objective)
    problem.symmetric = True
    return problem, params


def _least_squares(a: tuple, kw: dict) -> tuple[Problem, tuple]:
    b = _bind(so.least_squares, a, kw)
    lo, hi = b["bounds"] if not isinstance(b["bounds"], so.Bounds) else (b["bounds"].lb, b["bounds"].ub)
    if b["loss"] != "linear" or np.any(np.isfinite(lo)) or np.any(np.isfinite(hi)):
        raise refusal(
            "differentiating scipy.optimize.least_squares is supported with loss='linear' and no bounds; "
            f"this call has {'loss=' + repr(b['loss']) if b['loss'] != 'linear' else 'bounds'}.",
            "use the linear loss without bounds (reparametrise a bounded parameter), or take the derivative "
            "by finite differences.")

    def solve(fn: Any, args: tuple, kwargs: dict) -> tuple[Any, Any]:
        res = so.least_squares(**{**b, "fun": fn, "args": args, "kwargs": kwargs})
        return res.x, res

    problem, params = expose((b["fun"], _as_tuple(b["args"]), dict(b["kwargs"] or {})), solve,
                             "scipy.optimize.least_squares")
    problem.residual = _gradient_of(_half_sum_of_squares)
    problem.symmetric = True
    return problem, params


# ---- the scalar and legacy minimisers: minimize_scalar, golden, brent, fminbound, fmin, fmin_bfgs... --

def _first(out: Any) -> Any:
    return out[0] if isinstance(out, tuple) else out


def _legacy_minimum(original: Callable[..., Any], fn_name: str, bounds: Optional[Callable[[dict], Any]] = None,
                    x_of: Callable[[Any], Any] = _first) -> Callable[..., Any]:
    """The problem of a minimiser whose answer is `x_of(out)`: the implicit derivative of its
    optimality condition; `bounds(b)`, when given, gives the interval a bounded minimiser searches,
    and a minimum found at its edge is refused (a constrained minimum)."""
    def problem_of(a: tuple, kw: dict) -> tuple[Problem, tuple]:
        b = _bind(original, a, kw)
        name = f"scipy.optimize.{original.__name__}"

        def solve(fn: Any, args: tuple, kwargs: dict) -> tuple[Any, Any]:
            out = original(**{**b, fn_name: fn, "args": args})
            z = x_of(out)
            edges = bounds(b) if bounds is not None else None
            if edges is not None and np.min(np.abs(np.asarray(edges, dtype=float) - z)) <= 1e-3 * (1 + abs(z)):
                raise refusal(
                    f"{name} found its minimum {z!r} at the edge of the interval {tuple(edges)}: the derivative "
                    "of a constrained minimum is not supported.",
                    "widen the interval so that the minimum lies inside it.")
            return z, out

        problem, params = expose((b[fn_name], _as_tuple(b["args"]), {}), solve, name)
        problem.residual = _gradient_of(_scalar_objective)
        problem.symmetric = True
        return problem, params

    return problem_of


def _scalar_bounds(b: dict) -> Any:
    return b["bounds"] if b.get("method") is not None and str(b["method"]).lower() == "bounded" else None


_MINIMA = {
    so.minimize_scalar: _legacy_minimum(so.minimize_scalar, "fun", _scalar_bounds, lambda res: res.x),
    so.golden: _legacy_minimum(so.golden, "func"),
    so.brent: _legacy_minimum(so.brent, "func"),
    so.fminbound: _legacy_minimum(so.fminbound, "func", lambda b: (b["x1"], b["x2"])),
    so.fmin: _legacy_minimum(so.fmin, "func"),
    so.fmin_powell: _legacy_minimum(so.fmin_powell, "func"),
    so.fmin_bfgs: _legacy_minimum(so.fmin_bfgs, "f"),
    so.fmin_cg: _legacy_minimum(so.fmin_cg, "f"),
    so.fmin_ncg: _legacy_minimum(so.fmin_ncg, "f"),
}


def _legacy_output(problem: Problem, z: Any) -> Any:
    out = problem.result
    if isinstance(out, so.OptimizeResult):
        return _with_x(problem, z)
    return (z, *out[1:]) if isinstance(out, tuple) else z


#: optimisers whose answer bytegrad does not differentiate: global searches and constrained methods
_REFUSED = {
    so.shgo: "func", so.dual_annealing: "func", so.basinhopping: "func", so.differential_evolution: "func",
    so.brute: "func", so.fmin_cobyla: "func", so.fmin_slsqp: "func",
}


def _check_refused(original: Callable[..., Any], a: tuple, kw: dict) -> Any:
    """SciPy's answer, when no differentiated value reaches the objective; else a clear error."""
    b = _bind(original, a, kw)
    root = (b[_REFUSED[original]], _as_tuple(b.get("args", ())), dict(b.get("minimizer_kwargs") or {}))
    _, params = expose(root, lambda *r: (None, None), f"scipy.optimize.{original.__name__}")
    if params:
        raise refusal(
            f"differentiating scipy.optimize.{original.__name__} is not supported (a global or constrained "
            "search; differentiating its iterations would give a wrong derivative, often 0).",
            "polish its answer with scipy.optimize.minimize (no bounds or constraints) started there, "
            "and differentiate that: bytegrad differentiates minimize's minimum.")
    return original(*a, **kw)


def _refused(original: Callable[..., Any]) -> Callable[..., Any]:
    def refused_through(*a: Any, **kw: Any) -> Any:
        return _check_refused(original, a, kw)

    refused_through.__name__ = f"{original.__name__}_through"
    return refused_through


non_differentiable(*_MINIMA.values(), _legacy_output, _check_refused)
non_differentiable(_root_scalar, _with_root, _newton, _root, _fsolve, _minimize, _least_squares, _with_x,
                   _scalar_output, _newton_output)


# ---- what bytegrad runs in place of each SciPy function (rewritten: `solved` is recorded) -------------

_BRACKETING = {f: _bracketing(f) for f in (so.brentq, so.brenth, so.ridder, so.bisect, so.toms748)}
non_differentiable(*_BRACKETING.values())


def _bracketing_through(original: Callable[..., Any]) -> Callable[..., Any]:
    problem_of = _BRACKETING[original]

    def scalar_root_through(*a: Any, **kw: Any) -> Any:
        problem, params = problem_of(a, kw)
        return _scalar_output(problem, solved(problem, *params))

    scalar_root_through.__name__ = f"{original.__name__}_through"
    return scalar_root_through


def newton_through(*a: Any, **kw: Any) -> Any:
    problem, params = _newton(a, kw)
    return _newton_output(problem, solved(problem, *params))


def root_through(*a: Any, **kw: Any) -> Any:
    problem, params = _root(a, kw)
    return _with_x(problem, solved(problem, *params))


def root_scalar_through(*a: Any, **kw: Any) -> Any:
    problem, params = _root_scalar(a, kw)
    return _with_root(problem, solved(problem, *params))


def fsolve_through(*a: Any, **kw: Any) -> Any:
    problem, params = _fsolve(a, kw)
    z = solved(problem, *params)
    return z if problem.result is None else (z, *problem.result)


def minimize_through(*a: Any, **kw: Any) -> Any:
    problem, params = _minimize(a, kw)
    return _with_x(problem, solved(problem, *params))


def least_squares_through(*a: Any, **kw: Any) -> Any:
    problem, params = _least_squares(a, kw)
    return _with_x(problem, solved(problem, *params))


def _minimum_through(original: Callable[..., Any]) -> Callable[..., Any]:
    problem_of = _MINIMA[original]

    def minimum_through(*a: Any, **kw: Any) -> Any:
        problem, params = problem_of(a, kw)
        return _legacy_output(problem, solved(problem, *params))

    minimum_through.__name__ = f"{original.__name__}_through"
    return minimum_through


for _f in _MINIMA:
    differentiate_through(_f, _minimum_through(_f))
for _f in _REFUSED:
    differentiate_through(_f, _refused(_f))
for _f in _BRACKETING:
    differentiate_through(_f, _bracketing_through(_f))
differentiate_through(so.newton, newton_through)
differentiate_through(so.root, root_through)
differentiate_through(so.fsolve, fsolve_through)
differentiate_through(so.root_scalar, root_scalar_through)
differentiate_through(so.minimize, minimize_through)
differentiate_through(so.least_squares, least_squares_through)
