"""The public API: `differentiate` (with and without parentheses), `grad`, `value_and_grad`, `vjp`,
`.pullback`, every form of `wrt`, gradient types that mirror the inputs, zeros, and kwargs.
"""
from __future__ import annotations

import copy
import os
import sys
import threading
from collections import OrderedDict, namedtuple
from dataclasses import dataclass

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gradcheck import assert_mirrors, check_grad, numerical_grad

import bytegrad


def rng(seed=0):
    return np.random.default_rng(seed)


def three_args(x, y, z):
    return np.sum(np.sin(x) * y) + np.sum(z ** 2 * y)


def model(x, W, n, scale):
    h = x
    for _ in range(n):
        h = np.tanh(W @ h)
    return scale * np.sum(h ** 2)


def model_args(seed=0):
    r = rng(seed)
    return r.normal(size=3), r.normal(size=(3, 3)) / 2, 2, 1.5


# ---- differentiate --------------------------------------------------------------------------------


def test_differentiate_without_parentheses():
    @bytegrad.differentiate
    def f(x):
        """Doc of f."""
        return np.sum(x ** 3)

    x = rng().normal(size=4)
    assert f(x) == np.sum(x ** 3)
    x_bar = f.grad(x)
    assert type(x_bar) is np.ndarray and x_bar.shape == x.shape and x_bar.dtype == x.dtype
    np.testing.assert_allclose(x_bar, 3 * x ** 2, rtol=1e-12)
    assert f.__name__ == "f" and f.__doc__ == "Doc of f."


@pytest.mark.parametrize("wrt, expected", [
    (None, 0), (0, 0), (1, 1), ("y", 1), ("z", 2), ((0, 2), (0, 2)), ((0, "y"), (0, 1)), (("z", "x"), (2, 0)),
])
def test_differentiate_with_parentheses(wrt, expected):
    deco = bytegrad.differentiate() if wrt is None else bytegrad.differentiate(wrt=wrt)

    @deco
    def f(x, y, z):
        return np.sum(np.sin(x) * y) + np.sum(z ** 2 * y)

    x, y, z = rng(1).normal(size=(3, 4))
    assert f(x, y, z) == three_args(x, y, z)
    x_bar = f.grad(x, y, z)
    numeric = numerical_grad(three_args, (x, y, z), expected)
    if isinstance(expected, tuple):
        assert type(x_bar) is tuple and len(x_bar) == len(expected)
        for got, want in zip(x_bar, numeric):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    else:
        np.testing.assert_allclose(x_bar, numeric, rtol=1e-6, atol=1e-8)


def test_decorated_call_is_the_original_code():
    def f(x, n):
        out = np.zeros(3)
        for i in range(n):
            out = out + x * i
        return np.sum(out ** 2)

    code = f.__code__
    d = bytegrad.differentiate(f)
    x = rng(2).normal(size=3)
    expected = f(x, 3)
    check_grad(d, (x, 3), 0)
    assert f.__code__ is code, "differentiate must not replace the user's code object"
    assert d(x, 3) == expected == f(x, 3)
    assert d.__name__ == "f"


@pytest.mark.parametrize("wrt", [0, "x", 1, "y", 2, "z", (0, 1, 2), ("x", 2), (1,)])
def test_wrt_forms(wrt):
    args = tuple(rng(3).normal(size=(3, 4)))
    check_grad(three_args, args, wrt)
    check_grad(bytegrad.differentiate(three_args, wrt=wrt), args, wrt)


def test_wrt_tuple_of_one_gives_a_tuple():
    args = tuple(rng(4).normal(size=(3, 4)))
    out = bytegrad.grad(three_args, wrt=(1,))(*args)
    assert type(out) is tuple and len(out) == 1 and out[0].shape == (4,)


def test_wrt_name_passed_as_keyword():
    x, y, z = rng(5).normal(size=(3, 4))
    f = bytegrad.differentiate(three_args, wrt="y")
    check_grad(f, (x,), "y", kwargs={"y": y, "z": z})
    check_grad(f, (x, y), "y", kwargs={"z": z})
    x_bar = bytegrad.grad(three_args, wrt="z")(x, y=y, z=z)
    np.testing.assert_allclose(x_bar, 2 * z * y, rtol=1e-12)


def test_two_wrt_of_one_function_do_not_interfere():
    f0 = bytegrad.differentiate(three_args, wrt=0)
    f2 = bytegrad.differentiate(three_args, wrt=2)
    for seed in range(3):
        x, y, z = rng(seed).normal(size=(3, 4))
        np.testing.assert_allclose(f0.grad(x, y, z), np.cos(x) * y, rtol=1e-12)
        np.testing.assert_allclose(f2.grad(x, y, z), 2 * z * y, rtol=1e-12)
        np.testing.assert_allclose(bytegrad.grad(three_args, wrt=1)(x, y, z), np.sin(x) + z ** 2, rtol=1e-12)


# ---- grad, value_and_grad, vjp, pullback ----------------------------------------------------------


def test_grad_and_value_and_grad_return_functions():
    g = bytegrad.grad(model)
    vg = bytegrad.value_and_grad(model, wrt=(0, 1, 3))
    assert callable(g) and callable(vg)
    args = model_args()
    check_grad(model, args, 0)
    check_grad(model, args, (0, 1, 3))
    value, (x_bar, W_bar, scale_bar) = vg(*args)
    np.testing.assert_allclose(value, model(*args), rtol=1e-13, atol=0)  # (a Numba program sums in its own order)
    assert type(scale_bar) is float
    numeric = numerical_grad(model, args, (0, 1, 3))
    np.testing.assert_allclose(x_bar, numeric[0], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(W_bar, numeric[1], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(scale_bar, numeric[2], rtol=1e-6, atol=1e-8)
    value, W_bar2 = bytegrad.value_and_grad(model, wrt="W")(*args)
    np.testing.assert_allclose(W_bar2, W_bar, rtol=1e-12)


def test_vjp_gives_one_cotangent_per_positional_argument():
    args = model_args(1)
    before = copy.deepcopy(args)
    value, back = bytegrad.vjp(model, *args)
    np.testing.assert_allclose(value, model(*args), rtol=1e-12)
    cotangents = back(1.0)
    assert type(cotangents) is tuple and len(cotangents) == 4
    x_bar, W_bar, n_bar, scale_bar = cotangents
    assert n_bar is None, f"an int argument gets None, got {n_bar!r}"
    numeric = numerical_grad(model, args, (0, 1, 3))
    assert_mirrors(x_bar, args[0])
    assert_mirrors(W_bar, args[1])
    assert_mirrors(scale_bar, args[3])
    np.testing.assert_allclose(x_bar, numeric[0], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(W_bar, numeric[1], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(scale_bar, numeric[2], rtol=1e-6, atol=1e-8)
    # The pullback is linear and may be called again.
    twice = back(2.0)
    np.testing.assert_allclose(twice[0], 2 * x_bar, rtol=1e-12)
    np.testing.assert_allclose(twice[1], 2 * W_bar, rtol=1e-12)
    np.testing.assert_allclose(back(1.0)[0], x_bar, rtol=1e-12)
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)


def test_pullback_method():
    args = model_args(2)
    f = bytegrad.differentiate(model, wrt=(0, 1))
    value, back = f.pullback(*args)
    np.testing.assert_allclose(value, model(*args), rtol=1e-12)
    cotangents = back(1.0)
    assert type(cotangents) is tuple and len(cotangents) == 4
    assert cotangents[2] is None
    numeric = numerical_grad(model, args, (0, 1, 3))
    np.testing.assert_allclose(cotangents[0], numeric[0], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(cotangents[1], numeric[1], rtol=1e-6, atol=1e-8)
    # `scale` is not in wrt: None, or its right cotangent.
    if cotangents[3] is not None:
        np.testing.assert_allclose(cotangents[3], numeric[2], rtol=1e-6, atol=1e-8)


def test_vjp_of_a_vector_valued_function():
    def g(x, W):
        return W @ np.sin(x)

    r = rng(3)
    x, W = r.normal(size=4), r.normal(size=(3, 4))
    out, back = bytegrad.vjp(g, x, W)
    np.testing.assert_allclose(out, g(x, W), rtol=1e-12)
    u = r.normal(size=3)
    x_bar, W_bar = back(u)
    np.testing.assert_allclose(x_bar, np.cos(x) * (W.T @ u), rtol=1e-10)
    np.testing.assert_allclose(W_bar, np.outer(u, np.sin(x)), rtol=1e-10)
    value, back2 = bytegrad.differentiate(g).pullback(x, W)
    np.testing.assert_allclose(back2(u)[0], x_bar, rtol=1e-12)


@pytest.mark.parametrize("make_out", [
    lambda s: float(s), lambda s: np.float64(s), lambda s: np.asarray(s), lambda s: np.float32(s),
], ids=["float", "float64", "0-d array", "float32 scalar"])
def test_grad_accepts_every_scalar_output(make_out):
    def f(x):
        return make_out(np.sum(x ** 2))

    x = rng(4).normal(size=3)
    x_bar = bytegrad.grad(f)(x)
    rtol = 1e-6 if make_out(1.0).__class__ is np.float32 else 1e-12
    np.testing.assert_allclose(x_bar, 2 * x, rtol=rtol)


# ---- gradients mirror inputs ----------------------------------------------------------------------


Pair = namedtuple("Pair", ["a", "b", "count"])


@dataclass
class Layer:
    W: np.ndarray
    b: np.ndarray
    gain: float
    name: str = "layer"
    active: bool = True


@dataclass(frozen=True)
class FrozenLayer:
    W: np.ndarray
    gain: float


def uses_dict(p):
    return np.sum(p["w"] ** 2) * p["s"] + p["k"]


def uses_ordered_dict(p):
    return np.sum(np.sin(p["first"]) * p["second"])


def uses_list(ws):
    return sum(np.sum(w ** 2) for w in ws) + ws[0][0] * ws[1][1]


def uses_tuple(t):
    return np.sum(t[0] * t[1]) + t[2]


def uses_namedtuple(p):
    return np.sum(p.a * p.b) * p.count


def uses_dataclass(layer):
    h = np.tanh(layer.W @ np.ones(3) + layer.b) * layer.gain
    return np.sum(h ** 2) if layer.active else 0.0


def uses_frozen_dataclass(layer):
    return np.sum(layer.W ** 2) * layer.gain


def uses_float(a):
    return a ** 3 + np.sin(a)


def uses_nested(tree):
    total = 0.0
    for name, item in tree.items():
        if name == "layers":
            for layer in item:
                total = total + uses_dataclass(layer)
        else:
            total = total + np.sum(item[0]) * item[1]
    return total


def _make_layer(r):
    return Layer(r.normal(size=(3, 3)), r.normal(size=3), float(r.uniform(0.5, 1.5)))


MIRROR_CASES = [
    (uses_dict, lambda r: {"w": r.normal(size=3), "s": 1.5, "k": 2}),
    (uses_ordered_dict, lambda r: OrderedDict([("first", r.normal(size=2)), ("second", r.normal(size=2))])),
    (uses_list, lambda r: [r.normal(size=3), r.normal(size=2)]),
    (uses_tuple, lambda r: (r.normal(size=2), r.normal(size=2), 0.5)),
    (uses_namedtuple, lambda r: Pair(r.normal(size=3), r.normal(size=3), 3)),
    (uses_dataclass, _make_layer),
    (uses_frozen_dataclass, lambda r: FrozenLayer(r.normal(size=(2, 2)), 0.7)),
    (uses_float, lambda r: float(r.normal())),
    (uses_nested, lambda r: {"layers": [_make_layer(r), _make_layer(r)], "extra": (r.normal(size=2), 2.0)}),
]


@pytest.mark.parametrize("fn, make", MIRROR_CASES, ids=[c[0].__name__ for c in MIRROR_CASES])
def test_gradient_mirrors_input(fn, make):
    x = make(rng(6))
    x_bar = check_grad(fn, (x,), 0)
    assert type(x_bar) is type(x)


@pytest.mark.parametrize("fn, make", [c for c in MIRROR_CASES if c[0] is not uses_float],
                         ids=[c[0].__name__ for c in MIRROR_CASES if c[0] is not uses_float])
def test_gradient_mirrors_float32_input(fn, make):
    from functions import to_float32

    x = to_float32(make(rng(7)))
    check_grad(fn, (x,), 0, rtol=2e-3, atol=2e-3)


def test_float32_array_gradient_is_float32():
    def f(x, W):
        return np.sum(np.tanh(W @ x) ** 2) + np.sum(x * np.linspace(0, 1, 3))  # float64 constant mixed in

    r = rng(8)
    x, W = r.normal(size=3).astype(np.float32), r.normal(size=(2, 3)).astype(np.float32)
    x_bar, W_bar = bytegrad.grad(f, wrt=(0, 1))(x, W)
    assert x_bar.dtype == np.float32 and W_bar.dtype == np.float32
    check_grad(f, (x, W), (0, 1), rtol=2e-3, atol=2e-3)


# ---- zeros ----------------------------------------------------------------------------------------


def test_output_independent_of_input_gives_zeros():
    def ignores_x(x, y):
        return np.sum(y ** 2)

    def constant(x):
        return 3.0

    r = rng(9)
    x, y = r.normal(size=(2, 3)), r.normal(size=4)
    x_bar = bytegrad.grad(ignores_x)(x, y)
    assert type(x_bar) is np.ndarray and x_bar.shape == x.shape and x_bar.dtype == x.dtype
    assert not np.any(x_bar)
    x32_bar = bytegrad.grad(ignores_x)(x.astype(np.float32), y)
    assert type(x32_bar) is np.ndarray and x32_bar.dtype == np.float32 and not np.any(x32_bar)
    c_bar = bytegrad.grad(constant)(x)
    assert type(c_bar) is np.ndarray and c_bar.shape == x.shape and not np.any(c_bar)
    f_bar = bytegrad.grad(constant)(0.5)
    assert type(f_bar) is float and f_bar == 0.0
    d_bar = bytegrad.grad(uses_dict)({"w": np.ones(3), "s": 0.0, "k": 1, "unused": np.ones(2)})
    assert set(d_bar) == {"w", "s", "k", "unused"}
    assert type(d_bar["unused"]) is np.ndarray and d_bar["unused"].shape == (2,) and not np.any(d_bar["unused"])
    assert not np.any(d_bar["w"]) and d_bar["k"] is None


def test_value_and_grad_of_constant():
    value, x_bar = bytegrad.value_and_grad(lambda x: 2.5)(np.ones(2))
    assert value == 2.5 and np.array_equal(x_bar, np.zeros(2))


# ---- keyword arguments ----------------------------------------------------------------------------


def scaled(x, scale=1.0, *, power=2):
    return scale * np.sum(x ** power)


def _first_of_args(*args):
    return args[0] * 2.0


def _a_of_kwargs(**kw):
    return kw["a"] * 2.0


@pytest.mark.parametrize("f", [
    lambda x: np.sum(_first_of_args(x, np.ones(3))),        # an untracked array beside it in *args
    lambda x: np.sum(_first_of_args(x, 1.0, "s")),
    lambda x: np.sum(_a_of_kwargs(a=x, b=np.ones(3))),      # and in **kwargs
], ids=["args-with-array", "args-with-scalars", "kwargs-with-array"])
def test_a_differentiated_value_in_star_args_or_kwargs(f):
    x = rng(12).normal(size=3)
    np.testing.assert_allclose(bytegrad.grad(f)(x), 2.0 * np.ones(3), rtol=1e-12)
    check_grad(f, (x,), 0)


@pytest.mark.parametrize("f", [
    lambda x: np.dot([x[0], x[1]], [1.0, 2.0]),
    lambda x: np.sum(np.outer([x[0], 1.0], x)),
    lambda x: np.sum(np.matmul([[x[0], x[1]]], x[1:])),
    lambda x: np.einsum("i,i->", [x[0], x[2]], x[:2]),
], ids=["dot", "outer", "matmul", "einsum"])
def test_a_list_of_differentiated_scalars_into_a_product(f):
    """These rules give a list argument's cotangent lazily (a thunk); it reaches each scalar."""
    check_grad(f, (rng(13).normal(size=3),), 0)


def test_kwargs_passed_through():
    f = bytegrad.differentiate(scaled)
    x = rng(10).normal(size=3)
    np.testing.assert_allclose(f.grad(x, scale=2.0), 4.0 * x, rtol=1e-12)
    np.testing.assert_allclose(f.grad(x), 2.0 * x, rtol=1e-12)
    np.testing.assert_allclose(f.grad(x, 3.0, power=3), 9.0 * x ** 2, rtol=1e-12)
    value, x_bar = f.value_and_grad(x, scale=2.0, power=3)
    np.testing.assert_allclose(value, 2.0 * np.sum(x ** 3), rtol=1e-12)
    np.testing.assert_allclose(x_bar, 6.0 * x ** 2, rtol=1e-12)
    assert f(x, scale=2.0) == scaled(x, scale=2.0)
    check_grad(f, (x,), 0, kwargs={"scale": 0.5, "power": 4})
    scale_bar = bytegrad.grad(scaled, wrt="scale")(x, scale=2.0)
    assert type(scale_bar) is float
    np.testing.assert_allclose(scale_bar, np.sum(x ** 2), rtol=1e-12)


def test_lambda_and_decorated_callee():
    square_sum = bytegrad.differentiate(lambda v: np.sum(v ** 2))
    x = rng(11).normal(size=3)
    np.testing.assert_allclose(square_sum.grad(x), 2 * x, rtol=1e-12)

    def outer(x):
        return square_sum(np.sin(x)) * 2.0  # a decorated function called from differentiated code

    check_grad(outer, (x,), 0)


def test_int_argument_by_position_is_wrt_error():
    with pytest.raises(bytegrad.WrtError):
        bytegrad.grad(lambda a, x: a * np.sum(x))(3, np.ones(2))


def test_gradients_in_threads():
    results, errors = {}, []

    def work(k):
        try:
            r = rng(100 + k)
            for _ in range(3):
                args = model_args(k)
                x_bar = bytegrad.grad(model, wrt=1)(*args)
                results.setdefault(k, []).append(np.allclose(x_bar, numerical_grad(model, args, 1), rtol=1e-6, atol=1e-8))
                x = r.normal(size=4)
                results[k].append(np.allclose(bytegrad.grad(three_args, wrt=2)(x, x, x), 2 * x * x, rtol=1e-12))
        except Exception as exc:  # noqa: BLE001 - report in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(all(v) for v in results.values()) and len(results) == 4


class Regressor:
    def __init__(self, X, y):
        self.X, self.y = X, y

    def loss(self, w, l2=0.1):
        return np.mean((self.X @ w - self.y) ** 2) + l2 * np.sum(w ** 2)


def test_grad_of_a_bound_method():
    r = rng(12)
    model_obj = Regressor(r.normal(size=(5, 3)), r.normal(size=5))
    w = r.normal(size=3)
    check_grad(model_obj.loss, (w,), 0)
    check_grad(model_obj.loss, (w,), 0, kwargs={"l2": 0.5})
    check_grad(bytegrad.differentiate(model_obj.loss), (w,), 0)


@bytegrad.differentiate
def decorated_recursive(x, n):
    if n == 0:
        return np.sum(np.sin(x))
    return decorated_recursive(x * 1.5, n - 1) + np.sum(x ** 2)


def test_decorated_function_calling_itself():
    """The global name is the decorated object: the plain call and the gradient both go through it."""
    x = rng(13).normal(size=3)
    check_grad(decorated_recursive, (x, 3), 0)
    expected = np.sum(np.sin(x * 1.5 ** 3)) + sum(np.sum((x * 1.5 ** k) ** 2) for k in range(3))
    np.testing.assert_allclose(decorated_recursive(x, 3), expected, rtol=1e-12)


# ---- aliasing, identity outputs, keyword-only calls, nested gradients -------------------------------


def a_times_b_squared(a, b):
    return np.sum(a * b ** 2)


def test_same_array_passed_twice():
    """Each argument slot gets its own partial derivative, even when the caller passes one array twice."""
    x = rng(14).normal(size=3)
    a_bar, b_bar = bytegrad.grad(a_times_b_squared, wrt=(0, 1))(x, x)
    np.testing.assert_allclose(a_bar, x ** 2, rtol=1e-12)
    np.testing.assert_allclose(b_bar, 2 * x * x, rtol=1e-12)
    # Only slot 0 differentiated: slot 1 holds the same array but is a constant.
    np.testing.assert_allclose(bytegrad.grad(a_times_b_squared, wrt=0)(x, x), x ** 2, rtol=1e-12)
    np.testing.assert_allclose(bytegrad.grad(a_times_b_squared, wrt=1)(x, x), 2 * x * x, rtol=1e-12)


def test_same_array_twice_in_a_pytree():
    """Tied weights: two dict entries holding one array each get their own partial derivative."""
    W = rng(15).normal(size=(2, 2))

    def tied(p):
        return np.sum(p["enc"] @ p["dec"] * 2.0) + np.sum(p["enc"] ** 3)

    check_grad(tied, ({"enc": W, "dec": W},), 0)


def test_identity_outputs():
    assert bytegrad.grad(lambda a: a)(2.0) == 1.0
    assert type(bytegrad.grad(lambda a: a)(2.0)) is float
    x0 = np.array(1.5)
    x_bar = bytegrad.grad(lambda x: x)(x0)
    assert type(x_bar) is np.ndarray and x_bar.shape == () and x_bar == 1.0
    np.testing.assert_array_equal(bytegrad.grad(lambda x: x[1])(np.zeros(3)), [0.0, 1.0, 0.0])
    value, back = bytegrad.vjp(lambda x: x, np.ones(2))
    np.testing.assert_array_equal(back(np.array([3.0, 4.0]))[0], [3.0, 4.0])


def test_numpy_float64_scalar_input():
    def f(s, x):
        return s * np.sum(x ** 2) + s ** 3

    s, x = np.float64(1.3), rng(16).normal(size=3)
    s_bar = check_grad(f, (s, x), 0)
    assert isinstance(s_bar, (float, np.floating))


def test_all_arguments_by_keyword():
    x, y, z = rng(17).normal(size=(3, 4))
    check_grad(three_args, (), "x", kwargs={"x": x, "y": y, "z": z})
    check_grad(bytegrad.differentiate(three_args, wrt=("z", "x")), (), ("z", "x"), kwargs={"x": x, "y": y, "z": z})


def test_positional_only_parameter_by_name():
    def f(x, /, y):
        return np.sum(np.exp(x) * y)

    x, y = rng(18).normal(size=(2, 3))
    check_grad(f, (x, y), "x")
    check_grad(f, (x,), "y", kwargs={"y": y})


def test_nested_gradient_is_right_or_refused():
    """grad of a function that calls grad: the second-order result, or a DifferentiationError; never wrong."""

    def inner(x):
        return np.sum(np.sin(x) * x)

    def outer(x):
        return np.sum(bytegrad.grad(inner)(x) ** 2)

    x = rng(19).normal(size=3)
    try:
        x_bar = bytegrad.grad(outer)(x)
    except bytegrad.DifferentiationError:
        return
    np.testing.assert_allclose(x_bar, numerical_grad(outer, (x,), 0), rtol=1e-5, atol=1e-6)


def test_argument_types_changing_between_calls():
    """The same function with a non-differentiated argument that is an int, then a float, then an array."""

    def f(x, scale):
        return np.sum(np.tanh(x) * scale)

    d = bytegrad.differentiate(f)
    x = rng(20).normal(size=3)
    for scale in (2, 2.5, np.array([1.0, 2.0, 3.0]), 2, True):
        np.testing.assert_allclose(d.grad(x, scale), (1 - np.tanh(x) ** 2) * scale, rtol=1e-12)
