"""Random programs through the program store (compiled/store.py), compared with the general path.

Each program is written into a module of its own, captured under the numpy tier, written to bytes by
`store.dumps` and read back by `store.loads`, as a fresh process loads what `precompile` stored. The
loaded program then runs on new arguments (some of which take the other side of the program's data
decisions) and after a global it reads is changed: wherever it gives a result rather than MISS or
DECIDED, the value and the gradient must be the general path's, to a few ulp."""
from __future__ import annotations

import importlib
import itertools
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bytegrad
from bytegrad import _quick
from bytegrad.compiled import policy, quick
from bytegrad.compiled import store as program_store
from bytegrad.runtime.sentinels import DECIDED, MISS

PRELUDE = '''
import numpy as np

SCALE = 1.25
K = 2
M = np.linspace(-1.0, 1.0, 9).reshape(3, 3)


def helper(v):
    return v * np.cos(v)
'''

STEPS = [
    "h = np.sin(h) + 0.5 * h",
    "h = np.tanh(h * c)",
    "h = h * h * 0.3 + c",
    "h = np.exp(-h * h) + h",
    "h = h[::-1] * 1.5",
    "h = np.maximum(h, 0.1 * h)",
    "h = helper(h) * SCALE",
    "h = h + np.sum(h ** 2) * 0.1",
    "h = np.where(h > 0, h, 0.5 * h)",
    "if np.sum(h) > 0:\n    h = h * 2.0\nelse:\n    h = h - 1.0",
    "h = h @ M",
    "h = np.clip(h, -0.8, 0.8)",
    "h = np.log1p(h * h)",
    "for _ in range(K):\n    h = np.cos(h) * 0.9",
    "h = h / (1.0 + np.abs(h))",
    "h = h * SCALE + 0.1",
]

_names = itertools.count()
#: how many loaded programs, and standalone forms, gave a result that was compared (the deterministic tests check
#: that they grow)
RAN = [0]
QUICK_RAN = [0]


def source(steps: list[str]) -> str:
    body = "\n".join(textwrap.indent(s, "    ") for s in steps)
    return (PRELUDE + "\n\ndef program(x, c):\n    h = x\n" + body +
            "\n    return np.sum(h * np.linspace(0.5, 1.5, h.size))\n")


@pytest.fixture()
def module_of(tmp_path, monkeypatch):
    """`module_of(text)`: a module of that source, importable by name (the store refers to it so)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    made = []

    def make(text: str):
        name = f"bg_random_stored_{next(_names)}"
        (tmp_path / f"{name}.py").write_text(text)
        importlib.invalidate_caches()
        made.append(name)
        return importlib.import_module(name)

    yield make
    for name in made:
        sys.modules.pop(name, None)


def _same(a, b) -> bool:
    return bool(np.allclose(a, b, rtol=1e-12, atol=1e-15))


def check(module, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x0, c = rng.uniform(-1.0, 1.0, 3), float(rng.uniform(0.5, 1.5))
    d = bytegrad.differentiate(module.program, tier="numpy")
    d.value_and_grad(x0, c)
    tiers = policy._BY_FUNCTION.get(module.program, {})
    programs = [p for t in tiers.values() for p in t.programs]
    payload = program_store.dumps(programs) if programs else None
    if payload is None:  # (refused, or holding a constant the store does not write: nothing to load)
        return
    loaded = program_store.loads(payload)
    assert loaded is not None and len(loaded) == len(programs)  # (every reference holds in this process)
    # each program's standalone form (compiled/quick.py), which a fresh process's first call runs (bytegrad/_quick.py)
    # (as stored by a process that registered nothing of its own: the session's other tests may have)
    forms = [f for p in programs if (f := quick.payload(p, module.program, ((), ()))) is not None]
    general = bytegrad.differentiate(module.program, tier="general")
    xs = [x0, -x0, rng.uniform(-1.0, 1.0, 3), 3.0 * rng.uniform(-1.0, 1.0, 3)]
    for k, x in enumerate(xs + xs[:2]):
        if k == len(xs):  # the globals the program reads, changed: its guards must see it
            module.SCALE, module.K = 0.5, 3
        want_value, want_grad = general.value_and_grad(x, c)
        for prog in loaded:
            got = prog.fn((x, c), True)
            if got is MISS or got is DECIDED:
                continue
            RAN[0] += 1
            assert _same(got[0], want_value) and _same(got[1], want_grad), \
                (k, got, (want_value, want_grad), prog.source)
        for form in forms:
            got = _quick.run_stored(form, module.program, (x, c))
            if got is None:
                continue
            QUICK_RAN[0] += 1
            assert _same(got[0], want_value) and _same(got[1], want_grad), (k, got, (want_value, want_grad))


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(STEPS), min_size=1, max_size=5), st.integers(0, 2**16))
def test_a_loaded_program_gives_the_general_paths_results_or_misses(module_of, steps, seed):
    check(module_of(source(steps)), seed)


def test_the_comparison_runs_loaded_programs(module_of):
    """Not vacuous: a program with a helper, a global and a branch loads and runs."""
    before = RAN[0]
    check(module_of(source(["h = helper(h) * SCALE", STEPS[9], "h = np.tanh(h * c)"])), 0)
    assert RAN[0] > before


def test_the_comparison_runs_standalone_forms(module_of):
    """Not vacuous: a program with a global, a branch and a reduction has a standalone form, which runs (and
    sees the global change)."""
    before = QUICK_RAN[0]
    check(module_of(source(["h = np.tanh(h * c) * SCALE", STEPS[9], STEPS[7]])), 0)
    assert QUICK_RAN[0] > before

