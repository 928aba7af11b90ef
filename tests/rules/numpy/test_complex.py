"""Complex input: the rules verified against finite differences under bytegrad's convention.

The convention (docs/plugins.md, "Complex numbers"): a cotangent pairs with a tangent as
Re(sum(x_bar * x_dot)), without conjugation, so the gradient of a real-valued L(z) is
dL/dRe(z) - 1j * dL/dIm(z) = 2 dL/dz (as JAX: the gradient of |z|**2 is 2 * conj(z)).
Only the functions in these tables are claimed complex-safe.
"""
from __future__ import annotations

import operator
import warnings

import numpy as np
import pytest

import bytegrad
from bytegrad.rules.testing import check_rule

from ..cases import Gen, case, params

COMPLEX_DTYPES = ("complex128", "complex64")


def C(*shape):
    """A random complex array of `shape` in the case's dtype."""
    return Gen(lambda rng, dtype: (rng.uniform(-1.5, 1.5, shape) + 1j * rng.uniform(-1.5, 1.5, shape)).astype(dtype))


def R(*shape):
    """A random real array of `shape`, of the real dtype matching the case's complex dtype."""
    return Gen(lambda rng, dtype: rng.uniform(-1.5, 1.5, shape).astype(REAL_OF[dtype]))


def CS():
    """A random complex NumPy scalar of the case's dtype."""
    return Gen(lambda rng, dtype: np.dtype(dtype).type(complex(rng.uniform(-1.5, 1.5), rng.uniform(-1.5, 1.5))))


def RS():
    """A random real NumPy scalar, of the real dtype matching the case's complex dtype."""
    return Gen(lambda rng, dtype: np.dtype(REAL_OF[dtype]).type(rng.uniform(-1.5, 1.5)))


REAL_OF = {"complex128": "float64", "complex64": "float32"}


def ccase(fn, *args, **kwargs):
    return case(fn, *args, dtypes=COMPLEX_DTYPES, **kwargs)


ELEMENTWISE = [
    ccase(np.add, C(2, 3), C(3)), ccase(np.subtract, C(2, 3), C(2, 3)), ccase(np.multiply, C(2, 3), C(2, 3)),
    ccase(np.divide, C(2, 3), C(2, 3)), ccase(np.negative, C(2, 3)), ccase(operator.mul, C(2, 3), C(2, 3)),
    ccase(operator.add, C(3), C(3)), ccase(operator.truediv, C(3), C(3)),
    ccase(np.exp, C(2, 3)), ccase(np.log, C(2, 3)), ccase(np.sin, C(2, 3)), ccase(np.cos, C(2, 3)),
    ccase(np.tanh, C(2, 3)), ccase(np.sqrt, C(2, 3)), ccase(np.square, C(2, 3)), ccase(np.reciprocal, C(2, 3)),
    ccase(np.power, C(2, 3), 3, name="power-int"), ccase(np.expm1, C(3)), ccase(np.log1p, C(3)),
    ccase(np.sinh, C(3)), ccase(np.cosh, C(3)), ccase(np.tan, C(3)), ccase(np.arctan, C(3)),
    ccase(np.conjugate, C(2, 3)), ccase(np.absolute, C(2, 3)),
    ccase(np.sign, C(2, 3)),  # z / |z|: it was declared non-differentiable (a zero gradient)
]
REDUCTIONS_AND_SHAPES = [
    ccase(np.sum, C(2, 3)), ccase(np.sum, C(2, 3), 0, name="sum-axis"), ccase(np.mean, C(2, 3)),
    ccase(np.median, C(3, 4), 1, name="median-axis"), ccase(np.median, C(5)),  # (lexicographic order)
    ccase(np.prod, C(2, 3)), ccase(np.cumsum, C(2, 3)), ccase(np.cumprod, C(4)), ccase(np.diff, C(2, 3)),
    ccase(np.transpose, C(2, 3)), ccase(np.reshape, C(2, 3), (3, 2)), ccase(np.flip, C(2, 3)),
    ccase(np.roll, C(2, 3), 1), ccase(np.take, C(2, 3), [0, 2], 1), ccase(np.concatenate, [C(2, 3), C(1, 3)]),
    ccase(np.stack, [C(3), C(3)]), ccase(np.trace, C(3, 3)), ccase(np.diag, C(3, 3)), ccase(np.tril, C(3, 3)),
    # (their pullback gathered with np.bincount, whose weights are real: a TypeError in the reverse pass)
    ccase(np.pad, C(2, 3), 1, name="pad"), ccase(np.lib.stride_tricks.sliding_window_view, C(5), 3, name="sliding_window_view"),
]
PRODUCTS = [
    ccase(np.matmul, C(3, 3), C(3, 2)), ccase(np.matmul, C(2, 3, 3), C(3,), name="matmul-batched-vector"),
    ccase(np.dot, C(3, 3), C(3, 2)), ccase(np.inner, C(3), C(3)), ccase(np.outer, C(3), C(2)),
    ccase(np.einsum, "ij,jk->ik", C(3, 3), C(3, 2), name="einsum"), ccase(np.tensordot, C(3, 3), C(3, 2), 1),
    ccase(np.kron, C(2, 2), C(2, 1)), ccase(np.linalg.multi_dot, [C(2, 3), C(3, 3), C(3, 2)]),
    ccase(np.linalg.matrix_power, C(3, 3), 2),
    ccase(np.linalg.inv, C(3, 3)), ccase(np.linalg.solve, C(3, 3), C(3, 2)), ccase(np.linalg.det, C(3, 3)),
    # a complex determinant's sign moves with the matrix (a real one's is piecewise constant)
    ccase(np.linalg.slogdet, C(3, 3)), ccase(np.linalg.slogdet, C(2, 3, 3), name="slogdet-batched"),
]
#: real-valued functions of complex input that once returned the conjugate of the convention's gradient
NORMS_AND_SPREAD = [
    ccase(np.linalg.norm, C(4)), ccase(np.linalg.norm, C(2, 3), name="norm-fro"),
    ccase(np.linalg.norm, C(2, 3), "fro", name="norm-fro-explicit"),
    ccase(np.linalg.norm, C(2, 3), None, 1, name="norm-axis"), ccase(np.linalg.norm, C(2, 3), 2, 0, name="norm-ord2-axis"),
    ccase(np.linalg.norm, C(2, 3, 2), None, (1, 2), name="norm-fro-batched"),
    ccase(np.var, C(2, 3)), ccase(np.var, C(2, 3), 1, name="var-axis"), ccase(np.std, C(2, 3)),
    ccase(np.std, C(2, 3), 0, name="std-axis"), ccase(np.ndarray.var, C(4)), ccase(np.ndarray.std, C(4)),
] + [
    ccase(np.linalg.norm, C(5), o, name=f"norm-vector-{o}") for o in (1, np.inf, -np.inf, 0, 3, 0.5, -1.5)
] + [
    ccase(np.linalg.norm, C(3, 4), o, name=f"norm-matrix-{o}") for o in ("nuc", 2, -2, 1, -1, np.inf, -np.inf)
] + [
    ccase(np.linalg.norm, C(2, 3, 4), 1, (2, 0), name="norm-1-axes-batched"),
    ccase(np.linalg.norm, C(3, 4), np.inf, 1, True, name="norm-inf-axis-keepdims"),
    ccase(np.linalg.norm, C(2, 3, 3), "nuc", (1, 2), name="norm-nuc-batched"),
    ccase(np.vdot, C(2, 3), C(6)), ccase(np.vdot, C(3), R(3), name="vdot-complex-real"),
] + ([ccase(np.linalg.vector_norm, C(2, 3)), ccase(np.linalg.matrix_norm, C(2, 3))]
     if hasattr(np.linalg, "vector_norm") else [])
ATTRIBUTES = [
    ccase(np.ndarray.real, C(2, 3)), ccase(np.ndarray.imag, C(2, 3)),
    ccase(np.ndarray.conj, C(2, 3)), ccase(np.ndarray.conjugate, C(3)), ccase(np.ndarray.conj, R(3), name="conj-real"),
    ccase(np.generic.real, CS(), name="scalar-real"), ccase(np.generic.imag, CS(), name="scalar-imag"),
    ccase(np.generic.real, RS(), name="real-scalar-real"), ccase(np.generic.imag, RS(), name="real-scalar-imag"),
    # (the constructors run in nested derivatives: `project` builds a complex scalar's cotangent with them)
    ccase(np.complex128, CS(), name="complex128-scalar"), ccase(np.complex128, RS(), name="complex128-of-real"),
    ccase(np.complex128, C(3), name="complex128-array"), ccase(np.complex64, CS(), name="complex64-scalar"),
]
#: a real argument with a complex one: its cotangent is real, the real part of what a complex
#: argument in its place would get
MIXED = [
    ccase(np.add, R(2, 3), C(3)), ccase(np.add, C(2, 3), R(2, 3), name="add-complex-first"),
    ccase(np.subtract, R(2, 3), C(2, 3)), ccase(np.multiply, R(2, 3), C(2, 3)),
    ccase(np.multiply, C(3), R(2, 3), name="multiply-broadcast"),
    ccase(operator.mul, RS(), C(3), name="mul-real-scalar"),
    ccase(np.divide, R(2, 3), C(2, 3)), ccase(np.divide, C(2, 3), R(2, 3), name="divide-by-real"),
    ccase(np.matmul, R(2, 3), C(3, 2)), ccase(np.dot, C(2, 3), R(3, 2)),
    ccase(np.einsum, "ij,jk->ik", R(2, 3), C(3, 2), name="einsum"), ccase(np.sum, R(2, 3)),
]
TABLES = [ELEMENTWISE, REDUCTIONS_AND_SHAPES, PRODUCTS, ATTRIBUTES, MIXED, NORMS_AND_SPREAD]


@pytest.mark.parametrize("case,dtype", params(ELEMENTWISE + REDUCTIONS_AND_SHAPES + PRODUCTS + ATTRIBUTES + MIXED +
                                              NORMS_AND_SPREAD))
def test_complex_rule(case, dtype):
    case.check(dtype)


def _fd_gradient(f, z, h=1e-6):
    """dL/dRe - 1j dL/dIm (dL/dz for real z) by central differences, element by element."""
    g = np.zeros_like(z)
    for i in np.ndindex(z.shape):
        e = np.zeros_like(z)
        e[i] = h
        g[i] = (f(z + e) - f(z - e)) / (2 * h)
        if np.iscomplexobj(z):
            g[i] -= 1j * (f(z + 1j * e) - f(z - 1j * e)) / (2 * h)
    return g


@pytest.mark.parametrize("f", [
    lambda z: np.sum(np.abs(z) ** 2),
    lambda z: np.sum(np.abs(np.exp(z) * z)),
    lambda z: np.abs(np.sum(z.reshape(2, 2) @ z.reshape(2, 2))),
    lambda z: np.sum(np.abs(np.linalg.inv(z.reshape(2, 2)))),
    lambda z: np.abs(np.sum(np.conjugate(z) * np.sin(z))),
    lambda z: np.linalg.norm(z) ** 2,
    lambda z: np.sum(np.linalg.norm(z.reshape(2, 2), axis=0) * [1.0, 2.0]),
    lambda z: np.linalg.norm(z.reshape(2, 2), "fro"),
    lambda z: np.var(z) + np.std(z * z),
    lambda z: np.linalg.norm(z, 1) + np.linalg.norm(z, np.inf) + np.linalg.norm(z, 3),
    lambda z: np.linalg.norm(z.reshape(2, 2), "nuc") + np.linalg.norm(z.reshape(2, 2), 2) + np.linalg.norm(z.reshape(2, 2), 1),
    lambda z: np.abs(np.vdot(z, z[::-1] * (2 - 1j))),
], ids=["abs2", "abs-exp", "abs-matmul", "abs-inv", "abs-conj", "norm2", "norm-axis", "norm-fro", "var-std",
        "norm-vector-orders", "norm-matrix-orders", "vdot"])
def test_gradient_of_a_real_function_of_complex_input(f):
    z = np.array([0.3 + 0.4j, -1.1 + 0.2j, 0.7 - 0.9j, 1.2 + 0.5j])
    np.testing.assert_allclose(bytegrad.grad(f)(z), _fd_gradient(f, z), rtol=1e-6, atol=1e-8)


def test_the_gradient_of_abs_squared_is_twice_the_conjugate():
    z = np.array([3.0 + 4.0j])
    assert bytegrad.grad(lambda z: np.sum(np.abs(z) ** 2))(z)[0] == 6.0 - 8.0j


def test_norm_squared_agrees_with_abs_squared():
    z = np.array([1.0 + 2.0j, 3.0 - 1.0j])
    want = [2.0 - 4.0j, 6.0 + 2.0j]
    np.testing.assert_allclose(bytegrad.grad(lambda z: np.linalg.norm(z) ** 2)(z), want)
    np.testing.assert_allclose(bytegrad.grad(lambda z: np.sum(np.abs(z) ** 2))(z), want)


def test_a_real_argument_of_a_complex_product_gets_a_real_cotangent():
    check_rule(np.multiply, np.array([0.5, 1.5]), np.array([1.0 + 2.0j, -0.5j]))


def test_the_gradient_of_the_imaginary_part():
    """dIm(z)/dRe(z) = 0 and dIm(z)/dIm(z) = 1: the gradient of sum(Im z) is -1j everywhere."""
    z = np.array([0.3 + 0.4j, -1.1 + 0.2j])
    for f in (lambda z: np.sum(z.imag), lambda z: np.sum(np.imag(z)), lambda z: np.sum(z).imag):
        np.testing.assert_array_equal(bytegrad.grad(f)(z), [-1j, -1j])


_Z = np.array([[1.0 + 2.0j], [-0.5j]])


@pytest.mark.parametrize("f", [
    lambda x: np.abs(np.sum(x @ _Z)) ** 2,
    lambda x: np.abs(np.sum(np.dot(x[0], _Z[:, 0]))) ** 2,
    lambda x: np.abs(np.sum(np.einsum("ij,jk->ik", x, _Z))) ** 2,
    lambda x: np.abs(np.sum(x + _Z.T)) ** 2,
    lambda x: np.abs(np.sum(np.sin(x) * _Z.T)) ** 2,
    lambda x: np.abs(np.sum(x[0, 0] * _Z)) ** 2,
    lambda x: np.abs(np.sum(float(x[0, 0]) * _Z)) ** 2,
    lambda x: np.abs(x[0, 0] * (1 + 2j)) ** 2,
    lambda x: np.abs(np.sum(np.mean(x) * _Z)) ** 2,
    lambda x: np.abs(np.sum(np.tanh(x * _Z.T))) ** 2,
    lambda x: np.real(np.sum(x.T * _Z * np.exp(x.T * 1j))),
    lambda x: np.sum(np.exp(1j * x)).imag,
], ids=["matmul", "dot", "einsum", "add", "sin-times", "index-times", "float-times", "scalar-times", "mean-times",
        "tanh", "real", "imag"])
def test_real_input_through_complex_values(f):
    """A real input's gradient is real and right, and no step warns that it dropped an imaginary part
    (warnings are errors here)."""
    x = np.array([[0.5, 1.5]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = bytegrad.grad(f)(x)
    want = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = 1e-6
        want[i] = (f(x + e) - f(x - e)) / 2e-6
    assert g.dtype == np.float64
    np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-8)


def _sq(c):
    return np.real(c * np.conj(c))


@pytest.mark.parametrize("f", [
    lambda z: np.sum(np.abs(z) ** 3),
    lambda z: np.sum(np.absolute(z) * np.real(z)),
    lambda z: np.sum(np.angle(z) ** 2),
    lambda z: np.abs(np.sum(np.dot(z, z))),
    lambda z: np.abs(np.sum(np.kron(z, z))),
    lambda z: np.abs(np.dot(z[0, 0], z[1, 1]) + np.sum(np.kron(z[0, 1], z[1]))),
    lambda z: np.var(np.array([z[0, 0], 2 * z[1, 1], z[0, 1] * z[1, 0]])) + np.std(z[0] * z[1]),
    lambda z: np.sum(np.linalg.eigh(z + np.conj(z.T))[0] ** 3) + np.sum(np.abs(np.linalg.eigh(z + np.conj(z.T))[1]) ** 4),
    lambda z: np.sum(np.abs(np.linalg.eigh(z + np.conj(z.T), "U")[1]) ** 4),
    lambda z: np.sum(np.linalg.svd(z)[1] ** 3) + np.sum(np.abs(np.linalg.svd(z)[0]) ** 4),
    lambda z: np.sum(np.abs(np.linalg.svd(z[:1])[2]) ** 4) + np.sum(np.abs(np.linalg.svd(z[:, :1])[0]) ** 3),
    lambda z: np.sum(np.abs(np.linalg.eig(z)[0]) ** 3) + np.sum(_sq(np.linalg.eig(z)[1]) ** 2),
], ids=["abs", "absolute", "angle", "dot", "kron", "dot-kron-of-scalars", "var-std-of-scalars", "eigh", "eigh-upper", "svd", "svd-wide-tall",
        "eig"])
def test_grad_of_grad_of_a_real_function_of_complex_input(f):
    """The second order HIPS autograd's suite checks (issue 26): the gradient of Re<w, grad f(z)>
    against central differences of grad f. |z|'s partial went through np.sign (no derivative)."""
    z = np.array([[0.3 + 0.4j, -1.1 + 0.2j], [0.7 - 0.9j, 1.6 + 0.5j]])
    w = np.array([[0.5 - 1j, 0.2 + 0.3j], [1.1, -0.4 + 0.6j]])
    gf = bytegrad.grad(f)

    def s(z):
        return np.real(np.sum(w * gf(z)))

    np.testing.assert_allclose(bytegrad.grad(s)(z), _fd_gradient(s, z), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("f", [np.abs, np.real, np.imag, np.angle, lambda z: z.real, lambda z: z.imag],
                         ids=["abs", "real", "imag", "angle", "attr-real", "attr-imag"])
def test_forward_mode_gives_a_real_output_a_real_tangent(f):
    z = np.array([0.3 + 0.4j, -1.1 + 0.2j])
    v = np.array([0.5 - 1j, 0.2 + 0.3j])
    with warnings.catch_warnings():
        warnings.simplefilter("error", np.exceptions.ComplexWarning)
        _, t = bytegrad.jvp(f, (z,), (v,))
    assert t.dtype == np.float64
    np.testing.assert_allclose(t, (f(z + 1e-6 * v) - f(z - 1e-6 * v)) / 2e-6, rtol=1e-6, atol=1e-9)


def test_forward_mode_through_a_pullback_of_a_function_that_is_not_holomorphic():
    """A rule with only a pullback (np.linalg.svd): forward mode transposes it one output entry at a
    time, and a complex entry needs two pullbacks (U is not holomorphic in z: its tangent is not
    sum(pullback(e) * v))."""
    z = np.array([[2.0 + 0.5j, 0.3 - 0.2j], [0.1j, -1.0 + 0.2j]])
    v = np.array([[0.5 - 1j, 0.2 + 0.3j], [-0.4, 0.7j]])

    def f(z):
        u, s, vh = np.linalg.svd(z)
        return (u * np.array([1.0, 2.5])) @ np.conj(u.T) + s[0] * ((u[:, :1] * 3.0) @ vh[:1])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bytegrad.PerformanceWarning)
        _, t = bytegrad.jvp(f, (z,), (v,))
    np.testing.assert_allclose(t, (f(z + 1e-6 * v) - f(z - 1e-6 * v)) / 2e-6, rtol=1e-6, atol=1e-8)


def test_einsum_forward_mode_with_a_real_and_a_complex_operand_also_nested():
    """np.einsum has no forward rule: its tangent is transposed from its pullback, whose cotangent
    for the real operand is a real part; the imaginary part of J v was lost (issue 26)."""
    a = np.array([[1.0 + 2.0j, -0.5j], [0.3, 0.7 - 0.2j]])
    x, v, u = np.array([0.5, -1.2]), np.array([0.3, 0.8]), np.array([-0.4, 1.1])

    def f(x):
        return np.einsum("i,ij->j", x, a) * x

    def tangent(x):
        return bytegrad.jvp(f, (x,), (v,))[1]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bytegrad.PerformanceWarning)
        np.testing.assert_allclose(tangent(x), (f(x + 1e-6 * v) - f(x - 1e-6 * v)) / 2e-6, rtol=1e-6)
        nested = bytegrad.jvp(tangent, (x,), (u,))[1]  # forward over forward
        np.testing.assert_allclose(nested, (tangent(x + 1e-6 * u) - tangent(x - 1e-6 * u)) / 2e-6, rtol=1e-5)
