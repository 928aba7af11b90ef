"""Derivatives through `scipy.integrate.quad` (Leibniz's rule), `solve_ivp` and `odeint` (forward
sensitivities).

d/dp of the integral of f(t, p) from a(p) to b(p) is the integral of df/dp (bytegrad's reverse mode on
the user's integrand, integrated with QUADPACK again, `quad_vec` for several parameters) plus
f(b) b' - f(a) a'. `quad` itself runs unchanged on plain values; the differentiated values the
integrand reads (`args=`, its closure, defaults, globals) and the limits are the inputs of one
recorded operation (rules/scipy/_implicit.py).

For an ODE y' = f(t, y, p), y(t0) = y0(p), the sensitivities S = dy/dp solve S' = f_y S + f_p with
S(t0) = dy0/dp; they are integrated beside y by the same method and tolerances, at the times SciPy's
own solution reports (the value returned is SciPy's solution, unchanged). See docs/solvers.md.
"""
from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import scipy.integrate as si

from bytegrad.rules.registry import (
    NO_TANGENT,
    ZERO,
    differentiate_through,
    non_differentiable,
    rrule_via_ad,
)
from bytegrad.rules.scipy._implicit import (
    Problem,
    expose,
    rebuilt_root,
    refusal,
    solved,
)

_QUAD = inspect.signature(si.quad)
_LO, _HI = (("item", 3),), (("item", 4),)  # the paths of the limits in the problem's `root`


def _integrand(problem: Problem, t: float, params: tuple) -> Any:
    fn, args = rebuilt_root(problem, params)[:2]
    return fn(t, *args)


def _flat(cts: tuple, params: tuple) -> np.ndarray:
    parts = []
    for c, p in zip(cts, params):
        if c is None or c is ZERO or c is NO_TANGENT:
            parts.append(np.zeros(np.size(p)))
        else:
            parts.append(np.ravel(np.asarray(c, dtype=float)))
    return np.concatenate(parts) if parts else np.zeros(0)


def _leibniz(options: dict) -> Any:
    def quad_cotangents(problem: Problem, y: Any, params: tuple, y_bar: Any) -> list[Any]:
        fn, args, _, lo, hi = problem.root

        def gradient_at(t: float) -> np.ndarray:
            _, pullback = rrule_via_ad(lambda *ps: _integrand(problem, t, ps), *params)
            return _flat(pullback(1.0), params)

        n = sum(int(np.size(p)) for p in params)
        interior = np.zeros(n)
        if any(p != [_LO] and p != [_HI] for p in problem.paths):  # a parameter of the integrand
            kw = {k: options[k] for k in ("epsabs", "epsrel", "limit", "points", "weight", "wvar", "wopts")
                  if options.get(k) is not None}
            if n == 1 or options.get("weight") is not None:
                interior = np.array([si.quad(lambda t, k=k: gradient_at(t)[k], lo, hi, **kw)[0] for k in range(n)])
            else:
                interior = si.quad_vec(gradient_at, lo, hi, epsabs=options["epsabs"], epsrel=options["epsrel"],
                                       points=options.get("points"))[0]
        out, start = [], 0
        for p, paths in zip(params, problem.paths):
            size = int(np.size(p))
            ct = interior[start:start + size].reshape(np.shape(p)) * y_bar
            start += size
            if _HI in paths:
                ct = ct + y_bar * fn(hi, *args)
            if _LO in paths:
                ct = ct - y_bar * fn(lo, *args)
            out.append(float(ct) if np.ndim(p) == 0 else np.asarray(ct, dtype=float))
        return out

    return quad_cotangents


def _quad(a: tuple, kw: dict) -> tuple[Problem, tuple]:
    bound = _QUAD.bind(*a, **kw)
    bound.apply_defaults()
    b = dict(bound.arguments)
    if b["complex_func"]:
        raise refusal("differentiating scipy.integrate.quad with complex_func=True is not supported.",
                      "integrate the real and imaginary parts separately.")
    args = b["args"] if isinstance(b["args"], tuple) else (b["args"],)

    def solve(fn: Any, args: tuple, kwargs: dict, lo: Any, hi: Any) -> tuple[Any, Any]:
        out = si.quad(**{**b, "func": fn, "args": args, "a": lo, "b": hi})
        return out[0], tuple(out[1:])

    problem, params = expose((b["func"], args, {}, b["a"], b["b"]), solve, "scipy.integrate.quad")
    if b["weight"] is not None and any(_LO in p or _HI in p for p in problem.paths):
        raise refusal(
            "differentiating scipy.integrate.quad with respect to a limit is not supported with weight=.",
            "substitute t = a + (b - a) s to make the limits constant.")
    problem.cotangents = _leibniz(b)
    problem.first_order_only = True
    return problem, params


def _quad_output(problem: Problem, y: Any) -> Any:
    return (y, *problem.result)


non_differentiable(_quad, _quad_output)


# ---- solve_ivp and odeint: forward sensitivities -------------------------------------------------------

_IVP = inspect.signature(si.solve_ivp)
_ODEINT = inspect.signature(si.odeint)
_Y0 = ("item", 3)  # the path of the initial state in the problem's `root`


def _sensitivities(problem: Problem, params: tuple, times: np.ndarray, integrate: Any) -> np.ndarray:
    """S(t) = dy(t)/dp at `times`, shape (len(times), n, m) for m flattened parameters, from the forward
    sensitivity equations S' = f_y S + f_p, S(t0) = dy0/dp, integrated beside y by `integrate(rhs, w0)`
    (which returns the augmented state at `times`, one row per time); f_y and f_p by bytegrad's reverse
    mode on the user's right-hand side, one pullback per state component."""
    y0_of = lambda *ps: np.ravel(np.asarray(rebuilt_root(problem, ps)[3], dtype=float))  # noqa: E731
    y0, pullback0 = rrule_via_ad(y0_of, *params)
    n, m = y0.size, sum(int(np.size(p)) for p in params)
    eye = np.eye(n)
    s0 = np.stack([_flat(pullback0(eye[i]), params) for i in range(n)])  # (n, m)

    def rhs_of(t: float, y: np.ndarray, *ps: Any) -> Any:
        fn, args = rebuilt_root(problem, ps)[:2]
        assert problem.residual is not None  # (set by the rule)
        return problem.residual(fn, args, t, y)

    def augmented(t: float, w: np.ndarray) -> np.ndarray:
        y, sens = w[:n], w[n:].reshape(n, m)
        dy, pullback = rrule_via_ad(rhs_of, t, y, *params)
        rows = [pullback(eye[i]) for i in range(n)]
        f_y = np.stack([np.ravel(np.asarray(r[1], dtype=float)) if r[1] is not ZERO else np.zeros(n) for r in rows])
        f_p = np.stack([_flat(r[2:], params) for r in rows])
        return np.concatenate([np.ravel(np.asarray(dy, dtype=float)), (f_y @ sens + f_p).ravel()])

    w = integrate(augmented, np.concatenate([y0, s0.ravel()]))
    return w[:, n:].reshape(len(times), n, m)


def _times_constant(problem: Problem, names: str) -> None:
    if any(path[0][1] >= 4 for paths in problem.paths for path in paths):
        raise refusal(f"differentiating an ODE solution with respect to its times ({names}) is not supported.",
                      "scale time instead: integrate over s in [0, 1] with t = t0 + s * (t1 - t0), multiplying the "
                      "right-hand side by (t1 - t0).")


def _split(flat: np.ndarray, params: tuple) -> list[Any]:
    out, start = [], 0
    for p in params:
        size = int(np.size(p))
        part = flat[start:start + size]
        start += size
        out.append(float(part[0]) if np.ndim(p) == 0 else part.reshape(np.shape(p)))
    return out


def _ivp_cotangents(b: dict) -> Any:
    def ivp_cotangents(problem: Problem, ys: Any, params: tuple, ys_bar: Any) -> list[Any]:
        times = problem.result.t
        options = {k: v for k, v in b["options"].items() if k in ("rtol", "atol", "max_step", "first_step")}

        def integrate(rhs: Any, w0: np.ndarray) -> np.ndarray:
            sol = si.solve_ivp(rhs, b["t_span"], w0, method=b["method"], t_eval=times, **options)
            if sol.status != 0:
                raise refusal(f"the sensitivity equations of scipy.integrate.solve_ivp failed: {sol.message}",
                              "check the right-hand side is smooth over the interval, or tighten rtol.")
            return sol.y.T

        sens = _sensitivities(problem, params, times, integrate)  # (T, n, m)
        y_bar = np.asarray(ys_bar, dtype=float)  # (n, T)
        return _split(np.einsum("tnm,nt->m", sens, y_bar), params)

    return ivp_cotangents


def _solve_ivp(a: tuple, kw: dict) -> tuple[Problem, tuple]:
    bound = _IVP.bind(*a, **kw)
    b = dict(bound.arguments)
    b.setdefault("options", {})
    full = {k: b[k] for k in b if k != "options"} | b["options"]
    args = tuple(b.get("args") or ())

    def solve(fn: Any, args: tuple, kwargs: dict, y0: Any, *times: Any) -> tuple[Any, Any]:
        sol = si.solve_ivp(**{**full, "fun": fn, "args": args or None, "y0": y0})
        return sol.y, sol

    problem, params = expose((b["fun"], args, {}, b["y0"], b["t_span"], full.get("t_eval")), solve,
                             "scipy.integrate.solve_ivp")
    _times_constant(problem, "t_span and t_eval")
    if params and (full.get("dense_output") or full.get("events") is not None):
        raise refusal(
            "differentiating scipy.integrate.solve_ivp with " +
            ("dense_output=True" if full.get("dense_output") else "events") + " is not supported.",
            "pass the times you need as t_eval (and find an event's time with brentq on the solution).")
    problem.residual = lambda fn, args, t, y: fn(t, y, *args)
    problem.cotangents = _ivp_cotangents({"t_span": b["t_span"], "method": full.get("method", "RK45"),
                                          "options": full})
    problem.first_order_only = True
    return problem, params


def _ivp_output(problem: Problem, ys: Any) -> Any:
    """SciPy's OdeResult with the differentiated solution as `y` (a copy)."""
    res = type(problem.result)(problem.result)
    res["y"] = ys
    return res


def _odeint(a: tuple, kw: dict) -> tuple[Problem, tuple]:
    bound = _ODEINT.bind(*a, **kw)
    bound.apply_defaults()
    b = dict(bound.arguments)
    args = b["args"] if isinstance(b["args"], tuple) else (b["args"],)

    def solve(fn: Any, args: tuple, kwargs: dict, y0: Any, *times: Any) -> tuple[Any, Any]:
        out = si.odeint(**{**b, "func": fn, "args": args, "y0": y0})
        return (out[0], out[1:]) if b["full_output"] else (out, None)

    problem, params = expose((b["func"], args, {}, b["y0"], b["t"]), solve, "scipy.integrate.odeint")
    _times_constant(problem, "t")
    tfirst = b["tfirst"]
    problem.residual = (lambda fn, args, t, y: fn(t, y, *args)) if tfirst else (lambda fn, args, t, y: fn(y, t, *args))

    def odeint_cotangents(problem: Problem, ys: Any, params: tuple, ys_bar: Any) -> list[Any]:
        times = np.asarray(b["t"], dtype=float)

        def integrate(rhs: Any, w0: np.ndarray) -> np.ndarray:
            return si.odeint(rhs, w0, times, rtol=b["rtol"], atol=b["atol"], tfirst=True, mxstep=b["mxstep"] or 0)

        sens = _sensitivities(problem, params, times, integrate)  # (T, n, m)
        return _split(np.einsum("tnm,tn->m", sens, np.asarray(ys_bar, dtype=float)), params)

    problem.cotangents = odeint_cotangents
    problem.first_order_only = True
    return problem, params


def _odeint_output(problem: Problem, ys: Any) -> Any:
    return ys if problem.result is None else (ys, *problem.result)


non_differentiable(_solve_ivp, _ivp_output, _odeint, _odeint_output)


def solve_ivp_through(*a: Any, **kw: Any) -> Any:
    problem, params = _solve_ivp(a, kw)
    return _ivp_output(problem, solved(problem, *params))


def odeint_through(*a: Any, **kw: Any) -> Any:
    problem, params = _odeint(a, kw)
    return _odeint_output(problem, solved(problem, *params))


def quad_through(*a: Any, **kw: Any) -> Any:
    problem, params = _quad(a, kw)
    return _quad_output(problem, solved(problem, *params))


differentiate_through(si.quad, quad_through)
differentiate_through(si.solve_ivp, solve_ivp_through)
differentiate_through(si.odeint, odeint_through)
