"""Subscripts into instances of subclasses (runtime/abi.py `setitem` and `subclass_store`, runtime/callbacks.py
`_base_item`): a store into an ndarray subclass that a derivative would flow through is a MutationError (it
was a plain store, and the gradient through it a silent zero: the tape records writes into plain ndarrays
only), and a class's own `__setitem__`/`__getitem__` that calls the base class's (`super().__setitem__(k, v)`)
runs once, where it used to call itself without end (RecursionError). Compared with central differences,
and under every tier with the general path, effects counted."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import bytegrad

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gradcheck import numerical_grad  # noqa: E402

TIERS = ("numpy", "numba", "auto")
SEEN: list = []


class Plain(np.ndarray):
    pass


class Logged(np.ndarray):
    def __setitem__(self, index, value):
        SEEN.append(("set", index if not isinstance(index, slice) else "slice"))
        super().__setitem__(index, value)

    def __getitem__(self, index):
        SEEN.append(("get", index if not isinstance(index, slice) else "slice"))
        return super().__getitem__(index)


class LoggedList(list):
    def __setitem__(self, index, value):
        SEEN.append(("lset", index if not isinstance(index, slice) else "slice"))
        if isinstance(index, slice):
            super().__setitem__(index, list(value))
        else:
            super().__setitem__(index, value)

    def __getitem__(self, index):
        SEEN.append(("lget", index))
        return super().__getitem__(index)


class LoggedDict(dict):
    def __setitem__(self, key, value):
        SEEN.append(("dset", key))
        super().__setitem__(key, value)


def into_array_subclass(x, cls):
    a = np.zeros(4).view(cls)
    a[0] = x[0] * 2.0
    a[1:3] = x[1] * x[0]
    a[3] = np.sin(x[1])
    return np.sum(np.asarray(a) * np.array([1.0, 2.0, 3.0, 4.0]))


def into_containers(x):
    items = LoggedList([0.0, 0.0, 0.0])
    items[0] = x[0] * 2.0
    items[1:] = [x[1], x[0] * x[1]]
    d = LoggedDict()
    d["a"] = items[1] * 3.0
    return items[0] + items[2] * d["a"]


def constants_into_a_subclass(x, cls):
    a = np.zeros(3).view(cls)
    a[1] = 2.0
    a[2:] = 3.0
    return np.sum(x * np.asarray(a))


@pytest.mark.parametrize("cls", (Plain, Logged))
def test_a_store_a_derivative_would_flow_through_is_refused(cls):
    with pytest.raises(bytegrad.MutationError, match=f"instance of {cls.__qualname__}, a subclass of numpy.ndarray"):
        bytegrad.grad(into_array_subclass)(np.array([0.7, -1.3]), cls)


@pytest.mark.parametrize("cls", (Plain, Logged))
def test_constants_stored_into_a_subclass_array_are_constants(cls):
    x = np.array([0.5, 1.5, -2.0])
    np.testing.assert_allclose(bytegrad.grad(constants_into_a_subclass)(x, cls), [0.0, 2.0, 3.0])


def test_a_containers_own_setitem_calling_the_base_class_runs_once():
    x = np.array([1.5, -0.5])
    SEEN.clear()
    g = bytegrad.grad(into_containers)(x)
    seen = list(SEEN)
    SEEN.clear()
    into_containers(x)
    assert seen == SEEN  # the same overrides, once each, as the plain call
    np.testing.assert_allclose(g, numerical_grad(into_containers, (x,)), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("tier", TIERS)
def test_every_tier_agrees_with_the_general_path(tier):
    fast, general = bytegrad.differentiate(into_containers, tier=tier), bytegrad.differentiate(into_containers, tier="general")
    for i in range(4):
        x = np.array([0.5 + i, -0.25 * i])
        SEEN.clear()
        got = fast.value_and_grad(x)
        seen_fast = list(SEEN)
        SEEN.clear()
        want = general.value_and_grad(x)
        assert got[0] == pytest.approx(want[0], rel=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
        assert seen_fast == SEEN, (i, seen_fast, SEEN)


@pytest.mark.parametrize("tier", ("numpy", "numba"))
def test_a_capture_stores_constants_into_a_subclass_as_the_general_path(tier):
    """A capture run tracks the array `np.zeros(3)` makes (the general path does not): a store into its
    subclass view is the general path's plain store there, and the capture is refused, not failed."""
    d = bytegrad.differentiate(constants_into_a_subclass, tier=tier)
    for i in range(3):
        x = np.array([0.5, 1.5, -2.0]) + i
        np.testing.assert_allclose(d.grad(x, Plain), [0.0, 2.0, 3.0])
    info = d.stats()["compiled"]
    assert info["not_compiled"] and not info["compiled_calls"], info  # (refused: `.view` comes first)
