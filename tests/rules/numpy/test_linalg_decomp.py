"""Decomposition rules (cholesky, qr, svd, eigh, pinv, lstsq...) against finite differences."""
from __future__ import annotations

import numpy as np
import pytest

from bytegrad.rules._apply import as_rrule
from bytegrad.rules.registry import ZERO, RuleKind, lookup

from ..cases import Arr, Gen, case, params


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
QR = [
    case(np.linalg.qr, _spread(4, 3), name="qr-tall"), case(np.linalg.qr, _spread(3, 3), name="qr-square"),
    case(np.linalg.qr, _spread(3, 5), name="qr-wide"), case(np.linalg.qr, _spread(2, 4, 3), name="qr-batched"),
    case(np.linalg.qr, _spread(3, 5), "complete", name="qr-complete-wide"),
    case(np.linalg.qr, _spread(4, 3), "r", name="qr-r"), case(np.linalg.qr, _spread(3, 4), mode="r", name="qr-r-wide"),
]
SVD = [
    case(np.linalg.svd, _spread(4, 3), False, name="svd-tall"), case(np.linalg.svd, _spread(3, 3), name="svd-square"),
    case(np.linalg.svd, _spread(3, 5), full_matrices=False, name="svd-wide"),
    case(np.linalg.svd, _spread(2, 3, 4), False, name="svd-batched"),
    case(np.linalg.svd, _spread(4, 3), compute_uv=False, name="svd-values"),
    case(np.linalg.svd, _spread(2, 3, 5), False, False, name="svd-values-batched"),
    case(np.linalg.svd, _symmetric(), hermitian=True, name="svd-hermitian"),
    case(np.linalg.svdvals, _spread(3, 4)),
]
EIGH = [
    case(np.linalg.eigh, _symmetric()), case(np.linalg.eigh, _symmetric(2, n=3), name="eigh-batched"),
    case(np.linalg.eigh, _symmetric(), "U", name="eigh-upper"),
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


def test_eig_and_eigvals_are_declared_not_implemented():
    for fn in (np.linalg.eig, np.linalg.eigvals):
        rule = lookup(fn)
        assert rule.kind is RuleKind.NOT_IMPLEMENTED and "eigh" in rule.reason
