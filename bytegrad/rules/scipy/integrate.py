"""Derivatives through `scipy.integrate.quad`, by Leibniz's rule.

d/dp of the integral of f(t, p) from a(p) to b(p) is the integral of df/dp (bytegrad's reverse mode on
the user's integrand, integrated with QUADPACK again, `quad_vec` for several parameters) plus
f(b) b' - f(a) a'. `quad` itself runs unchanged on plain values; the differentiated values the
integrand reads (`args=`, its closure, defaults, globals) and the limits are the inputs of one
recorded operation (rules/scipy/_implicit.py). See docs/solvers.md.
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


def quad_through(*a: Any, **kw: Any) -> Any:
    problem, params = _quad(a, kw)
    return _quad_output(problem, solved(problem, *params))


differentiate_through(si.quad, quad_through)
