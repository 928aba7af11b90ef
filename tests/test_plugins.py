"""The example plugin package (examples/plugin), installed with pip into a temporary directory and
used from a fresh interpreter: not loaded by `import bytegrad`, loaded by the first gradient that needs
it, right against finite differences, and its rules pass check_rule.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "examples" / "plugin"


def _pip(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, env=env)


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory):
    if importlib.util.find_spec("pip") is None:
        pytest.skip("pip is not available in this interpreter")
    tmp = tmp_path_factory.mktemp("plugin")
    source = tmp / "src"
    shutil.copytree(PLUGIN, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = tmp / "site"
    common = ["install", "--quiet", "--no-deps", "--target", str(target), str(source)]
    # Offline first (setuptools with wheel support in this environment); else let pip fetch the
    # build backend into an isolated environment.
    result = _pip(common[:1] + ["--no-build-isolation"] + common[1:])
    if result.returncode != 0:
        result = _pip(common)
    if result.returncode != 0:
        pytest.skip(f"pip could not build examples/plugin (no usable build backend offline, and none "
                    f"could be fetched): {result.stderr.strip().splitlines()[-1:]}")
    return target


def _run(plugin_dir: Path, code: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(plugin_dir)])}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            env=env, cwd=plugin_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_import_does_not_load_the_plugin_and_the_first_gradient_does(plugin_dir):
    out = _run(plugin_dir, """
        import sys, math, warnings
        warnings.simplefilter("error")  # a plugin that fails to load would warn
        import bytegrad
        from bytegrad.rules import registry
        assert "bytegrad_example_plugin" not in sys.modules and not registry._plugins_loaded
        from bytegrad_example_plugin import erf, hypot
        assert "bytegrad_example_plugin.rules" not in sys.modules

        def f(x, y):
            return erf(x) * hypot(x, y) + hypot(y, 2.0 * x)

        gx, gy = bytegrad.grad(f, wrt=(0, 1))(0.5, -1.5)
        assert "bytegrad_example_plugin.rules" in sys.modules and registry._plugins_loaded
        h = 1e-6
        fx = (f(0.5 + h, -1.5) - f(0.5 - h, -1.5)) / (2 * h)
        fy = (f(0.5, -1.5 + h) - f(0.5, -1.5 - h)) / (2 * h)
        assert math.isclose(gx, fx, rel_tol=1e-7) and math.isclose(gy, fy, rel_tol=1e-7), (gx, fx, gy, fy)
        print("ok", gx, gy)
    """)
    assert out.startswith("ok")


def test_the_plugin_rules_pass_check_rule(plugin_dir):
    out = _run(plugin_dir, """
        import math
        from bytegrad.rules.registry import lookup, RuleKind
        from bytegrad.rules.testing import check_rule
        from bytegrad_example_plugin import erf, hypot
        for x in (-1.3, 0.2, 2.5):
            check_rule(erf, x)            # the scalar_rule (reverse and the derived forward rule)
            check_rule(hypot, x, 0.7)     # the rrule and the frule
        rule = lookup(hypot)
        assert rule.kind is RuleKind.RRULE and rule.rrule is not None and rule.frule is not None
        assert lookup(erf).kind is RuleKind.ELEMENTWISE
        print("ok")
    """)
    assert out.strip() == "ok"


def test_without_the_plugin_the_function_has_no_rule(plugin_dir):
    out = _run(plugin_dir, """
        import bytegrad
        from bytegrad.rules import registry
        registry._plugins_loaded = True  # as if no plugin were installed
        from bytegrad_example_plugin import erf
        try:
            bytegrad.grad(lambda x: erf(x))(0.5)
        except bytegrad.NoRuleError as exc:
            print("NoRuleError", "erf" in str(exc))
    """)
    assert out.strip() == "NoRuleError True"
