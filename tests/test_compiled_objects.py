"""Models as objects in compiled programs (compiled/objects.py): object arguments, bound methods,
partials and callable objects as the differentiated function, methods as callees.

Each test runs the compiled tiers (numpy, numba) beside the general path call by call and compares
values and gradients exactly; between calls it changes what the program guards or reads (an
in-place write into `model.W`, `model.W` rebound, `model.scale` set, a layer appended, a new
partial), and each change must be seen. The `guard-omitted` tests drop one kind of guard and
show the program then gives another result: the guard is what keeps it right.
"""
from __future__ import annotations

import functools
import types
from dataclasses import dataclass

import numpy as np
import pytest

from gradcheck import assert_same_call, assert_trees_close

import bytegrad
from bytegrad.compiled import source as program_source

TIERS = ["numpy", "numba"]


def _same(a, b) -> bool:
    """Whether two results agree (gradcheck.py's terms for `assert_same_call(..., atol=0.0)`), for the
    tests that show a result changes without a guard."""
    try:
        assert_trees_close(a, b, rtol=1e-12, atol=0.0)
    except AssertionError:
        return False
    return True


def _info(d) -> dict:
    return d.stats()["compiled"]


def fresh(fn):
    """A copy of `fn`: programs are kept per function object, so a copy starts with none."""
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _compiled_calls(d) -> int:
    return _info(d)["compiled_calls"]


class Model:
    def __init__(self, W, scale):
        self.W = W
        self.scale = scale

    def __call__(self, x):
        return self.scale * np.tanh(self.W @ x)

    def loss(self, x, y):
        return np.sum((self(x) - y) ** 2) + self.square(self.scale) * np.sum(x)

    @staticmethod
    def square(v):
        return v * v

    @classmethod
    def offset(cls, x):
        return cls.square(x) * 0.5


class OtherModel(Model):
    def __call__(self, x):
        return self.scale * np.sin(self.W @ x)


class Layer:
    def __init__(self, W, b):
        self.W = W
        self.b = b

    def __call__(self, h):
        return np.tanh(self.W @ h + self.b)


class Stack:
    def __init__(self, layers, cfg):
        self.layers = layers
        self.cfg = cfg

    def loss(self, x):
        h = x
        for layer in self.layers:
            h = layer(h)
        return self.cfg.scale * np.sum(h ** 2)


class Config:
    def __init__(self, scale):
        self.scale = scale


@dataclass
class Params:
    w: np.ndarray
    b: float
    steps: int = 2


def model_loss(x, model, y):
    return model.loss(x, y) + np.sum(Model.offset(x))


def stack_loss(x, stack):
    return stack.loss(x)


def dataclass_loss(x, p):
    z = x * p.w + p.b
    for _ in range(p.steps):
        z = np.tanh(z)
    return np.sum(z ** 2)


def scaled(x, k, scale=1.0):
    return scale * np.sum(np.sin(x) ** k)


def _rng_arrays(seed, *shapes):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s) for s in shapes]


# ---- object arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize("tier", TIERS)
def test_model_argument_compiles_and_sees_each_change(tier):
    x, y, W = _rng_arrays(0, 3, 3, (3, 3))
    model = Model(W.copy(), 0.5)
    fast = bytegrad.differentiate(fresh(model_loss), tier=tier)
    general = bytegrad.differentiate(model_loss, tier="general")
    for _ in range(3):
        assert_same_call(fast, general, (x, model, y), atol=0.0)
    assert len(_info(fast)["programs"]) == 1
    before = _compiled_calls(fast)
    model.W[0, 0] += 0.75  # in place: the program reads model.W at call time
    assert_same_call(fast, general, (x, model, y), atol=0.0)
    model.W = W * 2.0  # rebound
    assert_same_call(fast, general, (x, model, y), atol=0.0)
    assert _compiled_calls(fast) == before + 2
    model.scale = 2.0  # a guarded value: a new capture
    assert_same_call(fast, general, (x, model, y), atol=0.0)
    assert_same_call(fast, general, (x, model, y), atol=0.0)
    model.__class__ = OtherModel  # another class: its __call__
    assert_same_call(fast, general, (x, model, y), atol=0.0)
    assert_same_call(fast, general, (x, model, y), atol=0.0)
    model.W = np.ones((3, 4))  # another shape
    assert _same(fast.value_and_grad(np.ones(4), model, y), general.value_and_grad(np.ones(4), model, y))


@pytest.mark.parametrize("tier", TIERS)
def test_layers_in_a_list_and_a_config_object(tier):
    x, W1, b1, W2, b2 = _rng_arrays(1, 3, (3, 3), 3, (2, 3), 2)
    stack = Stack([Layer(W1, b1), Layer(W2, b2)], Config(0.5))
    fast = bytegrad.differentiate(fresh(stack_loss), tier=tier)
    general = bytegrad.differentiate(stack_loss, tier="general")
    for _ in range(3):
        assert_same_call(fast, general, (x, stack), atol=0.0)
    assert len(_info(fast)["programs"]) == 1
    stack.layers[1].b += 1.0  # in place, two objects deep
    assert_same_call(fast, general, (x, stack), atol=0.0)
    stack.cfg.scale = 3.0
    assert_same_call(fast, general, (x, stack), atol=0.0)
    stack.layers.append(Layer(np.eye(2), np.zeros(2)))
    assert_same_call(fast, general, (x, stack), atol=0.0)
    assert_same_call(fast, general, (x, stack), atol=0.0)
    stack.layers[0] = Layer(W1 * 0.5, b1)  # a new object in the list
    assert_same_call(fast, general, (x, stack), atol=0.0)


@pytest.mark.parametrize("tier", TIERS)
def test_dataclass_argument(tier):
    x, w = _rng_arrays(2, 4, 4)
    p = Params(w, 0.25)
    fast = bytegrad.differentiate(fresh(dataclass_loss), tier=tier)
    general = bytegrad.differentiate(dataclass_loss, tier="general")
    for _ in range(3):
        assert_same_call(fast, general, (x, p), atol=0.0)
    assert len(_info(fast)["programs"]) == 1
    p.steps = 3
    assert_same_call(fast, general, (x, p), atol=0.0)
    p.b = -0.0
    assert_same_call(fast, general, (x, p), atol=0.0)
    p.w *= 2.0
    assert_same_call(fast, general, (x, p), atol=0.0)


# ---- bound methods, partials, callable objects as the differentiated function --------------------


@pytest.mark.parametrize("tier", TIERS)
def test_bound_method_as_the_differentiated_function(tier):
    x, y, W = _rng_arrays(3, 3, 3, (3, 3))
    model = Model(W.copy(), 0.5)
    fast = bytegrad.differentiate(model.loss, tier=tier)
    general = bytegrad.differentiate(model.loss, tier="general")
    for _ in range(3):
        assert_same_call(fast, general, (x, y), atol=0.0)
    assert _info(fast)["programs"], _info(fast)
    calls = _compiled_calls(fast)
    model.W += 0.5
    assert_same_call(fast, general, (x, y), atol=0.0)
    assert _compiled_calls(fast) == calls + 1
    model.scale = 1.5
    assert_same_call(fast, general, (x, y), atol=0.0)
    model.W = np.eye(3)
    assert_same_call(fast, general, (x, y), atol=0.0)
    # wrt=(0, 1) through the bound object: positions counted after it, as on the general path
    both = bytegrad.differentiate(model.loss, wrt=(0, 1), tier=tier)
    both_general = bytegrad.differentiate(model.loss, wrt=(0, 1), tier="general")
    for _ in range(3):
        assert_same_call(both, both_general, (x, y), atol=0.0)


class Energy:
    def __init__(self, w, k):
        self.w = w
        self.k = k

    def __call__(self, x):
        return self.k * np.sum((self.w * x) ** 2)


@pytest.mark.parametrize("tier", TIERS)
def test_callable_object_sees_its_state(tier):
    x, w = _rng_arrays(5, 4, 4)
    e = Energy(w, 0.5)
    fast = bytegrad.differentiate(e, tier=tier)
    general = bytegrad.differentiate(e, tier="general")
    for _ in range(3):
        assert_same_call(fast, general, (x,), atol=0.0)
    assert _info(fast)["programs"]
    e.k = 4.0
    assert_same_call(fast, general, (x,), atol=0.0)
    e.w[1] = 10.0
    assert_same_call(fast, general, (x,), atol=0.0)


@pytest.mark.parametrize("tier", TIERS)
def test_partials_with_keywords_share_programs_but_not_results(tier):
    x = np.linspace(0.1, 1.0, 4)
    first = bytegrad.differentiate(functools.partial(scaled, k=3, scale=2.0), tier=tier)
    for _ in range(3):
        reference = bytegrad.differentiate(functools.partial(scaled, k=3, scale=2.0), tier="general")
        assert_same_call(first, reference, (x,), atol=0.0)
    assert _info(first)["programs"]
    second = bytegrad.differentiate(functools.partial(scaled, k=2, scale=-0.5), tier=tier)
    for _ in range(3):
        reference = bytegrad.differentiate(functools.partial(scaled, k=2, scale=-0.5), tier="general")
        assert_same_call(second, reference, (x,), atol=0.0)


# ---- effects: a method that writes its object stays on the general path ------------------------


class Counting:
    def __init__(self, w):
        self.w = w
        self.count = 0

    def loss(self, x):
        self.count += 1
        return np.sum(self.w * x)


def counting_loss(x, c):
    return c.loss(x)


@pytest.mark.parametrize("tier", TIERS)
def test_a_method_writing_its_object_is_never_dropped(tier):
    x, w = _rng_arrays(6, 3, 3)
    c, c_general = Counting(w), Counting(w)
    fast = bytegrad.differentiate(fresh(counting_loss), tier=tier)
    general = bytegrad.differentiate(counting_loss, tier="general")
    bound = bytegrad.differentiate(c.loss, tier=tier)
    for k in range(4):
        assert _same(fast.value_and_grad(x, c), general.value_and_grad(x, c_general))
        assert c.count == c_general.count == k + 1
    for k in range(3):
        bound.grad(x)
    assert c.count == 7
    assert not _info(fast)["programs"] and not _info(bound)["programs"]


def test_an_array_held_by_an_object_and_passed_too_is_refused():
    x, W = _rng_arrays(7, 3, (3, 3))
    model = Model(W, 0.5)

    def f(x, W, model):
        return np.sum(W @ x) + np.sum(model(x))
    fast = bytegrad.differentiate(f, tier="numpy")
    general = bytegrad.differentiate(f, tier="general")
    for _ in range(3):
        assert_same_call(fast, general, (x, W, model), atol=0.0)
    assert not _info(fast)["programs"]
    other = W + 1.0
    assert_same_call(fast, general, (x, other, model), atol=0.0)


# ---- each guard is what keeps the program right ------------------------------------------------


def _omitting(kind, monkeypatch, omit):
    if omit:
        monkeypatch.setattr(program_source, "_OMITTED", frozenset({kind}))


class SineLayer(Layer):
    def __call__(self, h):
        return np.sin(self.W @ h + self.b)


@pytest.mark.parametrize("omit", [False, True], ids=["guarded", "guard-omitted"])
@pytest.mark.parametrize("change", ["class", "method", "attributes"])
def test_the_object_guard_is_needed(change, omit, monkeypatch):
    _omitting("object", monkeypatch, omit)
    x, W1, b1 = _rng_arrays(8, 3, (3, 3), 3)
    stack = Stack([Layer(W1, b1)], Config(0.5))
    fast = bytegrad.differentiate(fresh(stack_loss), tier="numpy")
    general = bytegrad.differentiate(stack_loss, tier="general")
    for _ in range(3):
        fast.value_and_grad(x, stack)
    saved = SineLayer.__call__
    try:
        if change == "class":  # another class: its __call__
            stack.layers[0].__class__ = SineLayer
        elif change == "method":  # the class's method replaced
            stack.layers[0].__class__ = SineLayer
            fast.value_and_grad(x, stack)
            SineLayer.__call__ = lambda self, h: np.cos(self.W @ h + self.b)
        else:  # an attribute added (read first by the layer's __call__ before the class's)
            stack.cfg.__dict__.clear()
            stack.cfg.__dict__.update(other=1.0, scale=0.5)
            Config.extra = 2.0
        same = _same(fast.value_and_grad(x, stack), general.value_and_grad(x, stack))
    finally:
        SineLayer.__call__ = saved
        if hasattr(Config, "extra"):
            del Config.extra
    if change == "attributes":  # (the order of attributes read by name changes nothing the program reads)
        assert same
    else:
        assert same is not omit


@pytest.mark.parametrize("omit", [False, True], ids=["guarded", "guard-omitted"])
def test_the_value_guard_on_an_attribute_is_needed(omit, monkeypatch):
    _omitting("value", monkeypatch, omit)
    x, y, W = _rng_arrays(9, 3, 3, (3, 3))
    class Fresh(Model):  # (a new method: programs are kept per function)
        def loss(self, x, y):
            return Model.loss(self, x, y)
    model = Fresh(W, 0.5)
    fast = bytegrad.differentiate(model.loss, tier="numpy")
    general = bytegrad.differentiate(model.loss, tier="general")
    for _ in range(3):
        fast.value_and_grad(x, y)
    model.scale = 2.0
    assert _same(fast.value_and_grad(x, y), general.value_and_grad(x, y)) is not omit


@pytest.mark.parametrize("omit", [False, True], ids=["guarded", "guard-omitted"])
def test_the_length_guard_on_a_list_of_layers_is_needed(omit, monkeypatch):
    _omitting("type", monkeypatch, omit)
    x, W1, b1 = _rng_arrays(10, 3, (3, 3), 3)
    stack = Stack([Layer(W1, b1)], Config(0.5))
    fast = bytegrad.differentiate(fresh(stack_loss), tier="numpy")
    general = bytegrad.differentiate(stack_loss, tier="general")
    for _ in range(3):
        fast.value_and_grad(x, stack)
    stack.layers.append(Layer(np.eye(3), b1))
    try:
        same = _same(fast.value_and_grad(x, stack), general.value_and_grad(x, stack))
    except Exception:  # noqa: BLE001 - a program run past its guard may fail instead
        same = False
    assert same is not omit


@pytest.mark.parametrize("omit", [False, True], ids=["guarded", "guard-omitted"])
def test_the_value_guard_on_a_partials_keyword_is_needed(omit, monkeypatch):
    _omitting("value", monkeypatch, omit)
    x = np.linspace(0.1, 1.0, 4)

    def power(x, k):
        return np.sum(x ** k)
    first = bytegrad.differentiate(functools.partial(power, k=3), tier="numpy")
    for _ in range(3):
        first.value_and_grad(x)
    second = bytegrad.differentiate(functools.partial(power, k=2), tier="numpy")
    want = bytegrad.differentiate(functools.partial(power, k=2), tier="general").value_and_grad(x)
    assert _same(second.value_and_grad(x), want) is not omit


# ---- differentiated dataclasses and namedtuples -------------------------------------------------


@dataclass
class MLP:
    W: np.ndarray
    b: float
    act: str = "tanh"
    depth: int = 1

    def __call__(self, x):
        h = x
        for _ in range(self.depth):
            h = self.W @ h + self.b
            h = np.tanh(h) if self.act == "tanh" else np.sin(h)
        return h

    def loss(self, x):
        return np.sum(self(x) ** 2)


def mlp_loss(params, x):
    return params.loss(x) + 0.1 * np.sum(params.W ** 2)


@pytest.mark.parametrize("tier", TIERS)
def test_a_differentiated_dataclass_with_methods(tier):
    x, W = _rng_arrays(11, 3, (3, 3))
    p = MLP(W, 0.5)
    fast = bytegrad.differentiate(fresh(mlp_loss), tier=tier)
    general = bytegrad.differentiate(mlp_loss, tier="general")
    for _ in range(3):
        got = assert_same_call(fast, general, (p, x), atol=0.0)
    assert _info(fast)["programs"]
    assert type(got[1]) is MLP and got[1].act is None and type(got[1].b) is float
    assert got[1].W is not p.W
    p.act = "sin"
    assert_same_call(fast, general, (p, x), atol=0.0)
    p.depth = 2
    assert_same_call(fast, general, (p, x), atol=0.0)
    p.b = 2.0
    p.W[0] = 1.0
    assert_same_call(fast, general, (p, x), atol=0.0)
    p.extra = 1.0  # an attribute that is not a field: the general path's gradient copies it
    assert_same_call(fast, general, (p, x), atol=0.0)


@pytest.mark.parametrize("omit", [False, True], ids=["guarded", "guard-omitted"])
def test_the_value_guard_on_a_dataclass_field_is_needed(omit, monkeypatch):
    _omitting("value", monkeypatch, omit)
    x, W = _rng_arrays(12, 3, (3, 3))
    p = MLP(W, 0.5)
    fast = bytegrad.differentiate(fresh(mlp_loss), tier="numpy")
    general = bytegrad.differentiate(mlp_loss, tier="general")
    for _ in range(3):
        fast.value_and_grad(p, x)
    p.act = "sin"
    assert _same(fast.value_and_grad(p, x), general.value_and_grad(p, x)) is not omit


# ---- a partial made inside the function from a differentiated value --------------------------------


def _affine(x, scale=1.0, shift=0.0):
    return scale * x + shift


def partial_inside(x, k):
    double = functools.partial(_affine, scale=2.0, shift=k)
    p = functools.partial(np.power, x)
    return np.sum(double(x) * x) + np.sum(p(3)) + np.sum(p.args[0] ** 2)


@pytest.mark.parametrize("tier", TIERS)
def test_a_partial_made_inside_from_a_differentiated_value(tier):
    fast = bytegrad.differentiate(fresh(partial_inside), tier=tier)
    general = bytegrad.differentiate(partial_inside, tier="general")
    for k in range(5):  # (other values each call: the partial's argument is the call's x)
        x = np.linspace(0.1, 1.0, 4) * (k + 1)
        assert_same_call(fast, general, (x, 0.5 * k), atol=0.0)
    assert _info(fast)["programs"] and _compiled_calls(fast) >= 2


# ---- what stays on the general path, with its reason ---------------------------------------------


class Holder:
    def __init__(self, x, inner=None):
        self.x = x
        self.inner = inner

    def read(self):
        return self.x if self.inner is None else self.inner.read()


def holder_loss(x, h):
    return np.sum(x * h.read())


@pytest.mark.parametrize("case", ["int array", "too deep", "slots", "same object twice"])
def test_objects_the_capture_cannot_take_apart_stay_general(case):
    x = np.linspace(0.1, 1.0, 3)
    if case == "int array":
        h = Holder(np.array([1, 2, 3]))
        why = "dtype int"
    elif case == "too deep":
        h = Holder(None, Holder(None, Holder(None, Holder(None, Holder(np.ones(3))))))
        why = "too deep"
    elif case == "slots":
        h = Holder(None, _Slotted(np.ones(3)))
        why = "__slots__"
    else:
        leaf = Holder(np.ones(3))
        h = Holder(None, Holder([leaf, leaf]))
        h.inner.read = lambda: leaf.x  # (an instance attribute: the class keeps its method)
        why = "twice"
    fast = bytegrad.differentiate(fresh(holder_loss), tier="numpy")
    general = bytegrad.differentiate(holder_loss, tier="general")
    for _ in range(3):
        assert_same_call(fast, general, (x, h), atol=0.0)
    (reason,) = _info(fast)["not_compiled"].values()
    assert why in reason and not _info(fast)["programs"], reason


class _Slotted:
    __slots__ = ("x",)

    def __init__(self, x):
        self.x = x

    def read(self):
        return self.x


def test_explain_of_a_bound_method_reads_its_object_as_an_argument():
    import io

    model = Model(np.eye(3), 0.5)
    out = io.StringIO()
    bytegrad.explain(model.loss, np.ones(3), np.ones(3), file=out)
    text = out.getvalue()
    assert "compiled program: eligible" in text and "not an argument" not in text, text[-600:]


def dataclass_first(p, x):
    return np.sum(np.tanh(x * p.w + p.b) ** 2) * p.steps


def test_pullback_programs_of_a_differentiated_dataclass():
    x = np.ones(4)
    p = Params(np.linspace(0, 1, 4), 0.25)
    fast = bytegrad.differentiate(fresh(dataclass_first), wrt=(0, 1), tier="numpy")
    general = bytegrad.differentiate(dataclass_first, wrt=(0, 1), tier="general")
    for k in range(6):
        if k == 3:
            p.steps = 3
        if k == 4:
            p.w += 1.0
        (out, back), (want_out, want_back) = fast.pullback(p, x), general.pullback(p, x)
        got, want = back(2.0), want_back(2.0)
        assert _same(out, want_out) and _same(got, want) and type(got[0]) is Params
    assert fast.stats()["compiled_pullback"]["programs"]


# ---- objects built inside the function from differentiated values -----------------------------------


class Dense:
    gain = 1.0

    def __init__(self, W, b):
        self.W = W
        self.b = b

    def forward(self, x):
        return np.tanh(self.W @ x + self.b) * self.gain

    @property
    def norm(self):
        return np.sum(self.W ** 2)

    @staticmethod
    def square(h):
        return h * h


def builds_layers(W, b, x):
    layer = Dense(W, b)
    return np.sum(Dense.square(layer.forward(x))) + 0.1 * layer.norm


@pytest.mark.parametrize("tier", TIERS)
def test_an_object_built_inside_from_differentiated_values(tier):
    W, b, x = _rng_arrays(13, (3, 3), 3, 3)
    fast = bytegrad.differentiate(fresh(builds_layers), wrt=(0, 1), tier=tier)
    general = bytegrad.differentiate(builds_layers, wrt=(0, 1), tier="general")
    saved = Dense.forward
    try:
        for k in range(3):
            assert_same_call(fast, general, (W * (k + 1), b, x,), atol=0.0)
        assert _info(fast)["programs"]
        Dense.gain = 2.0  # a class attribute its method reads: the class guard sees it
        assert_same_call(fast, general, (W, b, x), atol=0.0)
        Dense.forward = lambda self, x: np.sin(self.W @ x) + self.b  # a method replaced
        assert_same_call(fast, general, (W, b, x), atol=0.0)
        assert_same_call(fast, general, (W, b, x), atol=0.0)
    finally:
        Dense.gain = 1.0
        Dense.forward = saved


class Tally:
    def __init__(self, w):
        self.w = w
        self.n = 0

    def __call__(self, x):
        me = self
        me.n = me.n + 1  # (through another name, not `self.name = value`: stays general)
        return np.sum(self.w * x)


class Finalized(Dense):
    def __del__(self):
        pass


def builds_tally(w, x):
    t = Tally(w)
    return t(x) + t(x) * t.n


def builds_finalized(W, b, x):
    return np.sum(Finalized(W, b).forward(x))


@pytest.mark.parametrize("fn, why", [(builds_tally, "writes an attribute"), (builds_finalized, "__del__")])
def test_objects_built_inside_that_stay_general(fn, why):
    W, b, x = _rng_arrays(14, (3, 3), 3, 3)
    args = (W[0], x) if fn is builds_tally else (W, b, x)
    fast = bytegrad.differentiate(fresh(fn), tier="numpy")
    general = bytegrad.differentiate(fn, tier="general")
    for _ in range(3):
        assert_same_call(fast, general, args, atol=0.0)
    (reason,) = _info(fast)["not_compiled"].values()
    assert why in reason and not _info(fast)["programs"], reason


@pytest.mark.parametrize("omit", [False, True], ids=["guarded", "guard-omitted"])
def test_the_class_guard_of_a_built_object_is_needed(omit, monkeypatch):
    _omitting("object", monkeypatch, omit)
    W, b, x = _rng_arrays(15, (3, 3), 3, 3)
    fast = bytegrad.differentiate(fresh(builds_layers), tier="numpy")
    general = bytegrad.differentiate(builds_layers, tier="general")
    try:
        for _ in range(3):
            fast.value_and_grad(W, b, x)
        Dense.gain = 3.0
        same = _same(fast.value_and_grad(W, b, x), general.value_and_grad(W, b, x))
    finally:
        Dense.gain = 1.0
    assert same is not omit


# ---- adversarial changes between calls ------------------------------------------------------------


class Poly:
    degree = 2

    def __init__(self, coefs, params):
        self.coefs = coefs
        self.params = params

    def apply(self, x):
        total = self.params["w"] * x
        for k in range(len(self.coefs)):
            if k < self.degree:
                total = total + self.coefs[k] * x ** (k + 1)
        return total


def poly_loss(x, poly):
    return np.sum(poly.apply(x) ** 2)


@pytest.mark.parametrize("tier", TIERS)
def test_adversarial_changes_to_an_object_argument(tier):
    x = np.linspace(-1.0, 1.0, 5)
    poly = Poly([0.5, -0.25, 2.0], {"w": np.ones(5)})
    fast = bytegrad.differentiate(fresh(poly_loss), tier=tier)
    general = bytegrad.differentiate(poly_loss, tier="general")

    def shadow(x):  # an instance attribute in front of the class's method
        return x * 10.0

    changes = [
        lambda: poly.coefs.__setitem__(0, 3.0),        # a float in a list, in place
        lambda: poly.coefs.append(1.0),                # the list's length
        lambda: poly.params["w"].__setitem__(0, -2.0),  # an array in a dict, in place
        lambda: poly.params.__setitem__("w", np.full(5, 0.5)),  # rebound in the dict
        lambda: setattr(Poly, "degree", 3),            # a class attribute
        lambda: setattr(poly, "degree", 1),            # an instance attribute in front of it
        lambda: setattr(poly, "apply", shadow),        # a method shadowed
        lambda: delattr(poly, "apply"),
        lambda: setattr(poly, "coefs", (0.5, 0.5)),    # a tuple where a list was
    ]
    try:
        for _ in range(3):
            assert_same_call(fast, general, (x, poly), atol=0.0)
        for change in changes:
            change()
            assert_same_call(fast, general, (x, poly), atol=0.0)
            assert_same_call(fast, general, (x, poly), atol=0.0)
    finally:
        Poly.degree = 2
    assert _compiled_calls(fast) > 0


# ---- a differentiated registered pytree ---------------------------------------------------------------


class Affine:
    def __init__(self, W, b, act="tanh"):
        self.W = W
        self.b = b
        self.act = act


bytegrad.register_pytree(Affine, fields=("W", "b"), static=("act",))


def affine_loss(p, x):
    h = p.W @ x + p.b
    return np.sum((np.tanh(h) if p.act == "tanh" else np.sin(h)) ** 2)


@pytest.mark.parametrize("tier", TIERS)
def test_a_differentiated_registered_pytree(tier):
    W, b, x = _rng_arrays(16, (3, 3), 3, 3)
    p = Affine(W, b)
    fast = bytegrad.differentiate(fresh(affine_loss), tier=tier)
    general = bytegrad.differentiate(affine_loss, tier="general")
    for _ in range(3):
        got = assert_same_call(fast, general, (p, x), atol=0.0)
    assert _info(fast)["programs"] and type(got[1]) is Affine and got[1].W is not p.W
    p.act = "sin"  # in aux: guarded by value
    assert_same_call(fast, general, (p, x), atol=0.0)
    p.W = W * 3.0  # a child, read at call time
    assert_same_call(fast, general, (p, x), atol=0.0)
    p.b[0] = 5.0
    assert_same_call(fast, general, (p, x), atol=0.0)


@pytest.mark.parametrize("omit", [False, True], ids=["guarded", "guard-omitted"])
def test_the_aux_guard_of_a_registered_pytree_is_needed(omit, monkeypatch):
    _omitting("value", monkeypatch, omit)
    W, b, x = _rng_arrays(17, (3, 3), 3, 3)
    p = Affine(W, b)
    fast = bytegrad.differentiate(fresh(affine_loss), tier="numpy")
    general = bytegrad.differentiate(affine_loss, tier="general")
    for _ in range(3):
        fast.value_and_grad(p, x)
    p.act = "sin"
    assert _same(fast.value_and_grad(p, x), general.value_and_grad(p, x)) is not omit
