"""`import bytegrad` stays light: it loads no numba (the first gradient must not wait for it)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run_fresh(code: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, **extra_env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_import_does_not_load_numba() -> None:
    proc = run_fresh(
        "import sys, bytegrad\n"
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'llvmlite'))))\n"
    )
    assert proc.returncode == 0, proc.stderr
    loaded = proc.stdout.strip()
    assert not loaded, f"`import bytegrad` imported {loaded}"


@pytest.mark.general_path  # BYTEGRAD_TIER=numba compiles a kernel on the first call, by design
def test_first_gradient_loads_only_what_it_needs() -> None:
    """`import bytegrad` leaves out the kernel machinery (explain and precompile load it on first
    use), and a first gradient (rewrite, disk cache store) loads neither the kernel generator nor
    pathlib, logging, OpenSSL's hashlib, threading or json: milliseconds each of every process's
    first gradient."""
    heavy = ("bytegrad.runtime.kernels", "bytegrad.runtime.fused", "bytegrad.introspect", "pathlib",
             "logging", "hashlib", "_hashlib", "threading", "json")
    proc = run_fresh(
        "import sys, numpy as np\n"
        f"heavy = {heavy!r}\n"
        "before = {m for m in heavy if m in sys.modules}\n"
        "import bytegrad\n"
        "print(sorted(m for m in heavy if m in sys.modules and m not in before))\n"
        "def f(W, x, b):\n"
        "    return np.sum(np.tanh(x @ W + b))\n"
        "bytegrad.grad(f)(np.ones((3, 2)), np.ones((4, 3)), np.ones(2))\n"
        "print(sorted(m for m in heavy if m in sys.modules and m not in before))\n"
        "assert callable(bytegrad.explain) and callable(bytegrad.precompile)\n"
        "print('explain' in dir(bytegrad))\n"
    )
    assert proc.returncode == 0, proc.stderr
    at_import, after_grad, listed = proc.stdout.split("\n")[:3]
    assert at_import == "[]"
    assert after_grad == "['bytegrad.runtime.fused']"  # the fused site's NumPy tier; no kernels
    assert listed == "True"


@pytest.mark.general_path  # a forced compiled tier captures on the first call (which analyses bytecode)
def test_a_warm_first_gradient_loads_no_rewriter_json_or_threading(tmp_path) -> None:
    """With the rewrite on disk, a new process's first gradient loads the stored code: it imports
    neither the rewriter (nor the `bytecode` package) nor json (entry headers are marshalled) nor
    threading."""
    (tmp_path / "warm_mod.py").write_text("import numpy as np\n\n\ndef f(W, x, b):\n"
                                          "    return np.sum(np.tanh(x @ W + b))\n")
    watched = ("json", "threading", "bytecode", "bytegrad.transform.rewrite")
    code = ("import sys, numpy as np, bytegrad\n"
            f"sys.path.insert(0, {str(tmp_path)!r})\n"
            "import warm_mod\n"
            "before = set(sys.modules)\n"
            "bytegrad.grad(warm_mod.f)(np.ones((3, 2)), np.ones((4, 3)), np.ones(2))\n"
            f"print(sorted(m for m in {watched!r} if m in sys.modules and m not in before))\n")
    cache = str(tmp_path / "cache")
    first = run_fresh(code, BYTEGRAD_CACHE_DIR=cache, BYTEGRAD_DISABLE_DISK_CACHE="")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "['bytegrad.transform.rewrite']"  # it rewrote (without the `bytecode` package), and stored
    second = run_fresh(code, BYTEGRAD_CACHE_DIR=cache, BYTEGRAD_DISABLE_DISK_CACHE="")
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "[]"


def test_a_slow_first_gradient_still_loads_no_threading(tmp_path) -> None:
    """Under load a first gradient may spend more than the fused sites' price floor, and ski rental
    then estimates a kernel's price (importing runtime/kernels.py) in that call: that must not load
    `threading` either (the warm-cache test above failed on loaded machines for this reason). The
    floor is set to zero here so that the estimate runs whatever the machine's speed."""
    (tmp_path / "slow_mod.py").write_text("import numpy as np\n\n\ndef f(W, x, b):\n"
                                          "    return np.sum(np.tanh(x @ W + b))\n")
    code = ("import sys, numpy as np, bytegrad\n"
            "from bytegrad.runtime import fused\n"
            "fused.PRICE_FLOOR = 0.0\n"
            f"sys.path.insert(0, {str(tmp_path)!r})\n"
            "import slow_mod\n"
            "bytegrad.grad(slow_mod.f)(np.ones((3, 2)), np.ones((4, 3)), np.ones(2))\n"
            "print('bytegrad.runtime.kernels' in sys.modules, 'threading' in sys.modules)\n")
    cache = str(tmp_path / "cache")
    # (the default tier: under BYTEGRAD_TIER=numpy the first call is a capture, which may load more)
    run_fresh(code, BYTEGRAD_CACHE_DIR=cache, BYTEGRAD_DISABLE_DISK_CACHE="", BYTEGRAD_TIER="auto")
    warm = run_fresh(code, BYTEGRAD_CACHE_DIR=cache, BYTEGRAD_DISABLE_DISK_CACHE="", BYTEGRAD_FUSION="auto",
                     BYTEGRAD_TIER="auto")
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout.strip() == "True False", warm.stdout
