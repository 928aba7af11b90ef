"""A Python callee with `try`/`except` in a compiled program, when the differentiated function has no
handler of its own: the capture run starts watching exceptions as the callee is called
(compiled/constructs.py `watch_callee`). A capture whose callee handled an exception raised by an
operation is refused; one where nothing was raised compiles, and a later call that raises in the
callee gets the general path's result (the replayed operation raises, and the call goes back).
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gradcheck import assert_trees_close

import bytegrad

TIERS = ("numpy", "numba")


def _safe_log(x):
    try:
        return math.log(x)
    except ValueError:
        return -1e3


def _logs(x):
    return sum(_safe_log(float(v)) * v for v in x)


def _safe_ratio(a, b):
    try:
        return a / b
    except ZeroDivisionError:
        return 0.0


def _ratio(a, b):
    return _safe_ratio(a * 2.0, b) + a


def _compare(fn, calls, tier, wrt=0):
    fast = bytegrad.differentiate(fn, wrt=wrt, tier=tier)
    general = bytegrad.differentiate(fn, wrt=wrt, tier="general")
    for args in calls:
        assert_trees_close(fast.value_and_grad(*args), general.value_and_grad(*args), rtol=1e-12, atol=1e-300)
    return fast.stats()["compiled"]


@pytest.mark.parametrize("tier", TIERS)
def test_a_callee_with_a_handler_that_never_runs_compiles(tier):
    x = np.array([0.5, 1.5, 2.5])
    s = _compare(_logs, [(x,), (x + 1.0,), (x * 2.0,)], tier)
    assert s["programs"] and s["compiled_calls"] >= 2, s


@pytest.mark.parametrize("tier", TIERS)
def test_the_handler_running_on_a_later_call_gives_the_general_paths_result(tier):
    """Call 3 takes the callee's `except` branch (log of a negative number): never the replay of the
    captured branch."""
    calls = [(np.array([0.5, 1.5]),), (np.array([0.5, 1.5]),), (np.array([-0.5, 1.5]),), (np.array([0.5, 2.5]),)]
    _compare(_logs, calls, tier)
    _compare(_ratio, [(1.0, 2.0), (1.0, 2.0), (1.0, 0.0), (3.0, 2.0), (1.0, 0.0)], tier, wrt=(0, 1))


@pytest.mark.parametrize("tier", TIERS)
def test_a_capture_whose_callee_handled_an_exception_is_refused(tier):
    """The first call (the capture, under a pinned tier) takes the `except` branch: the program would
    not know when to take it again; refused, with the callee's line. Without the watch on callees
    the capture would not see it (the differentiated function has no handler)."""
    def ratio(a, b):  # (a function of its own: programs are kept per function, across `differentiate`)
        return _safe_ratio(a * 2.0, b) + a

    s = _compare(ratio, [(1.0, 0.0), (1.0, 2.0), (1.0, 0.0)], tier, wrt=(0, 1))
    assert not s["programs"], s
    reason = next(iter(s["not_compiled"].values()))
    assert "ZeroDivisionError" in reason and "_safe_ratio" in reason, reason
