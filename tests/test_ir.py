"""The program IR (bytegrad/compiled/ir.py): golden listings of what a capture recorded.

The listing names each value, the operation that made it, its type and line, which values depend
on a differentiated leaf, and the decisions at their places. It is the same on every supported
CPython (it holds no bytecode), so a change in what the capture records, or in how the IR reads
the tape, shows here first.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

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


# ---- the lowered program: golden source ------------------------------------------------------------

GOLDEN = Path(__file__).parent / "golden_programs"
REGEN = os.environ.get("BYTEGRAD_REGEN_GOLDEN", "") not in ("", "0")


def _source_of(f, *args, wrt=0, tier="numpy"):
    fn = bytegrad.differentiate(f, tier=tier, wrt=wrt)
    fn.grad(*args)
    (tiers,) = policy._BY_FUNCTION[fn._target].values()
    (program,) = tiers.programs
    return re.sub(r"0x[0-9a-f]+", "0x", program.source)


def _golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.py.txt"
    if REGEN:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden {path}: run with BYTEGRAD_REGEN_GOLDEN=1"
    assert text == path.read_text(), f"{name}: the generated program changed (BYTEGRAD_REGEN_GOLDEN=1 rewrites it)"


def test_the_numpy_program_of_a_dense_layer():
    """The guards, the forward steps with the decision checked in place, the value-only steps
    (`if value:`), the reverse steps with buffers reused and every name deleted after its last use."""
    _golden("dense", _source_of(dense, np.ones((2, 3)) * 0.1, np.ones(3), np.zeros(2), wrt=(0, 2)))


def test_the_numpy_program_of_an_array_made_inside():
    _golden("made_inside", _source_of(made_inside, np.arange(2.0)))
