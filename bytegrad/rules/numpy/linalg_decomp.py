"""Matrix decompositions and what is built on them: `np.linalg` cholesky, qr, svd, svdvals, eigh,
eigvalsh, eig, eigvals, pinv and lstsq (also stacked). svd, svdvals, eigh, eigvalsh, eig and eigvals
take complex input too; the others are real-only.

Complex input: cotangents pair with tangents without conjugation (docs/plugins.md), so a rule's
cotangent is the conjugate of the adjoint that textbooks (and PyTorch) write. Singular vectors and
the eigenvectors of eigh and eig are fixed by the input only up to a phase per vector (a sign, for
real input); their cotangents are exact for functions that do not depend on that choice (|U|**2,
U diag(c) Vt, functions of the values), the only functions with a derivative.

One triangle: NumPy's cholesky, eigh and eigvalsh (and svd/pinv with hermitian=True) read only one
triangle of their argument (the lower one; the upper one with upper=True or UPLO='U'). Their
cotangent is the derivative of that function, so it lies in that triangle: an off-diagonal entry
holds what moving both mirrored entries of the symmetric matrix together gives. Along any change
that keeps the matrix symmetric (A = B @ B.T, S + S.T) it gives the same directional derivatives as
the symmetric gradient other systems return.

Extra columns: with full_matrices=True (svd) or mode='complete' (qr) and a non-square matrix, the
columns of U, Vt or Q beyond min(m, n) are fixed by the input only up to a rotation among
themselves; LAPACK picks one. The rules take the derivative in which those columns do not rotate
among themselves. That is exact for any function that does not depend on the choice (the projector
U2 @ U2.T, norms of U2.T @ x), and such functions are the only ones with a well-defined derivative.

Repeated eigenvalues or singular values make the derivative of the vectors infinite, as in every
AD system; the values alone (eigvalsh, svdvals, norms) are fine.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from bytegrad.errors import RuleCaseError
from bytegrad.rules._project import project, stand_in
from bytegrad.rules.registry import NO_TANGENT, ZERO, rrule


def swap_last_axes(m: np.ndarray) -> np.ndarray:
    return np.swapaxes(m, -1, -2)


def _mH(m: np.ndarray) -> np.ndarray:
    return np.conj(np.swapaxes(m, -1, -2))


def _real_only(name: str, a: Any) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind == "c":
        raise RuleCaseError(f"the numpy.linalg.{name} rule covers real matrices only")
    return a


def onto_triangle(m: np.ndarray, lower: bool) -> np.ndarray:
    """The cotangent of a matrix of which one triangle is read, from a cotangent `m` of the symmetric
    (Hermitian) matrix that triangle stands for (only m + m^H matters). The imaginary part of a complex
    diagonal is not read."""
    out = np.tril(m) + np.tril(_mH(m), -1) if lower else np.triu(m) + np.triu(_mH(m), 1)
    if out.dtype.kind == "c":
        out = out - 1j * diag_embed(np.diagonal(m, axis1=-2, axis2=-1).imag)
    return out


def diag_embed(d: Any) -> np.ndarray:
    d = np.asarray(d)
    return d[..., :, None] * np.eye(d.shape[-1], dtype=d.dtype)


def _gap_inverse(values: np.ndarray, square: bool) -> np.ndarray:
    """F[..., i, j] = 1 / (v_j - v_i) (of squares if `square`), 0 on the diagonal."""
    v = values * values if square else values
    gap = v[..., None, :] - v[..., :, None]
    off = ~np.eye(v.shape[-1], dtype=bool)
    with np.errstate(divide="ignore"):
        return np.where(off, 1.0 / np.where(off, gap, 1.0), 0.0).astype(values.dtype)


def _extra_columns(q_bar: Any, q: np.ndarray, k: int) -> Any:
    """The cotangent of the first k columns of q, given one of all of them: the other columns follow the
    first ones without rotating among themselves (see the module docstring)."""
    if q_bar is ZERO or q.shape[-1] == k:
        return q_bar
    q1, q2 = q[..., :k], q[..., k:]
    q2_bar = q_bar[..., k:]
    correction = q2 @ (swap_last_axes(q2_bar) @ q1)
    return q_bar[..., :k] - (np.conj(correction) if correction.dtype.kind == "c" else correction)


# ---- cholesky -------------------------------------------------------------------------------------

@rrule(np.linalg.cholesky)
def cholesky_rrule(a: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    _real_only("cholesky", a)
    out = np.linalg.cholesky(a, **kwargs)
    upper = bool(kwargs.get("upper", False))
    like = stand_in(a)

    def cholesky_pullback(out_bar: Any) -> tuple[Any]:
        return (cholesky_cotangent(out, out_bar, upper, like),)

    return out, cholesky_pullback


def cholesky_cotangent(out: np.ndarray, out_bar: Any, upper: bool, like: Any) -> Any:
    """The cotangent of the matrix whose lower (upper) triangle gave the Cholesky factor `out` (L, or
    U = L^T if `upper`). Also scipy.linalg's rules': they pass their own factor, which a nested
    derivative tracks (a factor recomputed here would be a constant to it)."""
    # A = L L^T gives L^-1 dA L^-T = X + X^T with X = L^-1 dL lower triangular, so
    # dL = L phi(L^-1 dA L^-T), phi taking the lower triangle with the diagonal halved.
    low = swap_last_axes(out) if upper else out
    low_bar = swap_last_axes(out_bar) if upper else out_bar
    p = np.tril(swap_last_axes(low) @ low_bar)
    p = p - 0.5 * diag_embed(np.diagonal(p, axis1=-2, axis2=-1))
    low_inv = np.linalg.inv(low)
    return project(onto_triangle(swap_last_axes(low_inv) @ p @ low_inv, not upper), like)


# ---- qr -------------------------------------------------------------------------------------------

def _qr_square_cotangent(q: np.ndarray, r: np.ndarray, q_bar: Any, r_bar: Any) -> np.ndarray:
    """The cotangent of A = QR with Q (m, k) and R (k, k) square, m >= k."""
    m = (r @ swap_last_axes(r_bar) if r_bar is not ZERO else 0.0) - (swap_last_axes(q_bar) @ q if q_bar is not ZERO else 0.0)
    copyltu = np.tril(m) + swap_last_axes(np.tril(m, -1))
    b = q @ copyltu + (q_bar if q_bar is not ZERO else 0.0)
    return swap_last_axes(np.linalg.solve(r, swap_last_axes(b)))  # b R^-T


@rrule(np.linalg.qr)
def qr_rrule(a: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    xa = _real_only("qr", a)
    mode = kwargs.get("mode", args[0] if args else "reduced")
    if mode not in ("reduced", "complete", "r"):
        raise RuleCaseError(f"the numpy.linalg.qr rule covers modes 'reduced', 'complete' and 'r', not {mode!r}")
    out = np.linalg.qr(a, *args, **kwargs)
    m, n = xa.shape[-2:]
    k = min(m, n)
    like = stand_in(a)
    # A wide A's last columns: its pullback needs them, sliced there (a nested derivative records
    # what the pullback computes, not what the rule computed before it)
    wide = a if m < n else None
    source = xa if mode == "r" else None    # mode 'r' returns no Q: the pullback recomputes it
    factors = None if mode == "r" else out

    def qr_pullback(out_bar: Any) -> tuple[Any, ...]:
        q_bar, r_bar = (ZERO, out_bar) if mode == "r" else out_bar
        if q_bar is ZERO and r_bar is ZERO:
            return (ZERO,) + (NO_TANGENT,) * len(args)
        if factors is None:
            assert source is not None  # mode 'r' keeps the input
            q, r = np.linalg.qr(source)
        else:
            q, r = factors
        q_bar = _extra_columns(q_bar, q, k)  # complete mode, m > n
        qk = q[..., :k]
        if r_bar is not ZERO:
            r_bar = r_bar[..., :k, :]  # complete mode: R's rows below n are zeros
        if m >= n:
            a_bar = _qr_square_cotangent(qk, r[..., :k, :], q_bar, r_bar)
        else:  # A = [X | Y] with X = Q U square and Y = Q V
            u = r[..., :, :m]
            v_bar = r_bar[..., :, m:] if r_bar is not ZERO else ZERO
            u_bar = r_bar[..., :, :m] if r_bar is not ZERO else ZERO
            if v_bar is not ZERO:
                y = np.asarray(wide)[..., :, m:]
                q_bar = q_bar + y @ swap_last_axes(v_bar)
                y_bar = qk @ v_bar
            else:
                y_bar = np.zeros(xa.shape[:-1] + (n - m,), dtype=q.dtype)
            x_bar = _qr_square_cotangent(qk, u, q_bar, u_bar)
            a_bar = np.concatenate([x_bar, y_bar], axis=-1)
        return (project(a_bar, like),) + (NO_TANGENT,) * len(args)

    return out, qr_pullback


# ---- svd ------------------------------------------------------------------------------------------

def _svd_cotangent(u: np.ndarray, s: np.ndarray, vt: np.ndarray, u_bar: Any, s_bar: Any, vt_bar: Any) -> Any:
    """The cotangent of A = U diag(s) Vt (reduced: U (m, k), Vt (k, n)), from those of U, s and Vt.

    Computed as the adjoint G of the derivative (g_u = conj(u_bar) and g_v = vt_bar^T are the adjoint
    forms of the cotangents of U and of V = Vt^H), and returned as conj(G). For complex input the
    phase of each singular pair is free; the derivative used keeps Re(diag(V^H dV)) = 0 and gives
    U the rest, so the diagonal of U^H g_u adds i Im(.) / s."""
    k = s.shape[-1]
    m, n = u.shape[-2], vt.shape[-1]
    v = _mH(vt)
    g_u = np.conj(u_bar) if u_bar is not ZERO else ZERO
    g_v = swap_last_axes(vt_bar) if vt_bar is not ZERO else ZERO
    inner = diag_embed(s_bar).astype(u.dtype) if s_bar is not ZERO else np.zeros(s.shape + (k,), dtype=u.dtype)
    if g_u is not ZERO or g_v is not ZERO:
        f = _gap_inverse(s, square=True)
        if g_u is not ZERO:
            j = _mH(u) @ g_u
            inner = inner + (f * (j - _mH(j))) * s[..., None, :]
            if j.dtype.kind == "c":
                inner = inner + diag_embed(1j * np.diagonal(j, axis1=-2, axis2=-1).imag / s)
        if g_v is not ZERO:
            kk = _mH(v) @ g_v
            inner = inner + s[..., :, None] * (f * (kk - _mH(kk)))
    g_a = u @ inner @ vt
    if g_u is not ZERO and m > k:  # the part of g_u outside U's columns
        g_a = g_a + ((g_u - u @ (_mH(u) @ g_u)) / s[..., None, :]) @ vt
    if g_v is not ZERO and n > k:
        g_a = g_a + u @ _mH((g_v - v @ (_mH(v) @ g_v)) / s[..., None, :])
    return np.conj(g_a) if g_a.dtype.kind == "c" else g_a


def _hermitian_flag(args: tuple[Any, ...], kwargs: dict[str, Any], pos: int) -> bool:
    return bool(kwargs.get("hermitian", args[pos] if len(args) > pos else False))


@rrule(np.linalg.svd)
def svd_rrule(a: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    xa = np.asarray(a)
    params = dict(zip(("full_matrices", "compute_uv", "hermitian"), args), **kwargs)
    full, compute_uv = params.get("full_matrices", True), params.get("compute_uv", True)
    hermitian = bool(params.get("hermitian", False))
    out = np.linalg.svd(a, *args, **kwargs)
    m, n = xa.shape[-2:]
    k = min(m, n)
    like = stand_in(a)
    source = None if compute_uv else xa  # singular values only: the pullback recomputes U and Vt

    def svd_pullback(out_bar: Any) -> tuple[Any, ...]:
        if compute_uv:
            u_bar, s_bar, vt_bar = out_bar
            u, s, vt = out
        else:
            u_bar, s_bar, vt_bar = ZERO, out_bar, ZERO
            assert source is not None  # kept without the vectors
            u, s, vt = np.linalg.svd(source, full_matrices=False, hermitian=hermitian)
        if u_bar is ZERO and s_bar is ZERO and vt_bar is ZERO:
            return (ZERO,) + (NO_TANGENT,) * len(args)
        uk, vtk = u[..., :k], vt[..., :k, :]
        if full:
            u_bar = _extra_columns(u_bar, u, k)
            if vt_bar is not ZERO:  # through V = Vt^H, whose cotangent is conj(Vt_bar^T)
                vt_bar = np.conj(swap_last_axes(_extra_columns(np.conj(swap_last_axes(vt_bar)), _mH(vt), k)))
        a_bar = _svd_cotangent(uk, s, vtk, u_bar, s_bar, vt_bar)
        if hermitian:
            a_bar = onto_triangle(a_bar, lower=True)
        return (project(a_bar, like),) + (NO_TANGENT,) * len(args)

    return out, svd_pullback


def _values_only(fn: Any, back: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
    """Register the rrule of a function giving a decomposition's values alone (svdvals, eigvals): its
    pullback recomputes the vectors, `back(x, out_bar)`."""
    name = fn.__name__

    def values_rrule(x: Any) -> tuple[Any, Callable[..., Any]]:
        xa = np.asarray(x)
        out = fn(x)
        like = stand_in(x)

        def values_pullback(out_bar: Any) -> tuple[Any]:
            return (project(back(xa, np.asarray(out_bar)), like),)

        return out, values_pullback

    values_rrule.__name__ = values_rrule.__qualname__ = f"{name}_rrule"
    rrule(fn)(values_rrule)


def _svdvals_back(xa: np.ndarray, s_bar: np.ndarray) -> np.ndarray:
    u, _, vt = np.linalg.svd(xa, full_matrices=False)
    return np.conj((u * s_bar[..., None, :]) @ vt)


if hasattr(np.linalg, "svdvals"):
    _values_only(np.linalg.svdvals, _svdvals_back)


# ---- eigh, eigvalsh -------------------------------------------------------------------------------

def _uplo(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the lower triangle is read."""
    return str(kwargs.get("UPLO", args[0] if args else "L")).upper() == "L"


@rrule(np.linalg.eigh)
def eigh_rrule(a: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.linalg.eigh(a, *args, **kwargs)
    lower = _uplo(args, kwargs)
    w, v = out
    like = stand_in(a)

    def eigh_pullback(out_bar: Any) -> tuple[Any, ...]:
        return (eigh_cotangent(w, v, out_bar[0], out_bar[1], lower, like),) + (NO_TANGENT,) * len(args)

    return out, eigh_pullback


def eigh_cotangent(w: np.ndarray, v: np.ndarray, w_bar: Any, v_bar: Any, lower: bool, like: Any) -> Any:
    """The cotangent of the matrix (of which one triangle is read) of eigenvalues w and eigenvectors v
    (also scipy.linalg.eigh's: its vectors' signs may differ from NumPy's, so each rule passes its own)."""
    # dw = diag(V^H dA V), dV = V (F * (V^H dA V)) with F[i, j] = 1 / (w_j - w_i): the cotangent
    # is conj(V) (diag(w_bar) + F * (V^T v_bar)) V^T (conj a no-op for real input).
    if w_bar is ZERO and v_bar is ZERO:
        return ZERO
    inner = diag_embed(w_bar) if w_bar is not ZERO else np.zeros(v.shape, dtype=v.dtype)
    if v_bar is not ZERO:
        inner = inner + _gap_inverse(w, square=False) * (swap_last_axes(v) @ v_bar)
    return project(onto_triangle(np.conj(v) @ inner @ swap_last_axes(v), lower), like)


@rrule(np.linalg.eigvalsh)
def eigvalsh_rrule(a: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    xa = np.asarray(a)
    lower = _uplo(args, kwargs)
    out = np.linalg.eigvalsh(a, *args, **kwargs)
    like = stand_in(a)

    def eigvalsh_pullback(out_bar: Any) -> tuple[Any, ...]:
        v = np.linalg.eigh(xa, "L" if lower else "U")[1]
        m = (np.conj(v) * np.asarray(out_bar)[..., None, :]) @ swap_last_axes(v)
        return (project(onto_triangle(m, lower), like),) + (NO_TANGENT,) * len(args)

    return out, eigvalsh_pullback


# ---- eig, eigvals ---------------------------------------------------------------------------------

def _eig_cotangent(w: np.ndarray, v: np.ndarray, w_bar: Any, v_bar: Any) -> np.ndarray:
    """The cotangent of A = V diag(w) V^-1 (each column of V of unit norm), from those of w and V:
    V^-T (diag(w_bar) + F * (V^T v_bar')) V^T with F[i, j] = 1 / (w_j - w_i), where v_bar' drops
    what would change a column's norm: v_bar - conj(V) Re(diag(V^T v_bar))."""
    vt = swap_last_axes(v)
    inner = diag_embed(w_bar).astype(v.dtype) if w_bar is not ZERO else np.zeros(v.shape, dtype=v.dtype)
    if v_bar is not ZERO:
        v_bar = v_bar - np.conj(v) * np.real(np.sum(v * v_bar, axis=-2))[..., None, :]
        inner = inner + _gap_inverse(w, square=False) * (vt @ v_bar)
    return np.linalg.solve(vt, inner @ vt)


@rrule(np.linalg.eig)
def eig_rrule(a: Any) -> tuple[Any, Callable[..., Any]]:
    """Real or complex input, distinct eigenvalues; a real input's eigenvalues may be complex, and its
    cotangent is the real part."""
    out = np.linalg.eig(a)
    like = stand_in(a)

    def eig_pullback(out_bar: Any) -> tuple[Any]:
        w_bar, v_bar = out_bar
        if w_bar is ZERO and v_bar is ZERO:
            return (ZERO,)
        return (project(_eig_cotangent(out[0], out[1], w_bar, v_bar), like),)

    return out, eig_pullback


_values_only(np.linalg.eigvals, lambda xa, w_bar: _eig_cotangent(*np.linalg.eig(xa), w_bar, ZERO))


# ---- pinv, lstsq ----------------------------------------------------------------------------------

def _pinv_cotangent(a: np.ndarray, x: np.ndarray, x_bar: np.ndarray) -> np.ndarray:
    """The cotangent of A from that of X = pinv(A), where the rank of A does not change:
    dX = -X dA X + X X^T dA^T (I - A X) + (I - X A) dA^T X^T X."""
    xt = swap_last_axes(x)
    xbt = swap_last_axes(x_bar)
    a_bar = -(xt @ x_bar @ xt)
    a_bar = a_bar + (xbt - a @ (x @ xbt)) @ (x @ xt)     # (I - A X) X_bar^T X X^T
    a_bar = a_bar + (xt @ x) @ (xbt - (xbt @ x) @ a)     # X^T X X_bar^T (I - X A)
    return a_bar


@rrule(np.linalg.pinv)
def pinv_rrule(a: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    xa = _real_only("pinv", a)
    out = np.linalg.pinv(a, *args, **kwargs)
    hermitian = _hermitian_flag(args, kwargs, 1)
    like = stand_in(a)

    def pinv_pullback(out_bar: Any) -> tuple[Any, ...]:
        a_bar = _pinv_cotangent(xa, out, out_bar)
        if hermitian:
            a_bar = onto_triangle(a_bar, lower=True)
        return (project(a_bar, like),) + (NO_TANGENT,) * len(args)

    return out, pinv_pullback


@rrule(np.linalg.lstsq)
def lstsq_rrule(a: Any, b: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    """All float outputs carry derivatives: the solution (the minimum-norm one, at constant rank), the
    residuals (when NumPy returns them: full column rank, m > n) and the singular values."""
    xa, xb = _real_only("lstsq", a), _real_only("lstsq", b)
    out = np.linalg.lstsq(a, b, *args, **kwargs)
    rcond = kwargs.get("rcond", args[0] if args else None)
    m, n = xa.shape
    eps = float(np.finfo(np.result_type(xa, xb, 0.0)).eps)
    rcond = eps * max(m, n) if rcond is None else (eps if rcond < 0 else rcond)  # NumPy's meanings
    like_a, like_b = stand_in(a), stand_in(b)
    vector = xb.ndim == 1

    def lstsq_pullback(out_bar: Any) -> tuple[Any, ...]:
        x_bar, res_bar, _, sv_bar = out_bar
        sol = out[0][:, None] if vector else out[0]
        b2 = xb[:, None] if vector else xb
        a_bar = np.zeros(xa.shape, dtype=np.result_type(xa, 0.0))
        b_bar = np.zeros(b2.shape, dtype=np.result_type(xb, 0.0))
        if x_bar is not ZERO:
            xb2 = np.asarray(x_bar)[:, None] if vector else np.asarray(x_bar)
            p = np.linalg.pinv(xa, rcond=rcond)
            a_bar = a_bar + _pinv_cotangent(xa, p, xb2 @ b2.T)
            b_bar = b_bar + p.T @ xb2
        if res_bar is not ZERO and np.size(out[1]):
            # residuals = |A x - b|^2 per column; A^T (A x - b) = 0 at the solution
            r = (xa @ sol - b2) * np.asarray(res_bar)
            a_bar = a_bar + 2.0 * r @ sol.T
            b_bar = b_bar - 2.0 * r
        if sv_bar is not ZERO:
            u, _, vt = np.linalg.svd(xa, full_matrices=False)
            a_bar = a_bar + (u * np.asarray(sv_bar)) @ vt
        return (project(a_bar, like_a), project(b_bar[:, 0] if vector else b_bar, like_b)) + (NO_TANGENT,) * len(args)

    return out, lstsq_pullback
