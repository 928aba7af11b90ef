"""The documentation: docs/rules.md is the registry's table (it must match what `python -m
bytegrad.rules.docs` prints), the public docstrings' examples run, and the site builds (`make docs`)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
                   "`numpy.argmax`", "## Counts", "HIPS autograd", "through-implementation",
                   "| `scipy.special` | 0 |", "| `scipy.special.expit` | scalar, reverse, forward |",
                   "| `scipy.stats.norm.logpdf` | reverse, forward |", "JAX 0.10.2"):
        assert needle in text, needle


# The modules whose docstrings the API reference (docs/api.md) renders; their examples must run.
DOCTESTED = ("bytegrad.api", "bytegrad.introspect", "bytegrad.precompile", "bytegrad.rules.registry",
             "bytegrad.rules.testing", "bytegrad.runtime.checkpoint", "bytegrad.tree_util")


def test_the_public_docstrings_examples_run():
    # In a fresh interpreter: the examples register rules (rrule(cube)...) that other tests must not see.
    code = ("import doctest, importlib, sys, bytegrad\n"
            "bytegrad.precompile  # the package attribute stays the function\n"
            f"for name in {DOCTESTED!r}:\n"
            "    module = importlib.import_module(name)\n"
            # A doctest's functions would have the module's __name__, and bytegrad runs functions
            # whose __module__ is bytegrad.api as its own (unrewritten): give them another one.
            "    globs = {**vars(module), '__name__': '__doctest__'}\n"
            "    result = doctest.testmod(module, globs=globs, optionflags=doctest.ELLIPSIS)\n"
            "    print(name, result.attempted, result.failed)\n"
            "    assert result.failed == 0, name\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    counts = {line.split()[0]: int(line.split()[1]) for line in proc.stdout.splitlines()}
    assert counts["bytegrad.api"] >= 15 and counts["bytegrad.rules.registry"] >= 10



def test_the_site_builds_without_warnings(tmp_path):
    """`make docs` builds the site with `mkdocs build --strict`: any warning (a broken link, a
    docstring mkdocstrings cannot render) fails it. The `docs` extra brings MkDocs."""
    pytest.importorskip("mkdocs", reason="MkDocs is not installed (pip install -e '.[docs]')")
    pytest.importorskip("mkdocstrings_handlers.python", reason="mkdocstrings[python] is not installed")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    site = tmp_path / "site"
    api = (site / "api" / "index.html").read_text()
    for name in ("bytegrad.api.grad", "bytegrad.api.jvp", "bytegrad.rules.registry.rrule",
                 "bytegrad.rules.testing.check_rule", "bytegrad.introspect.explain"):
        assert f'id="{name}"' in api, name
    assert "Parameters" in api and "Returns" in api
    assert (site / "bench" / "results" / "ratios.png").exists() and (site / "rules" / "index.html").exists()
    guarantees = (site / "guarantees" / "index.html").read_text()
    assert "A gradient is either right or an error" in guarantees  # the README's section, included
