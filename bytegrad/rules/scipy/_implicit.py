"""What the solver rules share: a solve run on plain values, recorded as one operation whose inputs are
the differentiated values the user's callable reads (through `args=`, its closure, defaults, globals),
and whose pullback differentiates the solution by the implicit function theorem.

A rule (rules/scipy/optimize.py, integrate.py) is a Python function bytegrad runs in place of the
SciPy function (`differentiate_through`). It calls `expose`, which finds those values (`closures.hidden`
over the callable, its `args` and `kwargs`), then `solved(problem, *params)`: a function with a
reverse rule, so the tape records it with `params` as its inputs. Its primal runs SciPy's own solver on
the user's callable as it is: the solver's iterations are never differentiated. The pullback rebuilds
the callable reading other values in the places of `params` (`closures.rebuild`) and differentiates
it with bytegrad (`rrule_via_ad`) at the solution.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from bytegrad.errors import NotImplementedRuleError, SourceLoc, library_file
from bytegrad.rules.closures import hidden, rebuild, tracked
from bytegrad.rules.registry import (
    NO_TANGENT,
    ZERO,
    non_differentiable,
    recording,
    rrule,
    rrule_via_ad,
)

__all__ = ["DENSE_LIMIT", "Problem", "expose", "rebuilt_root", "refusal", "root_cotangents", "solved"]

#: a linear solve with at most this many unknowns forms the matrix; above, an iterative solver
#: (`scipy.sparse.linalg.gmres`, `cg` for a Hessian) runs on products with it
DENSE_LIMIT = 64


def _user_loc() -> SourceLoc | None:
    """The innermost frame outside NumPy, SciPy, the standard library and bytegrad: the user's call
    of the solver (a rule runs below it)."""
    import sys

    frame: Any = sys._getframe(2)
    while frame is not None and (library_file(frame.f_code.co_filename)
                                 or frame.f_code.co_filename.startswith("<frozen")):
        frame = frame.f_back
    return SourceLoc(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name) if frame is not None else None


def refusal(message: str, fix: str) -> NotImplementedRuleError:
    """A NotImplementedRuleError at the user's line (a rule raising on the forward pass runs below it)."""
    return NotImplementedRuleError(message, _user_loc(), fix)


class Problem:
    """One solver call: the user's callable with its `args` and `kwargs` (`root`), the paths in `root`
    of the differentiated values it reads (one list per value), the solve itself, and what it gave."""

    __slots__ = (
        "called_at",
        "cotangents",
        "first_order_only",
        "paths",
        "residual",
        "result",
        "root",
        "solve",
        "symmetric",
        "what",
    )

    def __init__(self, root: tuple, paths: list[list[tuple]], solve: Callable[..., Any], what: str) -> None:
        self.root = root
        self.paths = paths
        self.solve = solve
        self.result: Any = None
        self.what = what
        #: (fn, args, kwargs, z) -> the residual whose zero the solution is (set by the rule)
        self.residual: Callable[..., Any] | None = None
        self.symmetric = False  # the residual's Jacobian is symmetric (a gradient's: a Hessian)
        self.first_order_only = False
        #: (problem, z, params, z_bar) -> the params' cotangents; None: the implicit function theorem
        self.cotangents: Callable[..., list[Any]] | None = None
        self.called_at: SourceLoc | None = None  # the user's line (for errors of the reverse pass)

    def run(self) -> Any:
        """Solve on the plain values (the callable as the user wrote it); keep SciPy's whole result and
        return the solution, a fresh float or array."""
        z, self.result = self.solve(*self.root)
        return float(z) if np.ndim(z) == 0 and not isinstance(z, np.ndarray) else np.array(z, dtype=float)

    def rebuilt(self, params: tuple) -> tuple:
        """`root` reading `params` where the differentiated values were."""
        paths, values = [], []
        for ps, v in zip(self.paths, params):
            paths.extend(ps)
            values.extend([v] * len(ps))
        return rebuild(self.root, paths, values)


def expose(root: tuple, solve: Callable[..., Any], what: str) -> tuple[Problem, tuple]:
    """The problem of one solver call, and the differentiated values its callable reads."""
    found = hidden(root, tracked)
    problem = Problem(root, [paths for paths, _ in found], solve, what)
    if found:
        problem.called_at = _user_loc()
    return problem, tuple(v for _, v in found)


non_differentiable(expose)


def rebuilt_root(problem: Problem, params: tuple) -> tuple:
    """`problem.rebuilt(params)`, called plainly from rewritten code (a function without a derivative)."""
    return problem.rebuilt(params)


non_differentiable(rebuilt_root)


def solved(problem: Problem, *params: Any) -> Any:
    """The solution of `problem` (its rule differentiates it with respect to `params`)."""
    return problem.run()


@rrule(solved)
def solved_rrule(problem: Problem, *params: Any) -> tuple[Any, Callable[..., tuple[Any, ...]]]:
    z = problem.run()

    def solved_pullback(z_bar: Any) -> tuple[Any, ...]:
        if z_bar is ZERO:
            return (NO_TANGENT,) + (ZERO,) * len(params)
        if problem.first_order_only and recording():
            at = problem.called_at
            raise NotImplementedRuleError(
                f"second derivatives through {problem.what} are not supported" +
                (f" (called at {at.filename}:{at.lineno}, in {at.function})." if at is not None else "."), None,
                "take the second derivative by finite differences of bytegrad's first derivative.")
        return (NO_TANGENT,) + tuple((problem.cotangents or root_cotangents)(problem, z, params, z_bar))

    return z, solved_pullback


def residual_at(problem: Problem) -> Callable[..., Any]:
    """`(z, *params) -> residual`: the problem's residual with `params` in place of the differentiated
    values, as bytegrad differentiates it."""
    def residual(z: Any, *params: Any) -> Any:
        fn, args, kwargs = rebuilt_root(problem, params)[:3]
        assert problem.residual is not None  # (the rule sets it before any pullback runs)
        return problem.residual(fn, args, kwargs, z)

    return residual


def root_cotangents(problem: Problem, z: Any, params: tuple, z_bar: Any) -> list[Any]:
    """The implicit function theorem: with F(z*, p) = 0, dz*/dp = -F_z^{-1} F_p, so
    p_bar = -F_p^T lam where F_z^T lam = z_bar (F_z, F_p by bytegrad's reverse mode at z*)."""
    _, pullback = rrule_via_ad(residual_at(problem), z, *params)
    lam = _solve_transposed(lambda v: pullback(v)[0], z, z_bar, problem.symmetric)
    cts = pullback(-lam)
    return list(cts[1:])


def _solve_transposed(jt_times: Callable[[Any], Any], z: Any, z_bar: Any, symmetric: bool) -> Any:
    """lam with J^T lam = z_bar, where `jt_times(v)` is J^T v (a residual cotangent -> a z cotangent)."""
    if np.ndim(z) == 0:
        return z_bar / jt_times(1.0)
    shape = np.shape(z)
    n = int(np.prod(shape))
    rhs = np.reshape(z_bar, (n,))
    if n <= DENSE_LIMIT or recording():  # (a nested derivative records a dense solve)
        eye = np.eye(n)
        j = np.stack([np.reshape(jt_times(np.reshape(eye[i], shape)), (n,)) for i in range(n)])  # rows of J
        return np.reshape(np.linalg.solve(np.transpose(j), rhs), shape)
    import scipy.sparse.linalg as spla

    op = spla.LinearOperator((n, n), matvec=lambda v: np.reshape(jt_times(np.reshape(v, shape)), (n,)),
                             dtype=float)
    lam, info = (spla.cg if symmetric else spla.gmres)(op, rhs, rtol=1e-12, atol=0.0, maxiter=10 * n)
    if info != 0:
        raise NotImplementedRuleError(
            f"the linear solve of the implicit derivative did not converge ({'cg' if symmetric else 'gmres'} "
            f"info={info}): the Jacobian at the solution may be singular.", None,
            "check that the solution is isolated (a nonsingular Jacobian, a Hessian with no zero eigenvalue).")
    return np.reshape(lam, shape)
