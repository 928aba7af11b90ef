"""`bytegrad.stop_gradient` is a PEP 562 attribute of the package: its rules module (rules/control.py)
is deferred (rules/_deferred.py) and loads on first use of the name, or when something lists the rules;
either way the registry then holds the same rule as when it loaded with bytegrad, and the version is
the same (no lookup could have met the function before it existed). Each program runs in a fresh process."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run(code: str, tmp_path: Path) -> str:
    env = dict(os.environ, BYTEGRAD_CACHE_DIR=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def test_stop_gradient_loads_its_module_on_first_use(tmp_path: Path) -> None:
    out = run("""
        import sys, numpy as np, bytegrad
        from bytegrad.rules import registry
        before = ["bytegrad.rules.control" in sys.modules, "stop_gradient" in dir(bytegrad),
                  "stop_gradient" in bytegrad.__all__]
        version = registry.version()
        sg = bytegrad.stop_gradient
        from bytegrad import stop_gradient
        rule = registry.lookup(sg)
        same = registry.version() == version  # (before a gradient: a compiled tier's first capture registers rules)
        g = bytegrad.grad(lambda x: x * stop_gradient(x) + np.sin(x))(3.0)
        print([before, sg is stop_gradient, "bytegrad.rules.control" in sys.modules, same,
               rule.kind.value, rule.defined_at.filename.endswith("control.py"), bool(abs(g - (3.0 + np.cos(3.0))) < 1e-12),
               sg.__module__])
        """, tmp_path)
    assert out == ("[[False, True, True], True, True, True, 'non-differentiable', True, True, 'bytegrad']")


def test_listing_the_rules_loads_it_without_the_name(tmp_path: Path) -> None:
    out = run("""
        import sys, bytegrad
        from bytegrad.rules import registry
        names = {getattr(fn, "__qualname__", "") for fn in registry.all_rules()}
        print(["bytegrad.rules.control" in sys.modules, "stop_gradient" in names,
               not registry.DEFERRED_PENDING])
        """, tmp_path)
    assert out == "[True, True, True]"


def test_star_import_gives_stop_gradient(tmp_path: Path) -> None:
    out = run("""
        from bytegrad import *
        import bytegrad
        print(stop_gradient is bytegrad.stop_gradient and callable(stop_gradient))
        """, tmp_path)
    assert out == "True"
