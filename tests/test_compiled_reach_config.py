"""Two everyday programs the compiled tier refused (bench/reach_programs.py), held to the general path
call by call, under the numpy and numba tiers, while what they assume changes between calls:

- a dataclass config built on constants in the function (`cfg = cfg or Config()`, compiled/reach_config.py)
  or at module level, whose attributes are read: a changed default, a new class, a field written on
  the module's object, a new object there, a config passed in;
- arithmetic on an integer label array argument (`2.0 * labels - 1.0`, compiled/reach_labels.py): the
  labels read per call, and their uses other than float arithmetic still refused.
"""
from __future__ import annotations

import types
from dataclasses import dataclass

import numpy as np
import pytest

import bytegrad
from bytegrad.compiled import reach_labels
from gradcheck import assert_trees_close

TIERS = ["numpy", "numba"]


def fresh(fn):
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def stats(d) -> dict:
    return d.stats()["compiled"]


def agree(fast, general, *args) -> None:
    assert_trees_close(fast.value_and_grad(*args), general.value_and_grad(*args), rtol=1e-12, atol=1e-300)


@dataclass
class Config:
    scale: float = 0.5
    temperature: float = 2.0
    squash: bool = True
    kind: str = "softplus"


CFG = Config()


def in_function(W, cfg=None):
    cfg = cfg or Config()
    h = np.log1p(np.exp(cfg.scale * W)) if cfg.kind == "softplus" else np.tanh(cfg.scale * W)
    return np.sum(np.tanh(h) if cfg.squash else h) / cfg.temperature


def built_with_keywords(W):
    cfg = Config(scale=0.25, kind="tanh")
    h = np.log1p(np.exp(cfg.scale * W)) if cfg.kind == "softplus" else np.tanh(cfg.scale * W)
    return np.sum(h) / cfg.temperature


def module_level(W):
    return np.sum(np.log1p(np.exp(CFG.scale * W))) / CFG.temperature


W = np.linspace(-1.0, 1.0, 12).reshape(3, 4)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn", [in_function, built_with_keywords], ids=lambda f: f.__name__)
def test_a_config_built_in_the_function_compiles_and_agrees(fn, tier):
    fast = bytegrad.differentiate(fresh(fn), tier=tier)
    general = bytegrad.differentiate(fn, tier="general")
    for s in (1.0, 2.0, -0.5):
        agree(fast, general, s * W)
    st = stats(fast)
    assert st["programs"] and not st["not_compiled"] and st["compiled_calls"] == 3, st


@pytest.mark.parametrize("tier", TIERS)
def test_a_changed_default_or_class_of_the_config_is_seen(tier, monkeypatch):
    fast = bytegrad.differentiate(fresh(in_function), tier=tier)
    general = bytegrad.differentiate(in_function, tier="general")
    agree(fast, general, W)
    agree(fast, general, W)
    init = Config.__init__
    monkeypatch.setattr(init, "__defaults__", (0.9, 3.0, False, "tanh"))  # every field's default changed
    agree(fast, general, W)
    monkeypatch.undo()

    @dataclass
    class Other:
        scale: float = -0.7
        temperature: float = 0.5
        squash: bool = False
        kind: str = "softplus"
    monkeypatch.setitem(globals(), "Config", Other)  # a new class under the same global
    agree(fast, general, W)
    monkeypatch.undo()
    agree(fast, general, W)
    assert stats(fast)["compiled_calls"] >= 3, stats(fast)


@pytest.mark.parametrize("tier", TIERS)
def test_a_config_passed_in_is_an_argument(tier):
    fast = bytegrad.differentiate(fresh(in_function), tier=tier)
    general = bytegrad.differentiate(in_function, tier="general")
    for cfg in (None, Config(scale=2.0), Config(scale=-1.0, squash=False), None, Config(kind="tanh")):
        agree(fast, general, W, cfg)


@pytest.mark.parametrize("tier", TIERS)
def test_a_module_level_config_written_or_replaced_is_seen(tier, monkeypatch):
    fast = bytegrad.differentiate(fresh(module_level), tier=tier)
    general = bytegrad.differentiate(module_level, tier="general")
    agree(fast, general, W)
    agree(fast, general, W)
    monkeypatch.setattr(CFG, "scale", 0.9)  # a field written
    agree(fast, general, W)
    monkeypatch.setattr(CFG, "temperature", 2.5)
    agree(fast, general, W)
    monkeypatch.setitem(globals(), "CFG", Config(scale=-0.3))  # a new object
    agree(fast, general, W)
    assert stats(fast)["programs"] and stats(fast)["compiled_calls"] >= 2, stats(fast)


def helper_writes(cfg):
    cfg.scale = 3.0


def written_after_built(W):
    cfg = Config()
    cfg.scale = float(np.random.default_rng().integers(1, 3))
    return np.sum(cfg.scale * W)


def built_from_a_function(W):
    cfg = make_config()
    return np.sum(cfg.scale * W)


def make_config():
    return Config(scale=float(np.random.default_rng().integers(1, 3)))


def another_local_on_the_jump(W, other=None):
    cfg = other or Config()  # (the jump carries another variable: not taken)
    return np.sum(cfg.scale * W)


@pytest.mark.parametrize("fn", [written_after_built, built_from_a_function, another_local_on_the_jump],
                         ids=lambda f: f.__name__)
def test_other_objects_stay_refused(fn):
    fast = bytegrad.differentiate(fresh(fn), tier="numpy")
    fast.grad(W)
    fast.grad(W)
    assert not stats(fast)["programs"] and stats(fast)["not_compiled"], stats(fast)


# ---- an integer label array ---------------------------------------------------------------------


def hinge(w, X, labels):
    signs = 2.0 * labels - 1.0
    margins = 1.0 - signs * (X @ w)
    return np.mean(np.maximum(margins, 0.0)) + 0.01 * w @ w


def weighted(x, flags):
    return np.sum((flags * 0.5 + 1.0) * np.tanh(x))


@pytest.mark.parametrize("tier", TIERS)
def test_integer_labels_are_read_per_call(tier):
    rng = np.random.default_rng(0)
    w, X = rng.normal(size=5), rng.normal(size=(20, 5))
    fast = bytegrad.differentiate(fresh(hinge), tier=tier)
    general = bytegrad.differentiate(hinge, tier="general")
    for _ in range(4):
        agree(fast, general, w, X, rng.integers(0, 2, 20))  # new labels every call
    agree(fast, general, w, X, rng.integers(0, 2, 20).astype(np.int32))  # another dtype: another program
    st = stats(fast)
    assert st["programs"] and not st["not_compiled"] and st["compiled_calls"] == 5, st


@pytest.mark.parametrize("tier", TIERS)
def test_boolean_flags_are_read_per_call(tier):
    rng = np.random.default_rng(1)
    x = rng.normal(size=7)
    fast = bytegrad.differentiate(fresh(weighted), tier=tier)
    general = bytegrad.differentiate(weighted, tier="general")
    for _ in range(4):
        agree(fast, general, x, rng.integers(0, 2, 7).astype(bool))
    assert stats(fast)["compiled_calls"] == 4, stats(fast)


def labels_counted(w, labels):
    return np.sum(2.0 * labels * w) / labels.sum()  # (`labels.sum()`: not float arithmetic)


def labels_indexed_and_scaled(w, labels):
    return np.sum(w[labels] * (labels - 0.5))


def test_other_uses_of_the_labels_keep_them_untracked():
    assert reach_labels.converted_params(hinge.__code__, frozenset({"labels"})) == {"labels"}
    assert reach_labels.converted_params(weighted.__code__, frozenset({"flags"})) == {"flags"}
    assert not reach_labels.converted_params(labels_counted.__code__, frozenset({"labels"}))
    assert not reach_labels.converted_params(labels_indexed_and_scaled.__code__, frozenset({"labels"}))
    rng = np.random.default_rng(2)
    for fn in (labels_counted, labels_indexed_and_scaled):
        fast = bytegrad.differentiate(fresh(fn), tier="numpy")
        general = bytegrad.differentiate(fn, tier="general")
        for _ in range(3):
            labels = rng.integers(1, 4, 6)
            agree(fast, general, rng.normal(size=6), labels)


def test_without_tracking_the_labels_a_program_would_hold_them(monkeypatch):
    """`leaf` is what makes the labels an input: without it the capture is refused (never a program
    that holds the capture's labels)."""
    monkeypatch.setattr(reach_labels, "leaf", lambda value, tape: None)
    rng = np.random.default_rng(3)
    w, X = rng.normal(size=5), rng.normal(size=(20, 5))
    fast = bytegrad.differentiate(fresh(hinge), tier="numpy")
    general = bytegrad.differentiate(hinge, tier="general")
    for _ in range(3):
        agree(fast, general, w, X, rng.integers(0, 2, 20))
    assert not stats(fast)["programs"], stats(fast)


@pytest.mark.parametrize("omit", [False, True], ids=["guarded", "guard-omitted"])
def test_the_config_reads_rest_on_the_guard_of_its_init(omit, monkeypatch):
    """The program holds what the attributes gave at capture; it is the `__init__`'s code and defaults
    guard (by value) that sees a changed default. Without it, the program keeps the old value."""
    from bytegrad.compiled import source as program_source

    if omit:
        monkeypatch.setattr(program_source, "_OMITTED", frozenset({"code"}))
    fast = bytegrad.differentiate(fresh(in_function), tier="numpy")
    general = bytegrad.differentiate(in_function, tier="general")
    agree(fast, general, W)
    with monkeypatch.context() as m:
        m.setattr(Config.__init__, "__defaults__", (0.9, 3.0, True, "softplus"))
        same = True
        try:
            agree(fast, general, W)
        except AssertionError:
            same = False
    assert same is not omit
