"""Jacobians (three modes), Hessians, Hessian-vector products and nested gradients: against finite
differences, known closed forms, and each other; perturbation confusion; errors.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import numpy as np
import pytest

import bytegrad

pytestmark = pytest.mark.filterwarnings("ignore::bytegrad.runtime.forward.PerformanceWarning")


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def fd_jacobian(f: Callable[..., Any], args: tuple, k: int = 0, eps: float = 1e-6) -> np.ndarray:
    """Central differences: shape out.shape + args[k].shape."""
    x = np.asarray(args[k], np.float64)
    cols = []
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = eps
        e = e.reshape(x.shape)
        plus = args[:k] + (x + e if x.ndim else float(x + e),) + args[k + 1:]
        minus = args[:k] + (x - e if x.ndim else float(x - e),) + args[k + 1:]
        cols.append((np.asarray(f(*plus), np.float64) - np.asarray(f(*minus), np.float64)) / (2 * eps))
    out_shape = np.shape(cols[0])
    return np.stack(cols, axis=-1).reshape(out_shape + x.shape)


MODES = ("rev", "fwd", "auto")


# ---- jacobian --------------------------------------------------------------------------------------------


def wide(x):          # R^5 -> R^2: auto picks rev
    return np.array([np.sum(np.sin(x)), np.prod(x[:3])]) if False else np.stack([np.sum(np.sin(x)), x[0] * x[1] * x[2]])


def tall(x):          # R^2 -> R^6: auto picks fwd
    return np.concatenate([np.exp(x) * x[0], np.tanh(x[::-1]), x ** 2])


def matrix_in_out(A):  # R^(3x2) -> R^(2x2)
    return np.tanh(A.T @ A) + A[:2] * 2.0


def scalar_out(A):
    return np.sum(np.sin(A) * A)


def scalar_in(a):
    return np.array([a, a ** 2, np.sin(a)])


JAC_CASES = [
    (wide, lambda r: (r.normal(size=5),)),
    (tall, lambda r: (r.normal(size=2),)),
    (matrix_in_out, lambda r: (r.normal(size=(3, 2)),)),
    (scalar_out, lambda r: (r.normal(size=(2, 3)),)),
    (scalar_in, lambda r: (0.7,)),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fn,make", JAC_CASES, ids=[c[0].__name__ for c in JAC_CASES])
def test_jacobian_against_finite_differences(fn: Callable[..., Any], make: Callable[..., tuple], mode: str) -> None:
    args = make(rng(1))
    J = bytegrad.jacobian(fn, mode=mode)(*args)
    expected = fd_jacobian(fn, args)
    assert np.shape(J) == expected.shape == np.shape(fn(*args)) + np.shape(args[0])
    np.testing.assert_allclose(J, expected, rtol=1e-6, atol=1e-8)


def test_jacobian_modes_agree_exactly_on_a_network() -> None:
    r = rng(2)
    W1, W2 = r.normal(size=(4, 3)), r.normal(size=(5, 4))

    def net(x):
        return W2 @ np.tanh(W1 @ x)

    x = r.normal(size=3)
    Jr = bytegrad.jacobian(net, mode="rev")(x)
    Jf = bytegrad.jacobian(net, mode="fwd")(x)
    np.testing.assert_allclose(Jr, Jf, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(Jr, W2 @ np.diag(1 - np.tanh(W1 @ x) ** 2) @ W1, rtol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_jacobian_of_several_arguments(mode: str) -> None:
    r = rng(3)
    A, x = r.normal(size=(2, 3)), r.normal(size=3)
    JA, Jx = bytegrad.jacobian(lambda A, x: np.sin(A @ x), wrt=(0, 1), mode=mode)(A, x)
    assert JA.shape == (2, 2, 3) and Jx.shape == (2, 3)
    np.testing.assert_allclose(JA, fd_jacobian(lambda A, x: np.sin(A @ x), (A, x), 0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(Jx, np.cos(A @ x)[:, None] * A, rtol=1e-12)


def test_jacobian_float32_and_constant_output() -> None:
    x = np.arange(3, dtype=np.float32)
    J = bytegrad.jacobian(lambda x: x * 2.0)(x)
    assert J.dtype == np.float32
    np.testing.assert_array_equal(J, 2 * np.eye(3))
    np.testing.assert_array_equal(bytegrad.jacobian(lambda x: np.ones(2))(np.ones(3)), np.zeros((2, 3)))


def test_jacobian_errors() -> None:
    # (containers in and out are Jacobians of trees now: tests/test_jacobian_trees.py)
    with pytest.raises(bytegrad.NonScalarOutputError, match="float arrays or floats"):
        bytegrad.jacobian(lambda x: [x, 3])(np.ones(2))
    with pytest.raises(bytegrad.NonScalarOutputError, match="returned an array of dtype int64"):
        bytegrad.jacobian(lambda x: np.argsort(x))(np.ones(2))
    with pytest.raises(ValueError, match="mode"):
        bytegrad.jacobian(lambda x: x, mode="sideways")


# ---- hessian and hvp ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ("fwd", "rev"))
def test_hessian_of_quadratic_forms(mode: str) -> None:
    r = rng(4)
    M = r.normal(size=(4, 4))
    A = M + M.T
    b = r.normal(size=4)
    x = r.normal(size=4)
    np.testing.assert_allclose(bytegrad.hessian(lambda x: 0.5 * x @ A @ x + b @ x, mode=mode)(x), A, rtol=1e-12)
    # x^T M x (M not symmetric): Hessian M + M^T
    np.testing.assert_allclose(bytegrad.hessian(lambda x: x @ (M @ x), mode=mode)(x), M + M.T, rtol=1e-12)
    # matrix argument: f(X) = sum(X * X) has Hessian 2 I, of shape X.shape + X.shape
    X = r.normal(size=(2, 3))
    H = bytegrad.hessian(lambda X: np.sum(X * X), mode=mode)(X)
    np.testing.assert_allclose(H, 2 * np.eye(6).reshape(2, 3, 2, 3), rtol=1e-12)


def composition(x):
    return np.sum(np.tanh(x) ** 2 * np.exp(-x)) + np.log(1 + x @ x) * x[0]


def softmax_loss(x):
    z = x - np.max(x)
    return np.log(np.sum(np.exp(z))) - z[1]


def with_python_callee(x):
    def rbf(a, b):
        return np.exp(-np.sum((a - b) ** 2))

    return rbf(x, np.ones_like(x)) * np.sum(np.sin(x)) + np.mean(x[1:] * x[:-1])


@pytest.mark.parametrize("mode", ("fwd", "rev"))
@pytest.mark.parametrize("fn", [composition, softmax_loss, with_python_callee], ids=lambda f: f.__name__)
def test_hessian_against_finite_differences_of_the_gradient(fn: Callable[..., Any], mode: str) -> None:
    x = rng(5).normal(size=4)
    H = bytegrad.hessian(fn, mode=mode)(x)
    expected = fd_jacobian(bytegrad.grad(fn), (x,))
    np.testing.assert_allclose(H, expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(H, H.T, rtol=1e-10, atol=1e-12)


def test_hessian_of_a_function_using_closures() -> None:
    r = rng(6)
    W = r.normal(size=(3, 3))
    shift = r.normal(size=3)

    def make_loss(scale):
        def loss(x):
            return scale * np.sum(np.sin(W @ x + shift) ** 2)
        return loss

    loss = make_loss(1.7)
    x = r.normal(size=3)
    H = bytegrad.hessian(loss)(x)
    s = np.sin(W @ x + shift)
    c = np.cos(W @ x + shift)
    expected = 1.7 * W.T @ np.diag(2 * (c ** 2 - s ** 2)) @ W
    np.testing.assert_allclose(H, expected, rtol=1e-10, atol=1e-12)


def test_hessian_with_respect_to_a_named_argument() -> None:
    def f(a, x):
        return a * np.sum(x ** 3)

    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(bytegrad.hessian(f, wrt="x")(2.0, x), np.diag(2.0 * 6 * x))


@pytest.mark.parametrize("fn", [composition, softmax_loss, with_python_callee], ids=lambda f: f.__name__)
def test_hvp_matches_hessian_times_vector(fn: Callable[..., Any]) -> None:
    r = rng(7)
    x, v = r.normal(size=4), r.normal(size=4)
    np.testing.assert_allclose(bytegrad.hvp(fn, (x,), (v,)), bytegrad.hessian(fn, mode="rev")(x) @ v,
                               rtol=1e-10, atol=1e-12)


def test_hvp_of_several_arguments() -> None:
    def f(x, y):
        return np.sum(x ** 2 * y) + np.sum(y ** 3)

    x, y = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    u, w = np.array([0.5, 1.0]), np.array([1.0, 2.0])
    hx, hy = bytegrad.hvp(f, (x, y), (u, w))
    # d2f/dx2 = diag(2y), d2f/dxdy = diag(2x), d2f/dy2 = diag(6y)
    np.testing.assert_allclose(hx, 2 * y * u + 2 * x * w)
    np.testing.assert_allclose(hy, 2 * x * u + 6 * y * w)


# ---- nested gradients -------------------------------------------------------------------------------------


def test_perturbation_confusion() -> None:
    """d/dx [x * d/dy (x + y)] is 1: the inner derivative must not see the outer x as its own."""

    def f(x):
        return x * bytegrad.grad(lambda y: x + y)(1.0)

    assert bytegrad.grad(f)(2.0) == 1.0

    def g(x):  # the same, evaluated at y = x: still 1, not 2
        return x * bytegrad.grad(lambda y: x + y)(x)

    assert bytegrad.grad(g)(2.0) == 1.0

    def h(x):  # arrays, and the inner derivative taken with respect to the closure's own variable
        return np.sum(x * bytegrad.grad(lambda y: np.sum(x * y + y))(x))

    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(bytegrad.grad(h)(x), 2 * x + 1)


def test_two_nested_gradients_of_the_same_closure_variable() -> None:
    """d/dx [ d/dy (x * y^2) ] at y = 3, with both levels closing over x: d/dx (2 x y) = 2 y = 6."""

    def outer(x):
        def inner(y):
            return x * y ** 2
        return bytegrad.grad(inner)(3.0)

    assert bytegrad.grad(outer)(5.0) == pytest.approx(6.0, rel=1e-12)


def test_grad_of_grad() -> None:
    f = lambda x: x ** 4 + np.sin(x)  # noqa: E731
    d2 = bytegrad.grad(bytegrad.grad(f))
    d3 = bytegrad.grad(d2)
    for x in (0.3, 1.7):
        assert d2(x) == pytest.approx(12 * x ** 2 - np.sin(x), rel=1e-12)
        assert d3(x) == pytest.approx(24 * x - np.cos(x), rel=1e-12)


def test_gradient_penalty_loss() -> None:
    """A loss that contains the norm of its own input gradient (as in WGAN-GP), differentiated
    with respect to the parameters."""
    r = rng(8)
    W, x = r.normal(size=(3, 4)), r.normal(size=4)

    def critic(x, W):
        return np.sum(np.tanh(W @ x))

    def loss(W):
        g = bytegrad.grad(critic)(x, W)
        return critic(x, W) + 0.5 * np.sum(g ** 2)

    W_bar = bytegrad.grad(loss)(W)
    np.testing.assert_allclose(W_bar, fd_jacobian(loss, (W,)), rtol=1e-6, atol=1e-8)


def test_nested_gradient_of_pytrees_and_float32() -> None:
    def inner(p, x):
        return np.sum(np.tanh(p["W"] @ x) * p["s"])

    def outer(x, p):
        g = bytegrad.grad(inner)(p, x)
        return np.sum(g["W"] ** 2) + g["s"] ** 2

    r = rng(9)
    p = {"W": r.normal(size=(2, 3)), "s": 1.3}
    x = r.normal(size=3)
    x_bar = bytegrad.grad(outer)(x, p)
    np.testing.assert_allclose(x_bar, fd_jacobian(lambda x: outer(x, p), (x,)), rtol=1e-6, atol=1e-8)
    x32 = x.astype(np.float32)
    p32 = {"W": p["W"].astype(np.float32), "s": 1.3}
    x_bar32 = bytegrad.grad(outer)(x32, p32)
    assert x_bar32.dtype == np.float32
    np.testing.assert_allclose(x_bar32, x_bar, rtol=1e-4, atol=1e-5)


def test_nested_vjp_and_value_and_grad() -> None:
    def inner(x):
        return np.sin(x) * x

    def outer(x):
        _, back = bytegrad.vjp(inner, x)
        (x_bar,) = back(np.ones_like(x))
        value, g = bytegrad.value_and_grad(lambda z: np.sum(z ** 3))(x)
        return np.sum(x_bar * x) + value * np.sum(g)

    x = rng(10).normal(size=3)
    np.testing.assert_allclose(bytegrad.grad(outer)(x), fd_jacobian(outer, (x,)), rtol=1e-6, atol=1e-8)


def test_nested_through_mutation_and_indexing() -> None:
    """The inner reverse pass writes into fresh arrays (getitem pullbacks): recorded like user code."""

    def inner(x):
        buf = np.zeros(3)
        buf[0] = x[2] * x[1]
        buf[1:] = np.sin(x[:2])
        return np.sum(buf ** 2) + np.sum(x[[0, 0, 2]])

    def outer(x):
        return np.sum(bytegrad.grad(inner)(x) * x)

    x = rng(11).normal(size=3)
    np.testing.assert_allclose(bytegrad.grad(outer)(x), fd_jacobian(outer, (x,)), rtol=1e-6, atol=1e-8)


def test_jacobian_inside_a_gradient() -> None:
    """jacobian taken inside a differentiated function (log-determinant of a map's Jacobian)."""
    A = np.array([[1.0, 0.3], [0.2, 0.8]])

    def flow(z):
        return np.tanh(A @ z) + z

    def log_det(z):
        J = bytegrad.jacobian(flow)(z)
        return np.log(np.abs(J[0, 0] * J[1, 1] - J[0, 1] * J[1, 0]))

    z = np.array([0.4, -0.3])
    np.testing.assert_allclose(bytegrad.grad(log_det)(z), fd_jacobian(log_det, (z,)), rtol=1e-6, atol=1e-8)


def test_jvp_inside_a_gradient() -> None:
    """Reverse over forward: grad of a function that calls jvp."""

    def f(x):
        return np.sin(x) * x

    def outer(x):
        _, t = bytegrad.jvp(f, (x,), (np.ones_like(x),))
        return np.sum(t ** 2)

    x = rng(12).normal(size=3)
    np.testing.assert_allclose(bytegrad.grad(outer)(x), fd_jacobian(outer, (x,)), rtol=1e-6, atol=1e-8)


def test_hessian_errors() -> None:
    # (wrt=(0, 1) gives JAX's blocks now: tests/test_jacobian_trees.py)
    with pytest.raises(bytegrad.WrtError, match="out of range"):
        bytegrad.hessian(lambda x, y: x * y, wrt=2)(1.0, 2.0)
    with pytest.raises(ValueError, match="mode"):
        bytegrad.hessian(lambda x: x * x, mode="sideways")


@pytest.mark.parametrize("f,t,want", [
    (lambda t: math.exp(t) * math.sin(t), 0.0, 2.0),      # sin's cotangent exp(0) is exactly 1.0
    (lambda t: t * t * math.log(t), 1.0, 3.0),
    (lambda t: np.exp(t) * np.sin(t), 0.0, 2.0),
], ids=["math-exp-sin", "math-log", "numpy-exp-sin"])
def test_second_derivative_where_a_cotangent_is_exactly_one(f, t, want):
    """A reverse step skips multiplying by a cotangent of 1.0 only when no nested derivative records
    it: recorded, that 1.0 is a differentiated value whose derivative the product carries."""
    assert bytegrad.grad(bytegrad.grad(f))(t) == pytest.approx(want, rel=1e-12)
    assert bytegrad.hvp(f, (t,), (1.0,)) == pytest.approx(want, rel=1e-12)



def _square_in_place(x):
    y = x * 1.0
    y *= y
    return np.sum(y * x)


def _scale_by_input_in_place(x):
    y = x * 1.0
    y *= x
    return np.sum(y * x)


def _normalize_exp_in_place(x):
    e = np.exp(x)
    e /= np.sum(e)
    return e[0] + 2.0 * e[1]


def _decay_constant(x):
    w = np.ones(4)
    s = 0.0
    for _ in range(3):
        s = s + np.sum(x * w * x)
        w *= 0.5
    return s


def _shift_add_self(x):
    y = x * 1.0
    y *= y
    y[1:] += y[:-1]
    return np.sum(y * x)


def _tanh_times_input_through_out(x):
    a = np.tanh(x)
    np.multiply(a, x, out=a)
    return np.sum(a ** 2)


@pytest.mark.parametrize("f", [_square_in_place, _scale_by_input_in_place, _normalize_exp_in_place, _decay_constant,
                               _shift_add_self, _tanh_times_input_through_out], ids=lambda f: f.__name__.strip("_"))
def test_hessian_vector_products_through_in_place_writes(f):
    """The old value an in-place operator reads, and the copy an overwritten saved value is given,
    are recorded copies: a nested derivative differentiates through them (`y *= x` lost a term)."""
    x, v = np.array([0.5, -1.0, 2.0, 0.3]), np.array([0.3, -0.2, 0.5, 1.0])
    g = bytegrad.grad(f)
    h = 1e-5
    want = (g(x + h * v) - g(x - h * v)) / (2 * h)
    np.testing.assert_allclose(bytegrad.hvp(f, (x,), (v,)), want, rtol=1e-6, atol=1e-7)


_M = np.arange(9.0).reshape(3, 3) / 5


@pytest.mark.parametrize("f", [
    lambda x: np.sum(np.outer(x, x) * _M),
    lambda x: np.dot(x, x),
    lambda x: np.dot([x[0], x[1]], x[1:]) ** 2,
    lambda x: np.sum(np.matmul([x[0], x[1], x[2]], _M) ** 2),
    lambda x: np.inner(x, x * x),
    lambda x: np.prod([x[0], x[1]]),
    lambda x: np.std([x[0], x[1], x[2]]),
    lambda x: np.nanprod(x),
    lambda x: np.sum(np.cross(x, x[::-1]) * np.array([1.0, 2.0, 3.0])),
    lambda x: np.sum(np.correlate(x, x, "full") * np.arange(5.0)),
    lambda x: np.polyval([1.0, 0.0, 0.0, 0.0], x[0]) + np.polyval(x, 1.5),
    lambda x: np.sum(np.linalg.multi_dot([np.outer(x, x), _M, x])),
    lambda x: np.sum(np.kron([x[0], x[1]], x) ** 2),
    lambda x: np.sum(np.kron(x[0], x) * np.arange(3.0)),
    lambda x: np.sum(np.kron(x, x[1]) ** 2),
    lambda x: np.sum(np.tensordot(x[0], x, 0) ** 2),
    lambda x: np.sum(np.tensordot(x * x, x[2], axes=0) * _M[0]),
    lambda x: np.std(x * 0.0 + 1.0) + np.sum(x ** 3),
    lambda x: np.sum(np.std(np.stack([x, x * 0.0]), axis=1)),
    lambda x: np.sum(np.linalg.norm(np.stack([x, x * 0.0]), axis=1)),
], ids=["outer", "dot", "dot-list", "matmul-list", "inner", "prod-list", "std-list", "nanprod", "cross",
        "correlate", "polyval", "multi_dot", "kron-list", "kron-scalar", "kron-scalar-b", "tensordot-scalar",
        "tensordot-scalar-b", "std-at-zero", "std-axis-at-zero", "norm-axis-at-zero"])
def test_hessian_vector_products_of_rules_whose_pullbacks_derive_arrays(f):
    """These pullbacks read arrays derived from their arguments (raveled, reversed, made from a list
    or a scalar); derived in the forward pass they were constants to a nested derivative (zero or
    half the second derivative), and np.dot of two vectors raised (np.multiply.outer has no rule).
    std and norm at 0 divided by 0 inside a masked branch, which a nested derivative turned to NaN."""
    x, v = np.array([0.5, -1.0, 2.0]), np.array([0.3, -0.2, 0.5])
    g = bytegrad.grad(f)
    h = 1e-5
    want = (g(x + h * v) - g(x - h * v)) / (2 * h)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bytegrad.PerformanceWarning)  # tangents formed from pullbacks
        np.testing.assert_allclose(bytegrad.hvp(f, (x,), (v,)), want, rtol=1e-6, atol=1e-7)


def test_second_derivatives_through_np_vectorize_are_refused_not_zero():
    """Its per-element pullbacks run in the forward pass, where a nested derivative cannot record
    them: hvp and hessian gave zeros. First order and jvp stay right."""
    vf = np.vectorize(lambda a: a ** 3)
    x = np.array([1.0, 2.0, 3.0])

    def f(x):
        return np.sum(vf(x))

    np.testing.assert_allclose(bytegrad.grad(f)(x), 3 * x ** 2, rtol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bytegrad.PerformanceWarning)
        assert bytegrad.jvp(f, (x,), (np.ones(3),))[1] == pytest.approx(42.0)
        with pytest.raises(bytegrad.DifferentiationError, match="second derivatives through np.vectorize"):
            bytegrad.hvp(f, (x,), (np.ones(3),))


@pytest.mark.parametrize("policy", ["always", "never"])
def test_second_order_through_a_fused_kernel(policy, monkeypatch):
    """A fused site on its Numba kernel computes its partials unrecorded: inside a nested derivative
    it must run on the NumPy tier, or the outer derivative takes them for constants (grad of grad
    and hvp were off by 0.2 once the site below had tiered up)."""
    from bytegrad.runtime import fused

    monkeypatch.setattr(fused, "POLICY", policy)
    w = rng(3).normal(size=5)

    def loop(x):
        for _ in range(4):
            x = x + 0.1 * np.sin(x) * w  # one fused site: "always" runs its kernel from the first call
        return np.sum(x ** 2)

    x, v = rng(4).normal(size=5), rng(5).normal(size=5)
    H = fd_jacobian(bytegrad.grad(loop), (x,))
    for _ in range(2):  # (the first call may still run the NumPy tier while the kernel compiles)
        np.testing.assert_allclose(bytegrad.hvp(loop, (x,), (v,)), H @ v, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(bytegrad.hessian(loop)(x), H, rtol=1e-6, atol=1e-7)
        squared = lambda x: np.sum(bytegrad.grad(loop)(x) ** 2)  # noqa: E731
        np.testing.assert_allclose(bytegrad.grad(squared)(x), fd_jacobian(squared, (x,)), rtol=1e-6, atol=1e-7)


def test_a_nested_pullback_whose_cotangents_alias_is_differentiated() -> None:
    """Two cotangents that are one array (a + b) are copied apart; inside a nested derivative the copy
    went through the rewriter, which cannot read np.copy (an _ArrayFunctionDispatcher: AttributeError)."""
    w = np.array([0.5, -1.5])

    def s(x: np.ndarray) -> Any:
        _, pullback = bytegrad.vjp(lambda a, b: a + b, x * x, 2.0 * x)
        a_bar, b_bar = pullback(x)  # both x: one array
        return np.sum(w * a_bar) + np.sum(w * b_bar * x)

    x = np.array([0.3, 1.2])
    np.testing.assert_allclose(bytegrad.grad(s)(x), w + 2 * w * x, rtol=1e-12)
