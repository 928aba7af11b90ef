"""`scipy.linalg`: solve (its assume_a structures), solve_triangular, cholesky, cho_factor/cho_solve,
lu_factor/lu_solve, inv, det, expm, sqrtm and eigh, for real matrices.

A function that reads part of its matrix argument (a triangle for assume_a='sym'/'pos', for
solve_triangular, cholesky, cho_factor, cho_solve and eigh; the band for 'tridiagonal') has a cotangent that lies
in that part: an off-diagonal entry of a symmetric structure holds what moving both mirrored entries
together gives, as for NumPy's cholesky and eigh (see bytegrad/rules/numpy/linalg_decomp.py).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import scipy.linalg as sl

from bytegrad.errors import RuleCaseError
from bytegrad.rules._project import project, stand_in
from bytegrad.rules._shape import unbroadcast
from bytegrad.rules.numpy import linalg_decomp as np_decomp
from bytegrad.rules.registry import NO_TANGENT, ZERO, rrule
from bytegrad.rules.scipy._args import params

_mT = np_decomp.swap_last_axes
_onto_triangle = np_decomp.onto_triangle


def _real(name: str, *values: Any) -> None:
    for v in values:
        if np.iscomplexobj(v):
            raise RuleCaseError(f"the scipy.linalg.{name} rule covers real matrices only")


def _rest(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return (NO_TANGENT,) * len(args)


# ---- solving: a cotangent of x = M^-1 b gives b_bar = M^-T x_bar, M_bar = -b_bar x^T -------------

def _as_matrix(x: Any, vector: bool) -> Any:
    return np.asarray(x)[..., None] if vector else np.asarray(x)


def _linear_solve_cotangents(m_solve_t: Callable[[Any], Any], x: Any, x_bar: Any, b: Any,
                             transposed: bool) -> tuple[Any, Any]:
    """(the full cotangent of the matrix M, b's cotangent) for x = op(M)^-1 b, op a transpose if `transposed`;
    `m_solve_t(y)` solves op(M)^T z = y."""
    vector = np.ndim(b) == 1
    b_bar = _as_matrix(m_solve_t(np.broadcast_to(x_bar, np.shape(x))), vector)
    x2 = _as_matrix(x, vector)
    m_bar = -(x2 @ _mT(b_bar)) if transposed else -(b_bar @ _mT(x2))
    return m_bar, (b_bar[..., 0] if vector else b_bar)


_SYMMETRIC = ("sym", "symmetric", "her", "hermitian", "pos", "positive definite")
_GENERAL = (None, "gen", "general")


def _read_part(m_bar: Any, assume_a: Any, lower: bool) -> Any:
    """The cotangent of solve's matrix argument from a cotangent of the matrix it stands for."""
    if assume_a in _GENERAL:
        return m_bar
    if assume_a in _SYMMETRIC:
        return _onto_triangle(m_bar, lower)
    if assume_a == "diagonal":
        return np_decomp.diag_embed(np.diagonal(m_bar, axis1=-2, axis2=-1))
    if assume_a == "tridiagonal":
        return np.triu(np.tril(m_bar, 1), -1)
    if assume_a in ("upper triangular", "lower triangular"):
        return np.tril(m_bar) if assume_a == "lower triangular" else np.triu(m_bar)
    raise RuleCaseError(f"the scipy.linalg.solve rule does not cover assume_a={assume_a!r}; "
                              "pass assume_a='gen' (the same solution, read from the whole matrix)")


_SOLVE_PARAMS = ("lower", "overwrite_a", "overwrite_b", "check_finite", "assume_a", "transposed")


@rrule(sl.solve)
def solve_rrule(a: Any, b: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    _real("solve", a, b)
    lower, _, _, _, assume_a, transposed = params(args, kwargs, _SOLVE_PARAMS,
                                                  (False, False, False, True, None, False))
    _read_part(np.zeros((1, 1)), assume_a, lower)  # refuses an assume_a it does not cover, now
    out = sl.solve(a, b, *args, **kwargs)
    like_a, like_b = stand_in(a), stand_in(b)
    symmetric = assume_a in _SYMMETRIC or assume_a == "diagonal"

    def solve_pullback(out_bar: Any) -> tuple[Any, ...]:
        def m_solve_t(y: Any) -> Any:  # the transposed system, with the same structure
            if symmetric:
                return sl.solve(a, y, lower=lower, assume_a=assume_a)
            return sl.solve(a, y, transposed=not transposed, assume_a="gen" if assume_a in _GENERAL else assume_a)

        m_bar, b_bar = _linear_solve_cotangents(m_solve_t, out, out_bar, b, bool(transposed))
        a_bar = _read_part(m_bar, assume_a, lower)
        return (project(unbroadcast(a_bar, np.shape(a)), like_a), project(unbroadcast(b_bar, np.shape(b)), like_b),
                *_rest(args))

    return out, solve_pullback


def _trans(trans: Any) -> bool:
    return trans in (1, 2, "T", "C")


@rrule(sl.solve_triangular)
def solve_triangular_rrule(a: Any, b: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    _real("solve_triangular", a, b)
    trans, lower, unit = params(args, kwargs, ("trans", "lower", "unit_diagonal"), (0, False, False))
    out = sl.solve_triangular(a, b, *args, **kwargs)
    like_a, like_b = stand_in(a), stand_in(b)
    transposed = _trans(trans)

    def solve_triangular_pullback(out_bar: Any) -> tuple[Any, ...]:
        def m_solve_t(y: Any) -> Any:
            return sl.solve_triangular(a, y, trans=0 if transposed else 1, lower=lower, unit_diagonal=unit)

        m_bar, b_bar = _linear_solve_cotangents(m_solve_t, out, out_bar, b, transposed)
        k = -1 if unit else 0
        a_bar = np.tril(m_bar, k) if lower else np.triu(m_bar, -k)
        return (project(unbroadcast(a_bar, np.shape(a)), like_a), project(unbroadcast(b_bar, np.shape(b)), like_b),
                *_rest(args))

    return out, solve_triangular_pullback


# ---- cholesky, cho_factor, cho_solve ----------------------------------------------------------------

def _lower_flag(args: tuple[Any, ...], kwargs: dict[str, Any], default: bool) -> bool:
    return bool(args[0] if args else kwargs.get("lower", default))


@rrule(sl.cholesky)
def cholesky_rrule(a: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    _real("cholesky", a)
    out = sl.cholesky(a, *args, **kwargs)
    upper = not _lower_flag(args, kwargs, False)
    like = stand_in(a)

    def cholesky_pullback(out_bar: Any) -> tuple[Any, ...]:
        return (np_decomp.cholesky_cotangent(out, out_bar, upper, like), *_rest(args))

    return out, cholesky_pullback


# scipy before 1.18 leaves a's entries in the factor's other triangle (LAPACK's potrf writes one triangle);
# 1.18 zeroes them. Asked once, of a 2 x 2 matrix, rather than read from the version.
_CHO_FACTOR_KEEPS = bool(sl.cho_factor(np.array([[4.0, 1.0], [1.0, 4.0]]))[0][1, 0] != 0)


@rrule(sl.cho_factor)
def cho_factor_rrule(a: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    _real("cho_factor", a)
    lower = _lower_flag(args, kwargs, False)
    out = sl.cho_factor(a, *args, **kwargs)
    like = stand_in(a)

    def cho_factor_pullback(out_bar: Any) -> tuple[Any, ...]:
        c_bar = out_bar[0]
        if c_bar is ZERO:
            return (ZERO, *_rest(args))
        c_bar = np.broadcast_to(c_bar, out[0].shape)
        # the factor's triangle comes from the Cholesky factor; the other one holds a's entries or zeros
        factor, factor_bar = (np.tril(out[0]), np.tril(c_bar)) if lower else (np.triu(out[0]), np.triu(c_bar))
        a_bar = np_decomp.cholesky_cotangent(factor, factor_bar, not lower, like)
        if _CHO_FACTOR_KEEPS:
            a_bar = a_bar + (np.triu(c_bar, 1) if lower else np.tril(c_bar, -1)).astype(out[0].dtype)
        return (a_bar, *_rest(args))

    return out, cho_factor_pullback


@rrule(sl.cho_solve)
def cho_solve_rrule(c_and_lower: Any, b: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    c, lower = c_and_lower
    _real("cho_solve", c, b)
    out = sl.cho_solve(c_and_lower, b, *args, **kwargs)
    like_c, like_b = stand_in(c), stand_in(b)

    def cho_solve_pullback(out_bar: Any) -> tuple[Any, ...]:
        a_bar, b_bar = _linear_solve_cotangents(lambda y: sl.cho_solve((c, lower), y), out, out_bar, b, False)
        # A = L L^T (or U^T U) from c's triangle: L_bar = (A_bar + A_bar^T) L, U_bar = U (A_bar + A_bar^T)
        sym = a_bar + _mT(a_bar)
        f = np.tril(c) if lower else np.triu(c)
        c_bar = np.tril(sym @ f) if lower else np.triu(f @ sym)
        return ((project(c_bar, like_c), NO_TANGENT), project(unbroadcast(b_bar, np.shape(b)), like_b), *_rest(args))

    return out, cho_solve_pullback


# ---- lu_factor, lu_solve: a = P L U, packed as lu = L + U - I with the pivots piv -------------------

def _unpack(lu: Any) -> tuple[Any, Any]:
    n = lu.shape[-1]
    return np.tril(lu, -1) + np.eye(n, dtype=lu.dtype), np.triu(lu)


def _permutation(piv: Any, n: int) -> np.ndarray:
    """P with a = P @ L @ U, from LAPACK's row interchanges."""
    perm = np.arange(n)
    for i, p in enumerate(np.asarray(piv)):
        perm[i], perm[p] = perm[p], perm[i]
    return np.eye(n)[perm].T  # P^T a = a[perm]


def _square(name: str, a: Any) -> None:
    if np.ndim(a) != 2 or np.shape(a)[0] != np.shape(a)[1]:
        raise RuleCaseError(f"the scipy.linalg.{name} rule covers square 2-D matrices only")


@rrule(sl.lu_factor)
def lu_factor_rrule(a: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    _real("lu_factor", a)
    _square("lu_factor", a)
    out = sl.lu_factor(a, *args, **kwargs)
    lu, piv = out
    like = stand_in(a)

    def lu_factor_pullback(out_bar: Any) -> tuple[Any, ...]:
        lu_bar = out_bar[0]
        if lu_bar is ZERO:
            return (ZERO, *_rest(args))
        lu_bar = np.broadcast_to(lu_bar, lu.shape)
        low, up = _unpack(lu)
        # P^T dA = dL U + L dU; with F = L^-1 P^T dA U^-1: dL = L tril(F, -1), dU = triu(F) U
        f_bar = np.tril(_mT(low) @ np.tril(lu_bar, -1), -1) + np.triu(np.triu(lu_bar) @ _mT(up))
        y = sl.solve_triangular(low, f_bar, lower=True, unit_diagonal=True, trans=1)  # L^-T F_bar
        core = sl.solve_triangular(up, _mT(y), lower=False)  # (L^-T F_bar U^-T)^T
        p = _permutation(piv, lu.shape[-1])
        return (project(p @ _mT(core), like), *_rest(args))

    return out, lu_factor_pullback


@rrule(sl.lu_solve)
def lu_solve_rrule(lu_and_piv: Any, b: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    lu, piv = lu_and_piv
    _real("lu_solve", lu, b)
    trans = args[0] if args else kwargs.get("trans", 0)
    transposed = _trans(trans)
    out = sl.lu_solve(lu_and_piv, b, *args, **kwargs)
    like_lu, like_b = stand_in(lu), stand_in(b)

    def lu_solve_pullback(out_bar: Any) -> tuple[Any, ...]:
        def m_solve_t(y: Any) -> Any:
            return sl.lu_solve((lu, piv), y, trans=0 if transposed else 1)

        a_bar, b_bar = _linear_solve_cotangents(m_solve_t, out, out_bar, b, transposed)
        low, up = _unpack(lu)
        pa_bar = _mT(_permutation(piv, lu.shape[-1])) @ a_bar  # the cotangent of L U = P^T a
        lu_bar = np.tril(pa_bar @ _mT(up), -1) + np.triu(_mT(low) @ pa_bar)
        return ((project(lu_bar, like_lu), NO_TANGENT), project(unbroadcast(b_bar, np.shape(b)), like_b), *_rest(args))

    return out, lu_solve_pullback


# ---- inv, det, expm, sqrtm ----------------------------------------------------------------------------

@rrule(sl.inv)
def inv_rrule(a: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    _real("inv", a)
    out = sl.inv(a, *args, **kwargs)
    like = stand_in(a)

    def inv_pullback(out_bar: Any) -> tuple[Any, ...]:
        out_t = _mT(out)
        return (project(-(out_t @ out_bar @ out_t), like), *_rest(args))

    return out, inv_pullback


@rrule(sl.det)
def det_rrule(a: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    _real("det", a)
    out = sl.det(a, *args, **kwargs)
    like = stand_in(a)

    def det_pullback(out_bar: Any) -> tuple[Any, ...]:
        # d det(A) = det(A) tr(A^-1 dA), with scipy's det (a nested derivative tracks it)
        scale = np.asarray(out_bar * out)[..., None, None]
        return (project(scale * _mT(np.linalg.inv(a)), like), *_rest(args))

    return out, det_pullback


def _expm_frechet_adjoint(a: Any, g: Any) -> Any:
    """The adjoint of expm's Frechet derivative at a, applied to g: the top right block of
    expm([[a^T, g], [0, a^T]]) (computed with expm, so that it is differentiable again)."""
    at = _mT(np.asarray(a))
    g = np.broadcast_to(g, at.shape)
    zero = np.zeros_like(at)
    block = np.concatenate([np.concatenate([at, g], axis=-1), np.concatenate([zero, at], axis=-1)], axis=-2)
    n = at.shape[-1]
    return sl.expm(block)[..., :n, n:]


@rrule(sl.expm)
def expm_rrule(a: Any) -> tuple[Any, Callable[..., Any]]:
    _real("expm", a)
    out = sl.expm(a)
    like = stand_in(a)

    def expm_pullback(out_bar: Any) -> tuple[Any]:
        return (project(_expm_frechet_adjoint(a, out_bar), like),)

    return out, expm_pullback


@rrule(sl.sqrtm)
def sqrtm_rrule(a: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    _real("sqrtm", a)
    _square("sqrtm", a)
    out = sl.sqrtm(a, *args, **kwargs)
    x = out[0] if isinstance(out, tuple) else out
    if np.iscomplexobj(x):
        raise RuleCaseError("the scipy.linalg.sqrtm rule covers matrices with a real square root only "
                                  "(this one's is complex: a negative real eigenvalue)")
    like = stand_in(a)

    def sqrtm_pullback(out_bar: Any) -> tuple[Any, ...]:
        x_bar = out_bar[0] if isinstance(out, tuple) else out_bar
        if x_bar is ZERO:
            return (ZERO, *_rest(args))
        # X X = A: dX X + X dX = dA, so A_bar solves X^T A_bar + A_bar X^T = X_bar
        a_bar = sl.solve_sylvester(x.T, x.T, np.broadcast_to(x_bar, x.shape))
        return (project(a_bar, like), *_rest(args))

    return out, sqrtm_pullback


@rrule(sl.solve_sylvester)
def solve_sylvester_rrule(a: Any, b: Any, q: Any) -> tuple[Any, Callable[..., Any]]:
    """X with A X + X B = Q (sqrtm's pullback solves one: its second derivative needs this rule)."""
    _real("solve_sylvester", a, b, q)
    out = sl.solve_sylvester(a, b, q)
    likes = [stand_in(v) for v in (a, b, q)]

    def solve_sylvester_pullback(out_bar: Any) -> tuple[Any, ...]:
        # dA X + A dX + dX B + X dB = dQ: Q_bar solves A^T Q_bar + Q_bar B^T = X_bar
        q_bar = sl.solve_sylvester(_mT(np.asarray(a)), _mT(np.asarray(b)), np.broadcast_to(out_bar, out.shape))
        a_bar, b_bar = -(q_bar @ _mT(out)), -(_mT(out) @ q_bar)
        return tuple(project(v, like) for v, like in zip((a_bar, b_bar, q_bar), likes))

    return out, solve_sylvester_pullback


# ---- eigh -------------------------------------------------------------------------------------------

_EIGH_PARAMS = ("b", "lower", "eigvals_only")


@rrule(sl.eigh)
def eigh_rrule(a: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    _real("eigh", a)
    b, lower, values_only = params(args, kwargs, _EIGH_PARAMS, (None, True, False))
    others = {k for k in kwargs if k not in _EIGH_PARAMS + ("overwrite_a", "overwrite_b", "check_finite", "driver")}
    if b is not None or len(args) > 3 or others:
        raise RuleCaseError("the scipy.linalg.eigh rule covers the standard problem with all eigenvalues "
                                  "(no b, subset_by_index, subset_by_value or type)")
    out = sl.eigh(a, *args, **kwargs)
    w, v = (out, None) if values_only else out
    like = stand_in(a)

    def eigh_pullback(out_bar: Any) -> tuple[Any, ...]:
        w_bar, v_bar = (out_bar, ZERO) if values_only else out_bar
        vectors = v if v is not None else sl.eigh(a, lower=lower)[1]
        return (np_decomp.eigh_cotangent(w, vectors, w_bar, v_bar, lower, like), *_rest(args))

    return out, eigh_pullback
