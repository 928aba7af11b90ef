"""The API edges a user coming from JAX or autograd meets (issue 26): functools.partial and other
callables as the differentiated function, `argnums=` as JAX's spelling of `wrt=`, a None tangent in
`hvp`, and `stats()` on what `jacobian` and `hessian` return. Jacobians and Hessians of trees are in
tests/test_jacobian_trees.py.
"""
from __future__ import annotations

import functools
import os
import pickle
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gradcheck import numerical_grad

import bytegrad

W = np.array([0.5, -1.0, 2.0])
X = np.array([1.5, 0.25, -0.75])


def loss(w, x, scale=1.0):
    return scale * np.sum(np.sin(w * x) + w ** 2 * x)


def grad_w(w, x, scale=1.0):
    return scale * (x * np.cos(w * x) + 2 * w * x)


def grad_x(w, x, scale=1.0):
    return scale * (w * np.cos(w * x) + w ** 2)


def hess_ww(w, x, scale=1.0):
    return np.diag(scale * (-x ** 2 * np.sin(w * x) + 2 * x))


# ---- functools.partial ---------------------------------------------------------------------------


def test_grad_of_a_keyword_partial():
    g = bytegrad.grad(functools.partial(loss, x=X))(W)
    np.testing.assert_allclose(g, grad_w(W, X), rtol=1e-12)


def test_grad_of_a_positional_partial_counts_the_remaining_arguments():
    np.testing.assert_allclose(bytegrad.grad(functools.partial(loss, W))(X), grad_x(W, X), rtol=1e-12)
    # wrt=0 / argnums=0 is the partial's first argument (x), wrt=1 its second (scale), as in JAX
    p = functools.partial(loss, W)
    np.testing.assert_allclose(bytegrad.grad(p, wrt=0)(X, 3.0), grad_x(W, X, 3.0), rtol=1e-12)
    assert bytegrad.grad(p, wrt=1)(X, 3.0) == pytest.approx(loss(W, X))
    np.testing.assert_allclose(bytegrad.grad(p, wrt="x")(X, 3.0), grad_x(W, X, 3.0), rtol=1e-12)
    gx, gs = bytegrad.grad(p, wrt=(0, 1))(X, 3.0)
    np.testing.assert_allclose(gx, grad_x(W, X, 3.0), rtol=1e-12)
    assert gs == pytest.approx(loss(W, X))


def test_grad_of_nested_partials():
    p = functools.partial(functools.partial(loss, scale=2.0), W)
    np.testing.assert_allclose(bytegrad.grad(p)(X), grad_x(W, X, 2.0), rtol=1e-12)
    # a subclass of partial is not flattened by functools: unwrapped here, outer keywords winning
    class Tagged(functools.partial):
        pass

    q = Tagged(functools.partial(loss, scale=2.0), scale=5.0)
    np.testing.assert_allclose(bytegrad.grad(q)(W, X), grad_w(W, X, 5.0), rtol=1e-12)


def test_a_call_keyword_overrides_the_partials_as_in_functools():
    p = functools.partial(loss, x=X, scale=2.0)
    np.testing.assert_allclose(bytegrad.grad(p)(W, scale=4.0), grad_w(W, X, 4.0), rtol=1e-12)


def test_the_partials_arguments_are_left_as_they_were():
    x = X.copy()
    bytegrad.grad(functools.partial(loss, x=x))(W)
    bytegrad.grad(functools.partial(loss, W.copy()), wrt=0)(x)
    np.testing.assert_array_equal(x, X)


def test_a_partial_of_a_bound_method_and_of_a_function_with_a_rule():
    class Model:
        def __init__(self, scale):
            self.scale = scale

        def loss(self, w, x):
            return self.scale * np.sum(np.sin(w * x) + w ** 2 * x)

    p = functools.partial(Model(3.0).loss, x=X)
    np.testing.assert_allclose(bytegrad.grad(p)(W), grad_w(W, X, 3.0), rtol=1e-12)
    g = bytegrad.grad(functools.partial(np.sum, axis=None))(np.ones((2, 2)))
    np.testing.assert_array_equal(g, np.ones((2, 2)))


def test_a_partial_of_a_differentiated_function_and_of_a_gradient():
    # the partial's function is a Differentiated: its own function is differentiated (run as it is,
    # the Differentiated would hide the derivative: a silent zero)
    np.testing.assert_allclose(bytegrad.grad(functools.partial(bytegrad.differentiate(loss), x=X))(W),
                               grad_w(W, X), rtol=1e-12)
    # a partial of a gradient function: its derivative is the Hessian's row sum
    g = bytegrad.grad(lambda w: np.sum(functools.partial(bytegrad.grad(loss), x=X)(w)))(W)
    np.testing.assert_allclose(g, hess_ww(W, X).sum(axis=0), rtol=1e-10)


def test_a_partial_over_differentiated_values_inside_a_derivative():
    # d/dx sum(grad_w loss(w, x)) with x reaching loss through the partial's keywords
    def outer(x):
        return np.sum(bytegrad.grad(functools.partial(loss, x=x))(W))

    expected = numerical_grad(outer, (X,))
    np.testing.assert_allclose(bytegrad.grad(outer)(X), expected, rtol=1e-6)


def test_a_callable_bytegrad_cannot_differentiate_is_named_once():
    # (a partial was refused as `functools.functools.partial(...)`: the module written twice)
    import operator

    with pytest.raises(TypeError, match=r"; operator\.methodcaller\('sum'\) \(methodcaller\) has neither"):
        bytegrad.grad(operator.methodcaller("sum"))(np.ones(2))


# Every entry point takes the same kinds of callable: (name, call) with call(fn_of_w_and_x) -> result
# to compare against the same entry point on the plain function.
def _entry_points():
    v = np.array([1.0, 0.5, -2.0])
    return {
        "grad": lambda f: bytegrad.grad(f)(W, X),
        "value_and_grad": lambda f: bytegrad.value_and_grad(f)(W, X),
        "differentiate": lambda f: bytegrad.differentiate(f).grad(W, X),
        "vjp": lambda f: bytegrad.vjp(f, W, X)[1](1.0),
        "jvp": lambda f: bytegrad.jvp(f, (W, X), (v, np.zeros(3))),
        "jacobian": lambda f: bytegrad.jacobian(f)(W, X),
        "hessian": lambda f: bytegrad.hessian(f)(W, X),
        "hvp": lambda f: bytegrad.hvp(f, (W, X), (v, None)),
    }


class Loss:
    def __init__(self, scale=2.0):
        self.scale = scale

    def method(self, w, x):
        return loss(w, x, self.scale)

    def __call__(self, w, x):
        return loss(w, x, self.scale)

    @staticmethod
    def static(w, x):
        return loss(w, x, 2.0)

    @classmethod
    def cls_method(cls, w, x):
        return loss(w, x, 2.0)


def _scaled(w, x):
    return loss(w, x, 2.0)


CALLABLES = {
    "partial": lambda: functools.partial(loss, scale=2.0),
    "bound method": lambda: Loss().method,
    "staticmethod": lambda: Loss.static,
    "staticmethod via an instance": lambda: Loss().static,
    "classmethod": lambda: Loss.cls_method,
    "callable object": lambda: Loss(),
}


def _assert_same(a, b):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    elif a is None:
        assert b is None
    else:
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kind", list(CALLABLES))
@pytest.mark.parametrize("entry", list(_entry_points()))
def test_every_entry_point_takes_every_kind_of_callable(entry, kind):
    call = _entry_points()[entry]
    _assert_same(call(CALLABLES[kind]()), call(_scaled))


# ---- argnums ---------------------------------------------------------------------------------------


def test_argnums_is_jaxs_name_for_wrt():
    np.testing.assert_allclose(bytegrad.grad(loss, argnums=1)(W, X), grad_x(W, X), rtol=1e-12)
    gw, gx = bytegrad.grad(loss, argnums=(0, 1))(W, X)
    np.testing.assert_allclose(gw, grad_w(W, X), rtol=1e-12)
    np.testing.assert_allclose(gx, grad_x(W, X), rtol=1e-12)
    value, g = bytegrad.value_and_grad(loss, argnums=1)(W, X)
    assert value == pytest.approx(loss(W, X))
    np.testing.assert_allclose(g, grad_x(W, X), rtol=1e-12)
    np.testing.assert_allclose(bytegrad.differentiate(loss, argnums=1).grad(W, X), grad_x(W, X), rtol=1e-12)
    np.testing.assert_allclose(bytegrad.differentiate(argnums=1)(loss).grad(W, X), grad_x(W, X), rtol=1e-12)
    J = bytegrad.jacobian(lambda w, x: w * x, argnums=1)(W, X)
    np.testing.assert_allclose(J, np.diag(W))
    H = bytegrad.hessian(loss, argnums=0)(W, X)
    np.testing.assert_allclose(H, hess_ww(W, X), rtol=1e-10)


@pytest.mark.parametrize("make", [
    lambda: bytegrad.grad(loss, wrt=0, argnums=1),
    lambda: bytegrad.grad(loss, 0, argnums=0),
    lambda: bytegrad.value_and_grad(loss, wrt=1, argnums=1),
    lambda: bytegrad.jacobian(loss, wrt=(0, 1), argnums=(0, 1)),
    lambda: bytegrad.hessian(loss, wrt=0, argnums=0),
    lambda: bytegrad.differentiate(loss, wrt=0, argnums=1),
], ids=["grad", "grad-positional", "value_and_grad", "jacobian", "hessian", "differentiate"])
def test_wrt_and_argnums_together_is_a_clear_type_error(make):
    with pytest.raises(TypeError, match=r"both wrt=.* and argnums=.*pass one of them"):
        make()


def test_the_default_is_still_the_first_argument():
    np.testing.assert_allclose(bytegrad.grad(loss)(W, X), grad_w(W, X), rtol=1e-12)
    assert "wrt=0" in repr(bytegrad.grad(loss))


# ---- hvp: a None tangent -----------------------------------------------------------------------------


def least_squares(w, A, y):
    return np.sum((A @ w - y) ** 2)


def test_hvp_with_none_tangents_differentiates_only_the_others():
    A = np.array([[1.0, 2.0, 0.0], [0.5, -1.0, 3.0]])
    y = np.array([1, 2])  # ints: not differentiable
    v = np.array([1.0, -0.5, 0.25])
    hv, a_row, y_row = bytegrad.hvp(least_squares, (W, A, y), (v, None, None))
    np.testing.assert_allclose(hv, 2 * A.T @ A @ v, rtol=1e-12)
    assert a_row is None and y_row is None
    # the same as naming the differentiated argument
    np.testing.assert_allclose(bytegrad.hvp(least_squares, (W, A, y), (v,), wrt=0), hv, rtol=1e-12)
    # two tangents given out of three: the rows of the block Hessian for those two
    A_dot = np.ones_like(A)
    hw, hA, none = bytegrad.hvp(least_squares, (W, A, y), (v, A_dot, None))
    ew, eA = bytegrad.hvp(least_squares, (W, A, y), (v, A_dot), wrt=(0, 1))
    np.testing.assert_allclose(hw, ew, rtol=1e-12)
    np.testing.assert_allclose(hA, eA, rtol=1e-12)
    assert none is None


def test_hvp_with_every_tangent_none_and_the_old_errors():
    assert bytegrad.hvp(least_squares, (W, np.eye(3), X), (None, None, None)) == (None, None, None)
    with pytest.raises(bytegrad.WrtError, match="cannot be differentiated"):
        bytegrad.hvp(least_squares, (W, np.eye(3), np.array([1, 2, 3])), (W, W, 0))  # 0 is not None


# ---- stats() and pickling of jacobian and hessian --------------------------------------------------------


def vector_fn(w):
    return np.sin(w) * w[0]


def only_for_stats(w, x):  # (stats count rewrites of a code object in the whole process: used here only)
    return np.sum(np.sin(w * x) * w)


def test_jacobian_and_hessian_have_stats():
    j = bytegrad.jacobian(lambda w: np.sin(w) * w[0])
    j(W)
    j(W)
    s = j.stats()
    assert s["misses"] == 1 and s["hits"] == 1  # rewritten once, reused by the second Jacobian
    assert s["first_gradient_s"] > 0 and s["rewrite_s"] > 0
    h = bytegrad.hessian(only_for_stats)
    h(W, X)
    hs = h.stats()
    assert hs["misses"] == 1  # the user's function, rewritten once: its stats, not the inner Jacobian's
    assert hs["first_gradient_s"] > 0
    assert h.__name__ == "only_for_stats" and "hessian of 'only_for_stats'" in repr(h)


def test_jacobian_and_hessian_functions_pickle():
    for make in (bytegrad.jacobian, bytegrad.hessian):
        f = make(vector_fn if make is bytegrad.jacobian else loss)
        args = (W,) if make is bytegrad.jacobian else (W, X)
        back = pickle.loads(pickle.dumps(f))
        np.testing.assert_allclose(back(*args), f(*args), rtol=1e-12)
