"""The IR's named passes (bytegrad/compiled/passes.py): dead code, the reverse schedule, the summed
bias, each listed by `passes.dump` (a program's `.passes`) and golden-tested here, as the
transform's passes are; and each pass's result checked against what it claims on its own. The
listing ends with what the passes over the lowered NumPy code did (value-only steps, buffer
reuse: `passes.dump_lowering`).

The listings hold no bytecode: they are the same on every supported CPython. A change in what a
pass decides shows here first (BYTEGRAD_REGEN_GOLDEN=1 rewrites the files in
tests/golden_programs/, to be read in review).
"""
from __future__ import annotations

import os
import types
from pathlib import Path

import numpy as np
import pytest

import bytegrad
from bytegrad.compiled import passes, policy

GOLDEN = Path(__file__).parent / "golden_programs"
REGEN = os.environ.get("BYTEGRAD_REGEN_GOLDEN", "") not in ("", "0")


def _fresh(f):
    """A new function of `f`'s code: its own programs (the tiers are kept per function)."""
    return types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)


def _program(f, *args, wrt=0):
    fn = bytegrad.differentiate(_fresh(f), tier="numpy", wrt=wrt)
    general = bytegrad.differentiate(f, tier="general", wrt=wrt)
    for _ in range(2):  # the capture, then a call of the program: both the general path's
        got, want = fn.value_and_grad(*args), general.value_and_grad(*args)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        for a, b in zip(got[1] if isinstance(wrt, tuple) else (got[1],), want[1] if isinstance(wrt, tuple) else (want[1],)):
            np.testing.assert_allclose(a, b, rtol=1e-12)
    (tiers,) = policy._BY_FUNCTION[fn._target].values()
    (program,) = tiers.programs
    return program


def _golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.passes.txt"
    if REGEN:
        path.write_text(text + "\n")
    assert path.exists(), f"no golden {path}: run with BYTEGRAD_REGEN_GOLDEN=1"
    assert text + "\n" == path.read_text(), f"{name}: the passes' listing changed (BYTEGRAD_REGEN_GOLDEN=1 rewrites it)"


def unused_and_shared(x, w):
    unused = np.cos(x) * 3.0  # noqa: F841 - read by nothing: dead code
    s = np.sin(x)
    y = s * w + s  # s read twice: its cotangent is a sum, in the sweep's order
    return np.sum(y * y)


def dense_bias(W, x, b):
    return np.sum(np.tanh(W @ x + b[:, None]))


def listed(a, b):
    return np.sum(np.stack([a, b * 2.0, a]) ** 2)


def reused(x, W):  # the MLP's shape, 64 x 64: every forward temporary is reusable
    h = np.tanh(W @ x + 0.5)
    h = np.tanh(W @ h - 0.25)
    return np.sum(h * h)


def py_division(x, a):
    r = 1.0 / a  # noqa: F841 - raises on the general path at a == 0: kept though nothing reads it
    return np.sum(x * 2.0)


@pytest.mark.parametrize("name, f, args, wrt", [
    ("unused_and_shared", unused_and_shared, (np.linspace(0.1, 0.9, 4), 1.5), (0, 1)),
    ("dense_bias", dense_bias, (np.full((3, 2), 0.2), np.ones((2, 5)), np.arange(3.0)), (0, 2)),
    ("listed", listed, (np.arange(3.0), np.ones(3)), (0, 1)),
    ("py_division", py_division, (np.arange(3.0), 2.0), 0),
    ("reused", reused, (np.linspace(-1.0, 1.0, 64 * 64).reshape(64, 64), np.eye(64) * 0.5), 1),
])
def test_the_passes_listing(name, f, args, wrt):
    _golden(name, _program(f, *args, wrt=wrt).passes)


@pytest.fixture
def plans(monkeypatch):
    """The Plans the passes give the programs built in a test."""
    made = []
    real = passes.plan

    def recorded(ir):
        made.append(real(ir))
        return made[-1]

    monkeypatch.setattr(passes, "plan", recorded)
    return made


def test_dead_code_drops_what_nothing_needs_and_keeps_what_may_raise(plans):
    prog = _program(unused_and_shared, np.linspace(0.1, 0.9, 4), 1.5, wrt=(0, 1))
    (p,) = plans
    ir = p.ir
    assert set(ir.dropped) and not set(ir.dropped) & set(ir.order)
    assert "np.cos" not in prog.ir and prog.records == len(ir.ops)  # (the guard on np.cos stays: it is read)
    reached, todo = set(), list(ir.outputs)
    while todo:  # what the output reads, by hand: exactly what the pass kept
        i = todo.pop()
        if i not in reached:
            reached.add(i)
            todo += ir.ops[i].inputs() if i in ir.ops else []
    assert set(ir.ops) == reached & set(ir.ops)
    plans.clear()
    prog = _program(py_division, np.arange(3.0), 2.0)
    (p,) = plans
    assert p.ir.raising and p.ir.raising <= set(p.ir.ops) and not p.ir.dropped
    d = bytegrad.differentiate(_fresh(py_division), tier="numpy")
    d.grad(np.arange(3.0), 2.0)
    assert d.grad(np.arange(3.0), 4.0) is not None and d.stats()["compiled"]["compiled_calls"] == 2
    with pytest.raises(ZeroDivisionError):  # kept: the program raises where the general path does
        d.grad(np.arange(3.0), 0.0)


def test_the_reverse_schedule_is_the_sweep_in_tape_order_reversed(plans):
    _program(unused_and_shared, np.linspace(0.1, 0.9, 4), 1.5, wrt=(0, 1))
    _program(listed, np.arange(3.0), np.ones(3), wrt=(0, 1))
    for p in plans:
        ir, sched = p.ir, p.schedule
        steps = [s.idx for s in sched.steps]
        assert steps == sorted(steps, reverse=True) == [i for i in reversed(ir.order) if i in ir.ops and i in ir.depends]
        flows: dict[int, list[int]] = {}
        for s in sched.steps:
            assert s.targets and sched.targets(s.idx) == list(s.targets)
            for _, t in s.targets:
                for q in (t if isinstance(t, tuple) else (t,)):
                    if q is not None and q in ir.depends:
                        flows.setdefault(q, []).append(s.idx)
        assert flows == {q: list(v) for q, v in sched.into.items()}
        assert sched.sweep({steps[-1]}) == [steps[-1]]


def test_summed_bias_only_for_a_bias_read_once_by_a_broadcast(plans):
    W, x, b = np.full((3, 2), 0.2), np.ones((2, 5)), np.arange(3.0)
    prog = _program(dense_bias, W, x, b, wrt=(0, 2))
    assert plans[-1].bias and "axis=(1,))" in prog.source

    def bias_twice(W, x, b):
        c = b[:, None]
        return np.sum(np.tanh(W @ x + c)) + np.sum(c * c)

    prog = _program(bias_twice, W, x, b, wrt=(0, 2))
    assert not plans[-1].bias and prog.records == plans[-1].ir.ops.__len__()


def chain(x, w):
    y = np.sin(x) * w
    return np.sum(np.tanh(y) * y)


@pytest.mark.parametrize("tier", ["numpy", "numba"])
def test_both_back_ends_lower_the_one_reverse_schedule(tier, monkeypatch):
    """The schedule is what each back end's reverse pass follows: a schedule that leaves out the
    step nearest the inputs makes a program whose gradient is not the general path's, which the
    check against the capture refuses (the signature stays on the general path, saying why); the
    schedule as built makes a program that runs."""
    from bytegrad.runtime import kernels

    if tier == "numba" and kernels.disabled():
        pytest.skip("Numba is disabled")
    x, w = np.linspace(0.1, 0.9, 5), 1.5
    want = bytegrad.differentiate(chain, tier="general").value_and_grad(x, w)
    good = bytegrad.differentiate(_fresh(chain), tier=tier)  # (a float differentiated: no Numba program)
    for _ in range(2):
        got = good.value_and_grad(x, w)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    info = good.stats()["compiled"]
    assert info["compiled_calls"] == 2 and info["programs"][0]["backend"] == tier, info
    real = passes.reverse_schedule

    def short(ir):
        s = real(ir)
        return passes.Schedule(s.steps[:-1], s.into, {st.idx: st for st in s.steps[:-1]})

    monkeypatch.setattr(passes, "reverse_schedule", short)
    bad = bytegrad.differentiate(_fresh(chain), tier=tier)
    for _ in range(2):
        got = bad.value_and_grad(x, w)  # (the general path's, the program being refused)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    info = bad.stats()["compiled"]
    assert info["compiled_calls"] == 0 and not info["programs"], info
    (why,) = info["not_compiled"].values()
    assert "disagreed" in why or "raised" in why, why


def test_the_lowering_listing_says_what_the_program_does():
    """The value-only records are those whose forward step the program runs only for the value
    (`if value:`), and each buffer reuse listed is a statement of the program."""
    import re

    x, W = np.linspace(-1.0, 1.0, 64 * 64).reshape(64, 64), np.eye(64) * 0.5
    prog = _program(reused, x, W, wrt=1)
    listing = prog.passes.split("value only, skipped:\n", 1)[1]
    only, reuse = listing.split("\nbuffer reuse, taken:\n")
    assert sorted(only.split()) == sorted(f"%{i}" for i in re.findall(r"if value: v(\d+) = ", prog.source))
    lines = [ln.split(": ", 1)[1] for ln in reuse.splitlines()]
    assert lines and all(ln in prog.source for ln in lines), lines
    assert len(re.findall(r"out=v\d+\)", prog.source)) == len(lines)
