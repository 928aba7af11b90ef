"""scipy stays optional: bytegrad never imports it, and its rules load once the program has imported it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("scipy")
REPO = Path(__file__).resolve().parents[3]


def printed(code: str) -> str:
    """What `code` prints in a fresh interpreter (that must succeed)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_import_and_a_numpy_gradient_leave_scipy_out():
    out = printed(  # (the default tier: a Numba program, under BYTEGRAD_TIER=numba, loads Numba, which imports SciPy)
        "import os; os.environ.pop('BYTEGRAD_TIER', None)\n"
        "import sys, numpy as np, bytegrad\n"
        "g = bytegrad.grad(lambda x: np.sum(np.tanh(x) ** 2))(np.ones(3))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy'))\n"
    )
    assert out == "[]"


def test_rules_load_when_the_program_imports_scipy():
    out = printed(
        "import numpy as np, bytegrad\n"
        "g = bytegrad.grad(lambda x: np.sum(np.sin(x)))(np.ones(3))  # a first gradient before scipy\n"
        "import scipy.special\n"
        "def f(x):\n"
        "    return np.sum(scipy.special.expit(x)) + scipy.special.logsumexp(x)\n"
        "x = np.array([0.5, -1.0, 2.0])\n"
        "s = 1 / (1 + np.exp(-x))\n"
        "want = s * (1 - s) + np.exp(x) / np.sum(np.exp(x))\n"
        "print(np.allclose(bytegrad.grad(f)(x), want, rtol=1e-12))\n"
    )
    assert out == "True"


def test_rules_load_for_a_scipy_module_imported_while_running():
    # `import scipy` alone: scipy.linalg is imported lazily, on the attribute read, inside the gradient
    out = printed(
        "import numpy as np, bytegrad, scipy\n"
        "def f(a):\n"
        "    return scipy.linalg.det(a)\n"
        "a = np.array([[2.0, 1.0], [0.5, 3.0]])\n"
        "print(np.allclose(bytegrad.grad(f)(a), np.linalg.det(a) * np.linalg.inv(a).T))\n"
    )
    assert out == "True"
