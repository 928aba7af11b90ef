"""The version a stored rewrite is keyed by (transform/cache.py's `rewrite_version`): a fingerprint of
the files of `REWRITE_SOURCES` only, not of every file of bytegrad. An edit of one of them in an editable
checkout makes the stored rewrites stale; an edit of a rules module is seen through the entry's recorded
assumptions; an edit elsewhere (the compiled tier) leaves them loadable. Each process runs a copy of the
package, in a fresh interpreter."""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import bytegrad
from bytegrad.transform import cache

pytestmark = pytest.mark.general_path

PACKAGE = Path(bytegrad.__file__).resolve().parent


def _covered(rel: str) -> bool:
    return any(rel == s or (s.endswith("/") and rel.startswith(s) and "/" not in rel[len(s):])
               for s in cache.REWRITE_SOURCES)


def _module_file(name: str) -> str | None:
    """`bytegrad.x.y` -> 'x/y.py' or 'x/y/__init__.py' (None: not a module of bytegrad)."""
    parts = name.split(".")[1:]
    for rel in ("/".join(parts) + ".py", "/".join(parts + ["__init__.py"])):
        if (PACKAGE / rel).is_file():
            return rel
    return None


def test_every_module_the_rewriter_imports_is_in_the_stamp() -> None:
    """Each bytegrad module that a module of transform/ imports (at the top or inside a function) shapes
    what the rewriter emits or what rewritten code holds: it is in REWRITE_SOURCES."""
    missing = set()
    for path in sorted((PACKAGE / "transform").rglob("*.py")):
        assert _covered(str(path.relative_to(PACKAGE))), path
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{a.name}" if _module_file(f"{node.module}.{a.name}") else node.module
                         for a in node.names]
            for name in names:
                rel = _module_file(name) if name == "bytegrad" or name.startswith("bytegrad.") else None
                if rel is not None and not _covered(rel):
                    missing.add(f"{rel} (imported by {path.relative_to(PACKAGE)})")
    assert not missing, sorted(missing)
    for source in cache.REWRITE_SOURCES:  # (each names a file or folder that exists)
        assert (PACKAGE / source).exists(), source


def test_the_stamp_reads_only_its_sources(monkeypatch) -> None:
    """Computed once per process, from a stat of each file of REWRITE_SOURCES and nothing else."""
    seen: list[str] = []
    real = os.stat
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: seen.append(str(p)) or real(p, *a, **k))
    monkeypatch.setattr(cache, "_rewrite_version", [])
    first = cache.rewrite_version()
    assert cache.rewrite_version() == first and first.startswith(bytegrad.__version__ + "+")
    monkeypatch.setattr(os, "stat", real)
    rels = [str(Path(p).resolve().relative_to(PACKAGE)) for p in seen]
    assert rels and all(_covered(r) for r in rels), rels
    assert len(rels) == len(set(rels)) and len(rels) < 60  # (bytegrad has ~170 files)
    assert "transform/rewrite.py" in rels and "runtime/abi.py" in rels


def test_a_rule_is_recorded_with_its_kernel_arity() -> None:
    """What fusion read of a rule is part of the entry's assumptions: a kernel formula's arity (or -1 for
    a formula per constant, `x ** c`), None without one."""
    assert cache._rule_of(np.tanh)[2] == 1
    assert cache._rule_of(np.power)[2] is None  # (np.power has no kernel; `x ** c` is operator.pow's)
    import operator
    assert cache._rule_of(operator.pow)[2] == -1
    assert cache._rule_of(operator.mul)[2] == 2
    assert cache._rule_of(len) is None or cache._rule_of(len)[2] is None


def test_the_key_holds_the_rules_of_the_operators_fusion_fuses(monkeypatch) -> None:
    """Binary operators are fused by their rules' kernels, read by no global of the function: those rules
    are part of the key (a kernel taken off `operator.mul` changes it), and the key's list is fusion's."""
    import operator

    from bytegrad.rules import registry
    from bytegrad.transform import fusion

    assert fusion._FUSED_BINARY == {operator.add, operator.mul, operator.pow, operator.sub, operator.truediv}
    code = (lambda x: x * 2.0 + 1.0).__code__
    before = cache._disk_key(code, frozenset({"x"}), frozenset())
    rule = registry.lookup(operator.mul)
    monkeypatch.setitem(registry._RULES, operator.mul, rule.replaced(kernel=None))
    assert cache._disk_key(code, frozenset({"x"}), frozenset()) != before
    monkeypatch.setitem(registry._RULES, operator.mul, rule)
    assert cache._disk_key(code, frozenset({"x"}), frozenset()) == before


RUNNER = r'''
import json, sys
import numpy as np
import bytegrad
from bytegrad.transform import cache

def loss(W, x):
    return np.sum(np.tanh(W @ x) * 2.0)

W = np.linspace(-1.0, 1.0, 12).reshape(4, 3); x = np.linspace(0.5, 2.0, 15).reshape(3, 5)
g = bytegrad.grad(loss)(W, x)
want = (2.0 * (1.0 - np.tanh(W @ x) ** 2)) @ x.T
print(json.dumps(dict(ok=bool(np.allclose(g, want)), **cache.disk_stats())))
'''


def _run(copy: Path, disk: Path) -> dict:
    env = dict(os.environ, BYTEGRAD_CACHE_DIR=str(disk), PYTHONPATH=str(copy), PYTHONDONTWRITEBYTECODE="1",
               BYTEGRAD_TIER="general")
    out = subprocess.run([sys.executable, "-c", RUNNER], env=env, cwd=copy, capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["ok"], result
    return result


def _loaded(r: dict) -> bool:
    return r["rewrites"] == 0 and r["disk_hits"] >= 1


def _edit(path: Path, text: str = "\n# edited\n") -> None:
    with open(path, "a", encoding="utf-8") as f:  # in place, as an editor that does not rename writes
        f.write(text)


def test_an_edit_of_a_rewrite_source_invalidates_stored_rewrites(tmp_path: Path) -> None:
    copy = tmp_path / "checkout"
    shutil.copytree(PACKAGE, copy / "bytegrad", ignore=shutil.ignore_patterns("__pycache__"))
    disk = tmp_path / "cache"
    cold = _run(copy, disk)
    assert cold["rewrites"] >= 1 and cold["disk_stores"] >= 1, cold
    assert _loaded(_run(copy, disk))

    _edit(copy / "bytegrad" / "transform" / "rewrite.py")  # the rewriter: rewritten again
    after = _run(copy, disk)
    assert after["rewrites"] >= 1 and after["disk_hits"] == 0, after
    assert _loaded(_run(copy, disk))

    fused = copy / "bytegrad" / "runtime" / "fused.py"  # the same size, a new mtime: rewritten again
    st = fused.stat()
    os.utime(fused, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    after = _run(copy, disk)
    assert after["rewrites"] >= 1 and after["disk_hits"] == 0, after

    _edit(copy / "bytegrad" / "compiled" / "ir.py")  # the compiled tier's IR: the rewrite still loads
    assert _loaded(_run(copy, disk))

    ufuncs = copy / "bytegrad" / "rules" / "numpy" / "ufuncs.py"  # np.tanh's rule moves: its entry is stale
    ufuncs.write_text("# a line above every rule\n" + ufuncs.read_text(encoding="utf-8"), encoding="utf-8")
    after = _run(copy, disk)
    assert after["rewrites"] >= 1 and after["disk_stale"] >= 1, after


def test_a_source_edited_since_import_makes_the_stamps_this_processs_own(monkeypatch) -> None:
    """The stamps are taken on first use: a bytegrad source edited between the import and then describes
    code this process does not run, so its stamps (rewrites, programs) are its own, not the edited
    code's; an mtime before the import, or in the future (a skewed clock), is not an edit."""
    from bytegrad import _config
    from bytegrad import diskcache

    monkeypatch.setattr(cache, "_rewrite_version", [])
    plain_rewrite, plain_all = cache.rewrite_version(), diskcache.bytegrad_version()
    assert "edited" not in plain_rewrite and "edited" not in plain_all
    monkeypatch.setattr(cache, "_rewrite_version", [])
    monkeypatch.setattr(diskcache, "_version", None)
    monkeypatch.setattr(_config, "IMPORTED_NS", 0)  # every source is newer than this "import"
    edited_rewrite, edited_all = cache.rewrite_version(), diskcache.bytegrad_version()
    assert edited_rewrite.startswith(plain_rewrite + "+edited-") and edited_all.startswith(plain_all + "+edited-")
    monkeypatch.setattr(_config, "IMPORTED_NS", time.time_ns() - 10**9)
    assert _config.edited_stamp([f"a.py:10:{time.time_ns() + 10**12};", "b.py:-;"]) == ""  # (the future)
    assert _config.edited_stamp([f"a.py:10:{time.time_ns() - 2 * 10**9};"]) == ""  # (before the import)
    assert _config.edited_stamp([f"a.py:10:{time.time_ns() - 10**8};"]).startswith("+edited-")
