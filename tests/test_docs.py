"""docs/rules.md is the registry's table: it must match what `python -m bytegrad.rules.docs` prints."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bytegrad.rules.docs import COMMAND

ROOT = Path(__file__).resolve().parent.parent


def _generated() -> str:
    # A fresh interpreter: rules registered by other tests in this session must not show up.
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "bytegrad.rules.docs"], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True).stdout


def test_rules_md_is_up_to_date():
    committed = (ROOT / "docs" / "rules.md").read_text()
    assert committed == _generated(), f"docs/rules.md is stale: regenerate it with `{COMMAND}` (or `make docs`)"


def test_rules_md_lists_forms_nondifferentiable_functions_and_counts():
    text = (ROOT / "docs" / "rules.md").read_text()
    for needle in ("| `numpy.sin` | scalar, reverse, forward |", "| `numpy.matmul` | reverse", "## Non-differentiable",
                   "`numpy.argmax`", "## Counts", "HIPS autograd", "through-implementation"):
        assert needle in text, needle
