"""Arrays a compiled program reads without receiving them as differentiated arguments: an array in a
callee's closure cell (a loss built by a factory), and what a function asks of an integer array's
shape (`len(labels)`). Each is compared call by call with tier="general" under the numpy and numba
tiers, with what it reads changed between calls; what a program would fold into a constant is refused
with a reason naming the construct and line.
"""
from __future__ import annotations

import functools
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gradcheck import assert_trees_close

import bytegrad

TIERS = ("numpy", "numba")


def _run(fn, calls, tier, between=None):
    fast = bytegrad.differentiate(fn, tier=tier)
    general = bytegrad.differentiate(fn, tier="general")
    for k, args in enumerate(calls):
        if between is not None:
            between(k)
        assert_trees_close(fast.value_and_grad(*args), general.value_and_grad(*args), rtol=1e-12, atol=1e-300)
    return fast.stats()["compiled"]


# ---- a callee's closure cell holding an array: read per call; what it computes alone refused ------


def _factory(X, y):
    def loss(w):
        r = X @ w - y
        return 0.5 * np.sum(r ** 2) / X.shape[0]

    def rebind(newX, newy):
        nonlocal X, y
        X, y = newX, newy
    return loss, rebind


@pytest.mark.parametrize("tier", TIERS)
def test_a_loss_made_by_a_factory_compiles_and_reads_its_data_per_call(tier):
    rng = np.random.default_rng(0)
    loss, rebind = _factory(rng.normal(size=(6, 3)), rng.normal(size=6))

    def f(w):
        return loss(w) + 0.1 * np.sum(w ** 2)

    def change(k):
        if k == 2:
            loss.__closure__[0].cell_contents[0] *= -2.0  # the data written in place
        elif k == 3:
            rebind(rng.normal(size=(6, 3)), rng.normal(size=6))  # new data, the same shapes
        elif k == 4:
            rebind(rng.normal(size=(9, 3)), rng.normal(size=9))

    s = _run(f, [(np.array([0.3, -0.1, 0.7]),)] * 6, tier, change)
    assert s["programs"] and s["compiled_calls"] >= 5, s


def _cell_maker(kind):
    """A callee reading the array in its closure cell `W` in the way `kind` names."""
    def make(W):
        def weighted(v):
            if kind == "np.sum":
                return v * np.sum(W)
            if kind == "float(W[i, j])":
                return v * float(W[0, 1])
            if kind == "W.max()":
                return v * W.max()
            return v @ W.T[0]

        def rebind(new):
            nonlocal W
            W = new
        return weighted, rebind
    return make


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("kind", ["np.sum", "float(W[i, j])", "W.max()", "W.T[0]"])
def test_what_a_callee_computes_from_a_cell_array_alone_is_refused(tier, kind):
    """The capture meets a callee's cell only when the run calls it: the array is not tracked, so
    `np.sum(W)` is not recorded; a program would keep the capture's sum. Refused, and the cell
    rebound to an array of the same shape gives the general path's values (it would not if the
    check were removed: the program would run)."""
    rng = np.random.default_rng(1)
    weighted, rebind = _cell_maker(kind)(rng.normal(size=(3, 3)))

    def f(x):
        return np.sum(weighted(x) ** 2)

    s = _run(f, [(rng.normal(size=3),)] * 4, tier, lambda k: k == 2 and rebind(rng.normal(size=(3, 3))))
    assert not s["programs"], s
    reason = next(iter(s["not_compiled"].values()))
    assert "array held by a closure variable" in reason or "reads an array computed without the arguments" in reason, \
        reason
    assert "line" in reason, reason


@pytest.mark.parametrize("tier", TIERS)
def test_a_cell_arrays_shape_is_guarded_not_refused(tier):
    rng = np.random.default_rng(2)

    def make(W):
        def scaled(v):
            return v * W.shape[0] + v * len(W) + v @ W

        def rebind(new):
            nonlocal W
            W = new
        return scaled, rebind

    scaled, rebind = make(rng.normal(size=(3, 3)))

    def f(x):
        return np.sum(scaled(x) ** 2)

    s = _run(f, [(rng.normal(size=3),)] * 4, tier, lambda k: k == 2 and rebind(rng.normal(size=(3, 3))))
    assert s["programs"], s


# ---- the shape of an integer array argument: guarded, so `len(labels)` needs no record ------------


def _pick(logits, labels):
    rows = np.arange(len(labels))
    return -np.sum(logits[rows, labels]) / np.size(labels) + np.ndim(labels)


@pytest.mark.parametrize("tier", TIERS)
def test_len_of_an_integer_array_argument_compiles(tier):
    rng = np.random.default_rng(3)
    calls = [(rng.normal(size=(5, 3)), rng.integers(0, 3, 5)) for _ in range(3)]
    calls.append((rng.normal(size=(7, 3)), rng.integers(0, 3, 7)))  # another length: another program
    s = _run(_pick, calls, tier)
    assert s["programs"] and s["compiled_calls"] >= 3, s


def _first_label(logits, labels):
    return logits[0, 0] * labels[0] + logits[1, 1] * labels.sum()


@pytest.mark.parametrize("tier", TIERS)
def test_an_integer_arrays_values_read_unrecorded_are_still_refused(tier):
    rng = np.random.default_rng(4)
    calls = [(rng.normal(size=(5, 3)), rng.integers(0, 3, 5)) for _ in range(3)]
    s = _run(_first_label, calls, tier)
    assert not s["programs"], s
    reason = next(iter(s["not_compiled"].values()))
    assert "integer or boolean array argument" in reason or "not an argument" in reason, reason


# ---- zip over containers holding arrays (bytegrad's zip compares no item) ----------------------------

_ACTS = {"tanh": np.tanh, "linear": lambda z: z}


def _layers_loss(params, x, names=("tanh", "linear")):
    h = x
    for layer, name in zip(params, names):
        h = _ACTS[name](h @ layer["W"] + layer["b"])
    return np.mean(h ** 2)


@pytest.mark.parametrize("tier", TIERS)
def test_zip_over_dict_layers_and_names_compiles(tier):
    rng = np.random.default_rng(5)

    def params():
        return [{"W": rng.normal(size=(3, 4)), "b": rng.normal(size=4)},
                {"W": rng.normal(size=(4, 2)), "b": rng.normal(size=2)}]

    s = _run(lambda p, x: _layers_loss(p, x), [(params(), rng.normal(size=(5, 3))) for _ in range(3)], tier)
    assert s["programs"] and s["compiled_calls"] >= 2, s


# ---- an object built in the call from objects built in the call ----------------------------------


class _Linear:
    def __init__(self, W):
        self.W = W

    def __call__(self, x):
        return x @ self.W


class _Net:
    scale = 1.0

    def __init__(self, layers, activation=np.tanh):
        self.layers = layers
        self.activation = activation

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.scale * self.layers[-1](x)


def _net_loss(W1, W2, x):
    net = _Net([_Linear(W1), _Linear(W2)])
    return np.sum(net.forward(x) ** 2)


@pytest.mark.parametrize("tier", TIERS)
def test_a_model_built_of_layers_built_in_the_call_compiles(tier):
    """`_Net([...])` holds no differentiated value itself, only layers the run built: it is a local
    of the call too (its `__init__` followed, its class guarded). A changed class attribute and a
    changed default of `__init__` are seen."""
    rng = np.random.default_rng(6)
    fast = bytegrad.differentiate(_net_loss, wrt=(0, 1), tier=tier)
    general = bytegrad.differentiate(_net_loss, wrt=(0, 1), tier="general")
    saved = _Net.__init__.__defaults__
    try:
        for k in range(6):
            if k == 3:
                _Net.scale = 2.0
            if k == 4:
                _Net.__init__.__defaults__ = (np.sin,)
            args = (rng.normal(size=(3, 4)), rng.normal(size=(4, 2)), rng.normal(size=(5, 3)))
            assert_trees_close(fast.value_and_grad(*args), general.value_and_grad(*args), rtol=1e-12, atol=1e-300)
    finally:
        _Net.scale = 1.0
        _Net.__init__.__defaults__ = saved
    s = fast.stats()["compiled"]
    assert s["programs"] and s["compiled_calls"] >= 3, s


# ---- a model at module level: taken apart by the capture, walked at each call --------------------


class _Model:
    def __init__(self, W, scale):
        self.W = W
        self.scale = scale

    def predict(self, x):
        return self.scale * np.tanh(x @ self.W)


class _Counting:
    def __init__(self):
        self.calls = 0

    def apply(self, x):
        self.calls += 1
        return 2.0 * x


MODEL = _Model(np.random.default_rng(7).normal(size=(3, 2)), 1.5)
COUNTER = _Counting()


def _global_model_loss(x):
    return np.sum(MODEL.predict(x) ** 2)


def _global_counter_loss(x):
    return np.sum(COUNTER.apply(x) ** 2)


@pytest.mark.parametrize("tier", TIERS)
def test_a_model_at_module_level_compiles_and_is_read_per_call(tier):
    """`MODEL.predict(x)` with MODEL a global object: its arrays are inputs read at each call, its
    numbers guarded by value, its class by identity. Each change below is seen (a program that
    held the capture's object or values would give another gradient)."""
    global MODEL
    saved = MODEL
    rng = np.random.default_rng(8)

    def change(k):
        global MODEL
        if k == 2:
            MODEL.W[0, 0] += 1.0  # in place
        elif k == 3:
            MODEL.W = rng.normal(size=(3, 2))  # an attribute rebound
        elif k == 4:
            MODEL.scale = -0.5  # a number changed
        elif k == 5:
            MODEL = _Model(rng.normal(size=(3, 2)), 1.5)  # the global rebound
        elif k == 6:
            MODEL.W = rng.normal(size=(3, 4))  # another shape

    try:
        s = _run(_global_model_loss, [(rng.normal(size=(4, 3)),) for _ in range(8)], tier, change)
    finally:
        MODEL = saved
    assert s["programs"] and s["compiled_calls"] >= 5, s


@pytest.mark.parametrize("tier", TIERS)
def test_a_global_object_written_by_a_method_stays_general(tier):
    """`self.calls += 1` on a global object: a replay would not count; refused, and the count is the
    general path's (once per call)."""
    COUNTER.calls = 0
    fast = bytegrad.differentiate(_global_counter_loss, tier=tier)
    x = np.array([0.5, -1.0])
    for _ in range(4):
        fast.grad(x)
    assert COUNTER.calls == 4
    s = fast.stats()["compiled"]
    assert not s["programs"], s


def _ridge(w, X, *, alpha=0.5):
    return np.sum((X @ w) ** 2) + alpha * np.sum(w ** 2)


RIDGE = functools.partial(_ridge, alpha=0.1)


def _global_partial_loss(w, X):
    return RIDGE(w, X)


@pytest.mark.parametrize("tier", TIERS)
def test_a_partial_at_module_level_is_guarded_by_its_state_not_walked(tier):
    """A global partial is a callee fixed by its function, arguments and keywords (not an object the
    capture takes apart: that refused it): its keywords changed in place between calls are seen."""
    rng = np.random.default_rng(9)
    saved = dict(RIDGE.keywords)
    try:
        s = _run(_global_partial_loss, [(rng.normal(size=3), rng.normal(size=(4, 3))) for _ in range(5)], tier,
                 lambda k: k == 3 and RIDGE.keywords.update(alpha=2.0))
    finally:
        RIDGE.keywords.clear()
        RIDGE.keywords.update(saved)
    assert s["programs"] and s["compiled_calls"] >= 3, s
