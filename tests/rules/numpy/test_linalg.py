"""Products and np.linalg rules against finite differences: 1-D, 2-D, batched and broadcast cases."""
from __future__ import annotations

import operator

import numpy as np
import pytest

import bytegrad

from bytegrad.rules._apply import as_rrule
from bytegrad.rules.registry import ZERO, lookup

from ..cases import Arr, Gen, Num, case, params


def _well_conditioned(*batch):
    def make(rng, dtype):
        n = 3
        a = rng.uniform(-0.5, 0.5, batch + (n, n)) + 2.0 * np.eye(n)
        return a.astype(dtype)
    return Gen(make)


MATMUL = [
    case(fn, Arr(a), Arr(b), name=f"{fn.__name__}-{a}@{b}")
    for fn in (np.matmul, operator.matmul)
    for a, b in [((2, 3), (3, 4)), ((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)), ((5, 2, 3), (3, 4)),
                 ((2, 1, 2, 3), (4, 3, 2)), ((3,), (5, 3, 2)), ((5, 2, 3), (3,))]
]
PRODUCTS = [
    case(np.dot, Arr((2, 3)), Arr((3, 4))), case(np.dot, Arr((3,)), Arr((3,)), name="dot-1d"),
    case(np.dot, Arr((2, 3)), Arr((3,)), name="dot-2d-1d"), case(np.dot, Arr((3,)), Arr((3, 2)), name="dot-1d-2d"),
    case(np.dot, Arr((2, 4, 3)), Arr((3,)), name="dot-3d-1d"), case(np.dot, Arr((2, 4, 3)), Arr((5, 3, 2)), name="dot-3d-3d"),
    case(np.dot, Arr((3,)), Arr((5, 3, 2)), name="dot-1d-3d"), case(np.dot, Num(), Arr((2, 3)), name="dot-scalar"),
    case(np.dot, Arr((2, 3)), Arr(()), name="dot-0d"),
    case(np.ndarray.dot, Arr((2, 3)), Arr((3, 2))),
    case(np.outer, Arr((3,)), Arr((4,))), case(np.outer, Arr((2, 2)), Arr((3,)), name="outer-flattens"),
    case(np.inner, Arr((3,)), Arr((3,))), case(np.inner, Arr((2, 3)), Arr((4, 3)), name="inner-2d"),
    case(np.inner, Arr((2, 5, 3)), Arr((3,)), name="inner-3d-1d"), case(np.inner, Num(), Arr((3,)), name="inner-scalar"),
    case(np.vdot, Arr((2, 3)), Arr((6,))),
    case(np.trace, Arr((3, 3))), case(np.trace, Arr((3, 4)), 1, name="trace-offset"),
    case(np.trace, Arr((2, 3, 4)), 0, 1, 2, name="trace-axes"), case(np.ndarray.trace, Arr((4, 2, 4)), -1, 0, 2),
]
EINSUM = [case(np.einsum, spec, *(Arr(sh) for sh in shapes), name=f"einsum-{spec}-{shapes}") for spec, shapes in [
    ("ij,jk->ik", ((2, 3), (3, 4))), ("ij,jk", ((2, 3), (3, 4))), ("ij->ji", ((2, 3),)), ("ij->", ((2, 3),)),
    ("ij->i", ((2, 3),)), ("i,i", ((3,), (3,))), ("i,j->ij", ((2,), (3,))), ("ij,ij->ij", ((2, 3), (2, 3))),
    ("ii->i", ((3, 3),)), ("ii", ((3, 3),)), ("iij->j", ((2, 2, 3),)), ("bij,bjk->bik", ((4, 2, 3), (4, 3, 2))),
    ("...ij,jk->...ik", ((5, 2, 3), (3, 4))), ("...ij,...jk->...ik", ((1, 2, 3), (4, 3, 2))),
    ("ij,jk,kl->il", ((2, 3), (3, 4), (4, 2))), ("ba,ca", ((2, 3), (4, 3))), ("i...->...", ((3, 2, 2),)),
    ("ij,kj->ikj", ((2, 1), (3, 4))), ("ij,jk->ik", ((0, 3), (3, 4))), ("bij,bjk->bik", ((0, 2, 3), (0, 3, 2))),
    ("...ij,jk->...ik", ((0, 2, 3), (3, 4))), ("ij,jk->ik", ((2, 0), (0, 4))), ("bij,jk->bik", ((1, 2, 3), (3, 0))),
]]
E = Ellipsis
EINSUM_SUBLISTS = [
    case(np.einsum, Arr((2, 3)), [0, 1], Arr((3, 4)), [1, 2], [0, 2], name="einsum-sublists"),
    case(np.einsum, Arr((2, 3)), [0, 1], Arr((3, 4)), [1, 2], name="einsum-sublists-implicit"),
    case(np.einsum, Arr((5, 2, 3)), [E, 0, 1], Arr((3, 4)), [1, 2], [E, 0, 2], name="einsum-sublists-ellipsis"),
    case(np.einsum, Arr((4, 2, 3)), [E, 1], [E], name="einsum-sublists-ellipsis-sum"),
    case(np.einsum, Arr((3, 3)), [0, 0], name="einsum-sublists-trace"),
    case(np.einsum, Arr((2, 3)), [30, 40], Arr((3,)), [40], [30], optimize=True, name="einsum-sublists-optimize"),
    case(np.einsum, Arr((0, 3)), [0, 1], Arr((3, 4)), [1, 2], [0, 2], name="einsum-sublists-zero-size"),
]
LINALG = [
    case(np.linalg.inv, _well_conditioned()), case(np.linalg.inv, _well_conditioned(2), name="inv-batched"),
    case(np.linalg.solve, _well_conditioned(), Arr((3,))), case(np.linalg.solve, _well_conditioned(), Arr((3, 2)), name="solve-matrix"),
    case(np.linalg.solve, _well_conditioned(4), Arr((3,)), name="solve-batched-vector"),
    case(np.linalg.solve, _well_conditioned(4), Arr((3, 2)), name="solve-batched-matrix"),
    case(np.linalg.solve, _well_conditioned(), Arr((4, 3, 2)), name="solve-broadcast-b"),
    case(np.linalg.det, _well_conditioned()), case(np.linalg.det, _well_conditioned(3), name="det-batched"),
    case(np.linalg.slogdet, _well_conditioned()), case(np.linalg.slogdet, _well_conditioned(2), name="slogdet-batched"),
    case(np.linalg.norm, Arr((5,))), case(np.linalg.norm, Arr((3, 4))), case(np.linalg.norm, Arr((3, 4)), "fro", name="norm-fro"),
    case(np.linalg.norm, Arr((3, 4)), axis=1, name="norm-axis"), case(np.linalg.norm, Arr((3, 4)), 2, 0, True, name="norm-keepdims"),
    case(np.linalg.norm, Arr((5,), 0.1, 2, signed=True), 1, name="norm-1"),
]
V = Arr((5,), 0.1, 2, signed=True, distinct=True)   # no ties, no zeros
M = Arr((3, 4), 0.1, 2, signed=True, distinct=True)
NORMS = [
    case(np.linalg.norm, V, np.inf, name="norm-inf"), case(np.linalg.norm, V, -np.inf, name="norm--inf"),
    case(np.linalg.norm, V, 0, name="norm-0"), case(np.linalg.norm, V, 3, name="norm-3"),
    case(np.linalg.norm, V, 0.5, name="norm-0.5"), case(np.linalg.norm, V, -1.5, name="norm--1.5"),
    case(np.linalg.norm, V, 2, name="norm-2-vector"), case(np.linalg.norm, V, 2.0, name="norm-float-order"),
    case(np.linalg.norm, Arr((3, 4), 0.1, 2, signed=True), 3, 1, name="norm-3-axis"),
    case(np.linalg.norm, Arr((4, 3), 0.1, 2, signed=True), np.inf, 0, True, name="norm-inf-axis-keepdims"),
    case(np.linalg.norm, M, "fro", (1, 0), name="norm-fro-axes"), case(np.linalg.norm, M, "nuc", name="norm-nuc"),
    case(np.linalg.norm, M, 2, name="norm-2-matrix"), case(np.linalg.norm, M, -2, name="norm--2-matrix"),
    case(np.linalg.norm, M, 1, name="norm-1-matrix"), case(np.linalg.norm, M, -1, name="norm--1-matrix"),
    case(np.linalg.norm, M, np.inf, name="norm-inf-matrix"), case(np.linalg.norm, M, -np.inf, name="norm--inf-matrix"),
    case(np.linalg.norm, Arr((2, 3, 4), 0.1, 2, signed=True, distinct=True), 1, (2, 0), name="norm-1-axes-batched"),
    case(np.linalg.norm, Arr((2, 3, 4), 0.1, 2, signed=True, distinct=True), np.inf, (-1, 1), True, name="norm-inf-axes-keepdims"),
    case(np.linalg.norm, Arr((2, 3, 4), distinct=True), "nuc", (0, 2), name="norm-nuc-batched"),
    case(np.linalg.norm, Arr((2, 3, 4), distinct=True), -2, (2, 1), keepdims=True, name="norm--2-batched-keepdims"),
    case(np.linalg.norm, Arr((2, 3, 4)), keepdims=True, name="norm-flat-keepdims"),
    case(np.linalg.vector_norm, Arr((2, 3, 4), 0.1, 2, signed=True), axis=(0, 2), ord=3, name="vector_norm-axes"),
    case(np.linalg.vector_norm, Arr((2, 3)), name="vector_norm-all"),
    case(np.linalg.vector_norm, V, ord=np.inf, keepdims=True, name="vector_norm-inf"),
    case(np.linalg.matrix_norm, Arr((2, 3, 4), distinct=True), name="matrix_norm-fro"),
    case(np.linalg.matrix_norm, Arr((2, 3, 4), distinct=True), ord="nuc", keepdims=True, name="matrix_norm-nuc"),
    case(np.linalg.matrix_norm, M, ord=-np.inf, name="matrix_norm--inf"),
]
TABLES = [MATMUL, PRODUCTS, EINSUM, EINSUM_SUBLISTS, LINALG, NORMS]


@pytest.mark.parametrize("case,dtype", params(MATMUL + PRODUCTS + EINSUM + EINSUM_SUBLISTS + LINALG + NORMS))
def test_linalg_rule(case, dtype):
    case.check(dtype)


def test_matmul_cotangents_are_thunks_computed_on_demand():
    a, b = np.ones((2, 3)), np.ones((3, 4))
    out, pullback = as_rrule(lookup(np.matmul))(a, b)
    a_bar, b_bar = pullback(np.ones((2, 4)))
    assert callable(a_bar) and callable(b_bar)
    assert a_bar().shape == (2, 3) and b_bar().shape == (3, 4)


def test_slogdet_ignores_the_sign_cotangent():
    out, pullback = as_rrule(lookup(np.linalg.slogdet))(np.eye(2) * 2.0)
    (a_bar,) = pullback((ZERO, 1.0))
    assert np.allclose(a_bar, np.eye(2) * 0.5)
    assert pullback((1.0, ZERO)) == (ZERO,)


def test_grad_through_einsum_operand_lists_and_empty_leading_axes():
    """The operand-list form was refused, and a zero-size axis broke the pullback, before."""
    a, b = np.arange(6.0).reshape(2, 3) / 7, np.arange(12.0).reshape(3, 4) / 5
    g = bytegrad.grad(lambda a: np.sum(np.einsum(a, [0, 1], b, [1, 2], [0, 2]) ** 2))(a)
    np.testing.assert_allclose(g, 2 * (a @ b) @ b.T)
    g = bytegrad.grad(lambda a: np.sum(np.einsum(a, [Ellipsis, 1], b, [1, 2], [Ellipsis, 2])))(a)
    np.testing.assert_allclose(g, np.broadcast_to(b.sum(axis=1), (2, 3)))
    empty = bytegrad.grad(lambda a: np.sum(np.einsum("...ij,jk->...ik", a, b)))(np.zeros((0, 2, 3)))
    assert empty.shape == (0, 2, 3)


def test_norm_inf_splits_ties_and_zero_norm_has_zero_subgradient():
    out, pullback = as_rrule(lookup(np.linalg.norm))(np.array([3.0, -3.0, 1.0]), np.inf)
    assert pullback(1.0)[0].tolist() == [0.5, -0.5, 0.0]
    out, pullback = as_rrule(lookup(np.linalg.norm))(np.zeros(3))
    assert pullback(1.0)[0].tolist() == [0.0, 0.0, 0.0]
