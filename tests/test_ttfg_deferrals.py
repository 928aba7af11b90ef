"""What a fresh process's first gradient leaves out (bytegrad issue 25: time to the first gradient),
each pinned by the modules a child process has imported; and that leaving them out changes nothing
the user sees (the compiled tier's counts, stored programs, results)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_fresh(code: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, **extra_env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=180)


def _json_lines(proc: subprocess.CompletedProcess[str]) -> list:
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


_MLP = ("import sys, json, numpy as np\n"
        "import bytegrad\n"
        "def loss(p, x):\n"
        "    h = np.tanh(p['W'] @ x + p['b'][:, None])\n"
        "    return np.sum(h * h)\n"
        "p = {'W': np.linspace(-1, 1, 12).reshape(4, 3), 'b': np.linspace(0, 1, 4)}\n"
        "x = np.linspace(-2, 2, 15).reshape(3, 5)\n")


def test_a_first_gradient_under_auto_imports_no_compiled_tier(tmp_path) -> None:
    """Under the default tier the compiled tier's record (compiled/policy.py) is made by the second
    gradient: neither `differentiate` nor the first gradient imports bytegrad/compiled/."""
    code = _MLP + (
        "mods = lambda: sorted(m for m in sys.modules if m.startswith('bytegrad.compiled'))\n"
        "d = bytegrad.differentiate(loss)\n"
        "print(json.dumps(mods()))\n"
        "d.grad(p, x)\n"
        "print(json.dumps(mods()))\n"
        "d.grad(p, x)\n"
        "print(json.dumps('bytegrad.compiled.policy' in sys.modules))\n")
    setup, first, second = _json_lines(run_fresh(code, BYTEGRAD_TIER="auto", BYTEGRAD_CACHE_DIR=str(tmp_path)))
    assert setup == [] and first == []
    assert second is True


_SEQUENCE = _MLP + (
    "eager = sys.argv[-1] == 'eager'\n"
    "if eager:\n"
    "    import bytegrad.compiled.policy  # the record is then made by `differentiate`, as before\n"
    "d = bytegrad.differentiate(loss)\n"
    "ref = None\n"
    "for i in range(5):\n"
    "    if i == 3 and 'replace' in sys.argv:\n"
    "        loss.__code__ = (lambda p, x: np.sum(np.tanh(p['W'] @ x + p['b'][:, None]) ** 2)).__code__\n"
    "    g = d.grad(p, x)\n"
    "    c = d.stats()['compiled']\n"
    "    print(json.dumps([c['general_calls'], c['compiled_calls'], len(c['programs']), c['loaded_from_disk'],\n"
    "                      [round(float(v), 12) for k in sorted(g) for v in g[k].ravel()[:3]]]))\n")


def _sequence(tmp_path: Path, mode: str, *extra: str, cache: str = "") -> list:
    code = _SEQUENCE.replace("sys.argv[-1] == 'eager'", repr(mode == "eager"))
    code = code.replace("'replace' in sys.argv", repr("replace" in extra))
    return _json_lines(run_fresh(code, BYTEGRAD_TIER="auto", BYTEGRAD_CACHE_DIR=cache or str(tmp_path / mode)))


def test_the_deferred_first_gradient_counts_as_before(tmp_path) -> None:
    """The first gradient, run before the record exists, is counted when it is made: the policy
    captures on the same call, the same calls run programs, the gradients agree, call by call."""
    lazy, eager = _sequence(tmp_path, "lazy"), _sequence(tmp_path, "eager")
    assert lazy == eager
    assert [row[0] for row in lazy] == [1, 2, 2, 2, 2] and lazy[-1][2] == 1  # captured on the 3rd call


def test_a_body_replaced_after_the_deferred_first_gradient_starts_again(tmp_path) -> None:
    """`f.__code__ = ...` between calls resets the record, deferred or not (a first gradient of the old
    body does not count for the new one)."""
    lazy, eager = _sequence(tmp_path, "lazy", "replace"), _sequence(tmp_path, "eager", "replace")
    assert lazy == eager


def test_a_stored_program_serves_the_first_gradient_and_loads_on_the_second(tmp_path) -> None:
    """After `bytegrad.precompile`, a fresh process's first gradient runs the stored program's standalone
    form (bytegrad/_quick.py), or the general path in a process that has loaded the rules (`eager`
    imported the compiled tier first); either way the second loads the stored program and runs it, and
    the gradients agree call by call."""
    cache = str(tmp_path / "cache")
    pre = run_fresh(_MLP + "bytegrad.precompile(loss, p, x)\n", BYTEGRAD_TIER="auto", BYTEGRAD_CACHE_DIR=cache)
    assert pre.returncode == 0, pre.stderr
    lazy = _sequence(tmp_path, "lazy", cache=cache)
    eager = _sequence(tmp_path, "eager", cache=cache)
    assert [row[4] for row in lazy] == [row[4] for row in eager]
    assert lazy[0][:4] == [0, 1, 0, 0] and eager[0][:4] == [1, 0, 0, 0]  # (general, compiled, programs, loaded)
    assert lazy[1][3] == eager[1][3] == 1 and lazy[1][1] == 2 and eager[1][1] == 1  # loaded, run on the 2nd


def test_import_leaves_out_what_a_gradient_does_not_use() -> None:
    """`import bytegrad` imports neither the compiled tier, nor jacobian's and jvp's modules
    (_jacobian, runtime.forward), nor tree_util; their public names resolve on first use; a gradient
    imports none of them, and jacobian and jvp work in that process."""
    left_out = ("bytegrad.compiled", "bytegrad._jacobian", "bytegrad.runtime.forward", "bytegrad.tree_util")
    code = _MLP + (
        f"left_out = {left_out!r}\n"
        "now = lambda: sorted(m for m in sys.modules if m.startswith(left_out))\n"
        "print(json.dumps(now()))\n"
        "bytegrad.grad(loss)(p, x)\n"
        "print(json.dumps(now()))\n"
        "t = bytegrad.tree_map(lambda v: v * 2, {'a': 1.0})\n"
        "jac = bytegrad.jacobian(lambda v: np.tanh(v))(np.ones(3))\n"
        "_, dot = bytegrad.jvp(lambda v: np.sum(np.sin(v)), (np.zeros(2),), (np.ones(2),))\n"
        "print(json.dumps([t, jac.tolist(), float(dot), 'tree_map' in dir(bytegrad)]))\n")
    at_import, after_grad, used = _json_lines(run_fresh(code, BYTEGRAD_TIER="auto"))
    assert at_import == [] and after_grad == []
    assert used[0] == {"a": 2.0} and used[3] is True
    assert abs(used[2] - 2.0) < 1e-12
    assert all(abs(used[1][i][j] - (1 - __import__("math").tanh(1.0) ** 2) * (i == j)) < 1e-12
               for i in range(3) for j in range(3))
