"""Compiled programs against the general path on programs written to break them (issue 23).

Each test runs the same sequence of calls through a function pinned to a compiled tier and through
the general path, and compares every value, every gradient and every side effect call by call:
writes into arguments (lists, dicts, arrays, objects), RNG draws, counters in helpers, and the
guards that must tell calls apart exactly (the sign of a zero, a NaN, a dict's key order, a
partial's keywords, a callee's defaults, a dtype's byte order).
"""
from __future__ import annotations

import dataclasses
import functools
import random
import threading

import numpy as np
import pytest

import bytegrad
from bytegrad.compiled import policy

TIERS = ("numpy", "numba", "auto")


def _run(f, make_args, tier, calls=5, state=None, wrt=0):
    """[(value, gradient) or the exception's type name, ...] over `calls` calls, then `state(args)`,
    then a draw from NumPy's and Python's global RNGs (so that a lost or doubled draw shows)."""
    fn = bytegrad.differentiate(f, tier=tier, wrt=wrt)
    args = make_args()
    np.random.seed(0)
    random.seed(0)
    out = []
    for _ in range(calls):
        try:
            v, g = fn.value_and_grad(*args)
            out.append((float(v), np.array(g, dtype=float).tobytes()))
        except Exception as exc:  # noqa: BLE001 - the general path's exception is part of the result
            out.append(type(exc).__name__)
    return out, (state(args) if state else None), np.random.random(), random.random(), fn


def same_as_general(f, make_args, tier, state=None, calls=5, wrt=0):
    got = _run(f, make_args, tier, calls, state, wrt)
    want = _run(f, make_args, "general", calls, state, wrt)
    assert got[:4] == want[:4], f"{tier}: {got[:4]} != general's {want[:4]}"
    return got[4]


# ---- effects on arguments, RNGs and helpers ------------------------------------------------------


def append_loss(x, history):
    loss = np.sum(x ** 2)
    history.append(loss)
    return loss


def append_constant(x, history):
    history.append(1)
    return np.sum(x ** 2)


def update_dict(x, info):
    loss = np.sum(np.sin(x))
    info.update(loss=loss)
    info["calls"] = info.get("calls", 0) + 1
    return loss


def count_in_place(x, counts):
    counts += 1
    return np.sum(x * counts)


def add_at(x, counts, idx):
    np.add.at(counts, idx, 1)
    return np.sum(x * counts)


def shuffle(x, idx):
    np.random.shuffle(idx)
    return np.sum(x[idx] * np.arange(3.0))


def draw_global(x):
    return np.sum(x * np.random.normal(size=3))


def draw_generator(x, rng):
    return np.sum(x * rng.normal(size=3))


def draw_python_random(x):
    return np.sum(x) * random.random()


class Box:
    pass


def set_attribute(x, box):
    box.n = getattr(box, "n", 0) + 1
    return np.sum(x ** 2)


def write_out(x, buf):
    np.multiply(x, 2.0, out=buf)
    return np.sum(x * buf)


EFFECTS = [
    ("list.append of the loss", append_loss, lambda: (np.ones(3), []), lambda a: len(a[1])),
    ("list.append of a constant", append_constant, lambda: (np.ones(3), []), lambda a: len(a[1])),
    ("dict.update and d[k] = v", update_dict, lambda: (np.ones(3), {}), lambda a: sorted(a[1].items())),
    ("counts += 1", count_in_place, lambda: (np.ones(3), np.zeros(3, dtype=int)), lambda a: a[1].tolist()),
    ("np.add.at", add_at, lambda: (np.ones(3), np.zeros(3, dtype=int), np.array([0, 0, 2])),
     lambda a: a[1].tolist()),
    ("np.random.shuffle", shuffle, lambda: (np.arange(3.0), np.array([0, 1, 2])), lambda a: a[1].tolist()),
    ("np.random.normal", draw_global, lambda: (np.ones(3),), None),
    ("Generator.normal", draw_generator, lambda: (np.ones(3), np.random.default_rng(0)), None),
    ("random.random", draw_python_random, lambda: (np.ones(3),), None),
    ("an attribute set on an argument", set_attribute, lambda: (np.ones(3), Box()), lambda a: a[1].n),
    ("out= into a float argument", write_out, lambda: (np.ones(3), np.zeros(3)), lambda a: a[1].tolist()),
]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("name,f,make,state", EFFECTS, ids=[e[0] for e in EFFECTS])
def test_effects_happen_as_on_the_general_path(name, f, make, state, tier):
    fn = same_as_general(f, make, tier, state)
    reasons = fn.stats()["compiled"]["not_compiled"]
    assert not fn.stats()["compiled"]["programs"] or not reasons or all(isinstance(r, str) for r in reasons.values())


@pytest.mark.parametrize("tier", ("numpy", "numba"))
def test_a_write_into_an_argument_keeps_the_signature_on_the_general_path_with_a_reason(tier):
    fn = bytegrad.differentiate(append_loss, tier=tier)
    history: list = []
    for _ in range(3):
        fn.grad(np.ones(3), history)
    assert len(history) == 3
    st = fn.stats()["compiled"]
    assert not st["programs"]
    assert any("writes into history" in why for why in st["not_compiled"].values()), st["not_compiled"]


HELPER_CALLS = [0]


def counted(x):
    HELPER_CALLS[0] += 1
    return x * 2.0


def count_then_write(x, buf):
    y = counted(x)
    np.multiply(x, 2.0, out=buf)
    return np.sum(y * buf)


@pytest.mark.parametrize("tier", TIERS)
def test_a_call_runs_the_users_code_once(tier):
    def state(_args):
        n = HELPER_CALLS[0]
        HELPER_CALLS[0] = 0
        return n

    HELPER_CALLS[0] = 0
    same_as_general(count_then_write, lambda: (np.ones(3), np.zeros(3)), tier, state, calls=4)


def user_error(x, n):
    HELPER_CALLS[0] += 1
    if n == 1:
        raise ValueError("bad n")
    return np.sum(x * n)


@pytest.mark.parametrize("tier", TIERS)
def test_an_exception_of_the_users_code_is_raised_once(tier):
    fn = bytegrad.differentiate(user_error, tier=tier)
    HELPER_CALLS[0] = 0
    for _ in range(3):
        with pytest.raises(ValueError, match="bad n"):
            fn.grad(np.ones(3), 1)
    assert HELPER_CALLS[0] == 3


# ---- guards that compare exactly -------------------------------------------------------------------

OFF = 0.0


def arctan_of_offset(x):
    return np.sum(np.arctan2(OFF, x))


@pytest.mark.parametrize("tier", TIERS)
def test_a_float_global_is_guarded_with_its_sign(tier):
    global OFF
    fn = bytegrad.differentiate(arctan_of_offset, tier=tier)
    general = bytegrad.differentiate(arctan_of_offset, tier="general")
    x = -np.ones(3)
    try:
        for off in (0.0, 0.0, 0.0, -0.0, -0.0, 0.0):
            OFF = off
            got, want = fn.value_and_grad(x), general.value_and_grad(x)
            assert got[0] == want[0] and np.array_equal(got[1], want[1]), (off, got, want)
    finally:
        OFF = 0.0


SCALE = float("nan")


def scaled(x):
    return np.sum(x * 2.0) + (0.0 if SCALE != SCALE else SCALE)


@pytest.mark.parametrize("tier", ("numpy", "numba"))
def test_a_nan_global_matches_itself(tier):
    fn = bytegrad.differentiate(scaled, tier=tier)
    for _ in range(4):
        fn.grad(np.ones(3))
    st = fn.stats()["compiled"]
    assert st["general_calls"] == 0 and len(st["programs"]) == 1, st


def loop_over_dict(p):
    total = 0.0
    weight = 1.0
    for k in p:
        total = total + weight * np.sum(p[k] ** 2)
        weight = weight * 3.0
    return total


@pytest.mark.parametrize("tier", TIERS)
def test_a_dict_argument_is_guarded_with_its_key_order(tier):
    fn = bytegrad.differentiate(loop_over_dict, tier=tier)
    general = bytegrad.differentiate(loop_over_dict, tier="general")
    a, b = np.ones(2), 2 * np.ones(2)
    for p in ({"a": a, "b": b}, {"a": a, "b": b}, {"a": a, "b": b}, {"b": b, "a": a}, {"b": b, "a": a}):
        got, want = fn.value_and_grad(p), general.value_and_grad(p)
        assert got[0] == want[0] and list(got[1]) == list(want[1])
        assert all(np.array_equal(got[1][k], want[1][k]) for k in p)


def power(x, p=2.0):
    return x ** p


SQUARE = functools.partial(power, p=2.0)


def through_partial(x):
    return np.sum(SQUARE(x))


@pytest.mark.parametrize("tier", TIERS)
def test_a_partial_is_guarded_with_its_keywords(tier):
    fn = bytegrad.differentiate(through_partial, tier=tier)
    general = bytegrad.differentiate(through_partial, tier="general")
    x = np.arange(1.0, 4.0)
    try:
        for k in range(6):
            if k == 3:
                SQUARE.keywords["p"] = 3.0
            got, want = fn.value_and_grad(x), general.value_and_grad(x)
            assert got[0] == want[0] and np.array_equal(got[1], want[1]), k
    finally:
        SQUARE.keywords["p"] = 2.0


def scale_kw(x, *, s=2.0):
    return x * s


def through_kwdefaults(x):
    return np.sum(scale_kw(x))


def scale_pos(x, s=2.0):
    return x * s


def through_defaults(x):
    return np.sum(scale_pos(x))


@pytest.mark.parametrize("tier", ("general",) + TIERS)
def test_a_callees_defaults_and_kwdefaults_are_seen_when_they_change(tier):
    fn_kw = bytegrad.differentiate(through_kwdefaults, tier=tier)
    fn_pos = bytegrad.differentiate(through_defaults, tier=tier)
    x = np.ones(3)
    try:
        for k in range(6):
            if k == 3:
                scale_kw.__kwdefaults__["s"] = 5.0  # in place
                scale_pos.__defaults__ = (5.0,)     # replaced
            s = 2.0 if k < 3 else 5.0
            assert fn_kw.value_and_grad(x)[0] == 3 * s, (tier, k)
            assert np.array_equal(fn_pos.grad(x), np.full(3, s)), (tier, k)
    finally:
        scale_kw.__kwdefaults__["s"] = 2.0
        scale_pos.__defaults__ = (2.0,)


def plain_loss(x):
    return np.sum(np.sin(x) * x)


@pytest.mark.parametrize("tier", ("numpy", "numba"))
def test_non_native_byte_order_matches_its_program(tier):
    fn = bytegrad.differentiate(plain_loss, tier=tier)
    general = bytegrad.differentiate(plain_loss, tier="general")
    for k in range(5):
        x = np.arange(3.0 + k % 2, dtype=">f8")[:3]
        got, want = fn.value_and_grad(x), general.value_and_grad(x)
        assert got[0] == want[0] and np.array_equal(got[1], want[1])
    st = fn.stats()["compiled"]
    assert len(st["programs"]) <= 2 and st["compiled_calls"] >= 3, st


def test_threads_capturing_at_once_keep_the_program_budget(monkeypatch):
    monkeypatch.setattr(policy, "MAX_PROGRAMS", 2)
    fn = bytegrad.differentiate(plain_loss, tier="numpy")
    barrier = threading.Barrier(6)

    def work(n: int) -> None:
        barrier.wait()
        fn.grad(np.ones(n))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(1, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(fn.stats()["compiled"]["programs"]) <= 2


@pytest.mark.parametrize("tier", ("general",) + TIERS)
def test_a_gradient_is_never_the_callers_array(tier):
    fn = bytegrad.differentiate(lambda x, w: np.sum(x * w), wrt=1, tier=tier)
    x = np.arange(3.0)
    for _ in range(3):
        g = fn.grad(x, np.ones(3))
        assert not np.shares_memory(g, x)
        assert np.array_equal(g, x)



class Model:
    def __init__(self) -> None:
        self.w = 2.0

    def loss(self, x):
        return np.sum(x * self.w)


def test_a_bound_method_compiles_and_guards_its_object():
    """A bound method has a compiled tier (tests/test_compiled_objects.py has the rest): its
    object's attributes are guarded, so `self.w` set between calls is seen."""
    model = Model()
    g = bytegrad.differentiate(model.loss, tier="numpy")
    for _ in range(3):
        assert np.array_equal(g.grad(np.ones(3)), np.full(3, 2.0))
    assert len(g.stats()["compiled"]["programs"]) == 1
    model.w = 3.0
    assert np.array_equal(g.grad(np.ones(3)), np.full(3, 3.0))


def test_guards_and_explain_name_the_users_parameters():
    """Guards are described with the parameter names and paths the user wrote (`W.shape`,
    `p['a']`), not the program's variables; `explain` shows constants' values."""
    def f(W, x, p):
        return np.sum(np.tanh(W @ x) * 3.5) + np.sum(p["a"] * 2.0)

    d = bytegrad.differentiate(f, tier="numpy")
    args = (np.ones((2, 3)), np.ones(3), {"a": np.ones(2)})
    d.grad(*args)
    guards = d.stats()["compiled"]["programs"][0]["guards"]
    assert "W.shape == (2, 3)" in guards and "p['a'].shape == (2,)" in guards, guards
    assert not any(g.startswith("x1") for g in guards), guards
    text = bytegrad.explain(d, *args)
    assert "W.shape == (2, 3)" in text
    assert any(line.split()[:2] == ["LOAD_CONST", "<current_tape>"] for line in text.splitlines()), text


def append_through_a_tuple(x, box):
    loss = np.sum(x ** 2)
    box[0].append(float(loss))
    return loss


@pytest.mark.parametrize("tier", TIERS)
def test_a_write_into_a_list_inside_a_tuple_argument_happens(tier):
    same_as_general(append_through_a_tuple, lambda: (np.ones(3), ([],)), tier, lambda a: len(a[1][0]))


@dataclasses.dataclass
class Params:
    w: np.ndarray


def counted_dataclass_loss(p):
    return np.sum(counted(p.w) ** 2)  # (the helper's counter: an effect the capture run sees late)


def counted_keepdims_loss(x):
    return np.sum(counted(x) ** 2, keepdims=True)


@pytest.mark.parametrize("tier", ("numpy", "numba"))
@pytest.mark.parametrize("f,make", [(counted_dataclass_loss, lambda: Params(np.arange(3.0))),
                                    (counted_keepdims_loss, lambda: np.arange(3.0))],
                         ids=["dataclass argument", "one-element array output"])
def test_a_capture_that_makes_no_program_does_not_run_the_function_again(f, make, tier):
    fn = bytegrad.differentiate(f, tier=tier)
    general = bytegrad.differentiate(f, tier="general")
    HELPER_CALLS[0] = 0
    got = [fn.grad(make()) for _ in range(3)]
    assert HELPER_CALLS[0] == 3
    want = general.grad(make())
    for g in got:
        assert np.array_equal(getattr(g, "w", g), getattr(want, "w", want))


def scaled_by_keyword(x, *, s=2.0):
    return np.sum(x * s)


@pytest.mark.parametrize("tier", ("general",) + TIERS)
def test_the_differentiated_functions_own_kwdefaults_written_in_place_are_seen(tier):
    fn = bytegrad.differentiate(scaled_by_keyword, tier=tier)
    x = np.ones(3)
    try:
        for k in range(6):
            if k == 3:
                scaled_by_keyword.__kwdefaults__["s"] = 5.0
            s = 2.0 if k < 3 else 5.0
            assert fn.value_and_grad(x)[0] == 3 * s, (tier, k)
    finally:
        scaled_by_keyword.__kwdefaults__["s"] = 2.0
