"""Decisions on data in Numba programs (compiled/numba_decide.py): a comparison, a truth test, a mask or
`np.argmax` is computed again by the kernel (or by the wrapper, on inputs alone) and checked; a call
where it comes out otherwise runs on the general path. Each program is held to the general path call
by call (values and gradients) while its decision flips, and the same run without the check gives a
wrong result (the mask excepted: the kernel computes it again, so it is right unchecked too)."""
from __future__ import annotations

import types

import numpy as np
import pytest

import bytegrad
from bytegrad.compiled import numba_decide, source as program_source
from bytegrad.runtime import kernels
from gradcheck import assert_trees_close

pytestmark = pytest.mark.skipif(kernels.disabled(), reason="Numba disabled (BYTEGRAD_DISABLE_NUMBA)")


def fresh(fn):
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def same(a, b) -> bool:
    try:
        assert_trees_close(a, b, rtol=1e-12, atol=0.0)
    except AssertionError:
        return False
    return True


def relu_mask(x):
    return np.sum((x * (x > 0)) ** 2) + np.sum(np.tanh(x))


def sum_branch(x):
    if np.sum(x) > 0:
        return np.sum(np.tanh(x) * x)
    return np.sum(x ** 2)


def argmax_index(x):
    return x[np.argmax(x)] * 3.0 + np.sum(np.sin(x))


class Dense:
    def __init__(self, W, b, activation=True):
        self.W = W
        self.b = b
        self.activation = activation

    def __call__(self, x):
        z = x @ self.W + self.b
        return np.tanh(z) if self.activation else z


def model_loss(W1, W2, x):
    h = x
    for layer in [Dense(W1, 0.0), Dense(W2, 0.0, activation=False)]:
        h = layer(h)
    return np.mean((h - 1.0) ** 2)


#: (function, the argument of each call: its decision flips between them)
FLIPS = [
    (relu_mask, [np.array([1.0, -2.0, 3.0]), np.array([1.5, -1.0, 2.0]), np.array([-1.0, 2.0, 3.0]),
                 np.array([2.0, -3.0, 1.0])]),
    (sum_branch, [np.array([1.0, -0.5, 2.0]), np.array([-3.0, 0.5, 1.0]), np.array([2.0, 1.0, -0.5]),
                  np.array([-1.0, -2.0, 0.5])]),
    (argmax_index, [np.array([1.0, 4.0, 2.0]), np.array([3.0, 1.0, 2.0]), np.array([0.5, 4.0, 2.0]),
                    np.array([0.0, 1.0, 5.0])]),
]


@pytest.mark.parametrize("omit", [False, True], ids=["checked", "check-omitted"])
@pytest.mark.parametrize("fn, calls", FLIPS, ids=lambda v: getattr(v, "__name__", ""))
def test_a_kernel_checks_its_decisions(fn, calls, omit, monkeypatch):
    if omit:
        monkeypatch.setattr(program_source, "_OMITTED", frozenset({program_source.DECISION_GUARD}))
        monkeypatch.setattr(numba_decide, "OMIT_CHECKS", True)
    fast = bytegrad.differentiate(fresh(fn), tier="numba")
    general = bytegrad.differentiate(fn, tier="general")
    agree = [same(fast.value_and_grad(x), general.value_and_grad(x)) for x in calls]
    st = fast.stats()["compiled"]
    assert st["programs"] and st["programs"][0]["backend"] == "numba", st
    if omit:
        assert not all(agree) or fn is relu_mask, agree
    else:
        assert all(agree), agree
        assert any(p["decided_otherwise"] for p in st["programs"]), st
        assert any("gives" in g for p in st["programs"] for g in p["guards"]), st


def test_a_decision_that_comes_out_as_captured_runs_the_kernel():
    fast = bytegrad.differentiate(fresh(sum_branch), tier="numba")
    general = bytegrad.differentiate(sum_branch, tier="general")
    for x in (np.array([1.0, -0.5, 2.0]), np.array([2.0, 0.5, 1.0]), np.array([0.1, 0.2, 0.3])):
        assert same(fast.value_and_grad(x), general.value_and_grad(x))
    st = fast.stats()["compiled"]
    assert [p["backend"] for p in st["programs"]] == ["numba"] and st["compiled_calls"] == 3, st
    assert st["programs"][0]["decided_otherwise"] == 0


def test_a_model_class_with_a_flag_runs_numba():
    """bench/realistic_programs.py's model_class: `np.tanh(z) if self.activation else z` is a decision
    on the flags of the layers the call built, checked in the kernel's wrapper."""
    rng = np.random.default_rng(0)
    fast = bytegrad.differentiate(fresh(model_loss), wrt=(0, 1), tier="numba")
    general = bytegrad.differentiate(model_loss, wrt=(0, 1), tier="general")
    for _ in range(3):
        args = (rng.standard_normal((4, 5)), rng.standard_normal((5, 2)), rng.standard_normal((6, 4)))
        assert same(fast.value_and_grad(*args), general.value_and_grad(*args))
    st = fast.stats()["compiled"]
    assert [p["backend"] for p in st["programs"]] == ["numba"] and st["compiled_calls"] == 3, st


def logged_branch(x, log):
    if np.sum(x) > 0:
        log.append(1)
        return np.sum(np.tanh(x))
    return np.sum(x ** 2)


def test_an_effect_next_to_a_decision_happens_once_per_call():
    """A run that writes (an item appended to an argument) stays on the general path: each call
    appends exactly what the general path appends, the decision flipping or not."""
    fast = bytegrad.differentiate(fresh(logged_branch), tier="numba")
    general = bytegrad.differentiate(logged_branch, tier="general")
    mine: list = []
    theirs: list = []
    for x in (np.array([1.0, 2.0]), np.array([-1.0, -2.0]), np.array([3.0, 1.0]), np.array([2.0, 2.0])):
        assert same(fast.value_and_grad(x, mine), general.value_and_grad(x, theirs))
        assert mine == theirs
    assert mine == [1, 1, 1]
