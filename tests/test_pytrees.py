"""User classes as pytrees (`bytegrad.register_pytree`, JAX's flatten/unflatten convention and the
`fields=` shortcut): differentiated arguments whose gradient is an instance of the class, outputs and
their cotangents, tangents, nested derivatives and `stop_gradient`; and the clear error for an
instance of a class that is not registered (it used to give a silent None gradient).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gradcheck import numerical_grad

import bytegrad


class Dense:
    """Registered with JAX's convention: `activation` is aux data."""

    def __init__(self, W, b, activation="tanh"):
        self.W, self.b, self.activation = W, b, activation

    def __call__(self, x):
        return getattr(np, self.activation)(self.W @ x + self.b)


bytegrad.register_pytree(Dense, lambda m: ((m.W, m.b), m.activation),
                         lambda activation, children: Dense(*children, activation=activation))


class Affine:
    """Registered with the fields shortcut; `name` is static."""

    def __init__(self, scale, shift, name="affine"):
        self.scale, self.shift, self.name = scale, shift, name


bytegrad.register_pytree(Affine, fields=("scale", "shift"), static=("name",))


class Slotted:
    __slots__ = ("a", "inner")

    def __init__(self, a, inner):
        self.a, self.inner = a, inner


bytegrad.register_pytree(Slotted, fields=("a", "inner"))


class Unregistered:
    def __init__(self, w):
        self.w = w


class Settings:
    def __init__(self, steps, name):
        self.steps, self.name = steps, name


def rng(seed=0):
    return np.random.default_rng(seed)


def dense(seed=0, dtype=np.float64):
    r = rng(seed)
    return Dense(r.normal(size=(3, 4)).astype(dtype), r.normal(size=3).astype(dtype))


def dense_loss(m, x):
    return np.sum(m(x) ** 2)


def check_dense_gradient(g, m, x, rtol=1e-6):
    assert type(g) is Dense and g.activation == m.activation
    np.testing.assert_allclose(g.W, numerical_grad(lambda W: dense_loss(Dense(W, m.b), x), (m.W,), 0),
                               rtol=rtol, atol=1e-8)
    np.testing.assert_allclose(g.b, numerical_grad(lambda b: dense_loss(Dense(m.W, b), x), (m.b,), 0),
                               rtol=rtol, atol=1e-8)


def test_grad_of_a_registered_class_is_an_instance_of_it():
    m, x = dense(), rng(1).normal(size=4)
    check_dense_gradient(bytegrad.grad(dense_loss)(m, x), m, x)
    (value, g) = bytegrad.value_and_grad(dense_loss)(m, x)
    assert value == pytest.approx(dense_loss(m, x))
    check_dense_gradient(g, m, x)


def test_float32_leaves_stay_float32():
    m, x = dense(2, np.float32), rng(3).normal(size=4).astype(np.float32)
    g = bytegrad.grad(dense_loss)(m, x)
    assert g.W.dtype == np.float32 and g.b.dtype == np.float32


def test_fields_shortcut_with_static_fields():
    a = Affine(np.array([1.0, 2.0]), 0.5, name="first")
    g = bytegrad.grad(lambda a, x: np.sum((a.scale * x + a.shift) ** 2))(a, np.array([3.0, -1.0]))
    assert type(g) is Affine and g.name == "first"
    r = a.scale * np.array([3.0, -1.0]) + a.shift
    np.testing.assert_allclose(g.scale, 2 * r * [3.0, -1.0])
    assert g.shift == pytest.approx(np.sum(2 * r))


def test_registered_classes_nest_inside_containers_and_containers_inside_them():
    params = {"layers": [Affine(2.0, 1.0), Affine(3.0, -1.0)],
              "slot": Slotted(np.array([1.0, 2.0]), {"c": 0.5, "n": 4})}

    def f(p, x):
        for layer in p["layers"]:
            x = layer.scale * x + layer.shift
        return np.sum(x * p["slot"].a) * p["slot"].inner["c"] * p["slot"].inner["n"]

    x = np.array([1.0, -2.0])
    g = bytegrad.grad(f)(params, x)
    assert [type(v) for v in g["layers"]] == [Affine, Affine] and type(g["slot"]) is Slotted
    assert g["slot"].inner["n"] is None  # an int child carries no derivative

    def f_flat(v):
        p = {"layers": [Affine(v[0], v[1]), Affine(v[2], v[3])], "slot": Slotted(v[4:6], {"c": v[6], "n": 4})}
        return f(p, x)

    v = np.array([2.0, 1.0, 3.0, -1.0, 1.0, 2.0, 0.5])
    expected = numerical_grad(f_flat, (v,), 0)
    got = np.array([g["layers"][0].scale, g["layers"][0].shift, g["layers"][1].scale, g["layers"][1].shift,
                    *g["slot"].a, g["slot"].inner["c"]])
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-8)


def test_vjp_cotangents_and_outputs_are_instances():
    m, x = dense(4), rng(5).normal(size=4)

    def f(m, x):
        return Affine(m(x), np.sum(m.b), name="out")

    out, back = bytegrad.vjp(f, m, x)
    assert type(out) is Affine
    out_bar = Affine(np.ones(3), 2.0, name="out")
    m_bar, x_bar = back(out_bar)
    assert type(m_bar) is Dense

    def scalar(m, x):
        return np.sum(m(x)) + 2.0 * np.sum(m.b)

    np.testing.assert_allclose(m_bar.b, numerical_grad(lambda b: scalar(Dense(m.W, b), x), (m.b,), 0),
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(x_bar, numerical_grad(lambda x: scalar(m, x), (x,), 0), rtol=1e-6, atol=1e-8)
    with pytest.raises(TypeError, match="must be a Affine too"):
        back({"scale": np.ones(3), "shift": 2.0})


def test_jvp_tangents_are_instances_in_and_out():
    a = Affine(np.array([1.0, 2.0]), 0.5)
    a_dot = Affine(np.array([0.1, -0.2]), 1.0)

    def f(a):
        return Affine(a.scale ** 2, a.shift * 3.0)

    out, out_dot = bytegrad.jvp(f, (a,), (a_dot,))
    assert type(out_dot) is Affine
    np.testing.assert_allclose(out_dot.scale, 2 * a.scale * a_dot.scale)
    assert out_dot.shift == pytest.approx(3.0)
    with pytest.raises(bytegrad.WrtError, match="registered pytree"):
        bytegrad.jvp(f, (a,), ({"scale": 1.0},))


def test_hvp_with_a_registered_primal():
    a = Affine(np.array([1.0, 2.0]), np.array(0.5))  # (a float leaf works too, slowly: float has no frule)
    v = Affine(np.array([1.0, 0.0]), np.array(1.0))

    def f(a):
        return np.sum(a.scale ** 3) + a.shift ** 2 * np.sum(a.scale)

    hv = bytegrad.hvp(f, (a,), (v,))
    assert type(hv) is Affine
    # H = [[6 s_i delta_ij, 2 shift], [2 shift, 2 sum(s)]] over (scale, shift)
    np.testing.assert_allclose(hv.scale, 6 * a.scale * v.scale + 2 * a.shift * v.shift)
    assert hv.shift == pytest.approx(2 * a.shift * np.sum(v.scale) + 2 * np.sum(a.scale) * v.shift)


def test_a_nested_gradient_through_a_registered_class():
    def loss(a):
        return np.sum(a.scale ** 3)

    def outer(w):
        return np.sum(bytegrad.grad(loss)(Affine(w, 0.0)).scale)  # sum of 3 w**2

    w = np.array([1.0, -2.0])
    np.testing.assert_allclose(bytegrad.grad(outer)(w), 6 * w)


def test_has_aux_and_a_registered_class():
    m, x = dense(6), rng(7).normal(size=4)
    g, aux = bytegrad.grad(lambda m, x: (dense_loss(m, x), m), has_aux=True)(m, x)
    check_dense_gradient(g, m, x)
    assert type(aux) is Dense


def test_stop_gradient_of_a_registered_instance():
    def f(a):
        b = bytegrad.stop_gradient(a)
        return np.sum(a.scale * b.scale) + a.shift * b.shift

    a = Affine(np.array([1.0, 2.0]), 3.0)
    b = bytegrad.stop_gradient(a)
    assert type(b) is Affine and b.name == "affine" and b.shift == 3.0 and b.scale is not a.scale
    g = bytegrad.grad(f)(a)
    np.testing.assert_array_equal(g.scale, [1.0, 2.0])
    assert g.shift == 3.0


# ---- an instance of a class that is not registered -------------------------------------------------


@pytest.mark.parametrize("make", [lambda w: Unregistered(w), lambda w: {"model": Unregistered(w)},
                                  lambda w: (w, Unregistered(2.0))], ids=["argument", "in a dict", "in a tuple"])
def test_grad_of_an_unregistered_instance_is_a_clear_error(make):
    w = np.array([1.0, 2.0])
    with pytest.raises(bytegrad.WrtError) as info:
        bytegrad.grad(lambda m: 0.0)(make(w))
    message = str(info.value)
    assert "Unregistered" in message and "bytegrad.register_pytree(Unregistered, fields=('w',))" in message, message


def test_vjp_and_jvp_refuse_an_unregistered_instance_that_holds_floats():
    with pytest.raises(bytegrad.WrtError, match="register_pytree"):
        bytegrad.vjp(lambda m, x: m.w * x, Unregistered(np.ones(2)), np.ones(2))
    with pytest.raises(bytegrad.WrtError, match="register_pytree"):
        bytegrad.jvp(lambda m: m.w * 2.0, (Unregistered(np.ones(2)),), (None,))


def test_an_unregistered_instance_without_float_data_is_a_constant_for_vjp():
    """Only `wrt` arguments must be differentiable; vjp differentiates every positional argument,
    and an object with nothing to differentiate gets None, as an int does."""
    out, back = bytegrad.vjp(lambda x, s: x * s.steps, np.ones(2), Settings(3, "run"))
    x_bar, s_bar = back(np.ones(2))
    np.testing.assert_array_equal(x_bar, [3.0, 3.0])
    assert s_bar is None
    with pytest.raises(bytegrad.WrtError, match="register_pytree"):  # but not as a `wrt` argument
        bytegrad.grad(lambda s, x: np.sum(x) * s.steps)(Settings(3, "run"), np.ones(2))


def test_an_unflatten_that_converts_its_children_is_refused():
    class Converting:
        def __init__(self, w):
            self.w = np.array(w, dtype=float)  # a copy: bytegrad could not follow w

    bytegrad.register_pytree(Converting, fields=("w",))
    with pytest.raises(bytegrad.WrtError, match="did not keep the children"):
        bytegrad.grad(lambda c: np.sum(c.w ** 2))(Converting(np.ones(2)))


def test_an_unflatten_failing_on_none_children_says_why():
    class Strict:
        def __init__(self, w, n):
            if not isinstance(n, int):
                raise TypeError("n must be an int")
            self.w, self.n = w, n

    bytegrad.register_pytree(Strict, fields=("w", "n"))
    with pytest.raises(TypeError, match="n must be an int") as info:
        bytegrad.grad(lambda s: np.sum(s.w) * s.n)(Strict(np.ones(2), 3))
    assert "static" in "".join(getattr(info.value, "__notes__", []))
    bytegrad.register_pytree(Strict, fields=("w",), static=("n",), override=True)
    g = bytegrad.grad(lambda s: np.sum(s.w) * s.n)(Strict(np.ones(2), 3))
    np.testing.assert_array_equal(g.w, [3.0, 3.0])
    assert g.n == 3


def test_a_flatten_with_the_wrong_shape_is_a_clear_error():
    class Bad:
        def __init__(self, w):
            self.w = w

    bytegrad.register_pytree(Bad, lambda b: b.w, lambda aux, ch: Bad(*ch))
    with pytest.raises(TypeError, match="registered for .*Bad must return \\(children, aux\\)"):
        bytegrad.grad(lambda b: np.sum(b.w))(Bad(np.ones(2)))


def test_registration_is_checked():
    class Twice:
        pass

    with pytest.raises(TypeError, match="takes a class"):
        bytegrad.register_pytree(Twice(), fields=("a",))
    with pytest.raises(TypeError, match="already knows"):
        bytegrad.register_pytree(dict, fields=("a",))
    with pytest.raises(TypeError, match="not both"):
        bytegrad.register_pytree(Twice, lambda t: ((), None), lambda a, c: Twice(), fields=("a",))
    with pytest.raises(TypeError, match="needs flatten and unflatten"):
        bytegrad.register_pytree(Twice)
    with pytest.raises(TypeError, match="attribute names"):
        bytegrad.register_pytree(Twice, fields="a")
    assert bytegrad.register_pytree(Twice, fields=("a",)) is Twice
    with pytest.raises(ValueError, match="already registered"):
        bytegrad.register_pytree(Twice, fields=("b",))
    bytegrad.register_pytree(Twice, fields=("b",), override=True)


def test_a_registered_dataclass_follows_its_registration():
    @dataclass
    class Config:
        w: np.ndarray
        label: str

    bytegrad.register_pytree(Config, fields=("w",), static=("label",))
    g = bytegrad.grad(lambda c: np.sum(c.w ** 2))(Config(np.array([1.0, 2.0]), "x"))
    assert type(g) is Config and g.label == "x"
    np.testing.assert_array_equal(g.w, [2.0, 4.0])
