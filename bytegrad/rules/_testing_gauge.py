"""Gauge-invariant functions of decompositions, for `check_rule(..., through=...)`.

An eigenvector, a pair of singular vectors or a column of Q with its row of R is defined up to a
sign (a phase if complex): LAPACK builds differ in the one they pick, and one routine may flip it
between `a + eps*d` and `a - eps*d` (scipy.linalg.eigh's default driver does), so finite
differences of raw vectors measure the flip. These functions keep everything the gauge does not
change (values, `V diag(c) V^H`, `|V|^2`, `U diag(c) Vh`, projectors onto columns LAPACK may rotate
among themselves), with distinct fixed weights `c`; they are written with operations bytegrad
differentiates, for both levels of `check_rule(..., second_order=True)`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["eig_invariants", "eigh_invariants", "qr_invariants", "r_invariants", "svd_invariants"]


def _weights(k: int) -> Any:
    return np.linspace(1.0, 2.0, k) + 0.37 * np.arange(k) ** 2


def _h(x: Any) -> Any:
    """The conjugate transpose of the last two axes."""
    return np.conj(np.swapaxes(x, -1, -2))


def _abs2(x: Any) -> Any:
    return np.real(x * np.conj(x))


def eigh_invariants(out: Any) -> tuple[Any, ...]:
    """`(w, V diag(c) V^H, |V|^2)` of `(w, V) = eigh(a)`."""
    w, v = out
    return w, (v * _weights(w.shape[-1])) @ _h(v), _abs2(v)


def eig_invariants(out: Any) -> tuple[Any, ...]:
    """`(w, V diag(c) V^H, |V|^2)` of `(w, V) = eig(a)` (NumPy's unit-norm columns, any phase)."""
    w, v = out
    return w, (v * _weights(w.shape[-1])) @ _h(v), _abs2(v)


def svd_invariants(out: Any) -> tuple[Any, ...]:
    """`(s, U1 diag(c) Vh1, |U1|^2, |Vh1|^2, U2 U2^H, Vh2^H Vh2)` of `(U, s, Vh) = svd(a)`, where U1
    and Vh1 are the first k = len(s) vectors and U2, Vh2 the extra ones of `full_matrices=True`."""
    u, s, vh = out
    k = s.shape[-1]
    u1, vh1 = u[..., :k], vh[..., :k, :]
    parts: tuple[Any, ...] = (s, (u1 * _weights(k)) @ vh1, _abs2(u1), _abs2(vh1))
    if u.shape[-1] > k:
        parts += (u[..., k:] @ _h(u[..., k:]),)
    if vh.shape[-2] > k:
        parts += (_h(vh[..., k:, :]) @ vh[..., k:, :],)
    return parts


def qr_invariants(out: Any) -> tuple[Any, ...]:
    """`(Q1 diag(c) Q1^H, Q1 diag(c) R1, R1^H diag(c) R1, |Q1|^2, |R1|^2, Q2 Q2^H)` of `(Q, R) = qr(a)`,
    Q1 and R1 the first k = min(m, n) columns and rows, Q2 the extra columns of mode='complete'."""
    q, r = out
    k = min(q.shape[-2], r.shape[-1])
    q1, r1 = q[..., :k], r[..., :k, :]
    c = _weights(k)
    parts: tuple[Any, ...] = ((q1 * c) @ _h(q1), (q1 * c) @ r1, (_h(r1) * c) @ r1, _abs2(q1), _abs2(r1))
    if q.shape[-1] > k:
        parts += (q[..., k:] @ _h(q[..., k:]),)
    return parts


def r_invariants(r: Any) -> tuple[Any, ...]:
    """`(R^H diag(c) R, |R|^2)` of `R = qr(a, mode='r')`, whose rows are defined up to a sign."""
    c = _weights(r.shape[-2])
    return (_h(r) * c) @ r, _abs2(r)
