"""The transform on its own: opcode classification, activity, and round trips of rewritten code."""
import dis

import numpy as np
import pytest

import bytegrad
from bytegrad import transform
from bytegrad.runtime import abi, guards, monitor
from bytegrad.runtime.tape import Tape, set_tape
from bytegrad.transform import opcodes


def _lines(code):
    return {line for _, _, line in code.co_lines() if line is not None}


def _hooks(code):
    return [c for c in code.co_consts if callable(c) and getattr(c, "__module__", "") == abi.__name__]


def sample_inactive(n, flag=True):
    total = 0
    for i in range(n):
        if i % 2 and flag:
            total += i * 2
        else:
            total -= 1
    try:
        total //= 1
    except ZeroDivisionError:
        total = -1
    return [total, (lambda q: q + 1)(total), {k: k for k in range(3)}]


def sample_active(x, y, n=3):
    z = x * y + np.sin(x)
    for i in range(n):
        z = z - 0.5 * z[i % len(z)]
    a, b = z[:2]
    return np.sum(z) + a * b


def test_every_opcode_is_classified():
    opcodes.check_complete()


def test_inactive_function_round_trips():
    code = sample_inactive.__code__
    new = transform.rewrite_code(code, frozenset(), sample_inactive.__globals__)
    fn = transform.function_from(sample_inactive, new)
    assert fn(5) == sample_inactive(5)
    assert fn(4, flag=False) == sample_inactive(4, flag=False)
    assert _lines(new) == _lines(code)
    # nothing active: no hooks but the tape prologue and the in-place operators (`total += ...`),
    # which are hooked everywhere to refuse overwriting an array the tape saved
    inplace = {hook for symbol, hook in abi.BINARY_HOOKS.items() if symbol.endswith("=")}
    assert all(c is abi.current_tape or c in inplace for c in _hooks(new))
    assert not any(c in abi.BINARY_HOOKS.values() and c not in inplace for c in _hooks(new))


@pytest.mark.parametrize("active", [frozenset({"x"}), frozenset({"x", "y"}), frozenset()])
def test_active_function_behaves_the_same_without_a_tape(active):
    code = sample_active.__code__
    new = transform.rewrite_code(code, active, sample_active.__globals__)
    fn = transform.function_from(sample_active, new)
    x, y = np.linspace(0.1, 0.9, 4), np.linspace(1.0, 2.0, 4)
    assert fn(x, y) == pytest.approx(sample_active(x, y))
    assert _lines(new) == _lines(code)


def test_active_sites_are_hooked_and_inactive_ones_are_not(monkeypatch):
    monkeypatch.setattr(bytegrad.config, "disable_fusion", True)  # `x * y + np.sin(x)` would fuse: see test_fusion.py
    monkeypatch.setattr(bytegrad.config, "check", False)  # the checking mode guards inactive sites (conftest.py)
    assert monitor.CHECK is False
    new = transform.rewrite_code(sample_active.__code__, frozenset({"x"}), sample_active.__globals__)
    hooks = set(_hooks(new))
    assert abi.BINARY_HOOKS["*"] in hooks       # x * y
    assert abi.getitem in hooks               # z[...]
    assert abi.unpack in hooks                # a, b = ...
    # `i % len(z)` works on ints only: the `%` stays a plain BINARY_OP
    assert abi.BINARY_HOOKS["%"] not in hooks
    names = [i.opname for i in dis.get_instructions(new)]
    assert "BINARY_OP" in names


def test_checking_mode_guards_the_inactive_sites(monkeypatch):
    monkeypatch.setattr(bytegrad.config, "disable_fusion", True)
    monkeypatch.setattr(bytegrad.config, "check", True)
    assert monitor.CHECK is True
    new = transform.rewrite_code(sample_active.__code__, frozenset({"x"}), sample_active.__globals__)
    consts = set(c for c in new.co_consts if callable(c))
    assert abi.BINARY_HOOKS["*"] in consts                              # x * y: hooked
    assert guards.guard_for(abi.BINARY_HOOKS["%"]) in consts           # i % len(z): guarded


def test_rewritten_code_records_on_a_tape():
    new = transform.rewrite_code(sample_active.__code__, frozenset({"x"}), sample_active.__globals__)
    fn = transform.function_from(sample_active, new)
    x, y = np.linspace(0.1, 0.9, 4), np.linspace(1.0, 2.0, 4)
    tape = Tape()
    xv = x.view()
    tape.leaf(xv)
    old = set_tape(tape)
    try:
        out = fn(xv, y)
    finally:
        set_tape(old)
    assert out == pytest.approx(sample_active(x, y))
    assert len(tape.nodes) > 5


def test_generator_and_closure_round_trip():
    def outer(x):
        scale = 2.0

        def gen():
            for v in x:
                yield v * scale

        return sum(gen())

    new = transform.rewrite_code(outer.__code__, frozenset({"x"}), outer.__globals__)
    fn = transform.function_from(outer, new)
    assert fn([1.0, 2.0]) == outer([1.0, 2.0])


def test_permute_builds_any_permutation():
    import itertools
    items = [object() for _ in range(4)]
    for target in itertools.permutations(items):
        seq = opcodes.permute(items, list(target), None)
        assert all(i.name == "SWAP" for i in seq)
