"""Buffer reuse in compiled NumPy programs (compiled/reuse.py): a step writes its result into a
dead temporary of the program's own, and a cotangent takes a contribution in place.

Each case runs under the numpy tier against the general path, bit for bit, over calls with new
values, with the caller's arrays (and what the call gave back) left as they were. Each of the
module's rules has cases that pass with it and fail without it (`relax`): the program then gives a
wrong value, writes into an array it does not own, or raises (and the capture's check against the
general path refuses it, so the signature is not compiled).
"""
from __future__ import annotations

import os
import re
import sys
import types

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bytegrad
from bytegrad.compiled import reuse as program_reuse

N = 64  # 64 x 64 = INPLACE_MIN_SIZE elements: big enough for reuse
assert N * N >= program_reuse.INPLACE_MIN_SIZE


def fresh(fn):
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


# ---- the functions: each a hazard for writing into an operand ------------------------------------


def chain(x, W):  # the MLP's shape: every forward temporary is reusable
    h = np.tanh(W @ x + 0.5)
    h = np.tanh(W @ h - 0.25)
    return np.sum(h * h)


def view_of_temporary(x):  # `a.T` holds `a`: a + 1.0 must not write into a
    a = x * 3.0
    t = a.T
    b = a + 1.0
    return np.sum(b * t)


def saved_for_later(x):  # `a` is read after `a + 1.0`
    a = x * 3.0
    b = a + 1.0
    return np.sum(b * a)


def returns_temporary_as_aux(x):
    a = x * 3.0
    b = np.tanh(a + 1.0)
    return np.sum(b), a


def broadcast_operand(x, y):  # a (64, 1) temporary broadcast to (64, 64)
    a = x * 2.0
    return np.sum(np.tanh(a + y))


def promoted(x32, y):  # float32 temporary + float64 argument: the result is float64
    a = x32 * 2.0
    return np.sum(np.sin(a + y))


def view_of_argument(x):  # x.reshape(-1) is the caller's memory
    return np.sum(np.tanh(x.reshape(-1) + 1.0))


def passed_twice(x, y):
    return np.sum(np.tanh(x + y) * y)


def fan_out(x):  # cotangents of y and z accumulate
    y = np.tanh(x * 1.5)
    z = np.sin(y)
    return np.sum(y * y + z + y)


def shared_cotangent(x):  # `a + b` gives a and b one cotangent object; a then takes sin(a)'s
    y = np.tanh(x * 1.5)
    a = y * 2.0
    b = y * 3.0
    c = np.sin(a)
    return np.sum(np.tanh(a + b) + c)


def square_and_negate(x):
    a = x * 2.0
    return np.sum(np.exp(-(a ** 2)))


def arg_inputs(rng, *shapes, dtype=np.float64):
    return tuple(rng.standard_normal(s).astype(dtype) for s in shapes)


CASES = {
    "chain": (chain, lambda r: arg_inputs(r, (N, N), (N, N)), (0, 1)),
    "view_of_temporary": (view_of_temporary, lambda r: arg_inputs(r, (N, N)), 0),
    "saved_for_later": (saved_for_later, lambda r: arg_inputs(r, (N, N)), 0),
    "broadcast_operand": (broadcast_operand, lambda r: arg_inputs(r, (N, 1), (N, N)), (0, 1)),
    "promoted": (promoted, lambda r: (r.standard_normal((N, N)).astype(np.float32), r.standard_normal((N, N))),
                 (0, 1)),
    "view_of_argument": (view_of_argument, lambda r: arg_inputs(r, (N, N)), 0),
    "fan_out": (fan_out, lambda r: arg_inputs(r, (N, N)), 0),
    "square_and_negate": (square_and_negate, lambda r: arg_inputs(r, (N, N)), 0),
    "shared_cotangent": (shared_cotangent, lambda r: arg_inputs(r, (N, N)), 0),
}


def run(fn, make, wrt, calls=3):
    """The numpy tier against the general path over `calls` new inputs: (results bit for bit the
    same, the caller's arrays untouched, every call compiled)."""
    fast = bytegrad.differentiate(fresh(fn), wrt=wrt, tier="numpy")
    general = bytegrad.differentiate(fn, wrt=wrt, tier="general")
    rng = np.random.default_rng(0)
    same = untouched = True
    for _ in range(calls):
        args = make(rng)
        copies = [a.copy() for a in args]
        got = fast.value_and_grad(*args)
        untouched &= all(np.array_equal(a, c) for a, c in zip(args, copies))
        want = general.value_and_grad(*args)
        same &= _same(got, want)
    s = fast.stats()["compiled"]
    return same, untouched, s["compiled_calls"] == calls and s["general_calls"] == 0, fast


def _same(a, b) -> bool:
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and np.asarray(a).dtype == np.asarray(b).dtype and np.array_equal(a, b)


@pytest.mark.parametrize("key", CASES)
def test_programs_that_reuse_buffers_agree_bit_for_bit(key):
    fn, make, wrt = CASES[key]
    same, untouched, compiled, _ = run(fn, make, wrt)
    assert same and untouched and compiled


def test_the_mlp_shape_reuses_its_forward_temporaries():
    src = _program_text(chain, (0, 1), CASES["chain"][1])
    assert src.count(", out=") >= 4, src  # the two sums and the two tanh


def _program_text(fn, wrt, make):
    from bytegrad.compiled import policy as compiled

    f = fresh(fn)
    d = bytegrad.differentiate(f, wrt=wrt, tier="numpy")
    args = make(np.random.default_rng(0))
    d.grad(*args)
    t = compiled.tiers_for(f, wrt, "numpy")
    return "\n".join(p.source for p in t.programs)


def test_small_arrays_are_not_reused():
    src = _program_text(chain, (0, 1), lambda r: arg_inputs(r, (8, 8), (8, 8)))
    assert ", out=" not in src


def test_has_aux_keeps_the_returned_temporary():
    fast = bytegrad.differentiate(fresh(returns_temporary_as_aux), has_aux=True, tier="numpy")
    general = bytegrad.differentiate(returns_temporary_as_aux, has_aux=True, tier="general")
    rng = np.random.default_rng(2)
    for _ in range(3):
        x = rng.standard_normal((N, N))
        (v1, a1), g1 = fast.value_and_grad(x)
        (v2, a2), g2 = general.value_and_grad(x)
        assert v1 == v2 and np.array_equal(a1, a2) and np.array_equal(g1, g2)
        assert np.array_equal(a1, x * 3.0)
    assert fast.stats()["compiled"]["compiled_calls"] == 3


def test_pullback_programs_keep_what_back_reads():
    def f(x):
        a = x * 3.0
        return np.tanh(a + 1.0) * a

    fast = bytegrad.differentiate(fresh(f), tier="numpy")
    general = bytegrad.differentiate(f, tier="general")
    rng = np.random.default_rng(3)
    for _ in range(3):
        x = rng.standard_normal((N, N))
        out1, back1 = fast.pullback(x)
        out2, back2 = general.pullback(x)
        assert np.array_equal(out1, out2)
        for _ in range(2):  # `back` twice: what it reads is not written in place
            ct = rng.standard_normal((N, N))
            assert np.array_equal(back1(ct)[0], back2(ct)[0])


# ---- each rule is needed --------------------------------------------------------------------------


#: rule -> the cases that need it
NEEDED = {
    "made_here": ["view_of_argument"],
    "shape": ["broadcast_operand", "promoted"],
    "dead": ["saved_for_later"],
    "sole": ["view_of_temporary", "shared_cotangent"],
}


@pytest.mark.parametrize("rule, key", [(r, k) for r, ks in NEEDED.items() for k in ks])
def test_each_reuse_rule_is_needed(rule, key, monkeypatch):
    fn, make, wrt = CASES[key]
    assert all(run(fn, make, wrt)[:3])
    monkeypatch.setattr(program_reuse, "_RELAXED", frozenset({rule}))
    assert not all(run(fn, make, wrt)[:3])


def test_without_the_dead_rule_an_aux_temporary_is_overwritten(monkeypatch):
    monkeypatch.setattr(program_reuse, "_RELAXED", frozenset({"dead"}))
    fast = bytegrad.differentiate(fresh(returns_temporary_as_aux), has_aux=True, tier="numpy")
    x = np.random.default_rng(4).standard_normal((N, N))
    fast.grad(x)
    (_, a), _ = fast.value_and_grad(x)
    assert not np.array_equal(a, x * 3.0) or fast.stats()["compiled"]["compiled_calls"] == 0


# ---- a bias's gradient: summed straight to its shape -----------------------------------------------


def dense(W, b, x):
    return np.sum(np.tanh(W @ x + b[:, None]))


def test_a_bias_gradient_is_its_sum_not_a_copy_of_a_reshaped_view():
    """`b[:, None]`'s cotangent is `sum(g, axis=1)` itself: no keepdims, no reshape, no copy."""
    src = _program_text(dense, (0, 1), lambda r: arg_inputs(r, (20, 20), (20,), (20, 128)))
    assert ".reshape(" not in src and "keepdims" not in src, src
    same, untouched, compiled, fast = run(dense, lambda r: arg_inputs(r, (20, 20), (20,), (20, 128)), (0, 1))
    assert same and untouched and compiled


def shared_bias(W, b, x):  # b[:, None] read twice: its cotangent has two contributions
    c = b[:, None]
    return np.sum(np.tanh(W @ x + c) * c)


def bias_clipped_to_itself(W, b, x):  # one record reads b[:, None] twice: two contributions
    c = b[:, None]
    return np.sum(np.tanh(np.clip(W @ x, c, c)))


@pytest.mark.parametrize("fn", [shared_bias, bias_clipped_to_itself], ids=lambda f: f.__name__)
def test_a_bias_read_twice_keeps_the_general_form(fn):
    same, untouched, compiled, _ = run(fn, lambda r: arg_inputs(r, (20, 20), (20,), (20, 128)), (0, 1))
    assert same and untouched and compiled


# ---- the gradient alone: the output's value is not computed ----------------------------------------


def loss_read_by_a_decision(x):
    loss = np.sum(np.exp(x) * x)
    if loss > 1e9:  # the decision reads the loss: it is computed for `grad` too
        return loss * 2.0
    return loss


@pytest.mark.parametrize("fn", [chain, dense, loss_read_by_a_decision], ids=lambda f: f.__name__)
def test_grad_alone_skips_the_value_and_agrees(fn):
    shapes = {"chain": [(N, N), (N, N)], "dense": [(20, 20), (20,), (20, 128)],
              "loss_read_by_a_decision": [(8, 8)]}[fn.__name__]
    wrt = tuple(range(len(shapes)))
    fast = bytegrad.differentiate(fresh(fn), wrt=wrt, tier="numpy")
    general = bytegrad.differentiate(fn, wrt=wrt, tier="general")
    rng = np.random.default_rng(6)
    for _ in range(3):
        args = arg_inputs(rng, *shapes)
        assert _same(fast.grad(*args), general.grad(*args))
        assert _same(fast.value_and_grad(*args), general.value_and_grad(*args))
    assert fast.stats()["compiled"]["compiled_calls"] == 6
    src = _program_text(fn, wrt, lambda r: arg_inputs(r, *shapes))
    assert ("if value:" in src) == (fn is not loss_read_by_a_decision), src


def test_reuse_happens_when_the_program_runs(monkeypatch):
    """Rule 4 holds at run time on this Python (the counts `SOLE` was calibrated to): the chain's
    forward temporaries are written in place, not only written so in the source."""
    from bytegrad.compiled import policy as compiled

    f = fresh(chain)
    d = bytegrad.differentiate(f, wrt=(0, 1), tier="numpy")
    args = CASES["chain"][1](np.random.default_rng(0))
    d.grad(*args)
    (prog,) = compiled.tiers_for(f, (0, 1), "numpy").programs
    counts = []

    def counting(x):
        counts.append(sys.getrefcount(x) - 1)  # (less this function's own reference)
        return counts[-1]

    monkeypatch.setitem(prog.fn.__globals__, "_getrefcount", counting)
    d.grad(*args)
    assert counts.count(program_reuse.SOLE) >= 4, counts


# ---- a partial computed into a value of the forward pass (tanh's `1 - out**2` into out) -----------


def tanh_as_aux(x):  # the tanh output is returned: its buffer is not the partial's
    h = np.tanh(x * 3.0)
    return np.sum(h), h


def tanh_view_as_aux(x):  # a view of the tanh output is returned: it holds the buffer
    h = np.tanh(x * 3.0)
    return np.sum(h), h.T


def run_aux(fn, calls=3):
    """(aux and gradient bit for bit the general path's, every call compiled) with has_aux."""
    fast = bytegrad.differentiate(fresh(fn), has_aux=True, tier="numpy")
    general = bytegrad.differentiate(fn, has_aux=True, tier="general")
    rng = np.random.default_rng(8)
    same = True
    for _ in range(calls):
        x = rng.standard_normal((N, N))
        g1, a1 = fast.grad(x)
        g2, a2 = general.grad(x)
        same &= _same(g1, g2) and _same(a1, a2)
    s = fast.stats()["compiled"]
    return same, s["compiled_calls"] == calls


def test_tanh_partial_is_computed_into_its_output():
    src = _program_text(chain, (0, 1), CASES["chain"][1])
    assert re.search(r"= u\d+\(v\d+, out=v\d+\) if _getrefcount\(v\d+\) == \d else v\d+ \*\* 2", src), src


@pytest.mark.parametrize("rule, fn", [("dead", tanh_as_aux), ("sole", tanh_view_as_aux)],
                         ids=["dead", "sole"])
def test_a_returned_tanh_output_keeps_its_buffer(rule, fn, monkeypatch):
    assert run_aux(fn) == (True, True)
    monkeypatch.setattr(program_reuse, "_RELAXED", frozenset({rule}))
    assert run_aux(fn) != (True, True)
