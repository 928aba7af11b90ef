"""scipy.linalg rules against finite differences (float64 and float32)."""
from __future__ import annotations

import numpy as np
import pytest

from bytegrad.errors import RuleCaseError
from bytegrad.rules.testing import eigh_invariants

sl = pytest.importorskip("scipy.linalg")

from ..cases import Arr, Gen, case, params  # noqa: E402
from ..numpy.test_linalg_decomp import _spd, _square, _symmetric  # noqa: E402


def _factored(factor, *args, **kwargs):
    def make(rng, dtype):
        return factor(_spd().make(rng, dtype) if factor is sl.cho_factor else _square().make(rng, dtype),
                      *args, **kwargs)
    return Gen(make)


def _triangular(lower):
    def make(rng, dtype):
        m = _square().make(rng, dtype)
        return np.tril(m) if lower else np.triu(m)
    return Gen(make)


SOLVE = [
    case(sl.solve, _square(), Arr((3,))), case(sl.solve, _square(), Arr((3, 2)), name="solve-matrix"),
    case(sl.solve, _square(), Arr((3, 2)), assume_a="gen", transposed=True, name="solve-transposed"),
    case(sl.solve, _square(), Arr((3,)), assume_a="sym", name="solve-sym-upper"),
    case(sl.solve, _square(), Arr((3, 2)), assume_a="sym", lower=True, name="solve-sym-lower"),
    case(sl.solve, _spd(), Arr((3,)), assume_a="pos", name="solve-pos"),
    case(sl.solve, _spd(), Arr((3,)), assume_a="her", lower=True, name="solve-her"),
    case(sl.solve, _square(), Arr((3, 2)), assume_a="diagonal", name="solve-diagonal"),
    case(sl.solve, _square(), Arr((3,)), assume_a="tridiagonal", name="solve-tridiagonal"),
    case(sl.solve, _square(), Arr((3,)), assume_a="lower triangular", name="solve-lower-triangular"),
    case(sl.solve, _square(2), Arr((2, 3, 2)), name="solve-batched"),
    case(sl.solve_triangular, _triangular(False), Arr((3,))),
    case(sl.solve_triangular, _square(), Arr((3, 2)), lower=True, name="solve_triangular-lower-reads-triangle"),
    case(sl.solve_triangular, _square(), Arr((3, 2)), trans=1, name="solve_triangular-trans"),
    case(sl.solve_triangular, _square(), Arr((3,)), trans="T", lower=True, unit_diagonal=True,
         name="solve_triangular-trans-lower-unit"),
    case(sl.cho_solve, _factored(sl.cho_factor), Arr((3,))),
    case(sl.cho_solve, _factored(sl.cho_factor, lower=True), Arr((3, 2)), name="cho_solve-lower"),
    case(sl.lu_solve, _factored(sl.lu_factor), Arr((3,))),
    case(sl.lu_solve, _factored(sl.lu_factor), Arr((3, 2)), trans=1, name="lu_solve-trans"),
    case(sl.solve_sylvester, _square(), _square(), Arr((3, 3))),
    case(sl.solve_sylvester, _square(), Gen(lambda rng, dt: _square().make(rng, dt)[:2, :2]), Arr((3, 2)),
         name="solve_sylvester-rectangular"),
]


def _pivoting(rng, dtype):
    """A matrix whose LU factorisation swaps rows (its largest entries below the diagonal)."""
    m = _square().make(rng, dtype)
    return m[::-1].copy()


DECOMPOSITIONS = [
    case(sl.cholesky, _spd()), case(sl.cholesky, _spd(), lower=True, name="cholesky-lower"),
    case(sl.cho_factor, _spd()), case(sl.cho_factor, _spd(), True, name="cho_factor-lower"),
    case(sl.lu_factor, _square()), case(sl.lu_factor, Gen(_pivoting), name="lu_factor-pivoting"),
    case(sl.inv, _square()), case(sl.inv, _square(2), name="inv-batched"),
    case(sl.cholesky, _spd(2), name="cholesky-batched"),
    case(sl.det, _square()), case(sl.det, _square(2), name="det-batched"),
    case(sl.expm, Arr((3, 3), lo=-1.0, hi=1.0)), case(sl.expm, Arr((2, 3, 3), lo=-1.0, hi=1.0), name="expm-batched"),
    case(sl.sqrtm, _spd()),
    # the vectors through gauge-invariant functions of them: the default driver (evr) may flip a
    # vector's sign between a + eps*d and a - eps*d, and float32 and float64 routines pick their own signs
    case(sl.eigh, _symmetric(), through=eigh_invariants),
    case(sl.eigh, _symmetric(), lower=False, name="eigh-upper", through=eigh_invariants),
    case(sl.eigh, _symmetric(), driver="evd", name="eigh-evd", through=eigh_invariants),
    case(sl.eigh, _symmetric(), lower=False, eigvals_only=True, name="eigh-upper-values"),
    case(sl.eigh, _symmetric(), eigvals_only=True, name="eigh-values"),
    case(sl.eigh, _symmetric(2), eigvals_only=True, name="eigh-values-batched"),
]
TABLES = [SOLVE, DECOMPOSITIONS]


@pytest.mark.parametrize("case,dtype", params(SOLVE + DECOMPOSITIONS))
def test_scipy_linalg_rule(case, dtype):
    case.check(dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("lower", [True, False])
def test_eigh_gauge_invariant_use_of_the_vectors(dtype, lower):
    import bytegrad

    def f(a):
        w, v = sl.eigh(a, lower=lower)
        return np.sum((v * w ** 2) @ v.T * c)  # = sum(a @ a * c) for symmetric a

    rng = np.random.default_rng(1)
    c = rng.standard_normal((4, 4))
    a = _symmetric().make(rng, dtype)
    g = bytegrad.grad(f)(a)
    dense = c @ a.T + a.T @ c  # d sum((a @ a) * c) / da
    assert g.dtype == a.dtype
    want = np.tril(dense) + np.tril(dense.T, -1) if lower else np.triu(dense) + np.triu(dense.T, 1)
    assert np.allclose(g, want, rtol=1e-8 if dtype == "float64" else 1e-4, atol=1e-4)  # read from one triangle


def test_unsupported_options_are_clear_errors():
    import bytegrad

    with pytest.raises(RuleCaseError, match="subset_by_index"):
        bytegrad.grad(lambda a: np.sum(sl.eigh(a, subset_by_index=[0, 1])[0]))(np.eye(3))
    with pytest.raises(RuleCaseError, match="assume_a='banded'"):
        bytegrad.grad(lambda a: np.sum(sl.solve(a, np.ones(3), assume_a="banded")))(np.eye(3))
