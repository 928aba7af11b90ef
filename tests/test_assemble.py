"""transform/assemble.py (bytegrad's own assembler, transform/code/): for every rewrite of the
catalogue (functions.py) the code object runs the instructions the `bytecode` package's assembly of
the same rewrite runs, with the same stack size (the `bytecode` package numbers its tables its own
way: see tests/test_code_asm.py); the one-pass stack size gives back the compiler's; invalid code
raises `UnsupportedOpcodeError`, so the rewrite declines."""
from __future__ import annotations

import os
import sys
import zlib

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import functions as catalogue

import bytegrad
from bytegrad.transform import assemble, cache

FIELDS = ("co_code", "co_stacksize", "co_exceptiontable", "co_linetable", "co_names", "co_varnames",
          "co_freevars", "co_cellvars", "co_flags", "co_argcount", "co_nlocals")


def _same_code(fast, full) -> None:
    for field in FIELDS:
        assert getattr(fast, field) == getattr(full, field), field
    assert len(fast.co_consts) == len(full.co_consts)
    for a, b in zip(fast.co_consts, full.co_consts):
        assert a is b or a == b


@pytest.fixture
def assembled(monkeypatch):
    """Every Bytecode the rewrite assembles in the test, with what the one-pass walk made of it."""
    seen: list = []
    real = assemble.to_code

    def recording(bc):
        size = assemble.stack_size(bc)
        fast = real(bc)
        full = _theirs(bc)  # the bytecode package's assembly of the same instructions
        seen.append((bc, size, fast, full))
        return fast

    monkeypatch.setattr(assemble, "to_code", recording)
    cache.clear()
    # (the switch itself, not the environment variable, which bytegrad read at import: rewrites stored
    # on disk by earlier tests of the run would otherwise load instead of being assembled here)
    with bytegrad.config.override(disable_disk_cache=True):
        yield seen
    cache.clear()


def test_every_catalogue_rewrite_assembles_as_the_graph_does(assembled) -> None:
    failed = []
    for case in catalogue.CASES:
        rng = np.random.default_rng(zlib.crc32(case.id.encode()))
        try:
            bytegrad.differentiate(case.fn, wrt=case.wrt, tier="general").grad(*case.args(rng), **case.kwargs(rng))
        except Exception as exc:  # noqa: BLE001 - the catalogue's own tests report these
            failed.append(f"{case.id}: {exc}")
    assert not failed
    walked = [entry for entry in assembled if entry[1] is not None]
    assert len(walked) >= 40  # most rewrites take the one-pass walk (a test that cannot pass vacuously)
    for bc, size, fast, full in assembled:
        assert _behaviour(fast) == _behaviour(full)
        assert size == full.co_stacksize == fast.co_stacksize


def _theirs(bc):
    pytest.importorskip("bytecode")
    from tests.test_code_asm import _to_theirs
    return _to_theirs(bc).to_code()


def _behaviour(code):
    from tests.test_code_asm import _behaviour
    return _behaviour(code)


def _same_as_compiled(fn) -> None:
    _same_code(assemble.to_code(_bc(fn)), fn.__code__)


def _bc(fn):
    from bytegrad.transform.code import Bytecode

    return Bytecode.from_code(fn.__code__)


def test_exception_handling_takes_the_walk_too() -> None:
    def f(x):
        try:
            return x + 1
        except TypeError:
            return x

    assert assemble.stack_size(_bc(f)) == f.__code__.co_stacksize
    _same_as_compiled(f)


def test_an_underflow_is_an_unsupported_construct() -> None:
    from bytegrad.errors import UnsupportedOpcodeError
    from bytegrad.transform.code import Instr

    def f(x):
        return x

    bc = _bc(f)
    bc.insert(len(bc) - 1, Instr("POP_TOP"))  # pops the value RETURN_VALUE then lacks
    assert assemble.stack_size(bc) is None
    with pytest.raises(UnsupportedOpcodeError):
        assemble.to_code(bc)


def test_loops_generators_and_branches_match_the_graph() -> None:
    def loops(x, n):
        total = 0.0
        for i in range(n):
            if i % 2:
                continue
            while total < 10:
                total += x[i] if i < len(x) else 1.0
                if total > 5:
                    break
        return [v * 2 for v in x] if total else total

    def gen(x):
        for v in x:
            y = yield v * 2
            if y:
                yield y

    for fn in (loops, gen, catalogue.CASES[0].fn):
        assert assemble.stack_size(_bc(fn)) == fn.__code__.co_stacksize
        _same_as_compiled(fn)
