"""Decomposition rules (cholesky, qr, svd, eigh, pinv, lstsq...) against finite differences."""
from __future__ import annotations

import numpy as np
import pytest

import bytegrad

from bytegrad.rules._apply import as_rrule
from bytegrad.rules.registry import ZERO, lookup
from bytegrad.rules.testing import eig_invariants, eigh_invariants, qr_invariants, r_invariants, svd_invariants

from ..cases import Arr, Gen, case, params
from .test_complex import _fd_gradient


def _spd(*batch, n=3):
    def make(rng, dtype):
        b = rng.uniform(-1, 1, batch + (n, n))
        return (b @ np.swapaxes(b, -1, -2) + n * np.eye(n)).astype(dtype)
    return Gen(make)


def _symmetric(*batch, n=4):
    """A symmetric matrix with eigenvalues well apart (1, 2, 3, ... scaled)."""
    def make(rng, dtype):
        q, _ = np.linalg.qr(rng.standard_normal(batch + (n, n)))
        w = np.arange(1.0, n + 1) * rng.choice([-1.0, 1.0], n)
        return ((q * w) @ np.swapaxes(q, -1, -2)).astype(dtype)
    return Gen(make)


def _spread(*shape):
    """A matrix with singular values well apart (1, 2, 3...)."""
    def make(rng, dtype):
        m, n = shape[-2:]
        k = min(m, n)
        u, _ = np.linalg.qr(rng.standard_normal(shape[:-2] + (m, k)))
        v, _ = np.linalg.qr(rng.standard_normal(shape[:-2] + (n, k)))
        return ((u * np.arange(1.0, k + 1)) @ np.swapaxes(v, -1, -2)).astype(dtype)
    return Gen(make)


def _square(*batch):
    def make(rng, dtype):
        return (rng.uniform(-0.5, 0.5, batch + (3, 3)) + 2.0 * np.eye(3)).astype(dtype)
    return Gen(make)


CHOLESKY = [
    case(np.linalg.cholesky, _spd()), case(np.linalg.cholesky, _spd(2), name="cholesky-batched"),
    case(np.linalg.cholesky, _spd(), upper=True, name="cholesky-upper"),
]
# Decompositions defined up to a sign or phase are compared through gauge-invariant functions of
# their outputs (bytegrad.rules.testing's *_invariants): the check must not depend on the signs a
# LAPACK build picks, nor on a sign flipped between a + eps*d and a - eps*d.
QR = [
    case(np.linalg.qr, _spread(4, 3), name="qr-tall", through=qr_invariants),
    case(np.linalg.qr, _spread(3, 3), name="qr-square", through=qr_invariants),
    case(np.linalg.qr, _spread(3, 5), name="qr-wide", through=qr_invariants),
    case(np.linalg.qr, _spread(2, 4, 3), name="qr-batched", through=qr_invariants),
    case(np.linalg.qr, _spread(3, 5), "complete", name="qr-complete-wide", through=qr_invariants),
    case(np.linalg.qr, _spread(5, 3), "complete", name="qr-complete-tall", through=qr_invariants),
    case(np.linalg.qr, _spread(4, 3), "r", name="qr-r", through=r_invariants),
    case(np.linalg.qr, _spread(3, 4), mode="r", name="qr-r-wide", through=r_invariants),
]
SVD = [
    case(np.linalg.svd, _spread(4, 3), False, name="svd-tall", through=svd_invariants),
    case(np.linalg.svd, _spread(3, 3), name="svd-square", through=svd_invariants),
    case(np.linalg.svd, _spread(3, 5), full_matrices=False, name="svd-wide", through=svd_invariants),
    case(np.linalg.svd, _spread(2, 3, 4), False, name="svd-batched", through=svd_invariants),
    case(np.linalg.svd, _spread(5, 3), name="svd-full-tall", through=svd_invariants),
    case(np.linalg.svd, _spread(3, 5), name="svd-full-wide", through=svd_invariants),
    case(np.linalg.svd, _spread(4, 3), compute_uv=False, name="svd-values"),
    case(np.linalg.svd, _spread(2, 3, 5), False, False, name="svd-values-batched"),
    case(np.linalg.svd, _symmetric(), hermitian=True, name="svd-hermitian", through=svd_invariants),
    case(np.linalg.svdvals, _spread(3, 4)),
]
EIGH = [
    case(np.linalg.eigh, _symmetric(), through=eigh_invariants),
    case(np.linalg.eigh, _symmetric(2, n=3), name="eigh-batched", through=eigh_invariants),
    case(np.linalg.eigh, _symmetric(), "U", name="eigh-upper", through=eigh_invariants),
    case(np.linalg.eigvalsh, _symmetric()), case(np.linalg.eigvalsh, _symmetric(3), UPLO="U", name="eigvalsh-upper"),
]
PINV = [
    case(np.linalg.pinv, _spread(4, 3), name="pinv-tall"), case(np.linalg.pinv, _spread(2, 5), name="pinv-wide"),
    case(np.linalg.pinv, _square(2), name="pinv-batched"), case(np.linalg.pinv, _symmetric(), hermitian=True, name="pinv-hermitian"),
    case(np.linalg.lstsq, _spread(5, 3), Arr((5,)), name="lstsq-vector"),
    case(np.linalg.lstsq, _spread(5, 3), Arr((5, 2)), None, name="lstsq-matrix"),
    case(np.linalg.lstsq, _spread(3, 3), Arr((3,)), name="lstsq-square"),
    case(np.linalg.lstsq, _spread(2, 4), Arr((2, 2)), name="lstsq-underdetermined"),
]
TABLES = [CHOLESKY, QR, SVD, EIGH, PINV]


@pytest.mark.parametrize("case,dtype", params(CHOLESKY + QR + SVD + EIGH + PINV))
def test_decomposition_rule(case, dtype):
    case.check(dtype)


def _gauge_invariant_check(fn, a, index, rows=False, **kwargs):
    """Full/complete factorizations of a non-square matrix: the cotangent of
    f(A) = <W1, Q[:, :k]> + <W2, Q2 Q2^T> + <W3, the other outputs>, with Q = out[index] (transposed if
    `rows`) and Q2 its extra columns, whose rotation among themselves LAPACK chooses, against a
    central finite difference of f."""
    rng = np.random.default_rng(1)
    k = min(a.shape)
    out = fn(a, **kwargs)
    weights = [rng.standard_normal(np.shape(o)) for o in out]
    q0 = out[index].T if rows else out[index]
    w1 = rng.standard_normal(q0[:, :k].shape)
    w2 = rng.standard_normal((q0.shape[0],) * 2)

    def f(x):
        parts = fn(x, **kwargs)
        q = parts[index].T if rows else parts[index]
        total = sum(float(np.sum(w * p)) for i, (w, p) in enumerate(zip(weights, parts)) if i != index)
        return total + float(np.sum(w1 * q[:, :k])) + float(np.sum(w2 * (q[:, k:] @ q[:, k:].T)))

    q_bar = np.concatenate([w1, (w2 + w2.T) @ q0[:, k:]], axis=1)
    bars = list(weights)
    bars[index] = q_bar.T if rows else q_bar
    _, pullback = as_rrule(lookup(fn))(a, **kwargs)
    (a_bar,) = pullback(tuple(bars))
    v = rng.standard_normal(a.shape)
    h = 1e-6
    fd = (f(a + h * v) - f(a - h * v)) / (2 * h)
    assert np.sum(a_bar * v) == pytest.approx(fd, rel=1e-6, abs=1e-8)


def _spread_matrix(m, n):
    return _spread(m, n).make(np.random.default_rng(0), "float64")


def test_svd_full_matrices_extra_columns_of_u():
    _gauge_invariant_check(np.linalg.svd, _spread_matrix(5, 3), 0)


def test_svd_full_matrices_extra_rows_of_vt():
    _gauge_invariant_check(np.linalg.svd, _spread_matrix(3, 5), 2, rows=True)


def test_qr_complete_extra_columns_of_q():
    _gauge_invariant_check(np.linalg.qr, _spread_matrix(5, 3), 0, mode="complete")


def test_eigh_vectors_only_and_values_only():
    a = _symmetric().make(np.random.default_rng(0), "float64")
    _, pullback = as_rrule(lookup(np.linalg.eigh))(a)
    (values_only,) = pullback((np.ones(4), ZERO))
    assert np.allclose(values_only, np.tril(2 * np.eye(4)) - np.eye(4))  # tr(A): the identity, lower triangle
    assert pullback((ZERO, ZERO)) == (ZERO,)


# ---- complex input, and eig ------------------------------------------------------------------------

COMPLEX_OF = {"float64": "complex128", "float32": "complex64"}


def _complex_spread(*shape):
    """A complex matrix with singular values well apart (1, 2, 3...), complex64 in a float32 case."""
    def make(rng, dtype):
        m, n = shape[-2:]
        k = min(m, n)
        u, _ = np.linalg.qr(rng.standard_normal(shape[:-2] + (m, k)) + 1j * rng.standard_normal(shape[:-2] + (m, k)))
        v, _ = np.linalg.qr(rng.standard_normal(shape[:-2] + (n, k)) + 1j * rng.standard_normal(shape[:-2] + (n, k)))
        return ((u * np.arange(1.0, k + 1)) @ np.conj(np.swapaxes(v, -1, -2))).astype(COMPLEX_OF[dtype])
    return Gen(make)


def _hermitian(*batch, n=4):
    """A Hermitian matrix with eigenvalues well apart; its upper triangle holds noise NumPy never reads."""
    def make(rng, dtype):
        q, _ = np.linalg.qr(rng.standard_normal(batch + (n, n)) + 1j * rng.standard_normal(batch + (n, n)))
        w = np.arange(1.0, n + 1) * rng.choice([-1.0, 1.0], n)
        a = (q * w) @ np.conj(np.swapaxes(q, -1, -2))
        return (a + np.triu(rng.standard_normal(a.shape), 1) + 0.3j * np.eye(n)).astype(COMPLEX_OF[dtype])
    return Gen(make)


def _eigen(*batch, n=3, complex_input=False, real_values=True):
    """V diag(w) V^-1 with eigenvalues well apart: real ones (1, 2.5, 4...), or complex conjugate pairs
    for a real matrix with real_values=False."""
    def make(rng, dtype):
        if complex_input:
            v = rng.standard_normal(batch + (n, n)) + 1j * rng.standard_normal(batch + (n, n))
            w = np.arange(1.0, n + 1) * (1.0 + 0.5j)
            return ((v * w) @ np.linalg.inv(v)).astype(COMPLEX_OF[dtype])
        v = rng.standard_normal(batch + (n, n)) + 2 * np.eye(n)
        a = (v * (1.0 + 1.5 * np.arange(n))) @ np.linalg.inv(v)
        if not real_values:  # a rotation block gives 1 +- 2i
            a = a + np.pad([[0.0, 2.0], [-2.0, 0.0]], [(0, n - 2), (0, n - 2)])
        return a.astype(dtype)
    return Gen(make)


COMPLEX = [
    case(np.linalg.svd, _complex_spread(4, 3), compute_uv=False, name="svd-values-complex"),
    case(np.linalg.svd, _complex_spread(2, 3, 5), False, False, name="svd-values-complex-batched"),
    case(np.linalg.svdvals, _complex_spread(3, 4), name="svdvals-complex"),
    case(np.linalg.eigvalsh, _hermitian(), name="eigvalsh-complex"),
    case(np.linalg.eigvalsh, _hermitian(2, n=3), "U", name="eigvalsh-complex-upper-batched"),
    case(np.linalg.eig, _eigen(), name="eig-real-values", through=eig_invariants),
    case(np.linalg.eig, _eigen(2), name="eig-batched", through=eig_invariants),
    case(np.linalg.eig, _eigen(real_values=False), name="eig-complex-values", through=eig_invariants),
    case(np.linalg.eig, _eigen(complex_input=True), name="eig-complex-input", through=eig_invariants),
    case(np.linalg.eig, _eigen(2, n=3, complex_input=True), name="eig-complex-batched", through=eig_invariants),
    case(np.linalg.svd, _complex_spread(4, 3), False, name="svd-complex-tall", through=svd_invariants),
    case(np.linalg.svd, _complex_spread(3, 3), name="svd-complex-square", through=svd_invariants),
    case(np.linalg.svd, _complex_spread(3, 5), name="svd-complex-full-wide", through=svd_invariants),
    case(np.linalg.svd, _complex_spread(2, 4, 3), False, name="svd-complex-batched", through=svd_invariants),
    case(np.linalg.svd, _hermitian(), hermitian=True, name="svd-complex-hermitian", through=svd_invariants),
    case(np.linalg.eigh, _hermitian(), name="eigh-complex", through=eigh_invariants),
    case(np.linalg.eigh, _hermitian(2, n=3), "U", name="eigh-complex-upper-batched", through=eigh_invariants),
    case(np.linalg.eigvals, _eigen(real_values=False), name="eigvals-complex-values"),
    case(np.linalg.eigvals, _eigen(complex_input=True), name="eigvals-complex-input"),
    case(np.linalg.eigvals, _eigen(2, n=4, complex_input=True), name="eigvals-complex-batched"),
]
TABLES.append(COMPLEX)


@pytest.mark.parametrize("case,dtype", params(COMPLEX))
def test_complex_decomposition_rule(case, dtype):
    case.check(dtype)


def _weights(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def _svd_loss(full):
    """Gauge-invariant: the values, |U|^2 and |Vt|^2 of the first k vectors, U diag(c) Vt, and the
    projectors onto the extra columns of a full U or Vt (which LAPACK may rotate among themselves)."""
    def loss(a):
        u, s, vt = np.linalg.svd(a, full_matrices=full)
        k = s.shape[-1]
        total = np.sum(_weights(s.shape, 1) * s) + np.sum(_weights(u[..., :k].shape, 2) * np.abs(u[..., :k]) ** 2)
        total = total + np.sum(_weights(vt[..., :k, :].shape, 3) * np.abs(vt[..., :k, :]) ** 2)
        total = total + np.real(np.sum(_weights(a.shape, 4) * ((u[..., :k] * _weights(k, 5)) @ vt[..., :k, :])))
        u2, v2 = u[..., k:], np.conj(np.swapaxes(vt[..., k:, :], -1, -2))
        p_u, p_v = u2 @ np.conj(np.swapaxes(u2, -1, -2)), v2 @ np.conj(np.swapaxes(v2, -1, -2))
        return total + np.real(np.sum(_weights(p_u.shape, 6) * p_u)) + np.imag(np.sum(_weights(p_v.shape, 7) * p_v))
    return loss


def _svd_hermitian_loss(a):
    u, s, vt = np.linalg.svd(a, hermitian=True)
    total = np.sum(_weights(s.shape, 1) * s) + np.sum(_weights(u.shape, 2) * np.abs(u) ** 2)
    return total + np.real(np.sum(_weights(a.shape, 3) * ((u * _weights(s.shape[-1], 4)) @ vt)))


def _eigh_loss(a):
    w, v = np.linalg.eigh(a)
    total = np.sum(_weights(w.shape, 1) * w) + np.sum(_weights(v.shape, 2) * np.abs(v) ** 2)
    return total + np.real(np.sum(_weights(a.shape, 3) * ((v * _weights(w.shape[-1], 4)) @ np.conj(np.swapaxes(v, -1, -2)))))


def _eig_loss(a):
    w, v = np.linalg.eig(a)
    total = np.real(np.sum(_weights(w.shape, 1) * w)) + np.imag(np.sum(_weights(w.shape, 2) * w ** 2))
    return total + np.sum(_weights(v.shape, 3) * np.abs(v) ** 2)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("loss,make", [
    (_svd_loss(False), _complex_spread(4, 3)), (_svd_loss(False), _complex_spread(3, 5)),
    (_svd_loss(True), _complex_spread(5, 3)), (_svd_loss(True), _complex_spread(3, 5)),
    (_svd_loss(False), _complex_spread(2, 3, 3)), (_svd_loss(True), _complex_spread(2, 4, 3)),
    (_svd_hermitian_loss, _hermitian()), (_eigh_loss, _hermitian()), (_eigh_loss, _hermitian(2, n=3)),
    (_eig_loss, _eigen(complex_input=True)), (_eig_loss, _eigen(2, n=4, complex_input=True)),
    (_eig_loss, _eigen(real_values=False)), (_eig_loss, _eigen(2, n=4, real_values=False)), (_eig_loss, _eigen()),
], ids=["svd-tall", "svd-wide", "svd-full-tall", "svd-full-wide", "svd-batched", "svd-full-batched", "svd-hermitian", "eigh",
        "eigh-batched", "eig-complex", "eig-complex-batched", "eig-real-complex-values", "eig-real-batched", "eig-real"])
def test_gauge_invariant_functions_of_complex_decompositions(loss, make, dtype):
    """svd and eigh of complex matrices, and eig, were refused before (real-only rules, eig not implemented)."""
    a = make.make(np.random.default_rng(0), dtype)
    wide = a.astype(np.complex128 if np.iscomplexobj(a) else np.float64)
    want = _fd_gradient(loss, wide)
    got = bytegrad.grad(loss)(a)
    assert got.dtype == a.dtype
    tol = 1e-6 if dtype == "float64" else 2e-3
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.max(np.abs(want)))
