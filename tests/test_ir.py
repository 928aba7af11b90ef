"""The program IR (bytegrad/compiled/ir.py): golden listings of what a capture recorded.

The listing names each value, the operation that made it, its type and line, which values depend
on a differentiated leaf, and the decisions at their places. It is the same on every supported
CPython (it holds no bytecode), so a change in what the capture records, or in how the IR reads
the tape, shows here first.
"""
from __future__ import annotations

import numpy as np

import bytegrad
from bytegrad.compiled import policy


def _ir_of(f, *args, wrt=0):
    fn = bytegrad.differentiate(f, tier="numpy", wrt=wrt)
    fn.grad(*args)
    (tiers,) = policy._BY_FUNCTION[fn._target].values()
    (program,) = tiers.programs
    return program.ir


def dense(W, x, b):
    h = np.tanh(W @ x + b)
    if np.sum(h) > 0:
        h = h * 2.0
    return np.sum(h ** 2)


def test_a_dense_layer_with_a_branch():
    text = _ir_of(dense, np.ones((2, 3)) * 0.1, np.ones(3), np.zeros(2), wrt=(0, 2))
    line = dense.__code__.co_firstlineno
    assert text.splitlines() == [
        "%0 = differentiated input  float64[2, 3] *",
        "%1 = input  float64[3]",
        "%2 = differentiated input  float64[2] *",
        f"%3 = operator.matmul(%0, %1)  float64[2]  (rrule, line {line + 1}) *",
        f"%4 = operator.add(%3, %2)  float64[2]  (elementwise, line {line + 1}) *",
        f"%5 = np.tanh(%4)  float64[2]  (elementwise, line {line + 1}) *",
        f"%6 = np.sum(%5)  float64  (rrule, line {line + 2}) *",
        f"check operator.gt(0.582625, 0) == True  (line {line + 2})",
        f"%7 = operator.mul(%5, 2.0)  float64[2]  (elementwise, line {line + 3}) *",
        f"%8 = operator.pow(%7, 2)  float64[2]  (elementwise, line {line + 4}) *",
        f"%9 = np.sum(%8)  float64  (rrule, line {line + 4}) *",
        "return %9",
    ]


def made_inside(x):
    eye = np.eye(2)
    return np.sum((eye @ x) * x)


def test_an_array_made_from_constants_and_an_unused_value():
    text = _ir_of(made_inside, np.arange(2.0))
    line = made_inside.__code__.co_firstlineno
    assert text.splitlines() == [
        "%0 = differentiated input  float64[2] *",
        "%1 = made np.eye(2)  float64[2, 2]",
        f"%2 = operator.matmul(%1, %0)  float64[2]  (rrule, line {line + 2}) *",
        f"%3 = operator.mul(%2, %0)  float64[2]  (elementwise, line {line + 2}) *",
        f"%4 = np.sum(%3)  float64  (rrule, line {line + 2}) *",
        "return %4",
    ]
