"""A configuration object as a default argument value (`def loss(w, X, y, hp=Hyper())`): a program reads
its attributes as constants and guards the object by content ("config": its class unchanged, its
`__dict__` equal, numbers by value and sign; compiled/objects.py `same_config`), where such a default
kept every program on the general path ("a default argument value that can change in place"). Each
case is compared call by call with tier="general" under the numpy and numba tiers, with the object
changed between calls; what a guard cannot fix stays refused, with its reason."""
from __future__ import annotations

import os
import pickle
import sys
from dataclasses import dataclass

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gradcheck import agree_with_general

import bytegrad
from bytegrad.compiled import objects

TIERS = ("numpy", "numba")


@dataclass
class Hyper:
    lr: float = 0.1
    l2: float = 1e-3
    steps: int = 3
    name: str = "gd"


def _data(i):
    r = np.random.default_rng(i)
    return r.normal(size=4), r.normal(size=(10, 4)), r.normal(size=10)


def make_unrolled():
    def unrolled(w0, X, y, hp=Hyper()):
        w = w0
        for _ in range(hp.steps):
            g = X.T @ (X @ w - y) / len(y) + hp.l2 * w
            w = w - hp.lr * g
        return np.mean((X @ w - y) ** 2)
    return unrolled


def _compiled(info):
    return bool(info.get("compiled_calls")) and bool(info.get("programs"))


@pytest.mark.parametrize("tier", TIERS)
def test_a_config_default_compiles_and_agrees(tier):
    info = agree_with_general(make_unrolled(), [_data(i) for i in range(5)], tier)
    assert _compiled(info), info


@pytest.mark.parametrize("change", ["float", "int", "negative_zero", "new_attribute", "class_method"])
@pytest.mark.parametrize("tier", TIERS)
def test_a_change_of_the_default_between_calls_is_seen(tier, change):
    f = make_unrolled()
    hp = f.__defaults__[0]

    def between(k):
        if k != 3:
            return
        if change == "float":
            hp.lr = 0.3
        elif change == "int":
            hp.steps = 5
        elif change == "negative_zero":
            hp.l2 = -0.0 if hp.l2 == 0.0 else 0.0
        elif change == "new_attribute":
            hp.extra = 1.0
        else:
            type(hp).scale = staticmethod(lambda v: v)  # (its class changed: the program is dropped)

    try:
        info = agree_with_general(f, [_data(i) for i in range(6)], tier, between=between)
    finally:
        if hasattr(Hyper, "scale"):
            del Hyper.scale
    assert _compiled(info), info


def test_the_guard_is_what_sees_the_change(monkeypatch):
    """Without the "config" guard the program keeps the capture's learning rate: a wrong value."""
    monkeypatch.setattr(objects, "same_config", lambda live, state: True)
    f = make_unrolled()
    hp = f.__defaults__[0]
    with pytest.raises(AssertionError):
        agree_with_general(f, [_data(i) for i in range(6)], "numpy",
                           between=lambda k: setattr(hp, "lr", 0.3) if k == 3 else None)


@pytest.mark.parametrize("tier", TIERS)
def test_the_config_passed_as_an_argument(tier):
    f = make_unrolled()
    calls = [(*_data(i), Hyper(lr=0.05 * (i + 1))) for i in range(5)]
    agree_with_general(f, calls, tier)


def holds_a_list(w, cfg=type("Cfg", (), {"__init__": lambda self: setattr(self, "ws", [1.0])})()):
    return np.sum(w * cfg.ws[0])


def rebinds(w, hp=Hyper()):
    hp = Hyper(lr=2.0) if w[0] > 10 else hp
    return np.sum(w * hp.lr)


@pytest.mark.parametrize("fn, why", [(holds_a_list, "default argument value that can change in place"),
                                     (rebinds, "attribute")])
@pytest.mark.parametrize("tier", TIERS)
def test_what_a_guard_cannot_fix_stays_refused(tier, fn, why):
    info = agree_with_general(fn, [(np.random.default_rng(i).normal(size=3),) for i in range(4)], tier)
    assert not _compiled(info)
    assert why in " ".join(str(v) for v in (info.get("not_compiled") or {}).values()), info


def test_a_program_guarding_the_object_is_not_stored(tmp_path):
    """A stored program would guard a copy of the object: it is not written (`objects.Live`)."""
    with pytest.raises(pickle.PicklingError):
        pickle.dumps(objects.Live(Hyper()))
    with bytegrad.config.override(cache_dir=str(tmp_path)):
        out = bytegrad.precompile(make_unrolled(), *_data(0))
    assert out["programs_stored"] == 0, out


SCALE = [1.0]


class Computed:
    def __init__(self):
        self.k = 2.0

    @property
    def lr(self):  # (computed when read, from a list a guard cannot fix)
        return SCALE[0]


def reads_a_property_of_the_default(x, hp=Computed()):
    return np.sum(x * hp.lr * hp.k)


def reads_a_property_of_a_built_config(x):
    hp = Computed()
    return np.sum(x * hp.lr * hp.k)


@pytest.mark.parametrize("fn", [reads_a_property_of_the_default, reads_a_property_of_a_built_config])
@pytest.mark.parametrize("tier", TIERS)
def test_a_property_read_off_a_config_is_not_a_constant(tier, fn):
    """A property runs when it is read, unhooked: a program would hold the capture's value. Both the
    default object and a config built in the call (compiled/reach_config.py) once compiled such a read
    and kept the first value after the list it reads had changed."""
    def between(k):
        SCALE[0] = 5.0 if k >= 3 else 1.0

    try:
        info = agree_with_general(fn, [(np.ones(3) * (i + 1),) for i in range(5)], tier, between=between)
    finally:
        SCALE[0] = 1.0
    assert not _compiled(info)
    assert "reads the attribute .lr" in " ".join(str(v) for v in (info.get("not_compiled") or {}).values()), info


@pytest.mark.parametrize("tier", TIERS)
def test_a_program_captured_after_a_change_guards_the_new_state(tier):
    """The static check's result is kept per signature, but the guard of a program must hold what its
    own capture read: after a change, the new program serves the calls that see the new values."""
    f = make_unrolled()
    hp = f.__defaults__[0]
    fast = bytegrad.differentiate(f, tier=tier)
    general = bytegrad.differentiate(f, tier="general")
    for i in range(8):
        if i == 3:
            hp.lr = 0.3
        before = fast.stats()["compiled"].get("compiled_calls", 0)
        got, want = fast.value_and_grad(*_data(i)), general.value_and_grad(*_data(i))
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-300)
    assert fast.stats()["compiled"]["compiled_calls"] > before, fast.stats()["compiled"]  # (the last call)
