"""`import bytegrad` stays light: it loads no numba (the first gradient must not wait for it)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_fresh(code: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
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
