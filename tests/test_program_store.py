"""Compiled programs on disk (compiled/store.py): `bytegrad.precompile` stores a function's
programs, and a fresh process's second gradient of that signature runs one, without a capture; a
program whose references no longer hold (a rule, a callee's code) is not loaded."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

MODULE = '''
import numpy as np

SCALE = 2.0


def layer(W, x):
    return np.tanh(W @ x)


def loss(W, x, n):
    h = layer(W, x)
    for _ in range(n):
        h = np.sin(h) * SCALE
    if h.sum() > 0:
        return np.sum(h * h)
    return np.sum(h)


def vector(x):
    return np.exp(x) * x
'''

RUNNER = '''
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import bytegrad, usermod
mode = sys.argv[2]
if mode == "override":
    bytegrad.scalar_rule(np.sin, lambda x, out: np.cos(x), override=True)
if mode == "global":
    usermod.SCALE = 3.0
if mode == "recode":
    usermod.layer.__code__ = (lambda W, x: np.tanh(x @ W.T)).__code__
rng = np.random.default_rng(0)
W, x = rng.normal(size=(3, 3)), rng.normal(size=3)
out = {}
if mode == "precompile":
    s = bytegrad.precompile(usermod.loss, W, x, 2, wrt=(0, 1))
    v = bytegrad.precompile(usermod.vector, x)
    out["stored"] = [s["programs_stored"], v["programs_stored"]]
else:
    d = bytegrad.differentiate(usermod.loss, wrt=(0, 1))
    value, (gW, gx) = d.value_and_grad(W, x, 2)
    st = d.stats()["compiled"]
    # what loads or builds programs (compiled/store.py, compiled/lower_numpy.py) is not imported by a
    # first gradient
    out["first"] = [st["loaded_from_disk"], st["general_calls"],
                    sorted(m for m in sys.modules if m.startswith("bytegrad.")
                           and m.rsplit(".", 1)[1] in ("program_store", "program", "store", "lower_numpy"))]
    value, (gW, gx) = d.value_and_grad(W, x, 2)
    general = bytegrad.differentiate(usermod.loss, wrt=(0, 1), tier="general").value_and_grad(W, x, 2)
    out["same"] = bool(value == general[0] and np.array_equal(gW, general[1][0]) and np.array_equal(gx, general[1][1]))
    st = d.stats()["compiled"]
    out["loaded"], out["compiled_calls"] = st["loaded_from_disk"], st["compiled_calls"]
    for _ in range(2):
        y, back = bytegrad.vjp(usermod.vector, x)
        (g,) = back(np.ones(3))
    out["vjp_same"] = bool(np.allclose(g, np.exp(x) * (x + 1.0), rtol=1e-12))
    out["vjp_loaded"] = bytegrad.compiled.policy.tiers_for(usermod.vector, bytegrad.compiled.policy.PULLBACK, None).loaded
print(json.dumps(out))
'''


def run_project(tmp: Path, mode: str, tier: str = "auto") -> dict:
    """The JSON line `runner.py` of `write_project` prints, run in a fresh process (the cache in `tmp`)."""
    env = dict(os.environ, BYTEGRAD_CACHE_DIR=str(tmp / "cache"), PYTHONPATH=str(ROOT), BYTEGRAD_TIER=tier)
    proc = subprocess.run([sys.executable, str(tmp / "runner.py"), str(tmp), mode], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write_project(tmp: Path, module: str, runner: str) -> Path:
    (tmp / "usermod.py").write_text(textwrap.dedent(module))
    (tmp / "runner.py").write_text(textwrap.dedent(runner))
    return tmp


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    return write_project(tmp_path, MODULE, RUNNER)


def test_a_fresh_process_runs_the_precompiled_program_from_its_second_gradient(project):
    """The first gradient of a signature runs the general path (its rewrite is on disk too) and does
    not look for a stored program, nor import what loads one; the second loads it and runs it."""
    assert run_project(project, "precompile")["stored"] == [1, 1]
    fresh = run_project(project, "plain")
    assert fresh["first"] == [0, 1, []], fresh
    assert fresh["same"] and fresh["loaded"] == 1 and fresh["compiled_calls"] == 1, fresh
    assert fresh["vjp_same"] and fresh["vjp_loaded"] == 1, fresh


@pytest.mark.parametrize("mode", ["override", "recode"])
def test_a_stored_program_whose_references_changed_is_not_loaded(project, mode):
    """A rule registered since (np.sin's), or a callee whose code was replaced: the stored program is
    another computation now; the first gradient runs on the general path, right."""
    run_project(project, "precompile")
    fresh = run_project(project, mode)
    assert fresh["loaded"] == 0 and fresh["compiled_calls"] == 0, fresh
    if mode == "override":  # the same derivative, written again: the gradient is unchanged
        assert fresh["same"]


def test_a_loaded_program_keeps_its_guards(project):
    """A global the program read has another value now: the loaded program's guard sends the call to
    the general path, which gives the gradient for the new value."""
    run_project(project, "precompile")
    fresh = run_project(project, "global")
    assert fresh["loaded"] == 1 and fresh["compiled_calls"] == 0 and fresh["same"], fresh


DEFAULTS_MODULE = '''
import numpy as np


def helper(x, s=2.0, *, t=3.0):
    return np.sin(x) * s * t


def loss(x):
    return np.sum(helper(x))
'''

DEFAULTS_RUNNER = '''
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import bytegrad, usermod
mode = sys.argv[2]
x = np.linspace(-1.0, 1.0, 5)
out = {}
if mode == "precompile":
    out["stored"] = bytegrad.precompile(usermod.loss, x)["programs_stored"]
else:
    if mode == "redefault":
        usermod.helper.__defaults__ = (5.0,)
    d = bytegrad.differentiate(usermod.loss)
    d.grad(x)  # (the first gradient runs the general path; a stored program loads on the second)
    g = d.grad(x)
    s = usermod.helper.__defaults__[0]
    out["same"] = bool(np.allclose(g, np.cos(x) * s * 3.0, rtol=1e-12))
    st = d.stats()["compiled"]
    out["loaded"], out["compiled_calls"] = st["loaded_from_disk"], st["compiled_calls"]
print(json.dumps(out))
'''


def test_a_program_whose_callee_has_defaults_is_stored_and_loaded(tmp_path):
    """`precompile` of a function whose Python callee has default arguments (positional and keyword-only)
    stores its program (it used to recurse without end in the store's `persistent_id`); a fresh process
    loads and runs it, and does not when a default was replaced since."""
    project = write_project(tmp_path, DEFAULTS_MODULE, DEFAULTS_RUNNER)
    assert run_project(project, "precompile")["stored"] == 1
    fresh = run_project(project, "plain")
    assert fresh["same"] and fresh["loaded"] == 1 and fresh["compiled_calls"] == 1, fresh
    changed = run_project(project, "redefault")
    assert changed["same"] and changed["loaded"] == 0 and changed["compiled_calls"] == 0, changed


def _scaled_sine(x):  # (run only with globals of its own: below)
    return np.sum(np.sin(x) * SCALE)  # noqa: F821


def test_a_function_whose_globals_are_no_modules_is_not_stored():
    """`FunctionType(code, {...})`: its globals would be written by value, and a loaded program would guard
    that frozen copy, not the globals the function reads (a global changed since: the stored value)."""
    import types as _types

    import numpy as np

    import bytegrad
    from bytegrad.compiled import policy
    from bytegrad.compiled import store as program_store

    f = _types.FunctionType(_scaled_sine.__code__, {"np": np, "SCALE": 2.0}, "f")
    bytegrad.differentiate(f, tier="numpy").grad(np.linspace(0.0, 1.0, 3))
    programs = [r.program for t in policy._BY_FUNCTION[f].values() for r in t.runs]
    assert programs and program_store.dumps(programs) is None
