"""Container methods that move differentiated values without looking at them (`list.insert`,
`list.extend`, `list.pop`, `dict.update`, `dict.pop`, `dict.setdefault`, `collections.deque`'s
appends and pops: runtime/dispatch.py `CAPTURE_SAFE`) in compiled programs, against the general path.

On a container the function made itself they are plumbing between recorded operations, so the
program replays them; on a container the caller passed in they are effects, which the effect check
(compiled/effects.py) keeps on the general path: the caller's list or dict must change on every
call, under every tier, exactly as on the general path. `list.sort` and `list.remove` compare
values, so they stay off the list (a program would replay the captured order).
"""
from __future__ import annotations

import collections
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gradcheck import agree_with_general, assert_trees_close

import bytegrad

TIERS = ("numpy", "numba")


def calls(n=4, size=4, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=size) for _ in range(n)]


def local_lists(x):
    items = [x[0], x[1]]
    items.insert(0, x[2] ** 2)
    items.append(x[3] * 2.0)
    items.append(x[0] * x[1])
    last = items.pop()
    first = items.pop(0)
    return sum(items) * last + first


def local_dicts(x):
    d = {"a": x[0] * 2.0}
    d.update(b=x[1] ** 2, c=x[2])
    d.setdefault("a", x[3])  # (present: gives d["a"], writes nothing)
    d.setdefault("e", x[3] * 3.0)
    c = d.pop("c")
    copy = d.copy()
    return sum(copy.values()) * c


def local_deques(x):
    window = collections.deque([x[0]], maxlen=3)
    window.append(x[1] * 2.0)
    window.appendleft(x[2])
    window.append(x[3])
    window.append(x[0] ** 2)  # (maxlen: the oldest falls out)
    right = window.pop()
    left = window.popleft()
    return sum(window) * right + left


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn", [local_lists, local_dicts, local_deques])
def test_container_methods_on_own_containers_compile_and_agree(fn, tier):
    s = agree_with_general(fn, [(x,) for x in calls()], tier)
    assert s["programs"] and s["compiled_calls"] >= 2, s


def inserts_into_callers_list(x, history):
    history.insert(0, len(history))
    history.extend([1, 2])
    return np.sum(x ** 2)


def updates_callers_dict(x, info):
    info.update(calls=info.get("calls", 0) + 1)
    info.setdefault("first", 7)
    return np.sum(np.sin(x))


def pops_callers_list(x, queue):
    scale = queue.pop()  # (a float the caller queued: each call takes the next one)
    return np.sum(x * scale)


def extends_a_local_list(x):
    items = [x[0]]
    items.extend([x[1] * 2.0, x[2] ** 2])  # (3.12+: bytegrad's py_list_extend, whose handler keeps it general)
    return sum(items) * items[-1]


@pytest.mark.parametrize("tier", TIERS)
def test_list_extend_agrees(tier):
    agree_with_general(extends_a_local_list, [(x,) for x in calls()], tier)


@pytest.mark.parametrize("tier", TIERS)
def test_writes_into_the_callers_list_happen_on_every_call(tier):
    fast = bytegrad.differentiate(inserts_into_callers_list, tier=tier)
    general = bytegrad.differentiate(inserts_into_callers_list, tier="general")
    mine, theirs = [], []
    for x in calls():
        assert_trees_close(fast.value_and_grad(x, mine), general.value_and_grad(x, theirs), rtol=1e-12, atol=0)
        assert mine == theirs
    assert len(mine) == 12


@pytest.mark.parametrize("tier", TIERS)
def test_writes_into_the_callers_dict_happen_on_every_call(tier):
    fast = bytegrad.differentiate(updates_callers_dict, tier=tier)
    general = bytegrad.differentiate(updates_callers_dict, tier="general")
    mine: dict = {}
    theirs: dict = {}
    for x in calls():
        assert_trees_close(fast.value_and_grad(x, mine), general.value_and_grad(x, theirs), rtol=1e-12, atol=0)
        assert mine == theirs
    assert mine == {"calls": 4, "first": 7}


@pytest.mark.parametrize("tier", TIERS)
def test_a_pop_from_the_callers_list_takes_the_next_item_each_call(tier):
    fast = bytegrad.differentiate(pops_callers_list, tier=tier)
    general = bytegrad.differentiate(pops_callers_list, tier="general")
    mine, theirs = [0.5, 1.5, 2.5, 3.5, 4.5], [0.5, 1.5, 2.5, 3.5, 4.5]
    for x in calls():
        got, want = fast.value_and_grad(x, mine), general.value_and_grad(x, theirs)
        assert_trees_close(got, want, rtol=1e-12, atol=0)
        assert mine == theirs
    assert mine == [0.5]


def sorts_a_local_list(x):
    items = [x[0], x[1], x[2]]
    items.sort()
    return items[0] * 2.0 + items[2]


@pytest.mark.parametrize("tier", TIERS)
def test_list_sort_is_not_replayed(tier):
    """`list.sort` compares values in C, so it runs as `py_list_sort` (each comparison a decision): a
    program never replays the captured order. The order of the calls' values changes; every
    gradient must be the general path's (tests/test_compiled_reach.py has more)."""
    fast = bytegrad.differentiate(sorts_a_local_list, tier=tier)
    general = bytegrad.differentiate(sorts_a_local_list, tier="general")
    for x in (np.array([1.0, 2.0, 3.0]), np.array([3.0, 1.0, 2.0]), np.array([2.0, 3.0, 1.0]),
              np.array([1.5, 2.5, 0.5])):
        assert_trees_close(fast.value_and_grad(x), general.value_and_grad(x), rtol=1e-12, atol=0)
    assert all(any("lt gives" in g for g in p["guards"]) for p in fast.stats()["compiled"]["programs"])
