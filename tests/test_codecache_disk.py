"""The marshal cache of rewritten code (transform/cache.py): a warm process loads instead of
rewriting, revalidates what the rewrite assumed, survives damaged entries and concurrent writers."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import bytegrad
from bytegrad import diskcache
from bytegrad.runtime import abi
from bytegrad.transform import cache, sidetable

pytestmark = pytest.mark.general_path  # the general path's own machinery (tests/conftest.py)

ROOT = Path(__file__).resolve().parent.parent


# ---- in this process -----------------------------------------------------------------------------


def poly_loss(x, w):
    h = np.tanh(w * x)
    return np.sum(h * h) + np.sum(np.sin(x) * w)


def poly_grad(x, w):
    t = np.tanh(w * x)
    return 2 * t * (1 - t * t) * w + np.cos(x) * w


X = np.linspace(-1.0, 1.0, 7)
W = 0.7


def fresh_gradient():
    """A gradient that cannot be served by any in-memory cache: only the disk one, or a rewrite."""
    cache.clear()
    return bytegrad.grad(poly_loss)(X, W)


def test_entry_written_and_reused(disk):
    before = cache.disk_stats()
    np.testing.assert_allclose(fresh_gradient(), poly_grad(X, W))
    mid = cache.disk_stats()
    assert mid["rewrites"] == before["rewrites"] + 1 and mid["disk_stores"] == before["disk_stores"] + 1
    assert len(list((disk / "code").glob("*.bgc"))) == 1
    np.testing.assert_allclose(fresh_gradient(), poly_grad(X, W))
    after = cache.disk_stats()
    assert after["rewrites"] == mid["rewrites"] and after["disk_hits"] == mid["disk_hits"] + 1


def _only_entry(disk: Path) -> Path:
    cache.flush_stores()  # (the first gradient defers its store: tests/test_deferred_store.py)
    (entry,) = (disk / "code").glob("*.bgc")
    return entry


@pytest.mark.parametrize("damage", ["flip", "truncate", "zero", "swap"])
def test_damaged_entry_is_rebuilt_with_a_right_gradient(disk, damage):
    fresh_gradient()
    entry = _only_entry(disk)
    data = bytearray(entry.read_bytes())
    if damage == "flip":
        for i in range(len(data) - 200, len(data), 7):
            data[i] ^= 0x55
    elif damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "zero":
        data = bytearray()
    else:  # another function's entry under this key's name
        cache.clear()
        bytegrad.grad(np_sum_sin)(X)
        cache.flush_stores()
        other = [p for p in (disk / "code").glob("*.bgc") if p != entry][0]
        data = bytearray(other.read_bytes())
    entry.write_bytes(bytes(data))
    rewrites = cache.disk_stats()["rewrites"]
    np.testing.assert_allclose(fresh_gradient(), poly_grad(X, W))
    assert cache.disk_stats()["rewrites"] == rewrites + 1
    np.testing.assert_allclose(fresh_gradient(), poly_grad(X, W))  # the rebuilt entry loads
    assert cache.disk_stats()["rewrites"] == rewrites + 1


def np_sum_sin(x):
    return np.sum(np.sin(x))


def test_entry_with_a_foreign_object_in_its_side_table_is_not_loaded(disk):
    fresh_gradient()
    entry = _only_entry(disk)
    head, payload = diskcache.read_header(entry.read_bytes())
    import marshal

    fmt, nonce, stripped, frozen, side = marshal.loads(payload)
    evil = pickle.dumps([os.system])
    bad = marshal.dumps((fmt, nonce, stripped, frozen, evil))
    entry.write_bytes(diskcache.encode_entry(head["key"], bad, label=head["label"]))  # a valid checksum
    rewrites = cache.disk_stats()["rewrites"]
    np.testing.assert_allclose(fresh_gradient(), poly_grad(X, W))
    assert cache.disk_stats()["rewrites"] == rewrites + 1


def test_unserializable_constant_skips_the_store_and_keeps_working(disk, monkeypatch):
    def refuse(obj):
        raise pickle.PicklingError("cannot pickle a fused site")

    monkeypatch.setattr(diskcache, "safe_dumps", refuse)
    monkeypatch.setattr(sidetable, "dumps", lambda table, *how: None)  # (neither format writes the table)
    before = cache.disk_stats()
    np.testing.assert_allclose(fresh_gradient(), poly_grad(X, W))
    assert cache.disk_stats()["disk_unstorable"] == before["disk_unstorable"] + 1
    assert not list(disk.rglob("*.bgc"))


def test_disabled_disk_cache_writes_nothing(disk, monkeypatch):
    monkeypatch.setattr(bytegrad.config, "disable_disk_cache", True)
    np.testing.assert_allclose(fresh_gradient(), poly_grad(X, W))
    assert not disk.exists()


def test_changed_global_in_this_process_causes_a_rewrite(disk):
    fresh_gradient()
    g = poly_loss.__globals__
    saved = g["np"]
    stale = cache.disk_stats()["disk_stale"]
    try:
        g["np"] = types.SimpleNamespace(tanh=np.tanh, sum=np.sum, sin=np.sin)  # not a module any more
        cache.clear()
        got = bytegrad.grad(poly_loss)(X, W)
    finally:
        g["np"] = saved
    np.testing.assert_allclose(got, poly_grad(X, W))
    assert cache.disk_stats()["disk_stale"] == stale + 1


def test_strip_and_restore_reach_nested_code_objects():
    src = "def outer():\n    def inner():\n        return 1\n    return inner\n"
    outer = compile(src, "<nested>", "exec").co_consts[0]
    inner = next(c for c in outer.co_consts if isinstance(c, types.CodeType))
    site = abi.Site("<nested>", 3, "inner", "call")
    inner2 = inner.replace(co_consts=tuple(site if c == 1 else c for c in inner.co_consts))
    outer2 = outer.replace(co_consts=tuple(inner2 if c is inner else c for c in outer.co_consts))
    table: list = []
    stripped = cache._strip(outer2, "n0", table)
    import marshal

    assert table == [site]
    back = cache._restore(marshal.loads(marshal.dumps(stripped)), "n0", table)
    inner3 = next(c for c in back.co_consts if isinstance(c, types.CodeType))
    assert site in inner3.co_consts


# ---- across processes ------------------------------------------------------------------------------

MODULE = '''
import numpy as np

SCALE = {scale}
act = np.{act}


def loss(params, x):
    W, b = params
    h = act(W @ x + b[:, None])
    return SCALE * np.sum(h * h)
'''

RUNNER = r'''
import json, sys, time
sys.path.insert(0, sys.argv[1])
t0 = time.perf_counter()
import numpy as np
import bytegrad
from bytegrad.transform import cache
from bytegrad import diskcache
import model
if len(sys.argv) > 2 and sys.argv[2] == "override_rule":
    bytegrad.scalar_rule(np.tanh, lambda x, out: 1.0 - out * out, override=True)
rng = np.random.default_rng(0)
W = rng.standard_normal((4, 3)); b = rng.standard_normal(4); x = rng.standard_normal((3, 5))
gW, gb = bytegrad.grad(model.loss)((W, b), x)
act = {"tanh": (np.tanh, lambda h: 1 - h * h), "sin": (np.sin, None)}[model.act.__name__]
z = W @ x + b[:, None]
h = act[0](z)
dz = 2 * model.SCALE * h * (1 - h * h if act[1] else np.cos(z))
ok = np.allclose(gW, dz @ x.T) and np.allclose(gb, dz.sum(axis=1))
print(json.dumps(dict(ok=bool(ok), bytecode="bytecode" in sys.modules,
                      version=diskcache.bytegrad_version(), **cache.disk_stats())))
'''


def _write_model(tmp_path: Path, scale: str = "1.5", act: str = "tanh") -> Path:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "model.py").write_text(MODULE.format(scale=scale, act=act))
    (src / "runner.py").write_text(RUNNER)
    return src


def _run(src: Path, disk: Path, *extra: str) -> dict:
    env = dict(os.environ, BYTEGRAD_CACHE_DIR=str(disk), PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    out = subprocess.run([sys.executable, str(src / "runner.py"), str(src), *extra], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cold_then_warm(src: Path, disk: Path, *extra: str) -> tuple[dict, dict]:
    """Two processes in a row; repeated once if bytegrad's own files changed in between (another
    engineer saving a file changes the version fingerprint, which correctly invalidates the cache)."""
    for _attempt in range(2):
        cold = _run(src, disk)
        warm = _run(src, disk, *extra)
        if cold["version"] == warm["version"]:
            return cold, warm
    pytest.skip("bytegrad's source files kept changing while the test ran")


def test_warm_process_loads_instead_of_rewriting(tmp_path, disk):
    src = _write_model(tmp_path)
    cold, warm = _cold_then_warm(src, disk)
    assert cold["ok"] and cold["rewrites"] >= 1 and cold["disk_stores"] >= 1
    assert warm["ok"], warm
    assert warm["rewrites"] == 0 and warm["disk_hits"] >= 1, warm
    assert not warm["bytecode"], "a warm process should not import the bytecode package"


def test_changed_global_between_processes_causes_a_rewrite(tmp_path, disk):
    src = _write_model(tmp_path, act="tanh")
    _cold_then_warm(src, disk)
    _write_model(tmp_path, act="sin")  # same code, another function behind the global `act`
    changed = _run(src, disk)
    assert changed["ok"], changed
    assert changed["rewrites"] >= 1 and changed["disk_stale"] >= 1, changed


def test_changed_global_type_between_processes_causes_a_rewrite(tmp_path, disk):
    src = _write_model(tmp_path, scale="1.5")
    _cold_then_warm(src, disk)
    _write_model(tmp_path, scale="np.float64(1.5)")
    changed = _run(src, disk)
    assert changed["ok"] and changed["rewrites"] >= 1 and changed["disk_stale"] >= 1, changed


def test_changed_rule_between_processes_causes_a_rewrite(tmp_path, disk):
    src = _write_model(tmp_path)
    cold, warm = _cold_then_warm(src, disk, "override_rule")
    assert warm["ok"], warm
    assert warm["rewrites"] >= 1 and warm["disk_stale"] >= 1, warm


CONCURRENT = r'''
import json, sys
import numpy as np
import bytegrad
from bytegrad.transform import cache
ns = {"np": np}
ok = True
for i in range(12):
    src = f"def f{i}(x):\n    return np.sum(np.sin(x * {i + 1}.0) ** 2)\n"
    exec(compile(src, f"<gen{i}>", "exec"), ns)
for rep in range(3):
    cache.clear()
    for i in range(12):
        x = np.linspace(-1, 1, 9)
        k = i + 1.0
        g = bytegrad.grad(ns[f"f{i}"])(x)
        ok = ok and np.allclose(g, 2 * np.sin(k * x) * np.cos(k * x) * k)
print(json.dumps(dict(ok=bool(ok), **cache.disk_stats())))
'''


def test_two_processes_filling_the_same_cache_at_once(tmp_path, disk):
    script = tmp_path / "concurrent.py"
    script.write_text(CONCURRENT)
    env = dict(os.environ, BYTEGRAD_CACHE_DIR=str(disk), PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["ok"] for r in results), results
    assert sum(r["disk_stores"] for r in results) >= 12
    assert not [p for p in disk.rglob("*") if p.name.startswith(diskcache.TMP_PREFIX)]
    entries = list((disk / "code").glob("*.bgc"))
    assert len(entries) >= 12
    third = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert third.returncode == 0, third.stderr
    r3 = json.loads(third.stdout.strip().splitlines()[-1])
    assert r3["ok"] and r3["disk_hits"] >= 1


def test_killed_writer_leaves_nothing_that_loads(tmp_path, disk):
    src = _write_model(tmp_path)
    script = tmp_path / "killed.py"
    script.write_text(
        "import os, sys, runpy\n"
        "os.replace = lambda a, b: os._exit(7)\n"
        f"sys.argv = [{str(src / 'runner.py')!r}, {str(src)!r}]\n"
        f"runpy.run_path({str(src / 'runner.py')!r}, run_name='__main__')\n")
    env = dict(os.environ, BYTEGRAD_CACHE_DIR=str(disk), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 7, out.stderr
    assert not list(disk.rglob("*.bgc"))
    after = _run(src, disk)
    assert after["ok"] and after["rewrites"] >= 1 and after["disk_hits"] == 0
