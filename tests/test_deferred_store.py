"""The disk cache entry of a rewrite is written after the first gradient (transform/cache.py,
`flush_stores`): on the function's next gradient, at `disk_stats`/`clear`, or at exit; what the
rewrite assumed is recorded when it ran, and the entry goes only into the directory it was made for."""
from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bytegrad
from bytegrad import diskcache
from bytegrad.transform import cache

pytestmark = pytest.mark.general_path

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def disk(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setattr(bytegrad.config, "cache_dir", str(path))
    monkeypatch.setattr(bytegrad.config, "disable_disk_cache", False)
    cache.flush_stores()
    diskcache._reset_for_tests()
    cache.clear()
    yield path
    cache.PENDING.clear()
    diskcache._reset_for_tests()
    cache.clear()


def _entries(disk: Path) -> list[Path]:
    return list((disk / "code").glob("*.bgc"))


def cube_loss(x):
    return np.sum(np.sin(x) * x * x)


def cube_grad(x):
    return np.cos(x) * x * x + 2 * np.sin(x) * x


X = np.linspace(-1.0, 1.0, 5)


def test_first_gradient_defers_the_store_and_the_second_writes_it(disk):
    f = bytegrad.differentiate(cube_loss)
    np.testing.assert_allclose(f.grad(X), cube_grad(X))
    assert len(cache.PENDING) == 1 and not _entries(disk)  # nothing written by the first gradient
    np.testing.assert_allclose(f.grad(X), cube_grad(X))
    assert not cache.PENDING and len(_entries(disk)) == 1
    cache.clear()  # the entry loads in place of a rewrite
    rewrites = cache.disk_stats()["rewrites"]
    np.testing.assert_allclose(bytegrad.differentiate(cube_loss).grad(X), cube_grad(X))
    assert cache.disk_stats()["rewrites"] == rewrites


def helper(x):
    return x * x


def uses_helper(x):
    return np.sum(helper(x))


def test_assumptions_are_those_of_the_rewrite_not_of_the_flush(disk):
    """A rule registered between the rewrite and the store must not be recorded as one the rewrite saw
    (a later process with the rule would load code rewritten without it)."""
    from bytegrad.rules import registry

    np.testing.assert_allclose(bytegrad.grad(uses_helper)(X), 2 * X)
    assert cache.PENDING
    try:
        @bytegrad.rrule(helper)
        def helper_rrule(x):
            return x * x, lambda g: (2 * x * g,)

        cache.flush_stores()
        heads = [diskcache.read_header(e.read_bytes()) for e in _entries(disk)]  # (helper's own rewrite too)
        (payload,) = [p for h, p in heads if h["label"].startswith("uses_helper ")]
        frozen_globals = marshal.loads(payload)[3][0]
        (record,) = [g for g in frozen_globals if g[0] == "helper"]
        assert record[3] is None, record  # no rule when the rewrite ran
        cache.clear()
        assert cache._decode(payload, uses_helper.__globals__) is None  # stale now: rewritten again
    finally:
        registry._RULES.pop(helper, None)
        registry.outdate()


def test_pending_entry_is_not_written_into_another_directory(disk, tmp_path, monkeypatch):
    np.testing.assert_allclose(bytegrad.grad(cube_loss)(X), cube_grad(X))
    assert cache.PENDING
    other = tmp_path / "other"
    monkeypatch.setattr(bytegrad.config, "cache_dir", str(other))
    cache.flush_stores()
    assert not cache.PENDING
    assert not list(other.rglob("*.bgc")) and not _entries(disk)


SCRIPT = r'''
import json, sys
import numpy as np
import bytegrad
from bytegrad.transform import cache

def loss(x):
    return np.sum(np.tanh(x) ** 2)

g = bytegrad.grad(loss)(np.linspace(-1, 1, 4))
print(json.dumps(dict(pending=len(cache.PENDING), stores=cache._disk["disk_stores"],
                      rewrites=cache._disk["rewrites"], hits=cache._disk["disk_hits"])))
'''


def test_one_gradient_process_stores_at_exit(tmp_path):
    disk = tmp_path / "cache"
    script = tmp_path / "one.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, BYTEGRAD_CACHE_DIR=str(disk), PYTHONPATH=str(ROOT))
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold == dict(pending=1, stores=0, rewrites=1, hits=0), cold  # not yet written when it printed
    assert len(list((disk / "code").glob("*.bgc"))) == 1  # written at exit
    assert warm["rewrites"] == 0 and warm["hits"] == 1 and warm["pending"] == 0, warm


def test_pending_entries_are_bounded(disk, monkeypatch):
    monkeypatch.setattr(cache, "PENDING_LIMIT", 2)
    ns = {"np": np}
    for i in range(3):
        exec(f"def f{i}(x):\n    return np.sum(np.sin(x) * {i + 1}.0)\n", ns)  # noqa: S102
        np.testing.assert_allclose(bytegrad.grad(ns[f"f{i}"])(X), np.cos(X) * (i + 1))
        assert len(cache.PENDING) == (i + 1 if i < 2 else 0)
    assert len(_entries(disk)) == 3
