"""Stored programs and what a process registers besides bytegrad's own rules (compiled/store.py
`foreign_state`): a program captured where a user's function had no rule inlines that function, so
a process that gave it a rule must not load it; one captured under the user's rule loads where the
same rule is in force, and not where it was opted out. Pytree classes likewise."""
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


def sq(x):
    return x * x


def loss(x):
    return np.sum(sq(x))


class Pair:
    def __init__(self, w, b):
        self.w, self.b = w, b


def flatten_pair(p):
    return (p.w, p.b), None


def unflatten_pair(aux, children):
    return Pair(*children)


def pair_loss(p):
    return np.sum(p.w * p.w) + p.b
'''

RULES = '''
import bytegrad
import usermod


@bytegrad.rrule(usermod.sq)
def sq_rule(x):
    return x * x, lambda g: (g * 100.0,)
'''

PYTREE = '''
import bytegrad
import usermod

bytegrad.register_pytree(usermod.Pair, usermod.flatten_pair, usermod.unflatten_pair)
'''

RUNNER = '''
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import bytegrad, usermod
what = sys.argv[2].split(",")
if "rule" in what:
    import userrules
if "optout" in what:
    bytegrad.opt_out(usermod.sq)
if "pytree" in what:
    import userpytree
if "pytree-here" in what:
    bytegrad.register_pytree(usermod.Pair, usermod.flatten_pair, usermod.unflatten_pair)
x = np.linspace(-1.0, 1.0, 4)
fn, args = (usermod.pair_loss, (usermod.Pair(x, 0.5),)) if "pair" in what else (usermod.loss, (x,))
out = {}
if "precompile" in what:
    out["stored"] = bytegrad.precompile(fn, *args)["programs_stored"]
else:
    d = bytegrad.differentiate(fn)
    grads = [d.grad(*args) for _ in range(3)]
    ref = bytegrad.differentiate(fn, tier="general").grad(*args)
    leaves = (lambda g: [g.w, g.b]) if "pair" in what else (lambda g: [g])
    out["same"] = all(np.array_equal(a, b) for g in grads for a, b in zip(leaves(g), leaves(ref)))
    out["grad"] = np.asarray(leaves(grads[-1])[0]).tolist()
    st = d.stats()["compiled"]
    out["loaded"], out["compiled_calls"] = st["loaded_from_disk"], st["compiled_calls"]
print(json.dumps(out))
'''


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    for name, text in (("usermod", MODULE), ("userrules", RULES), ("userpytree", PYTREE), ("runner", RUNNER)):
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
    return tmp_path


def run(tmp: Path, what: str) -> dict:
    env = dict(os.environ, BYTEGRAD_CACHE_DIR=str(tmp / "cache"), PYTHONPATH=str(ROOT), BYTEGRAD_TIER="auto")
    proc = subprocess.run([sys.executable, str(tmp / "runner.py"), str(tmp), what], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


X = [-1.0, -1.0 / 3.0, 1.0 / 3.0, 1.0]


def test_a_program_that_inlined_a_function_is_not_loaded_where_it_has_a_rule(project):
    """Stored without a rule for `sq` (the program computes 2x), loaded where `sq`'s rule says 100:
    every gradient is the rule's, as on the general path (it was 2x from the second call on)."""
    assert run(project, "precompile")["stored"] == 1
    fresh = run(project, "rule")
    assert fresh["same"] and fresh["grad"] == [100.0] * 4, fresh
    assert fresh["loaded"] == 0, fresh


def test_a_program_stored_under_a_users_rule_loads_where_the_same_rule_is_in_force(project):
    assert run(project, "precompile,rule")["stored"] == 1
    fresh = run(project, "rule")
    assert fresh["same"] and fresh["grad"] == [100.0] * 4 and fresh["loaded"] == 1, fresh
    assert fresh["compiled_calls"] >= 1, fresh


@pytest.mark.parametrize("what", ["plain", "rule,optout"])
def test_a_program_stored_under_a_users_rule_is_not_loaded_without_it(project, what):
    """Without the rule (not imported, or opted out), `sq` is differentiated through: 2x."""
    assert run(project, "precompile,rule")["stored"] == 1
    fresh = run(project, what)
    assert fresh["same"] and fresh["grad"] == pytest.approx([2.0 * v for v in X], rel=1e-14) and fresh["loaded"] == 0, fresh


def test_a_program_over_a_pytree_loads_only_under_the_same_registration(project):
    assert run(project, "precompile,pair,pytree")["stored"] == 1
    same = run(project, "pair,pytree")
    assert same["same"] and same["loaded"] == 1, same
    elsewhere = run(project, "pair,pytree-here")  # the same functions, registered at another place
    assert elsewhere["same"] and elsewhere["loaded"] == 0, elsewhere
