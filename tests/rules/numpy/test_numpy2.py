"""NumPy 2's array-API functions against finite differences: vecdot (np and np.linalg), matvec, vecmat,
matrix_transpose, cumulative_sum, cumulative_prod, linalg.outer, and vector_norm/matrix_norm for every
order, axis and keepdims, real and complex. Each table is empty on a NumPy that lacks its functions."""
from __future__ import annotations

import numpy as np
import pytest

import bytegrad

from ..cases import Arr, Gen, case, params
from .test_complex import COMPLEX_DTYPES, C
from .test_fft import check_jvp_and_hvp

HAS_2_0, HAS_2_1, HAS_2_2 = hasattr(np, "vecdot"), hasattr(np, "cumulative_sum"), hasattr(np, "matvec")
V = Arr((5,), 0.1, 2, signed=True, distinct=True)   # no ties, no zeros
M = Arr((3, 4), 0.1, 2, signed=True, distinct=True)


def ccase(fn, *args, **kwargs):
    return case(fn, *args, dtypes=COMPLEX_DTYPES, **kwargs)


def _with_zeros(rng, dtype):
    x = rng.uniform(0.5, 1.5, (3, 4)) * rng.choice([-1.0, 1.0], (3, 4))
    x[0, 1] = x[2, 3] = 0.0
    return x.astype(dtype)


PRODUCTS = [
    case(np.vecdot, Arr((2, 3)), Arr((3,))), case(np.vecdot, Arr((3, 2)), Arr((3, 1)), axis=0, name="vecdot-axis"),
    ccase(np.vecdot, C(2, 3), C(2, 3), name="vecdot-complex"), ccase(np.vecdot, C(4, 3), C(3,), name="vecdot-complex-broadcast"),
    case(np.linalg.vecdot, Arr((4, 3)), Arr((4, 3))), case(np.linalg.vecdot, Arr((3, 4)), Arr((3, 4)), axis=-2, name="linalg.vecdot-axis"),
    ccase(np.linalg.vecdot, C(3,), C(2, 3), name="linalg.vecdot-complex"),
    case(np.linalg.outer, Arr((3,)), Arr((4,))), ccase(np.linalg.outer, C(3), C(2), name="linalg.outer-complex"),
    case(np.matrix_transpose, Arr((2, 3, 4))), case(np.linalg.matrix_transpose, Arr((3, 4))),
    ccase(np.matrix_transpose, C(3, 2), name="matrix_transpose-complex"),
] if HAS_2_0 else []
CUMULATIVE = [
    case(np.cumulative_sum, Arr((5,))), case(np.cumulative_sum, Arr((3, 4)), axis=1, include_initial=True, name="cumulative_sum-initial"),
    case(np.cumulative_sum, Arr((3, 4)), axis=0, dtype=np.float64, name="cumulative_sum-dtype"),
    ccase(np.cumulative_sum, C(3, 4), axis=-1, name="cumulative_sum-complex"),
    case(np.cumulative_prod, Arr((5,), 0.5, 1.5, signed=True)),
    case(np.cumulative_prod, Arr((3, 4), 0.5, 1.5, signed=True), axis=0, include_initial=True, name="cumulative_prod-initial"),
    case(np.cumulative_prod, Gen(_with_zeros), axis=1, name="cumulative_prod-zeros"),
    case(np.cumulative_prod, Gen(_with_zeros), axis=-1, include_initial=True, name="cumulative_prod-zeros-initial"),
    ccase(np.cumulative_prod, C(2, 4), axis=1, include_initial=True, name="cumulative_prod-complex"),
] if HAS_2_1 else []
MATVEC = [
    case(np.matvec, Arr((3, 4)), Arr((4,))), case(np.matvec, Arr((2, 3, 4)), Arr((4,)), name="matvec-batched"),
    case(np.matvec, Arr((1, 3, 4)), Arr((2, 1, 4)), name="matvec-broadcast"),
    ccase(np.matvec, C(3, 4), C(5, 4), name="matvec-complex"),
    case(np.vecmat, Arr((3,)), Arr((3, 4))), case(np.vecmat, Arr((5, 3)), Arr((3, 4)), name="vecmat-batched"),
    case(np.vecmat, Arr((2, 1, 3)), Arr((1, 3, 4)), name="vecmat-broadcast"),
    ccase(np.vecmat, C(2, 3), C(3, 4), name="vecmat-complex"),
] if HAS_2_2 else []
VECTOR_ORDERS = (2, 1, np.inf, -np.inf, 0, 3, 0.5, -1.5)
MATRIX_ORDERS = ("fro", "nuc", 2, -2, 1, -1, np.inf, -np.inf)
NORMS = ([
    case(np.linalg.vector_norm, V, ord=o, name=f"vector_norm-{o}") for o in VECTOR_ORDERS
] + [
    ccase(np.linalg.vector_norm, C(5), ord=o, name=f"vector_norm-complex-{o}") for o in VECTOR_ORDERS
] + [
    case(np.linalg.vector_norm, Arr((2, 3, 4), 0.1, 2, signed=True, distinct=True), axis=(2, 0), ord=np.inf, keepdims=True,
         name="vector_norm-axes-keepdims"),
    case(np.linalg.vector_norm, Arr((3, 4), 0.1, 2, signed=True), axis=1, ord=3, name="vector_norm-axis"),
    ccase(np.linalg.vector_norm, C(3, 4), axis=0, ord=1, keepdims=True, name="vector_norm-complex-axis-keepdims"),
    ccase(np.linalg.vector_norm, C(2, 3), ord=-np.inf, name="vector_norm-complex-flattened"),
] + [
    case(np.linalg.matrix_norm, M, ord=o, name=f"matrix_norm-{o}") for o in MATRIX_ORDERS
] + [
    ccase(np.linalg.matrix_norm, C(3, 4), ord=o, name=f"matrix_norm-complex-{o}") for o in MATRIX_ORDERS
] + [
    case(np.linalg.matrix_norm, Arr((2, 3, 4), 0.1, 2, signed=True, distinct=True), ord=1, keepdims=True,
         name="matrix_norm-batched-keepdims"),
    ccase(np.linalg.matrix_norm, C(2, 3, 3), ord="nuc", keepdims=True, name="matrix_norm-complex-batched"),
]) if HAS_2_0 else []
TABLES = [PRODUCTS, CUMULATIVE, MATVEC, NORMS]


@pytest.mark.parametrize("case,dtype", params(PRODUCTS + CUMULATIVE + MATVEC + NORMS))
def test_numpy2_rule(case, dtype):
    case.check(dtype)


_Z = np.array([0.3 + 0.4j, -1.1 + 0.2j, 0.7 - 0.9j])


@pytest.mark.skipif(not HAS_2_2, reason="NumPy < 2.2")
@pytest.mark.parametrize("f", [
    lambda x: np.sum(np.vecdot(x.reshape(2, 3), x[:3]) ** 2),
    lambda x: np.sum(np.matvec(x.reshape(2, 3), x[3:]) ** 2),
    lambda x: np.sum(np.vecmat(x[:2], x.reshape(2, 3)) ** 2),
    lambda x: np.sum(np.matrix_transpose(x.reshape(2, 3)) * np.arange(6.0).reshape(3, 2)),
    lambda x: np.sum(np.cumulative_sum(x, include_initial=True) ** 2),
    lambda x: np.sum(np.cumulative_prod(x)),
    lambda x: np.sum(np.linalg.outer(x[:2], x) ** 2) + np.linalg.vecdot(x, x),
    lambda x: np.abs(np.vecdot(_Z, x[:3] * (1 + 1j))) ** 2,
], ids=["vecdot", "matvec", "vecmat", "matrix_transpose", "cumulative_sum", "cumulative_prod", "outer-vecdot",
        "vecdot-complex"])
def test_grad_of_user_code_calling_numpy2_functions(f):
    """Each was refused (no rule) before these rules."""
    x = np.array([0.3, -1.2, 0.8, 2.0, -0.4, 1.1])
    want = np.array([(f(x + e) - f(x - e)) / 2e-6 for e in np.eye(6) * 1e-6])
    np.testing.assert_allclose(bytegrad.grad(f)(x), want, rtol=1e-6, atol=1e-8)


@pytest.mark.skipif(not HAS_2_2, reason="NumPy < 2.2")
@pytest.mark.parametrize("f", [
    lambda x: np.vecdot(x.reshape(2, 3), x[:3]) ** 2,
    lambda x: np.matvec(x.reshape(2, 3), x[3:]) ** 2,
    lambda x: np.vecmat(x[:2], x.reshape(2, 3)) ** 2,
    lambda x: np.matrix_transpose(x.reshape(2, 3)) ** 3,
    lambda x: np.cumulative_sum(x, include_initial=True) ** 2,
    lambda x: np.linalg.outer(x[:2], x) ** 2,
], ids=["vecdot", "matvec", "vecmat", "matrix_transpose", "cumulative_sum", "outer"])
def test_forward_mode_and_hessian_vector_products(f):
    check_jvp_and_hvp(f)
