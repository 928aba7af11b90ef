"""JAX's names (bytegrad/_jax_api.py): jacfwd, jacrev, linearize, custom_vjp, custom_jvp, and `has_aux` for jvp,
each checked against bytegrad's own derivatives, central differences, and the rule it was given."""
from __future__ import annotations

import numpy as np
import pytest

import bytegrad

TIERS = ("general", "numpy", "numba")


def _central_jacobian(f, x, h=1e-6):
    cols = []
    for k in range(x.size):
        e = np.zeros_like(x)
        e.flat[k] = h
        cols.append((np.asarray(f(x + e)) - np.asarray(f(x - e))).ravel() / (2 * h))
    return np.stack(cols, axis=-1).reshape(np.shape(f(x)) + x.shape)


def vector_field(x, w):
    return np.tanh(x * w) * x[0] + np.sin(x[::-1])


@pytest.mark.parametrize("name", ("jacfwd", "jacrev"))
def test_jacobians_match_central_differences_and_jacobian(name):
    make = getattr(bytegrad, name)
    x, w = np.array([0.3, -0.7, 1.1]), np.array([0.5, 2.0, -1.0])
    J = make(vector_field)(x, w)
    np.testing.assert_allclose(J, _central_jacobian(lambda v: vector_field(v, w), x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(J, bytegrad.jacobian(vector_field)(x, w), rtol=1e-12)
    Jx, Jw = make(vector_field, argnums=(0, 1))(x, w)
    np.testing.assert_allclose(Jw, _central_jacobian(lambda v: vector_field(x, v), w), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(Jx, J, rtol=1e-12)


@pytest.mark.parametrize("name", ("jacfwd", "jacrev"))
def test_jacobians_with_aux_return_the_aux_of_the_run(name):
    calls = []

    def f(x):
        calls.append(1)
        return np.sin(x) * 2.0, {"norm": np.sum(x * x), "n": len(calls)}

    x = np.array([0.1, 0.2])
    J, aux = getattr(bytegrad, name)(f, has_aux=True)(x)
    np.testing.assert_allclose(J, np.diag(2.0 * np.cos(x)), rtol=1e-12)
    assert aux["norm"] == pytest.approx(0.05) and aux["n"] == len(calls) == 1
    with pytest.raises(bytegrad.AuxOutputError, match="has_aux=True"):
        getattr(bytegrad, name)(lambda x: np.sin(x), has_aux=True)(x)


@pytest.mark.parametrize("name", ("jacfwd", "jacrev"))
def test_holomorphic_jacobians_and_jaxs_complex_checks(name):
    make = getattr(bytegrad, name)
    z = np.array([1.0 + 2.0j, 0.5 - 1.0j])

    def f(z):
        return np.array([z[0] ** 2 * z[1], np.sin(z[1])])

    exact = np.array([[2 * z[0] * z[1], z[0] ** 2], [0.0, np.cos(z[1])]])
    np.testing.assert_allclose(make(f, holomorphic=True)(z), exact, rtol=1e-12)
    with pytest.raises(bytegrad.WrtError, match="holomorphic=True"):
        make(f)(z)  # (complex arguments without holomorphic=True: refused, as JAX does)
    with pytest.raises(bytegrad.WrtError, match="complex arguments"):
        make(np.sin, holomorphic=True)(np.array([0.5]))
    with pytest.raises(bytegrad.WrtError, match="complex outputs"):
        make(lambda z: np.abs(z) ** 2, holomorphic=True)(z)


def test_jvp_with_aux():
    x, t = np.array([0.4, 1.3]), np.array([1.0, -2.0])
    out, dot, aux = bytegrad.jvp(lambda x: (np.sum(np.sin(x)), x * 3.0), (x,), (t,), has_aux=True)
    assert out == pytest.approx(np.sum(np.sin(x))) and dot == pytest.approx(np.cos(x) @ t)
    np.testing.assert_allclose(aux, x * 3.0)
    with pytest.raises(bytegrad.AuxOutputError):
        bytegrad.jvp(lambda x: np.sum(x), (x,), (t,), has_aux=True)


def test_linearize_runs_the_function_once_and_pushes_each_tangent():
    runs = []

    def f(x, y):
        runs.append(1)
        return {"a": np.exp(x) * y, "b": np.sum(x * y)}

    x, y = np.array([0.2, -0.4, 0.9]), np.array([1.5, 0.5, -1.0])
    out, f_jvp = bytegrad.linearize(f, x, y)
    assert len(runs) == 1
    np.testing.assert_allclose(out["a"], np.exp(x) * y)
    rng = np.random.default_rng(0)
    for _ in range(4):
        tx, ty = rng.normal(size=3), rng.normal(size=3)
        got = f_jvp(tx, ty)
        _, want = bytegrad.jvp(f, (x, y), (tx, ty))
        np.testing.assert_allclose(got["a"], want["a"], rtol=1e-12)
        assert got["b"] == pytest.approx(want["b"], rel=1e-12)
        np.testing.assert_allclose(got["a"], np.exp(x) * y * tx + np.exp(x) * ty, rtol=1e-12)
    assert len(runs) == 1 + 4  # (the four `jvp` references ran it; `f_jvp` did not)
    with pytest.raises(bytegrad.WrtError, match="one per primal"):
        f_jvp(np.ones(3))


def test_linearize_inside_a_gradient():
    def outer(x):
        _, f_jvp = bytegrad.linearize(np.sin, x)
        return np.sum(f_jvp(np.ones_like(x)) * x)  # sum(cos(x) * x)

    x = np.array([0.3, 1.2])
    np.testing.assert_allclose(bytegrad.grad(outer)(x), np.cos(x) - x * np.sin(x), rtol=1e-10)


@bytegrad.custom_vjp
def clipped_identity(x, bound):
    return x * 1.0


clipped_identity.defvjp(lambda x, bound: (x * 1.0, None),
                        lambda bound, res, g: (np.clip(g, -bound, bound),))


def calls_clipped(x):
    return np.sum(clipped_identity(x, 0.5) * np.array([1.0, 5.0, -5.0]))


clipped_identity.nondiff_argnums = (1,)  # (JAX's custom_vjp(fun, nondiff_argnums=(1,)), set after the fact)


@pytest.mark.parametrize("tier", TIERS)
def test_custom_vjp_uses_its_backward_rule(tier):
    d = bytegrad.differentiate(calls_clipped, tier=tier)
    x = np.array([1.0, 2.0, 3.0])
    for _ in range(4):  # (the compiled tiers: capture, then programs)
        np.testing.assert_allclose(d.grad(x), [0.5, 0.5, -0.5])
    assert calls_clipped(x) == pytest.approx(1.0 + 10.0 - 15.0)


def test_custom_vjp_differentiated_itself_and_its_errors():
    @bytegrad.custom_vjp
    def f(x):
        return np.sin(x)

    f.defvjp(lambda x: (np.sin(x), np.cos(x)), lambda cos_x, g: (7.0 * cos_x * g,))
    x = np.array([0.1, 0.6])
    np.testing.assert_allclose(bytegrad.grad(lambda x: np.sum(f(x)))(x), 7.0 * np.cos(x))
    assert bytegrad.grad(f)(0.3) == pytest.approx(7.0 * np.cos(0.3))  # (the decorated object itself)

    @bytegrad.custom_vjp
    def g(x, y):
        return x * y

    g.defvjp(lambda x, y: (x * y, (x, y)), lambda res, ct: (ct * res[1],))  # one cotangent for two arguments
    with pytest.raises(bytegrad.DifferentiationError, match="must return a tuple of 2"):
        bytegrad.grad(lambda x: g(x, 2.0) * 1.0)(3.0)


@bytegrad.custom_jvp
def scaled_sin(x, y):
    return np.sin(x) * y


scaled_sin.defjvp(lambda primals, tangents: (scaled_sin(*primals),
                                             3.0 * np.cos(primals[0]) * primals[1] * tangents[0]
                                             + np.sin(primals[0]) * tangents[1]))


def uses_scaled_sin(x, y):
    return np.sum(scaled_sin(x, y) ** 2)


@pytest.mark.parametrize("tier", TIERS)
def test_custom_jvp_gives_forward_and_reverse_derivatives_from_its_rule(tier):
    """The rule is deliberately not the derivative of `sin(x) * y` (3x in x): both modes must follow it."""
    x, y = np.array([0.2, -1.1, 0.7]), np.array([1.5, 0.5, 2.0])
    tx, ty = np.array([1.0, 0.5, -1.0]), np.array([0.3, 0.0, 1.0])
    _, dot = bytegrad.jvp(scaled_sin, (x, y), (tx, ty))
    np.testing.assert_allclose(dot, 3.0 * np.cos(x) * y * tx + np.sin(x) * ty, rtol=1e-12)
    d = bytegrad.differentiate(uses_scaled_sin, wrt=(0, 1), tier=tier)
    out = np.sin(x) * y
    for _ in range(4):
        gx, gy = d.grad(x, y)
        np.testing.assert_allclose(gx, 2 * out * 3.0 * np.cos(x) * y, rtol=1e-12)
        np.testing.assert_allclose(gy, 2 * out * np.sin(x), rtol=1e-12)


def test_custom_jvp_of_the_decorated_object_and_a_scalar():
    @bytegrad.custom_jvp
    def softplus(x):
        return np.logaddexp(0.0, x)

    softplus.defjvp(lambda p, t: (softplus(p[0]), t[0] * 2.0 / (1.0 + np.exp(-p[0]))))  # (2x: the rule's)
    assert bytegrad.grad(softplus)(0.0) == pytest.approx(1.0)
    np.testing.assert_allclose(bytegrad.jacrev(softplus)(np.array([0.0, 1.0])),
                               np.diag(2.0 / (1.0 + np.exp(-np.array([0.0, 1.0])))), rtol=1e-12)
