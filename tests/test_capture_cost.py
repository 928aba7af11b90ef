"""What a capture costs (bytegrad/compiled/): the work of building a program grows as its operations do,
not as their square; a program too big to compile in a few gradients' time is refused before it is
built, with the reason in `stats()`; and the `bytegrad` logger records each capture, compile, refusal
and change of back end. Work is counted (bytecode instructions run, collections, calls), never timed."""
from __future__ import annotations

import gc
import logging
import os
import sys

import numpy as np
import pytest

import bytegrad
from bytegrad.compiled import build as build_module, parts, policy
from bytegrad.runtime import kernels

COMPILED = os.path.dirname(os.path.abspath(policy.__file__))


def step(x, w, dt):
    return x + dt * np.sin(x) * w


def simulator(n):
    """The README's `simulate` loop (without `@checkpoint`) of `n` steps: 4 operations a step."""
    def simulate(x, w):
        for _ in range(n):
            x = step(x, w, 0.001)
        return np.sum(x ** 2)
    return simulate


X, W = np.ones(10), np.linspace(0.0, 1.0, 10)


class _TooMuch(Exception):
    pass


def build_work(n: int, cap: int) -> int:
    """Bytecode instructions run in bytegrad/compiled/ by the capture call (numpy tier) of an `n`-step
    loop; stops with `_TooMuch` past `cap`."""
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "opcode":
            count += 1
            if count > cap:
                raise _TooMuch(count)
        return local

    def global_(frame, event, arg):
        if frame.f_code.co_filename.startswith(COMPILED):
            frame.f_trace_opcodes = True
            return local
        return None

    d = bytegrad.differentiate(simulator(n), wrt=(0, 1), tier="numpy")
    sys.settrace(global_)
    try:
        d.grad(X, W)
    finally:
        sys.settrace(None)
    assert d.stats()["compiled"]["programs"], d.stats()["compiled"]
    return count


def test_a_capture_does_work_linear_in_its_operations():
    """Twice the steps, about twice the work (the `del` of each name after its last read was found
    by a scan of every name per statement, and each inlined partial parsed its lambda again)."""
    build_work(5, 10 ** 9)  # (the rules files' lambdas, parsed once per process)
    small = build_work(40, 10 ** 9)
    large = build_work(80, 3 * small)
    assert large <= 2.4 * small, (small, large)


def test_a_build_runs_no_garbage_collection(monkeypatch):
    """The cyclic collector, which visited every object of a big program's code at each collection
    (a build growing as the square of its operations), is paused while a program is built."""
    inside, collections = [False], []
    build = build_module.build

    def counted(*args, **kwargs):
        inside[0] = True
        try:
            return build(*args, **kwargs)
        finally:
            inside[0] = False

    def on_gc(phase, info):
        if phase == "start" and inside[0]:
            collections.append(info["generation"])

    monkeypatch.setattr(build_module, "build", counted)
    gc.callbacks.append(on_gc)
    try:
        d = bytegrad.differentiate(simulator(300), wrt=(0, 1), tier="numpy")
        d.grad(X, W)
    finally:
        gc.callbacks.remove(on_gc)
    assert d.stats()["compiled"]["programs"]
    assert collections == []
    assert gc.isenabled()


def _program_codes(monkeypatch) -> list:
    calls: list = []
    code = parts.program_code
    monkeypatch.setattr(parts, "program_code", lambda *a: calls.append(1) or code(*a))
    return calls


def test_a_program_too_big_to_compile_fast_is_refused_before_it_is_built(monkeypatch):
    """The README's 2,000-step loop (8,002 operations): the capture call's result is the capture
    run's, and no program is written or compiled; later calls run the general path."""
    built = _program_codes(monkeypatch)
    d = bytegrad.differentiate(simulator(2000), wrt=(0, 1), tier="numpy")
    got = d.grad(X, W)
    st = d.stats()["compiled"]
    assert not st["programs"] and built == []
    (why,) = st["not_compiled"].values()
    assert "8002 operations" in why and str(parts.MAX_RECORDS) in why
    general = bytegrad.differentiate(simulator(2000), wrt=(0, 1), tier="general").grad(X, W)
    for a, b in zip(got, general):  # (a fused site of the general path may round otherwise than the capture's ops)
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-300)
    d.grad(X, W)
    assert d.stats()["compiled"]["general_calls"] == 2 and built == []


def test_the_size_limit_is_the_number_of_operations(monkeypatch):
    monkeypatch.setattr(parts, "MAX_RECORDS", 42)
    small = bytegrad.differentiate(simulator(10), wrt=(0, 1), tier="numpy")  # 42 operations
    small.grad(X, W)
    assert small.stats()["compiled"]["programs"]
    large = bytegrad.differentiate(simulator(11), wrt=(0, 1), tier="numpy")  # 46
    large.grad(X, W)
    assert not large.stats()["compiled"]["programs"]


def test_the_bytegrad_logger_records_captures_compiles_and_refusals(caplog):
    assert any(type(h) is logging.NullHandler for h in logging.getLogger("bytegrad").handlers) or \
        policy._LOGGER is None
    with caplog.at_level(logging.DEBUG, logger="bytegrad"):
        d = bytegrad.differentiate(simulator(3), wrt=(0, 1), tier="auto")
        for _ in range(3):
            d.grad(X, W)
        big = bytegrad.differentiate(simulator(2000), wrt=(0, 1), tier="numpy")
        big.grad(X, W)
    assert any(type(h) is logging.NullHandler for h in logging.getLogger("bytegrad").handlers)
    messages = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "bytegrad"]
    assert any(level == logging.DEBUG and m.startswith("compiled a numpy program of 14 operations for ")
               for level, m in messages), messages
    assert any(level == logging.INFO and m.startswith("captured ") and "simulate (ndarray, ndarray; tier auto): "
               "a numpy program of 14 operations, in " in m for level, m in messages), messages
    assert any(level == logging.INFO and m.startswith("not compiled ") and "8002 operations" in m
               and "the capture took" in m for level, m in messages), messages


@pytest.mark.skipif(kernels.disabled(), reason="Numba disabled (BYTEGRAD_DISABLE_NUMBA)")
def test_the_bytegrad_logger_records_a_change_of_back_end(caplog, monkeypatch):
    """`auto`'s ski rental, its price set to nothing: the 16th run of the NumPy program captures its
    Numba twin, and the log says which program the function keeps, and what the twin cost."""
    monkeypatch.setattr(policy, "numba_price", lambda prog: 0.0)
    d = bytegrad.differentiate(simulator(3), wrt=(0, 1), tier="auto")
    with caplog.at_level(logging.INFO, logger="bytegrad"):
        for _ in range(20):
            d.grad(X, W)
    changes = [r.getMessage() for r in caplog.records if "Numba" in r.getMessage()]
    assert len(changes) == 1, changes
    assert "(the twin's capture and compile took " in changes[0] or "no Numba twin" in changes[0], changes
