"""Derivatives through SciPy's solvers (rules/scipy/optimize.py, integrate.py): each against central
finite differences of the function itself, with the problem's parameter reaching the user's callable
through a closure, through `args=`, and through a default, a partial or a bound object. Tolerances
follow the solver's: a root found to xtol ~ 1e-12 differentiated by differences of step 1e-6 agrees to
about 1e-6 relative. Each case gave 0 (or an error, or a wrong value) before these rules."""
from __future__ import annotations

import dataclasses
import functools
import warnings

import numpy as np
import pytest

pytest.importorskip("scipy")
import scipy.integrate as si  # noqa: E402
import scipy.optimize as so  # noqa: E402

import bytegrad  # noqa: E402
from bytegrad.errors import DifferentiationError, NotImplementedRuleError  # noqa: E402


def central(f, x, eps=1e-6):
    x = np.asarray(x, dtype=float)
    if x.ndim == 0:
        return (f(float(x) + eps) - f(float(x) - eps)) / (2 * eps)
    cols = []
    for i in np.ndindex(x.shape):
        e = np.zeros(x.shape)
        e[i] = eps
        cols.append((np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * eps))
    return np.stack(cols, axis=-1).reshape(np.shape(cols[0]) + x.shape)  # d out[...] / d x[i] last


def cubic(z, t):
    return z ** 3 + t * z - 1.0


def cos_line(z, t):
    return np.cos(z) - t * z


def system(z, p):
    return np.array([z[0] ** 3 + p[0] * z[0] - 1.0 + 0.1 * z[1], z[1] - p[1] * z[0] ** 2])


def loss(z, p):
    return np.sum((z - p) ** 4) + np.sum(z ** 2) + 0.5 * z[0] * z[1]


def loss_grad(z, p):  # exact (a gradient by differences would limit the solution to ~1e-8)
    return 4 * (z - p) ** 3 + 2 * z + 0.5 * z[::-1]


def loss_hess(z, p):
    return np.diag(12 * (z - p) ** 2 + 2) + 0.5 * np.array([[0.0, 1.0], [1.0, 0.0]])


def argmin_loss(p):
    """The minimiser of `loss`, polished by Newton's method to machine precision: central differences
    of a solver's own answer measure its tolerance (~1e-9 / 1e-6 here), not the derivative."""
    z = so.minimize(loss, Z2, args=(p,), method="BFGS", jac=loss_grad).x
    for _ in range(6):
        z = z - np.linalg.solve(loss_hess(z, p), loss_grad(z, p))
    return z


def argmin_ls(p):
    z = so.least_squares(ls_residual, Z2, args=(p,)).x
    for _ in range(6):
        r, j = ls_residual(z, p), ls_jac(z, p)
        z = z - np.linalg.solve(j.T @ j + r[1] * np.array([[0.0, 1.0], [1.0, 0.0]]), j.T @ r)
    return z


def ls_residual(z, p):
    return np.array([z[0] - p[0], z[1] * z[0] - p[1], z[1] - 1.0])


def ls_jac(z, p):
    return np.array([[1.0, 0.0], [z[1], z[0]], [0.0, 1.0]])


class CallableResidual:
    def __init__(self, t):
        self.t = t

    def __call__(self, z):
        return np.cos(z) - self.t * z


def nested(t):
    inner = lambda z: t * z  # noqa: E731
    return lambda z: np.cos(z) - inner(z)


class Holder:
    def __init__(self, t):
        self.t = t

    def residual(self, z):
        return np.cos(z) - self.t * z


P = np.array([1.0, 0.7])
Z2 = np.array([0.5, 0.5])
TIGHT = {"gtol": 1e-11}
CASES = {
    # name: (function, point, rtol)
    "root-closure": (lambda t: so.root(lambda z: z ** 3 + t * z - 1, 0.5, tol=1e-13).x[0], 1.0, 1e-6),
    "root-args": (lambda t: so.root(cubic, 0.5, args=(t,), tol=1e-13).x[0], 1.0, 1e-6),
    "root-lm": (lambda t: so.root(cubic, 0.5, args=(t,), method="lm", tol=1e-13).x[0], 1.0, 1e-6),
    "root-broyden1": (lambda t: so.root(cubic, np.array([0.5]), args=(t,), method="broyden1",
                                        options={"fatol": 1e-13}).x[0], 1.0, 1e-5),
    "root-jac-true": (lambda t: so.root(lambda z: (cubic(z, t), np.diag(3 * z ** 2 + t)), np.array([0.5]),
                                        jac=True, tol=1e-13).x[0], 1.0, 1e-6),
    "root-system-closure": (lambda p: np.sum(so.root(lambda z: system(z, p), Z2, tol=1e-13).x ** 2), P, 1e-6),
    "root-system-args": (lambda p: so.root(system, Z2, args=(p,), tol=1e-13).x @ np.array([1.0, -2.0]), P, 1e-6),
    "fsolve-closure": (lambda t: so.fsolve(lambda z: cubic(z, t), 0.5, xtol=1e-13)[0], 1.0, 1e-6),
    "fsolve-args": (lambda p: np.sum(so.fsolve(system, Z2, args=(p,), xtol=1e-13)), P, 1e-6),
    "brentq-closure": (lambda t: so.brentq(lambda z: np.cos(z) - t * z, 0, 2), 1.0, 1e-6),
    "brentq-args": (lambda t: so.brentq(cos_line, 0, 2, args=(t,)), 1.0, 1e-6),
    "brenth": (lambda t: so.brenth(cos_line, 0, 2, args=(t,)), 1.0, 1e-6),
    "ridder": (lambda t: so.ridder(lambda z: np.cos(z) - t * z, 0, 2), 1.0, 1e-6),
    "bisect": (lambda t: so.bisect(cos_line, 0, 2, args=(t,)), 1.0, 1e-5),
    "toms748": (lambda t: so.toms748(lambda z: np.cos(z) - t * z, 0, 2), 1.0, 1e-6),
    "brentq-default": (lambda t: so.brentq(lambda z, c=t: np.cos(z) - c * z, 0, 2), 1.0, 1e-6),
    "brentq-partial": (lambda t: so.brentq(functools.partial(cos_line, t=t), 0, 2), 1.0, 1e-6),
    "brentq-bound-method": (lambda t: so.brentq(Holder(t).residual, 0, 2), 1.0, 1e-6),
    "brentq-callable-object": (lambda t: so.brentq(CallableResidual(t), 0, 2), 1.0, 1e-6),
    "brentq-nested-closure": (lambda t: so.brentq(nested(t), 0, 2), 1.0, 1e-6),
    "brentq-dict-in-closure": (lambda t: so.brentq((lambda d: (lambda z: np.cos(z) - d["t"] * z))({"t": t}), 0, 2),
                               1.0, 1e-6),
    "root-matrix-parameter": (lambda w: so.root(lambda z: z - np.tanh(w @ z) - 0.1, np.zeros(2), tol=1e-13).x.sum(),
                              np.array([[0.3, -0.2], [0.1, 0.4]]), 1e-6),
    "brentq-full-output": (lambda t: so.brentq(cos_line, 0, 2, args=(t,), full_output=True)[0], 1.0, 1e-6),
    "newton-closure": (lambda t: so.newton(lambda z: np.cos(z) - t * z, 1.0, tol=1e-13), 1.0, 1e-6),
    "newton-args": (lambda t: so.newton(cos_line, 1.0, args=(t,), tol=1e-13), 1.0, 1e-6),
    "newton-vector": (lambda p: np.sum(so.newton(lambda z: np.cos(z) - p * z, np.ones(2), tol=1e-13)), P, 1e-6),
    "root_scalar": (lambda t: so.root_scalar(cos_line, args=(t,), bracket=(0, 2)).root, 1.0, 1e-6),
    "quad-closure": (lambda a: si.quad(lambda s: np.exp(-a * s * s), 0, 1)[0], 1.0, 1e-7),
    "quad-args": (lambda a: si.quad(lambda s, c: np.exp(-c * s * s), 0, 1, args=(a,))[0], 1.0, 1e-7),
    "quad-limits": (lambda a: si.quad(lambda s: np.exp(-a * s * s), -a, 2 * a)[0], 1.0, 1e-7),
    "quad-infinite": (lambda a: si.quad(lambda s: np.exp(-a * s * s), 0, np.inf)[0], 1.0, 1e-7),
    "quad-vector-parameter": (lambda p: si.quad(lambda s, v: np.exp(-v[0] * s * s) * v[1], 0, 1, args=(p,))[0],
                              P, 1e-7),
    "quad-weight": (lambda a: si.quad(lambda s: np.exp(-a * s), 0, 3, weight="cos", wvar=2.0)[0], 1.0, 1e-6),
    "dblquad": (lambda a: si.dblquad(lambda y, x: np.exp(-a * x * y), 0, 1, 0, 1)[0], 1.0, 1e-6),
    "nquad": (lambda a: si.nquad(lambda y, x: np.exp(-a * x * y), [(0, 1), (0, 1)])[0], 1.0, 1e-6),
    "tplquad": (lambda a: si.tplquad(lambda z, y, x: np.exp(-a * x * y * z), 0, 1, 0, 1, 0, 1)[0], 1.0, 1e-6),
}


MINIMA = {
    # name: (function of the solver, the same of the polished solution, the output of a solution)
    "minimize-bfgs-closure": (lambda p: so.minimize(lambda z: loss(z, p), Z2, method="BFGS",
                                                    jac=lambda z: loss_grad(z, p), options=TIGHT).x, argmin_loss),
    "minimize-bfgs-args": (lambda p: so.minimize(loss, Z2, args=(p,), method="BFGS", jac=loss_grad,
                                                 options=TIGHT).x, argmin_loss),
    "minimize-default-method": (lambda p: so.minimize(loss, Z2, args=(p,), jac=loss_grad, tol=1e-13).x,
                                argmin_loss),
    "minimize-jac-true": (lambda p: so.minimize(lambda z: (loss(z, p), loss_grad(z, p)), Z2, jac=True,
                                                method="CG", options=TIGHT).x, argmin_loss),
    "minimize-nelder-mead": (lambda p: so.minimize(loss, Z2, args=(p,), method="Nelder-Mead",
                                                   options={"xatol": 1e-13, "fatol": 1e-16, "maxiter": 20000}).x,
                             argmin_loss),
    "minimize-newton-cg": (lambda p: so.minimize(loss, Z2, args=(p,), method="Newton-CG", jac=loss_grad,
                                                 options={"xtol": 1e-13}).x, argmin_loss),
    "minimize-lbfgsb-no-bounds": (lambda p: so.minimize(loss, Z2, args=(p,), method="L-BFGS-B", jac=loss_grad,
                                                        options={"gtol": 1e-12, "ftol": 1e-15}).x, argmin_loss),
    "least_squares-closure": (lambda p: so.least_squares(lambda z: ls_residual(z, p), Z2, jac=lambda z: ls_jac(z, p),
                                                         xtol=1e-15, ftol=1e-15, gtol=1e-15).x, argmin_ls),
    "least_squares-args-kwargs": (lambda p: so.least_squares(lambda z, a, b=1.0: np.array([z[0] - a, z[0] * b]),
                                                             np.zeros(1), args=(p[0],), kwargs={"b": p[1]},
                                                             xtol=1e-15, ftol=1e-15, gtol=1e-15).x,
                                  lambda p: np.array([p[0] / (1 + p[1] ** 2)])),  # (the minimiser, exactly)
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", list(MINIMA))
@pytest.mark.parametrize("out", [0, 1])
def test_minimum_against_central_differences(name, out):
    """The tolerance is the solver's: Nelder-Mead's simplex stops within ~1e-8 of the minimiser."""
    f, polished = MINIMA[name]
    k = min(out, np.size(polished(P)) - 1)
    got = bytegrad.grad(lambda p: f(p)[k])(P)
    np.testing.assert_allclose(got, central(lambda p: polished(p)[k], P),
                               rtol=1e-4 if "nelder" in name else 1e-6, atol=1e-8)
    assert np.max(np.abs(got)) > 1e-3


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", list(CASES))
def test_against_central_differences(name):
    f, x, rtol = CASES[name]
    got = bytegrad.grad(f)(x)
    ref = central(f, x)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * 1e-2)
    assert np.max(np.abs(got)) > 1e-3  # (not a zero that the tolerance would let through)


def test_value_is_scipys():
    t = 1.3
    v, _ = bytegrad.value_and_grad(lambda t: so.brentq(cos_line, 0, 2, args=(t,)))(t)
    assert v == so.brentq(cos_line, 0, 2, args=(t,))
    res_bg = []
    bytegrad.grad(lambda t: res_bg.append(so.root(cubic, 0.5, args=(t,))) or res_bg[-1].x[0])(t)
    plain = so.root(cubic, 0.5, args=(t,))
    assert res_bg[0].x[0] == plain.x[0] and res_bg[0].nfev == plain.nfev and res_bg[0].success


def test_parameter_both_in_args_and_closure():
    f = lambda t: so.brentq(lambda z, c: np.cos(z) - c * z - 0.1 * t * t * z, 0, 2, args=(t,))  # noqa: E731
    np.testing.assert_allclose(bytegrad.grad(f)(1.0), central(f, 1.0), rtol=1e-6)


def test_callable_state_left_unchanged():
    h = Holder(1.0)
    cell_fn = (lambda t: (lambda z: np.cos(z) - t * z))(1.0)
    bytegrad.grad(lambda t: so.brentq(Holder(t).residual, 0, 2) + so.brentq(h.residual, 0, 2) * t)(1.0)
    assert h.t == 1.0 and cell_fn.__closure__[0].cell_contents == 1.0


def test_hessian_through_root():
    def h(p):
        return np.sum(so.root(system, Z2, args=(p,), tol=1e-13).x ** 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bytegrad.PerformanceWarning)
        hess = bytegrad.hessian(h)(P)
    ref = central(lambda p: bytegrad.grad(h)(p), P)  # rows: d/dp_j of the gradient
    np.testing.assert_allclose(hess, ref, rtol=1e-5, atol=1e-8)


def test_second_derivative_through_brentq_closure():
    f = lambda t: so.brentq(lambda z: z ** 3 + t * z - 1, 0, 2)  # noqa: E731
    np.testing.assert_allclose(bytegrad.grad(bytegrad.grad(f))(1.0), central(bytegrad.grad(f), 1.0), rtol=1e-5)


def test_second_derivative_through_minimize():
    f = lambda p: np.sum(so.minimize(loss, Z2, args=(p,), method="BFGS", jac=loss_grad,  # noqa: E731
                                     options=TIGHT).x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bytegrad.PerformanceWarning)
        hess = bytegrad.hessian(f)(P)
    np.testing.assert_allclose(hess, central(bytegrad.grad(lambda p: np.sum(argmin_loss(p))), P, eps=1e-5),
                               rtol=1e-5, atol=1e-8)


def test_second_derivative_through_quad_is_a_clear_error():
    f = lambda a: si.quad(lambda s: np.exp(-a * s * s), 0, 1)[0]  # noqa: E731
    with pytest.raises(DifferentiationError, match="second derivatives through scipy.integrate.quad") as info:
        bytegrad.grad(bytegrad.grad(f))(1.0)
    assert f"called at {__file__}" in str(info.value)  # the user's line, not the rule's


@pytest.mark.parametrize("kw", [{"bounds": [(0, 2), (0, 2)]}, {"constraints": {"type": "eq", "fun": lambda z: z[0]}},
                                {"method": "SLSQP", "bounds": [(0, 2), (0, 2)]}], ids=["bounds", "constraints", "slsqp"])
def test_constrained_minimize_is_a_clear_error(kw):
    f = lambda p: so.minimize(loss, Z2, args=(p,), **kw).x[0]  # noqa: E731
    with pytest.raises(NotImplementedRuleError, match="constrained minimum"):
        bytegrad.grad(f)(P)


@pytest.mark.parametrize("kw", [{"bounds": (0.0, 5.0)}, {"loss": "soft_l1"}])
def test_least_squares_bounds_or_robust_loss_is_a_clear_error(kw):
    f = lambda a: so.least_squares(lambda z: np.array([z[0] - a]), np.ones(1), **kw).x[0]  # noqa: E731
    with pytest.raises(NotImplementedRuleError, match="least_squares"):
        bytegrad.grad(f)(1.0)


def test_constant_problem_no_parameter():
    # nothing differentiated reaches the solver: its value is a constant of the gradient
    f = lambda a: a * so.brentq(cos_line, 0, 2, args=(1.0,))  # noqa: E731
    assert bytegrad.grad(f)(2.0) == so.brentq(cos_line, 0, 2, args=(1.0,))


def test_gradient_with_respect_to_data_array():
    data = np.array([0.3, 1.2, 2.0])
    f = lambda d: so.minimize(lambda m: np.sum((d - m[0]) ** 2), np.zeros(1), method="BFGS",  # noqa: E731
                              options=TIGHT).x[0]
    np.testing.assert_allclose(bytegrad.grad(f)(data), np.full(3, 1 / 3), rtol=1e-6)


_D = np.array([1.0])
K = None


def _rebound_global_residual(z):
    return z ** 3 + K * z - 1.0


def test_parameter_through_a_rebound_global():
    """A module-level residual reading a global the differentiated function assigns: the rule
    substitutes the global (the frame watch once took the solver's plain run for a blind call)."""
    def f(t):
        global K
        K = t * 1.0
        try:
            return so.brentq(_rebound_global_residual, 0, 2)
        finally:
            K = None
    np.testing.assert_allclose(bytegrad.grad(f)(1.0), central(f, 1.0), rtol=1e-6)


def _global_residual(z, t):
    return z ** 3 + t * z - _D[0]


def test_module_level_residual_sound_across_calls():
    """A module-level residual (a compiled tier may capture the caller): new parameter values and a
    changed global give new, right gradients."""
    f = lambda t: so.newton(_global_residual, 0.5, args=(t,), tol=1e-13) * 2.0  # noqa: E731
    g = bytegrad.grad(f)
    try:
        for t, d in [(1.0, 1.0)] * 4 + [(2.0, 1.0), (1.0, 2.0)]:
            _D[0] = d
            np.testing.assert_allclose(g(t), central(f, t), rtol=1e-6)
    finally:
        _D[0] = 1.0


def quartic(z, a):
    return (z - a) ** 2 + 0.3 * z ** 4


def argmin_quartic(a):
    z = so.minimize_scalar(quartic, args=(a,)).x
    for _ in range(6):
        z = z - (2 * (z - a) + 1.2 * z ** 3) / (2 + 3.6 * z ** 2)
    return z


SCALAR_MINIMA = {
    "minimize_scalar-brent-args": lambda a: so.minimize_scalar(quartic, args=(a,), tol=1e-12).x,
    "minimize_scalar-golden-closure": lambda a: so.minimize_scalar(lambda z: quartic(z, a), method="golden",
                                                                   tol=1e-12).x,
    "minimize_scalar-bounded": lambda a: so.minimize_scalar(lambda z: quartic(z, a), bounds=(-2, 2), method="bounded",
                                                            options={"xatol": 1e-12}).x,
    "golden": lambda a: so.golden(quartic, args=(a,), tol=1e-12),
    "brent-full-output": lambda a: so.brent(lambda z: quartic(z, a), tol=1e-12, full_output=True)[0],
    "fminbound": lambda a: so.fminbound(quartic, -2, 2, args=(a,), xtol=1e-12),
    "fmin": lambda a: so.fmin(lambda z: quartic(z[0], a), np.array([0.5]), xtol=1e-12, ftol=1e-15, disp=0)[0],
    "fmin_powell": lambda a: so.fmin_powell(lambda z: quartic(z[0], a), np.array([0.5]), xtol=1e-12, ftol=1e-15,
                                            disp=0)[0],
    "fmin_bfgs": lambda a: so.fmin_bfgs(lambda z: quartic(z[0], a), np.array([0.5]), gtol=1e-12, disp=0)[0],
    "fmin_cg": lambda a: so.fmin_cg(lambda z: quartic(z[0], a), np.array([0.5]), gtol=1e-12, disp=0)[0],
    "fmin_ncg": lambda a: so.fmin_ncg(lambda z: quartic(z[0], a), np.array([0.5]),
                                      lambda z: np.array([2 * (z[0] - a) + 1.2 * z[0] ** 3]), avextol=1e-12,
                                      disp=0)[0],
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", list(SCALAR_MINIMA))
def test_scalar_minimum_against_central_differences(name):
    """Before: minimize_scalar, golden and the fmin family were differentiated through their Python
    iterations, which gave 0 or a wrong value (brent's parabolic steps, golden's comparisons)."""
    got = bytegrad.grad(SCALAR_MINIMA[name])(1.0)
    np.testing.assert_allclose(got, central(argmin_quartic, 1.0), rtol=1e-5)


def test_bounded_minimum_at_the_edge_is_a_clear_error():
    f = lambda a: so.minimize_scalar(lambda z: quartic(z, a), bounds=(0.9, 2), method="bounded").x  # noqa: E731
    with pytest.raises(NotImplementedRuleError, match="at the edge of the interval") as info:
        bytegrad.grad(f)(1.0)
    assert info.value.loc.filename == __file__


REFUSED = {
    "shgo": lambda a: so.shgo(lambda z: (z[0] - a) ** 2, [(-2, 2)]).x[0],
    "differential_evolution": lambda a: so.differential_evolution(lambda z, c: (z[0] - c) ** 2, [(-2, 2)],
                                                                  args=(a,), seed=0, maxiter=5).x[0],
    "dual_annealing": lambda a: so.dual_annealing(lambda z: (z[0] - a) ** 2, [(-2, 2)], maxiter=5, seed=0).x[0],
    "basinhopping": lambda a: so.basinhopping(lambda z, c: (z[0] - c) ** 2, [0.0], niter=2, rng=0,
                                              minimizer_kwargs={"args": (a,)}).x[0],
    "brute": lambda a: so.brute(lambda z: (z[0] - a) ** 2, [(-2, 2)], Ns=5, finish=None),
    "fmin_cobyla": lambda a: so.fmin_cobyla(lambda z: np.sum((z - a) ** 2), np.zeros(1), [], rhoend=1e-6)[0],
    "fmin_slsqp": lambda a: so.fmin_slsqp(lambda z: np.sum((z - a) ** 2), np.zeros(1), iprint=0)[0],
}


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", list(REFUSED))
def test_global_and_constrained_searches_are_a_clear_error(name):
    """Before: differentiated through their iterations, to 0 or a wrong value, with no error."""
    with pytest.raises(NotImplementedRuleError, match=f"differentiating scipy.optimize.{name} is not supported") as info:
        bytegrad.grad(REFUSED[name])(1.0)
    assert info.value.loc.filename == __file__


def test_refused_search_without_a_differentiated_value_runs():
    objective = lambda z: (z[0] - 1.0) ** 2  # noqa: E731
    f = lambda a: a * so.shgo(objective, [(-2, 2)]).x[0]  # noqa: E731
    assert bytegrad.grad(f)(2.0) == so.shgo(objective, [(-2, 2)]).x[0]


def lotka_volterra(t, y, a, b):
    return np.array([a * y[0] - 0.4 * y[0] * y[1], -b * y[1] + 0.1 * y[0] * y[1]])


T = np.linspace(0.0, 5.0, 11)
ODE = 1e-10, 1e-12  # rtol, atol
ODES = {
    # solve_ivp used to be differentiated through its Python steps; odeint gave 0 (then a BlindCallError)
    "solve_ivp-closure": (lambda a: si.solve_ivp(lambda t, y: -a * y, (0, 1), [1.0], rtol=ODE[0],
                                                 atol=ODE[1]).y[0, -1], 1.0),
    "solve_ivp-args-t_eval": (lambda p: np.sum(si.solve_ivp(lotka_volterra, (0, 5), [10.0, 5.0], args=(p[0], p[1]),
                                                            t_eval=T, rtol=ODE[0], atol=ODE[1]).y ** 2), P + 0.1),
    "solve_ivp-y0": (lambda y0: np.sum(si.solve_ivp(lotka_volterra, (0, 5), y0, args=(1.1, 0.4), rtol=ODE[0],
                                                    atol=ODE[1]).y[:, -1]), np.array([10.0, 5.0])),
    "solve_ivp-radau": (lambda a: si.solve_ivp(lambda t, y: -a * y, (0, 1), [1.0], method="Radau", rtol=ODE[0],
                                               atol=ODE[1]).y[0, -1], 1.0),
    "odeint-closure": (lambda a: si.odeint(lambda y, t: -a * y, 1.0, [0.0, 0.5, 1.0], rtol=1e-11,
                                           atol=1e-12)[-1, 0], 1.0),
    "odeint-args-tfirst": (lambda p: np.sum(si.odeint(lotka_volterra, [10.0, 5.0], T, args=(p[0], p[1]), tfirst=True,
                                                      rtol=1e-11, atol=1e-12)), P + 0.1),
}


@pytest.mark.parametrize("name", list(ODES))
def test_ode_against_central_differences(name):
    f, x = ODES[name]
    np.testing.assert_allclose(bytegrad.grad(f)(x), central(f, x), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kw", [{"dense_output": True}, {"events": lambda t, y: y[0] - 0.5}],
                         ids=["dense_output", "events"])
def test_solve_ivp_dense_output_or_events_is_a_clear_error(kw):
    f = lambda a: si.solve_ivp(lambda t, y: -a * y, (0, 1), [1.0], **kw).y[0, -1]  # noqa: E731
    with pytest.raises(NotImplementedRuleError, match="solve_ivp with") as info:
        bytegrad.grad(f)(1.0)
    assert info.value.loc.filename == __file__


def test_ode_times_depending_on_the_parameter_is_a_clear_error():
    f = lambda t1: si.solve_ivp(lambda t, y: -y, (0.0, t1), [1.0]).y[0, -1]  # noqa: E731
    with pytest.raises(NotImplementedRuleError, match="respect to its times"):
        bytegrad.grad(f)(1.0)


def test_ode_value_is_scipys():
    run = lambda a: si.solve_ivp(lotka_volterra, (0, 5), [10.0, 5.0], args=(a, 0.4))  # noqa: E731
    got = []
    bytegrad.grad(lambda a: np.sum(got.append(run(a)) or got[-1].y))(1.1)
    np.testing.assert_array_equal(got[0].y, run(1.1).y)
    np.testing.assert_array_equal(got[0].t, run(1.1).t)


# ---- the table the registry's coverage test reads (tests/rules/test_rule_coverage.py) ---------------

class Entry:
    """A solver rule and the cases above that check it against central differences."""

    def __init__(self, fn, *cases):
        self.fn, self.cases = fn, cases


_solved = __import__("bytegrad.rules.scipy._implicit", fromlist=["solved"]).solved
SOLVERS = [
    Entry(so.root, "root-closure", "root-args", "root-lm", "root-broyden1", "root-jac-true", "root-system-args"),
    Entry(so.fsolve, "fsolve-closure", "fsolve-args"),
    Entry(so.brentq, "brentq-closure", "brentq-args", "brentq-partial", "brentq-bound-method"),
    Entry(so.brenth, "brenth"), Entry(so.ridder, "ridder"), Entry(so.bisect, "bisect"), Entry(so.toms748, "toms748"),
    Entry(so.newton, "newton-closure", "newton-args", "newton-vector"),
    Entry(so.root_scalar, "root_scalar"),
    Entry(so.minimize, "minimize-bfgs-closure", "minimize-bfgs-args", "minimize-nelder-mead"),
    Entry(so.least_squares, "least_squares-closure", "least_squares-args-kwargs"),
    Entry(si.quad, "quad-closure", "quad-args", "quad-limits", "quad-infinite", "dblquad"),
    Entry(_solved, "root-closure", "quad-closure", "minimize-bfgs-args"),
    *(Entry(getattr(so, name.split("-")[0]), name) for name in SCALAR_MINIMA),
    Entry(si.solve_ivp, "solve_ivp-closure", "solve_ivp-args-t_eval", "solve_ivp-y0"),
    Entry(si.odeint, "odeint-closure", "odeint-args-tfirst"),
    *(Entry(getattr(so, name), name) for name in REFUSED),
]
TABLES = [SOLVERS]


def test_table_names_real_cases():
    for entry in SOLVERS:
        assert entry.cases and all(c in CASES or c in MINIMA or c in SCALAR_MINIMA or c in REFUSED or c in ODES
                                   for c in entry.cases), entry.fn


@pytest.mark.filterwarnings("ignore::bytegrad.PerformanceWarning")
def test_forward_mode_agrees_with_reverse():
    f = lambda p: so.root(system, Z2, args=(p,), tol=1e-13).x  # noqa: E731
    np.testing.assert_allclose(bytegrad.jacobian(f, mode="fwd")(P), bytegrad.jacobian(f)(P), rtol=1e-12)
    np.testing.assert_allclose(bytegrad.jacobian(f)(P), central(f, P), rtol=1e-6)
    q = lambda a: si.quad(lambda s: np.exp(-a * s * s), 0, 1)[0]  # noqa: E731
    value, tangent = bytegrad.jvp(q, (1.0,), (2.0,))
    assert value == q(1.0)
    np.testing.assert_allclose(tangent, 2.0 * central(q, 1.0), rtol=1e-7)


@dataclasses.dataclass(frozen=True, slots=True)
class Rates:
    t: float


def test_parameter_in_a_frozen_slotted_dataclass_and_deep_containers():
    f = lambda t: so.brentq(lambda z, r=Rates(t): np.cos(z) - r.t * z, 0, 2)  # noqa: E731
    np.testing.assert_allclose(bytegrad.grad(f)(1.0), central(f, 1.0), rtol=1e-6)
    deep = lambda t: so.brentq(lambda z, d={"a": [{"b": (t,)}]}: np.cos(z) - d["a"][0]["b"][0] * z, 0, 2)  # noqa: E731
    np.testing.assert_allclose(bytegrad.grad(deep)(1.0), central(deep, 1.0), rtol=1e-6)


def _directional(f, x, v, eps=1e-6):
    return (f(x + eps * v) - f(x - eps * v)) / (2 * eps)


@pytest.mark.parametrize("n", [80])
def test_large_root_uses_gmres(n, monkeypatch):
    """Above DENSE_LIMIT unknowns the implicit solve is iterative (gmres on Jacobian products): checked
    along a random direction against central differences, and against the dense solve."""
    from bytegrad.rules.scipy import _implicit

    rng = np.random.default_rng(0)
    w = 0.3 * rng.standard_normal((n, n)) / np.sqrt(n)
    c = rng.standard_normal(n)
    f = lambda b: c @ so.root(lambda z: z - np.tanh(w @ z) - b, np.zeros(n), tol=1e-13).x  # noqa: E731
    b = 0.1 * rng.standard_normal(n)
    v = rng.standard_normal(n)
    got = bytegrad.grad(f)(b)
    np.testing.assert_allclose(got @ v, _directional(f, b, v), rtol=1e-6)
    monkeypatch.setattr(_implicit, "DENSE_LIMIT", 10 ** 6)
    np.testing.assert_allclose(bytegrad.grad(f)(b), got, rtol=1e-8, atol=1e-10)


def test_large_minimum_uses_cg(monkeypatch):
    from bytegrad.rules.scipy import _implicit

    n = 70
    rng = np.random.default_rng(1)
    a = rng.standard_normal((n, n)) / np.sqrt(n)
    h = a @ a.T + np.eye(n)
    objective = lambda z, p: 0.5 * z @ h @ z + np.sum(np.cosh(z - p))  # noqa: E731
    gradient = lambda z, p: h @ z + np.sinh(z - p)  # noqa: E731

    def argmin(p):  # BFGS, then Newton to machine precision (for the differences)
        z = so.minimize(objective, np.zeros(n), args=(p,), jac=gradient, method="BFGS").x
        for _ in range(4):
            z = z - np.linalg.solve(h + np.diag(np.cosh(z - p)), gradient(z, p))
        return z

    f = lambda p: np.sum(so.minimize(objective, np.zeros(n), args=(p,), jac=gradient, method="BFGS",  # noqa: E731
                                     options={"gtol": 1e-12}).x ** 2)
    p = rng.standard_normal(n)
    v = rng.standard_normal(n)
    got = bytegrad.grad(f)(p)
    np.testing.assert_allclose(got @ v, _directional(lambda p: np.sum(argmin(p) ** 2), p, v), rtol=1e-6)
    monkeypatch.setattr(_implicit, "DENSE_LIMIT", 10 ** 6)
    np.testing.assert_allclose(bytegrad.grad(f)(p), got, rtol=1e-7, atol=1e-10)
