"""Second derivatives through the scipy rules (their pullbacks are differentiated again): bytegrad.hessian
against central differences of bytegrad.grad. A pullback must use the output the tape recorded, not a
value it recomputed (that would be a constant to the outer derivative)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("scipy")
import scipy.linalg as sl
import scipy.signal as ss
import scipy.special as sc
import scipy.stats as st

import bytegrad

P = np.array([0.3, 1.0])


def _spd(x):
    return np.outer(x, x) + np.diag(x) + 2.0


FUNCTIONS = {
    "logsumexp": lambda x: sc.logsumexp(x, b=x),
    "softmax": lambda x: np.sum(sc.softmax(x) * np.arange(3.0)),
    "log_softmax": lambda x: np.sum(sc.log_softmax(x) ** 2),
    "gammaln-digamma": lambda x: np.sum(sc.gammaln(x) * sc.digamma(x)),
    "expit-erf-i1": lambda x: np.sum(sc.expit(x) * sc.erf(x) + sc.i1(x)),
    "log_ndtr-xlogy": lambda x: np.sum(sc.log_ndtr(x) + sc.xlogy(x, x)),
    "norm.logpdf": lambda x: np.sum(st.norm.logpdf(P, x[0], x[1])),
    "t.logpdf": lambda x: np.sum(st.t.logpdf(P, x[2], x[0], x[1])),
    "gamma.logcdf": lambda x: np.sum(st.gamma.logcdf(P + x[0], 2.0, 0.0, x[1])),
    "multivariate_normal": lambda x: st.multivariate_normal.logpdf(np.array([0.3, 1.0, 0.0]), x, _spd(x)),
    "solve-sym": lambda x: np.sum(sl.solve(_spd(x), x, assume_a="sym")),
    "solve_triangular": lambda x: np.sum(sl.solve_triangular(_spd(x), x, lower=True, trans=1)),
    "cho_factor-cho_solve": lambda x: np.sum(sl.cho_solve(sl.cho_factor(_spd(x)), x)),
    "lu_factor-lu_solve": lambda x: np.sum(sl.lu_solve(sl.lu_factor(_spd(x)[::-1]), x)),
    "det-inv": lambda x: sl.det(_spd(x)) + np.sum(sl.inv(_spd(x))),
    "cholesky": lambda x: np.sum(sl.cholesky(_spd(x)) ** 2),
    "expm": lambda x: np.sum(sl.expm(np.outer(x, x) * 0.3)),
    "eigh": lambda x: np.sum(sl.eigh(_spd(x), eigvals_only=True) ** 2),
    "convolve-correlate": lambda x: np.sum(ss.convolve(x, x) ** 2) + np.sum(ss.correlate(x, x ** 2, "same")),
}


def _fd_hessian(f, x, eps=1e-5):
    g = bytegrad.grad(f)
    cols = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = eps
        cols.append((g(x + e) - g(x - e)) / (2 * eps))
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_hessian(name):
    f = FUNCTIONS[name]
    x = np.array([1.2, 0.7, 2.1])
    assert np.allclose(bytegrad.hessian(f)(x), _fd_hessian(f, x), rtol=1e-5, atol=1e-6)
