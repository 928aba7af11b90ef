"""Every refusal of the compiled tier names the line it is about (issue 27: `stats()` and `explain`
name, for anything still refused, the construct and the line), here for what is read rather than
computed: a global or a closure variable a guard cannot fix, a mutable default argument."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import bytegrad

STATE = {1, 2}


def _line_of(fn, text):
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, line in enumerate(lines) if text in line)


def reads_a_global_set(x):
    y = x * 2.0
    return np.sum(y) + len(STATE)


def mutable_default(x, d=[1.0]):  # noqa: B006  (the point)
    return np.sum(x) * d[0]


def _closure_over_a_set():
    seen = {1}

    def f(x):
        y = np.sin(x)
        return np.sum(y) * len(seen)
    return f


CASES = [
    (reads_a_global_set, "reads the global STATE", "len(STATE)"),
    (mutable_default, "default argument", "def mutable_default"),
    (_closure_over_a_set(), "the closure variable seen", "len(seen)"),
]


@pytest.mark.parametrize("fn, what, text", CASES, ids=[c[1] for c in CASES])
def test_a_refusal_names_the_line_it_is_about(fn, what, text):
    d = bytegrad.differentiate(fn, tier="numpy")
    for _ in range(2):
        d.grad(np.array([0.5, 1.0]))
    (why,) = d.stats()["compiled"]["not_compiled"].values()
    assert what in why and f"(line {_line_of(fn, text)})" in why, why
    assert f"line {_line_of(fn, text)}" in bytegrad.explain(d, np.array([0.5, 1.0]))
