"""Globals that are frozensets or tuples of numbers, strings, types and ufuncs (`_PICKS =
frozenset({np.maximum, np.minimum})` in bytegrad's own `ufunc.accumulate`, a user's `COEFS = (1.0,
0.5)`): immutable all through, so a program guards them by identity (compiled/eligibility.py
`_frozen`). Each is compared call by call with tier="general" under the numpy and numba tiers, with
the global rebound between calls; a tuple holding something mutable stays refused, with its line.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gradcheck import agree_with_general

TIERS = ("numpy", "numba")


def _x(i):
    return np.random.default_rng(i).normal(size=6)


def _compiled(info):
    return bool(info.get("compiled_calls")) and bool(info.get("programs"))


def cumulative_returns(r):
    wealth = np.cumprod(1 + 0.01 * r)
    drawdown = wealth / np.maximum.accumulate(wealth) - 1
    return -wealth[-1] + drawdown.min() ** 2


@pytest.mark.parametrize("tier", TIERS)
def test_maximum_accumulate_compiles(tier):
    """`np.maximum.accumulate` runs bytegrad's own Python implementation, which asks whether the
    ufunc is in a module-level frozenset: that once refused every program using it."""
    info = agree_with_general(cumulative_returns, [(_x(i),) for i in range(5)], tier)
    assert _compiled(info), info


COEFS = (1.0, 0.5, 0.25)
KINDS = frozenset({"tanh", "sin"})
HOLDS_A_LIST = (1.0, [2.0])


def polynomial(x):
    return np.sum(COEFS[0] * x + COEFS[1] * x ** 2 + COEFS[2] * x ** 3)


def by_kind(x, kind):
    if kind in KINDS:
        return np.sum(np.tanh(x))
    return np.sum(x ** 2)


def holds_a_list(x):
    return np.sum(x * HOLDS_A_LIST[0])


def _rebind(name, value, at):
    def between(k):
        if k == at:
            globals()[name] = value
    return between


@pytest.mark.parametrize("tier", TIERS)
def test_a_tuple_of_floats_rebound_between_calls_is_seen(tier):
    try:
        info = agree_with_general(polynomial, [(_x(i),) for i in range(6)], tier,
                                  between=_rebind("COEFS", (2.0, -1.0, 0.5), 3))
    finally:
        globals()["COEFS"] = (1.0, 0.5, 0.25)
    assert _compiled(info), info


@pytest.mark.parametrize("tier", TIERS)
def test_a_frozenset_rebound_between_calls_is_seen(tier):
    try:
        info = agree_with_general(by_kind, [(_x(i), "sin") for i in range(6)], tier,
                                  between=_rebind("KINDS", frozenset({"tanh"}), 3))
    finally:
        globals()["KINDS"] = frozenset({"tanh", "sin"})
    assert _compiled(info), info


@pytest.mark.parametrize("tier", TIERS)
def test_a_tuple_holding_a_list_stays_refused(tier):
    info = agree_with_general(holds_a_list, [(_x(i),) for i in range(4)], tier)
    assert not _compiled(info)
    reasons = " ".join(str(v) for v in (info.get("not_compiled") or {}).values())
    assert "HOLDS_A_LIST" in reasons and "line" in reasons, info
