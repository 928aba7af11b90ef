"""`bytegrad.explain` lists the operations the rewrite left as they are, with the reason (issue 16)."""
from __future__ import annotations

import math

import numpy as np

import bytegrad


def loss(x, n):
    m = n * 2 - 1
    k = len(x) + m
    y = np.sin(x) * 2.0
    s = x.shape[0] / 2
    return np.sum(y) + k + s + math.sqrt(n)


def _section(text):
    return text.split("left as is in loss")[1].split("compiled program")[0]


def test_explain_lists_the_sites_left_unrewritten_and_why():
    part = _section(bytegrad.explain(loss, np.ones(3), 4))
    lines = [line for line in part.splitlines() if "|" in line]
    assert any("m = n * 2 - 1" in line and "BINARY_OP: no operand can hold a differentiated value" in line
               for line in lines)
    assert any("k = len(x) + m" in line and "call of len: its result has no derivative" in line for line in lines)
    assert any("attribute .shape: it describes the array, not its values" in line for line in lines)
    assert any("math.sqrt(n)" in line and "neither the callable nor an argument" in line for line in lines)
    assert not any("y = np.sin(x) * 2.0" in line for line in lines)  # hooked: not listed


def test_explain_says_none_when_everything_is_hooked():
    text = bytegrad.explain(lambda x: np.sum(np.sin(x) * x), np.ones(3))
    assert "and why (the activity analysis over its code):\n  none\n" in text
