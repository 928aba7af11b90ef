"""The value-only and buffer-reuse passes over the program IR (bytegrad/compiled/passes.py
`value_only`, `buffer_reuse`): what each decides on the IR alone, that the NumPy lowering does
only what they allow (a pass that allows nothing leaves the program without `if value:` steps,
or without `out=` writes), and that the programs stay the general path's call by call, a
gradient asked alone included. The listings are golden-tested in tests/test_passes_ir.py."""
from __future__ import annotations

import re
import types

import numpy as np
import pytest

import bytegrad
from bytegrad.compiled import passes, policy
from bytegrad.runtime.backward import INPLACE_MIN_SIZE


def _fresh(f):
    return types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)


@pytest.fixture
def plans(monkeypatch):
    made = []
    real = passes.plan

    def recorded(ir):
        made.append(real(ir))
        return made[-1]

    monkeypatch.setattr(passes, "plan", recorded)
    return made


def _compare(f, calls, wrt=0):
    """`f` under the numpy tier against the general path, call by call: the value and gradient,
    and the gradient asked alone (the program's value-only steps skipped). Returns the last program."""
    fast = bytegrad.differentiate(_fresh(f), tier="numpy", wrt=wrt)
    general = bytegrad.differentiate(f, tier="general", wrt=wrt)
    for args in calls:
        got, want = fast.value_and_grad(*args), general.value_and_grad(*args)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
        np.testing.assert_allclose(fast.grad(*args), want[1], rtol=1e-12)
    (tiers,) = policy._BY_FUNCTION[fast._target].values()
    assert tiers.compiled_calls >= len(calls), fast.stats()["compiled"]
    return tiers.programs[-1]  # (the last captured: a flipped decision adds one)


def _skipped(source: str) -> list[int]:
    return sorted(int(i) for i in re.findall(r"if value: v(\d+) = ", source))


def tanh_loss(x, w):
    return np.sum(np.tanh(x * w))  # tanh's partial reads its output: only the sum is value-only


def decided(x, w):
    s = np.sum(x * w)
    if s > 0.0:  # a decision reads s: s is computed for it, value or not
        return s * 2.0
    return s * -3.0


def raises(x, a):
    r = 1.0 / a  # noqa: F841 - raises on the general path at a == 0: kept though nothing reads it
    return np.sum(x * 2.0)


def test_value_only_is_what_only_the_output_reads(plans):
    x = np.linspace(0.1, 0.9, 5)
    prog = _compare(tanh_loss, [(x, 1.5), (x, -0.5)])
    p = plans[-1]
    (tanh,) = [i for i, r in p.ir.ops.items() if r.fn is np.tanh]
    assert tanh in passes.reverse_reads(p.ir, p.schedule) and tanh not in p.value_only
    assert p.value_only == tuple(p.ir.outputs) and _skipped(prog.source) == list(p.value_only)
    for rec_i in p.value_only:  # each value-only record's readers are value-only (or it is the output)
        readers = {i for i, r in p.ir.ops.items() if rec_i in r.inputs()}
        assert readers <= set(p.value_only)

    plans.clear()
    prog = _compare(decided, [(x, 1.5), (x, 1.0), (x, -1.0), (x, 2.0)])  # (the decision flips: a second program)
    for p in plans:
        read = {q for reads in p.ir.decision_reads for q in reads}
        assert read and not read & set(p.value_only) and len(p.value_only) == 1, (read, p.value_only)

    plans.clear()
    prog = _compare(raises, [(x, 2.0), (x, 4.0)])
    p = plans[-1]
    assert p.ir.raising and not p.ir.raising & set(p.value_only) and p.value_only == tuple(_skipped(prog.source))


def test_the_lowering_skips_only_what_the_pass_allows(monkeypatch):
    """A value-only pass that allows nothing: no step is skipped. One that allows every record:
    the lowering's own check of its statements (what a reverse step, a guard, a decision reads)
    keeps the program right, and skips what the pass would (the check is not the pass's only guard)."""
    x = np.linspace(0.1, 0.9, 5)
    monkeypatch.setattr(passes, "value_only", lambda ir, schedule: ())
    assert _skipped(_compare(tanh_loss, [(x, 1.5), (x, -0.5)]).source) == []
    monkeypatch.setattr(passes, "value_only", lambda ir, schedule: tuple(ir.ops))
    for f in (tanh_loss, decided):
        prog = _compare(f, [(x, 1.5), (x, 0.5)])
        assert len(_skipped(prog.source)) == 1, prog.source


def big(x, W, b):
    c = np.sin(b)  # a (64,) array of the program's own: broadcast, so never written into
    h = np.tanh(W @ x + c)  # W @ x is a product the program made: `+ c` may write into it
    return np.sum(np.exp(x) * h)  # x is the caller's: never written into


def test_buffer_reuse_offers_the_programs_own_arrays_of_the_results_shape(plans):
    rng = np.random.default_rng(0)
    x, W, b = rng.standard_normal((64, 64)), rng.standard_normal((64, 64)) / 8.0, rng.standard_normal(64)
    prog = _compare(big, [(x, W, b), (x * 0.5, W, b + 1.0)], wrt=1)
    p = plans[-1]
    ops = p.ir.ops
    assert p.into, "nothing offered"
    for i, qs in p.into.items():
        out = ops[i].out
        assert ops[i].kind == "elementwise" and out.size >= INPLACE_MIN_SIZE
        for q in qs:
            assert q in p.made and q in ops and ops[q].out.shape == out.shape and ops[q].out.dtype == out.dtype
    (matmul,) = [i for i, r in ops.items() if r.fn is np.matmul or getattr(r.fn, "__name__", "") == "matmul"]
    (sin,) = [i for i, r in ops.items() if r.fn is np.sin]
    (exp,) = [i for i, r in ops.items() if r.fn is np.exp]
    assert matmul in p.made and sin in p.made  # both new arrays of the program's
    offered = {q for qs in p.into.values() for q in qs}
    assert matmul in offered and sin not in offered  # (sin's is broadcast against the product)
    assert p.into.get(exp, ()) == ()  # exp(x) reads the caller's x
    taken = re.findall(r"out=(v\d+)\)", prog.source)
    assert taken and {f"v{q}" for q in offered} >= {v for v in taken if v.startswith("v")}


def test_the_lowering_writes_in_place_only_where_the_pass_allows(monkeypatch):
    rng = np.random.default_rng(1)
    x, W, b = rng.standard_normal((64, 64)), rng.standard_normal((64, 64)) / 8.0, rng.standard_normal(64)
    assert re.search(r"out=v\d+\)", _compare(big, [(x, W, b)], wrt=1).source)
    monkeypatch.setattr(passes, "buffer_reuse", lambda ir: (frozenset(), {}))
    prog = _compare(big, [(x, W, b), (x + 1.0, W, b)], wrt=1)
    assert not re.search(r"out=v\d+\)", prog.source), prog.source
