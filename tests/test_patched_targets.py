"""A NumPy function replaced before bytegrad's rules load keeps its own derivative (rules/_targets.py).

`import bytegrad` no longer loads the rules (they load with the general path, or with a deferred
module's first lookup), so a program may replace `np.tanh` first. The rule module then reads the
replacement by attribute; registering tanh's rule for it would give the replacement tanh's
derivative, silently. These run in fresh processes (the test session has loaded the rules)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def fresh(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BYTEGRAD_")}
    env.update(BYTEGRAD_DISABLE_DISK_CACHE="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_ufunc_replaced_after_import_is_differentiated_through_its_code():
    out = fresh(
        "import numpy as np, bytegrad\n"
        "np.tanh = lambda v: np.sin(v)  # before the first gradient: the rules are not loaded yet\n"
        "x = np.array([0.3, -1.2, 2.0])\n"
        "g = bytegrad.grad(lambda v: np.sum(np.tanh(v) * v))(x)\n"
        "print(bool(np.allclose(g, np.cos(x) * x + np.sin(x))))\n")
    assert out == "True"


def test_a_deferred_modules_function_replaced_keeps_its_own_derivative():
    """(The deferred index finds a module by its functions' identity: the replacement finds none.)"""
    out = fresh(
        "import numpy as np, bytegrad\n"
        "np.cumsum = lambda v: v * 2.0\n"
        "x = np.array([0.3, -1.2, 2.0])\n"
        "g = bytegrad.grad(lambda v: np.sum(np.cumsum(v) ** 2))(x)\n"
        "print(bool(np.allclose(g, 8.0 * x)))\n")
    assert out == "True"


def test_no_rule_of_bytegrads_own_counts_as_replaced():
    """The packages each rules directory covers (`_targets._ROOTS`) hold every function its rules are for."""
    from bytegrad.rules import _targets, registry

    registry.load_deferred()
    assert not [r.fn for r in registry.all_rules().values() if r.trusted and _targets.replaced(r)]
