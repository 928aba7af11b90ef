"""Jacobians and Hessians of trees, in JAX's block layout (issue 26): the output's structure outside,
the differentiated arguments' structure inside (a tuple of them for a tuple `wrt`), each block shaped
`out_leaf.shape + in_leaf.shape`; `hessian(f, wrt=(0, 1))` as `((Hxx, Hxy), (Hyx, Hyy))`; the Hessian
of a vector-valued function as the Jacobian of its Jacobian. Every block is checked against central
differences."""
from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pytest

import bytegrad
from bytegrad import tree_util

MODES = ("rev", "fwd", "auto")


def fd_block(f, args, k, path_out, leaf_in, eps=1e-6):
    """d f(args)[path_out] / d leaf_in, where leaf_in picks one leaf of argument k by central differences."""
    x = np.asarray(leaf_in(args[k]), dtype=np.float64)
    cols = []
    for i in range(x.size):
        outs = []
        for sign in (1.0, -1.0):
            leaves, treedef = tree_util.tree_flatten(args[k])
            target = leaf_in(args[k])
            bumped = x.copy().reshape(-1)
            bumped[i] += sign * eps
            bumped = bumped.reshape(x.shape) if x.shape else float(bumped[0])
            leaves = [bumped if leaf is target else leaf for leaf in leaves]
            new_args = list(args)
            new_args[k] = tree_util.tree_unflatten(treedef, leaves)
            outs.append(np.asarray(path_out(f(*new_args)), dtype=np.float64))
        cols.append((outs[0] - outs[1]) / (2 * eps))
    out_shape = cols[0].shape
    return np.stack(cols, axis=-1).reshape(out_shape + x.shape)


def f_dict(p, x):
    h = np.tanh(p["W"] @ x + p["b"])
    return {"h": h, "s": np.sum(h ** 2) * p["c"], "const": np.ones(2)}


def params():
    r = np.random.default_rng(0)
    return {"W": r.normal(size=(2, 3)), "b": r.normal(size=2), "c": 0.7}


X = np.array([0.3, -1.2, 0.5])


@pytest.mark.parametrize("mode", MODES)
def test_jacobian_of_a_dict_input_and_output(mode):
    p = params()
    J = bytegrad.jacobian(f_dict, mode=mode)(p, X)
    assert list(J) == ["h", "s", "const"]
    for out_key in J:
        assert list(J[out_key]) == ["W", "b", "c"]  # the output outside, the input inside
        for in_key in ("W", "b", "c"):
            block = J[out_key][in_key]
            out_shape = np.shape(f_dict(p, X)[out_key])
            assert np.shape(block) == out_shape + np.shape(p[in_key])
            expected = fd_block(f_dict, (p, X), 0, lambda o, k=out_key: o[k], lambda t, k=in_key: t[k])
            np.testing.assert_allclose(block, expected, rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(J["const"]["W"], np.zeros((2, 2, 3)))  # not dependent: zeros


@pytest.mark.parametrize("mode", MODES)
def test_jacobian_with_a_tuple_wrt_over_a_tree_and_an_array(mode):
    p = params()
    J = bytegrad.jacobian(f_dict, wrt=(0, 1), mode=mode)(p, X)
    Jp, Jx = J["h"]  # at each output leaf, a tuple with one entry per differentiated argument
    assert set(Jp) == {"W", "b", "c"} and Jx.shape == (2, 3)
    np.testing.assert_allclose(Jx, fd_block(f_dict, (p, X), 1, lambda o: o["h"], lambda t: t), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(Jp["b"], fd_block(f_dict, (p, X), 0, lambda o: o["h"], lambda t: t["b"]),
                               rtol=1e-6, atol=1e-8)


Pair = collections.namedtuple("Pair", "first second")


@dataclasses.dataclass
class Layer:
    w: np.ndarray
    b: float


@pytest.mark.parametrize("mode", MODES)
def test_jacobian_of_lists_namedtuples_dataclasses_and_none(mode):
    layer = Layer(np.array([1.0, -2.0]), 0.5)

    def f(layer, x):
        y = np.sin(layer.w * x) + layer.b
        return [Pair(y, np.sum(y)), None, (layer.b * x,)]

    J = bytegrad.jacobian(f, mode=mode)(layer, 2.0)
    assert isinstance(J, list) and isinstance(J[0], Pair) and J[1] is None and isinstance(J[2], tuple)
    block = J[0].first
    assert isinstance(block, Layer) and block.w.shape == (2, 2) and np.shape(block.b) == (2,)
    np.testing.assert_allclose(block.w, np.diag(2.0 * np.cos(layer.w * 2.0)), rtol=1e-12)
    np.testing.assert_allclose(block.b, np.ones(2))
    np.testing.assert_allclose(J[0].second.w, 2.0 * np.cos(layer.w * 2.0), rtol=1e-12)
    np.testing.assert_allclose(J[2][0].b, 2.0)
    np.testing.assert_allclose(J[2][0].w, np.zeros(2))


def test_jacobian_of_a_registered_pytree_output():
    class Point:
        def __init__(self, xy, label="p"):
            self.xy, self.label = xy, label

    bytegrad.register_pytree(Point, fields=("xy",), static=("label",))
    J = bytegrad.jacobian(lambda t: Point(np.array([np.cos(t), np.sin(t)]), "q"))(0.3)
    assert isinstance(J, Point) and J.label == "q"
    np.testing.assert_allclose(J.xy, [-np.sin(0.3), np.cos(0.3)], rtol=1e-12)


def test_jacobian_of_trees_in_float32():
    p = {"a": np.array([1.0, 2.0], np.float32), "b": np.float32(3.0)}
    J = bytegrad.jacobian(lambda p: {"y": p["a"] * p["b"]})(p)
    assert J["y"]["a"].dtype == np.float32 and J["y"]["b"].dtype == np.float32
    np.testing.assert_allclose(J["y"]["a"], 3.0 * np.eye(2))
    np.testing.assert_allclose(J["y"]["b"], [1.0, 2.0])


def test_jacobian_of_a_tree_inside_a_derivative():
    # the blocks are recorded on the outer tape: d/dw of sum(J), J = d{"y": w**3}/d{"w": w}
    def outer(w):
        J = bytegrad.jacobian(lambda p: {"y": p["w"] ** 3})({"w": w})
        return np.sum(J["y"]["w"])

    w = np.array([0.5, -1.5])
    np.testing.assert_allclose(bytegrad.grad(outer)(w), 6.0 * w, rtol=1e-12)


# ---- hessian --------------------------------------------------------------------------------------------


def two_args(x, y):
    return np.sum(np.sin(x) * y ** 2) + np.sum(x) * np.sum(y ** 3)


@pytest.mark.parametrize("mode", ("fwd", "rev"))
def test_hessian_blocks_of_two_arguments(mode):
    x, y = np.array([0.3, -0.8]), np.array([1.5, 0.2, -0.4])[:2]
    H = bytegrad.hessian(two_args, wrt=(0, 1), mode=mode)(x, y)
    assert isinstance(H, tuple) and len(H) == 2 and all(isinstance(row, tuple) and len(row) == 2 for row in H)
    grads = bytegrad.grad(two_args, wrt=(0, 1))
    for i in range(2):
        for j in range(2):
            expected = fd_block(grads, (x, y), j, lambda g, i=i: g[i], lambda t: t)
            assert H[i][j].shape == (2, 2)
            np.testing.assert_allclose(H[i][j], expected, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(H[0][1], H[1][0].T, rtol=1e-12)


@pytest.mark.parametrize("mode", ("fwd", "rev"))
def test_hessian_of_a_function_of_a_dict(mode):
    p = {"a": np.array([0.5, 1.0]), "b": 2.0}

    def f(p):
        return np.sum(p["a"] ** 2 * p["b"]) + np.sin(p["b"])

    H = bytegrad.hessian(f, mode=mode)(p)
    assert list(H) == ["a", "b"] and list(H["a"]) == ["a", "b"]
    np.testing.assert_allclose(H["a"]["a"], 2 * p["b"] * np.eye(2), rtol=1e-12)
    np.testing.assert_allclose(H["a"]["b"], 2 * p["a"], rtol=1e-12)
    np.testing.assert_allclose(H["b"]["a"], 2 * p["a"], rtol=1e-12)
    np.testing.assert_allclose(H["b"]["b"], -np.sin(2.0), rtol=1e-12)


@pytest.mark.parametrize("mode", ("fwd", "rev"))
def test_hessian_of_a_vector_valued_function_is_the_jacobian_of_its_jacobian(mode):
    x = np.array([0.4, -1.1, 0.9])

    def f(x):
        return np.array([np.sum(x ** 3), x[0] * x[1] * x[2]]) * 1.0

    H = bytegrad.hessian(f, mode=mode)(x)
    assert H.shape == (2, 3, 3)  # out.shape + x.shape + x.shape, as jax.hessian
    expected = fd_block(bytegrad.jacobian(f), (x,), 0, lambda J: J, lambda t: t)
    np.testing.assert_allclose(H, expected, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(H[0], np.diag(6 * x), rtol=1e-12)


def test_a_one_element_output_still_has_a_hessian_shaped_like_grads():
    H = bytegrad.hessian(lambda x: np.sum(x ** 3, keepdims=True))(np.array([1.0, 2.0]))
    np.testing.assert_allclose(H, np.diag([6.0, 12.0]))
    assert float(bytegrad.hessian(lambda t: t ** 3)(1.5)) == pytest.approx(9.0)


@pytest.mark.parametrize("mode", ("fwd", "rev"))
def test_hessian_blocks_where_the_gradients_share_a_cotangent(mode):
    # x + y: one cotangent object reaches both arguments (the inner gradients are unaliased)
    x, y = np.array([0.5, 1.0]), np.array([-1.0, 2.0])
    H = bytegrad.hessian(lambda x, y: np.sum(x + y) ** 2 + np.sum(x ** 3), wrt=(0, 1), mode=mode)(x, y)
    np.testing.assert_allclose(H[0][0], 2.0 + np.diag(6 * x), rtol=1e-12)
    for block in (H[0][1], H[1][0], H[1][1]):
        np.testing.assert_allclose(block, 2.0 * np.ones((2, 2)), rtol=1e-12)
