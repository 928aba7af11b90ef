"""`bytegrad.checkpoint`: the same derivatives as without it (to 1e-12, and against finite
differences), with one record per call instead of its intermediates; arrays, floats, containers,
ints and flags, closures, methods, nested checkpoints, float32, forward mode and second order.
"""
from __future__ import annotations

import inspect
import os
import pickle
import sys
import tracemalloc
import warnings

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import functions as catalogue
from gradcheck import assert_trees_close, check_grad
from test_catalogue import make_inputs

import bytegrad
from bytegrad import checkpoint

R = np.random.default_rng(0)
X = R.normal(size=6)
W = R.normal(size=6)
DT = 0.05


def plain(fn):
    return fn


WRAPS = [pytest.param(plain, id="plain"), pytest.param(checkpoint, id="checkpoint")]


def general(f, wrt=0):
    return bytegrad.differentiate(f, wrt=wrt, tier="general")


def loop(x, w, wrap=plain, n=40):
    """A time-stepping loop whose step reads `w` from its closure."""
    @wrap
    def step(x):
        return x + DT * np.sin(x) * w
    for _ in range(n):
        x = step(x)
    return np.sum(x ** 2)


def both(f, *args, wrt=0):
    """The gradient of f(*args, wrap) without and with checkpointing."""
    g0 = general(lambda *a: f(*a, plain), wrt).grad(*args)
    g1 = general(lambda *a: f(*a, checkpoint), wrt).grad(*args)
    return g0, g1


def assert_same(g0, g1, rtol=1e-12):
    if isinstance(g0, dict):
        assert g0.keys() == g1.keys()
        for k in g0:
            assert_same(g0[k], g1[k], rtol)
    elif isinstance(g0, (tuple, list)):
        assert type(g0) is type(g1) and len(g0) == len(g1)
        for a, b in zip(g0, g1):
            assert_same(a, b, rtol)
    else:
        assert type(g0) is type(g1)
        assert np.asarray(g0).dtype == np.asarray(g1).dtype
        np.testing.assert_allclose(g1, g0, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("wrt", [0, 1, (0, 1)])
def test_a_loop_body_gives_the_gradient_it_gives_without_checkpointing(wrt):
    g0, g1 = both(loop, X, W, wrt=wrt)
    assert_same(g0, g1)
    check_grad(lambda x, w: loop(x, w, checkpoint), (X, W), wrt=wrt)


def test_float32_stays_float32_and_matches():
    x, w = X.astype(np.float32), W.astype(np.float32)
    g0, g1 = both(loop, x, w, wrt=(0, 1))
    assert g1[0].dtype == np.float32 and g1[1].dtype == np.float32
    assert_same(g0, g1, rtol=1e-6)


def test_outside_a_gradient_it_just_calls_the_function():
    def f(x, k=2):
        return x * k

    c = checkpoint(f)
    assert c(3.0) == 6.0 and c(3.0, k=3) == 9.0
    assert c.fn is f and c.__name__ == "f" and checkpoint(c) is c
    with pytest.raises(TypeError, match="callable"):
        checkpoint(3)


def model(params, x, flags, wrap=plain):
    """Containers in and out, an int and a flag, a keyword argument."""
    @wrap
    def layer(p, h, k, relu=False, scale=1.0):
        z = h @ p["W"] + p["b"]
        a = np.maximum(z, 0.0) if relu else np.tanh(z)
        return {"out": a * scale, "both": (a, z[:k])}

    r1 = layer(params[0], x, 2, relu=flags[0], scale=params[2])
    r2 = layer(params[1], r1["out"], 1, relu=flags[1])
    return np.sum(r2["out"] ** 2) + np.sum(r1["both"][1] * 3.0) + np.sum(r2["both"][0])


def model_args():
    r = np.random.default_rng(1)
    params = [{"W": r.normal(size=(4, 5)), "b": r.normal(size=5)},
              {"W": r.normal(size=(5, 3)), "b": r.normal(size=3)}, 0.7]
    return params, r.normal(size=(2, 4))


@pytest.mark.parametrize("flags", [(False, True), (True, False)])
def test_containers_ints_flags_and_keywords(flags):
    params, x = model_args()
    g0, g1 = both(model, params, x, flags, wrt=(0, 1))
    assert_same(g0, g1)
    check_grad(lambda p, x: model(p, x, flags, checkpoint), (params, x), wrt=(0, 1))


def test_a_value_read_only_through_the_closure_gets_its_gradient():
    def f(w, wrap):
        @wrap
        def scaled(c):  # the argument is a constant; w comes from the closure
            return np.sin(c * w)
        return np.sum(scaled(np.ones(3)) * scaled(2.0))

    w = np.array([0.3, -0.2, 1.1])
    g0, g1 = both(f, w)
    assert_same(g0, g1)
    assert np.all(g1 != 0)


class Cell:
    def __init__(self, a):
        self.a = a

    @checkpoint
    def forward(self, x, w):
        return np.tanh(self.a * x @ w)


def test_a_checkpointed_method():
    cell = Cell(0.5)
    w = R.normal(size=(6, 6))

    def f(x, w):
        h = x
        for _ in range(3):
            h = cell.forward(h, w)
        return np.sum(h)

    def f_plain(x, w):
        h = x
        for _ in range(3):
            h = Cell.forward.fn(cell, h, w)
        return np.sum(h)

    assert_same(general(f_plain, (0, 1)).grad(X, w), general(f, (0, 1)).grad(X, w))


def blocks(x, w, wrap=plain, n=36, size=6):
    """sqrt(n) segments: each block is checkpointed, and so is each step inside it."""
    @wrap
    def step(x):
        return x + DT * np.sin(x) * w

    @wrap
    def block(x):
        for _ in range(size):
            x = step(x)
        return x

    for _ in range(n // size):
        x = block(x)
    return np.sum(x ** 2)


def test_nested_checkpoints():
    g0, g1 = both(blocks, X, W, wrt=(0, 1))
    assert_same(g0, g1)


def peak_bytes(f, *args):
    d = general(f)
    d.grad(*args)  # warm: rewrites done
    tracemalloc.start()
    try:
        d.grad(*args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_tape_keeps_the_inputs_of_each_call_and_nothing_in_between():
    x, w = np.linspace(0.0, 1.0, 2000), np.linspace(1.0, 2.0, 2000)  # 16 KB per array
    n = 144
    full = peak_bytes(lambda x, w: loop(x, w, plain, n), x, w)
    steps = peak_bytes(lambda x, w: loop(x, w, checkpoint, n), x, w)
    segments = peak_bytes(lambda x, w: blocks(x, w, checkpoint, n, 12), x, w)
    assert full > n * 2 * 16_000  # several arrays per step without checkpointing
    assert steps < 0.7 * full      # one array per step (the step's output)
    assert segments < 0.2 * full   # 12 block inputs + one block's 12 step outputs


def test_second_order_through_a_checkpointed_function():
    f0 = lambda x, w: loop(x, w, plain, 10)  # noqa: E731
    f1 = lambda x, w: loop(x, w, checkpoint, 10)  # noqa: E731
    v = np.linspace(-1.0, 1.0, 6)
    assert_same(bytegrad.hvp(f0, (X, W), (v, v)), bytegrad.hvp(f1, (X, W), (v, v)))
    assert_same(bytegrad.hessian(f0)(X, W), bytegrad.hessian(f1)(X, W))
    gg0 = bytegrad.grad(lambda x: np.sum(bytegrad.grad(f0)(x, W) ** 2))(X)
    gg1 = bytegrad.grad(lambda x: np.sum(bytegrad.grad(f1)(x, W) ** 2))(X)
    assert_same(gg0, gg1)


def test_forward_mode_through_a_checkpointed_function():
    def f(x, wrap):
        @wrap
        def pair(x):
            return np.sin(x) * W, {"sq": x ** 2}
        a, b = pair(x)
        c, _ = pair(a)
        return a * b["sq"] + c

    v = np.linspace(-1.0, 1.0, 6)
    out0, dot0 = bytegrad.jvp(lambda x: f(x, plain), (X,), (v,))
    out1, dot1 = bytegrad.jvp(lambda x: f(x, checkpoint), (X,), (v,))
    assert_same(out0, out1)
    assert_same(dot0, dot1)
    assert_same(bytegrad.jacobian(lambda x: f(x, plain), mode="fwd")(X),
                bytegrad.jacobian(lambda x: f(x, checkpoint), mode="fwd")(X))
    assert_same(bytegrad.jacobian(lambda x: f(x, plain), mode="rev")(X),
                bytegrad.jacobian(lambda x: f(x, checkpoint), mode="rev")(X))


def test_vjp_of_a_tuple_output():
    def f(x, w, wrap):
        @wrap
        def two(x):
            return np.exp(x) * w, np.cos(x)
        a, b = two(x)
        return a + b, b * 2.0

    ct = (np.ones(6), np.linspace(0.0, 1.0, 6))
    _, back0 = bytegrad.vjp(lambda x, w: f(x, w, plain), X, W)
    _, back1 = bytegrad.vjp(lambda x, w: f(x, w, checkpoint), X, W)
    assert_same(back0(ct), back1(ct))


def test_an_output_that_is_an_input_and_an_untracked_output():
    def f(x, wrap):
        @wrap
        def g(x):
            return x, np.sin(x), 3.0, np.asarray(x)
        a, b, c, d = g(x)
        return np.sum(a * b * c + d ** 2)

    assert_same(*both(f, X))


def test_where_masks_stay_nan_safe():
    def f(x, wrap):
        root = wrap(lambda x: np.sqrt(-x))
        return np.sum(np.where(x >= 0, x, root(x)))

    x = np.array([1.0, 4.0])
    with np.errstate(invalid="ignore"):
        g0, g1 = both(f, x)
    assert_same(g0, g1)
    assert g1.tolist() == [1.0, 1.0]


def test_compiled_tiers_fall_back_to_the_general_path():
    step = checkpoint(lambda x, w: x + DT * np.sin(x) * w)

    def f(x, w):
        for _ in range(5):
            x = step(x, w)
        return np.sum(x ** 2)

    expected = general(f).grad(X, W)
    for tier in ("numpy", "auto"):
        d = bytegrad.differentiate(f, tier=tier)
        for _ in range(4):
            assert_same(expected, d.grad(X, W))


def stencil_loop(x, wrap):
    @wrap
    def stencil(x):  # allocate-then-fill, and in-place operators, on arrays the function made
        new = np.empty_like(x)
        new[1:-1] = x[:-2] - 2.0 * x[1:-1] + x[2:]
        new[0] = new[-1] = 0.0
        new *= 0.1
        return x + new
    for _ in range(3):
        x = stencil(x)
    return np.sum(np.sin(x))


def test_writes_into_arrays_the_function_made_are_collapsed_with_it():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g0, g1 = both(stencil_loop, X)
    assert_same(g0, g1)
    check_grad(lambda x: stencil_loop(x, checkpoint), (X,))


def test_writes_into_an_outside_array_keep_the_call_with_a_warning():
    def f(x, wrap):
        buf = x * 1.0  # tracked, made outside the checkpointed function

        @wrap
        def bump(y):
            buf[1:3] = y[:2] ** 2  # writes into buf
            return np.sum(buf * y)

        return bump(np.cos(x)) + np.sum(buf ** 3)

    g0 = general(lambda x: f(x, plain)).grad(X)
    with pytest.warns(bytegrad.PerformanceWarning, match="kept on the tape"):
        g1 = general(lambda x: f(x, checkpoint)).grad(X)
    assert_same(g0, g1)


TRAJECTORY = np.zeros((3, 6))


def test_writing_into_an_untracked_outside_array_is_an_error_naming_the_line():
    @checkpoint
    def step(x, i):
        y = x + np.sin(x)
        TRAJECTORY[i] = y  # the line the error names
        return y

    def f(x):
        for i in range(3):
            x = step(x, i)
        return np.sum(TRAJECTORY ** 2)

    with pytest.raises(bytegrad.DifferentiationError, match=r"TRAJECTORY\[i\] = y"):
        general(f).grad(X)


KEPT = []


def test_a_value_kept_outside_the_function_is_an_error_naming_its_line():
    @checkpoint
    def leaky(x):
        h = np.sin(x)
        KEPT.append(h)  # the line the error names
        return np.cos(h)

    def f(x):
        return np.sum(leaky(x)) + np.sum(KEPT[-1])

    with pytest.raises(bytegrad.DifferentiationError) as info:
        general(f).grad(X)
    KEPT.clear()
    message = str(info.value)
    assert "h = np.sin(x)" in message and "return the value" in message


def test_an_error_inside_names_the_users_line():
    @checkpoint
    def bad(x):
        return np.linalg.qr(np.outer(x, x), mode="raw")[0] * 2.0  # qr's raw mode has no rule

    with pytest.raises(bytegrad.DifferentiationError, match=r"mode=\"raw\"\)\[0\] \* 2.0"):
        general(lambda x: np.sum(bad(x))).grad(X)


def test_a_function_that_computes_something_else_when_rerun_is_an_error():
    calls = []

    @checkpoint
    def moody(x):
        calls.append(1)
        return (np.sin(x),) if len(calls) == 1 else (np.sin(x), np.cos(x))

    with pytest.raises(bytegrad.DifferentiationError, match="deterministic"):
        general(lambda x: np.sum(moody(x)[0])).grad(X)


@checkpoint
def module_step(x):
    return np.sin(x) * 2.0


def test_a_module_level_checkpointed_function_pickles_by_reference():
    assert pickle.loads(pickle.dumps(module_step)) is module_step
    g = pickle.loads(pickle.dumps(bytegrad.grad(lambda x: np.sum(module_step(x)))))  # cloudpickle
    np.testing.assert_allclose(g(X), 2.0 * np.cos(X))


def test_debug_nans_names_the_line_inside_the_rerun(monkeypatch):
    monkeypatch.setattr(bytegrad.config, "debug_nans", True)

    @checkpoint
    def root(x):
        return np.sqrt(x)  # infinite derivative at 0

    with warnings.catch_warnings(), pytest.raises(bytegrad.NaNError, match=r"np.sqrt\(x\)"):
        warnings.simplefilter("ignore")
        general(lambda x: np.sum(root(x))).grad(np.array([0.0, 1.0]))


def test_a_derivative_taken_inside_the_checkpointed_function():
    def energy(x):
        return np.sum(np.cos(x) * W + x ** 4 / 4.0)

    def f(x, wrap):
        @wrap
        def descend(x):  # a gradient step: a nested derivative inside the segment
            return x - 0.1 * bytegrad.grad(energy)(x)
        for _ in range(4):
            x = descend(x)
        return np.sum(x ** 2)

    assert_same(*both(f, X))
    check_grad(lambda x: f(x, checkpoint), (X,))


def test_second_order_where_the_checkpointed_call_is_outside_the_inner_derivative():
    def f(x, wrap):
        y = wrap(lambda x: np.sin(x) * W)(x)
        return np.sum(bytegrad.grad(lambda y: np.sum(np.tanh(y) ** 2))(y) * x)

    assert_same(*both(f, X))
    v = np.linspace(-1.0, 1.0, 6)
    assert_same(bytegrad.hvp(lambda x: f(x, plain), (X,), (v,)), bytegrad.hvp(lambda x: f(x, checkpoint), (X,), (v,)))


def mlp(params, x, wrap=plain):
    @wrap
    def dense(W, b, h):  # the fused `tanh(W @ h + b)` site: its tiers release what they can
        return np.tanh(W @ h + b[:, None])

    h = dense(params["W1"], params["b1"], x)
    h = dense(params["W2"], params["b2"], h)
    return np.sum(h ** 2)


def test_layers_with_fused_sites_over_many_calls():
    r = np.random.default_rng(2)
    params = {"W1": r.normal(size=(16, 8)), "b1": r.normal(size=16),
              "W2": r.normal(size=(4, 16)), "b2": r.normal(size=4)}
    x = r.normal(size=(8, 32))
    d0 = general(lambda p, x: mlp(p, x, plain))
    d1 = general(lambda p, x: mlp(p, x, checkpoint))
    for _ in range(6):
        assert_same(d0.grad(params, x), d1.grad(params, x))


def _positional(fn, wrt):
    """`wrt` with parameter names replaced by positions (the wrapper below has no named parameters)."""
    names = list(inspect.signature(fn).parameters)
    if isinstance(wrt, tuple):
        return tuple(_positional(fn, w) for w in wrt)
    return names.index(wrt) if isinstance(wrt, str) else wrt


def _calling(wrapped):
    """A differentiated function that calls `wrapped` (a fresh code object per case: no recompile warning)."""
    namespace = {"wrapped": wrapped}
    exec("def calls(*args, **kwargs):\n    return wrapped(*args, **kwargs)\n", namespace)  # noqa: S102
    return namespace["calls"]


def catalogue_cases():
    return [pytest.param(c, f32, id=f"{c.id}{'-f32' if f32 else ''}")
            for f32, cases in ((False, catalogue.CASES), (True, catalogue.FLOAT32_CASES)) for c in cases]


@pytest.mark.parametrize("case, float32", catalogue_cases())
def test_every_catalogue_program_checkpointed_whole(case, float32):
    """Each program of tests/functions.py called through checkpoint from a differentiated wrapper:
    the plain gradient, with no call kept on the tape (module_level_state leaves values in module
    attributes, which is refused)."""
    wrapped = checkpoint(case.fn)
    wrt = _positional(case.fn, case.wrt)
    d0 = general(case.fn, case.wrt)
    d1 = general(_calling(wrapped), wrt)
    args, kwargs = make_inputs(case, 0, float32)
    g0 = d0.grad(*args, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", bytegrad.PerformanceWarning)
        if case.id == "module_level_state":
            with pytest.raises(bytegrad.DifferentiationError, match="left it somewhere besides"):
                d1.grad(*args, **kwargs)
            return
        g1 = d1.grad(*args, **kwargs)
    tol = 1e-6 if float32 else 1e-10
    assert_trees_close(g1, g0, rtol=tol, atol=tol)


def test_an_exception_only_the_rerun_meets_names_its_line():
    calls = []

    @checkpoint
    def once(x):
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("second call")  # the line the error names
        return np.sin(x)

    with pytest.raises(bytegrad.DifferentiationError, match=r"(?s)raise RuntimeError.*ran it again"):
        general(lambda x: np.sum(once(x))).grad(X)


def test_local_writes_free_their_memory():
    x = np.linspace(0.0, 1.0, 2000)
    full = peak_bytes(lambda x: stencil_loop(x, plain), x)
    collapsed = peak_bytes(lambda x: stencil_loop(x, checkpoint), x)
    assert collapsed < 0.8 * full


def test_an_argument_buffer_overwritten_after_each_call():
    """A workspace passed to each step and refilled in place before the next one: the tape keeps a
    copy for each call's rerun, as it does for the records it would have kept."""
    forcing = np.linspace(-1.0, 1.0, 6)

    def f(x, wrap):
        step = wrap(lambda x, b: x + 0.1 * np.sin(x) * b)
        buf = np.empty(6)
        for k in range(4):
            buf[:] = forcing * k  # untracked, overwritten after each call read it
            x = step(x, buf)
        return np.sum(x ** 2)

    assert_same(*both(f, X))


SHARED = np.linspace(0.5, 1.5, 6)


def test_an_array_read_from_a_global_and_overwritten_after_the_call_is_an_error():
    @checkpoint
    def step(x):
        return np.sin(x) * SHARED

    def f(x):
        y = step(x)
        SHARED[:] = 2.0  # overwrites what step read, before the reverse pass
        return np.sum(y)

    before = SHARED.copy()
    try:
        with pytest.raises(bytegrad.DifferentiationError, match="overwritten in place after this call"):
            general(f).grad(X)
    finally:
        SHARED[:] = before


def test_an_iterator_argument_keeps_the_call():
    def f(x, wrap):
        total = wrap(lambda items, w: np.sum(np.stack(list(items)) * w))
        return total(iter([np.sin(x), x ** 2]), W)

    g0 = general(lambda x: f(x, plain)).grad(X)
    with pytest.warns(bytegrad.PerformanceWarning, match="iterator"):
        g1 = general(lambda x: f(x, checkpoint)).grad(X)
    assert_same(g0, g1)
