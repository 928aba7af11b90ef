"""The cache directory (diskcache.py): trust by ownership and mode, damaged or foreign
entries ignored and deleted, atomic writes, read-only or full directories, the LRU cap, the CLI."""
from __future__ import annotations

import errno
import os
import pickle
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import bytegrad
from bytegrad import diskcache

ROOT = Path(__file__).resolve().parent.parent
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
POSIX = hasattr(os, "getuid")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache directory for this test, with the module's per-process state reset."""
    path = tmp_path / "cache"
    monkeypatch.setattr(bytegrad.config, "cache_dir", str(path))
    monkeypatch.setattr(bytegrad.config, "disable_disk_cache", False)
    monkeypatch.setattr(bytegrad.config, "cache_max_mb", diskcache.DEFAULT_MAX_MB)
    diskcache._reset_for_tests()
    yield path
    diskcache._reset_for_tests()


def cache_warnings(record) -> list:
    return [w for w in record if issubclass(w.category, diskcache.CacheWarning)]


def tanh_loss(x):
    return np.sum(np.tanh(x) * x)


def check_gradient_still_right() -> None:
    x = np.linspace(-1.0, 1.0, 5)
    t = np.tanh(x)
    np.testing.assert_allclose(bytegrad.grad(tanh_loss)(x), (1 - t * t) * x + t)


# ---- where, and trust -------------------------------------------------------------------------------


@pytest.mark.skipif(not POSIX, reason="POSIX modes")
def test_directory_is_created_with_mode_0700(cache):
    assert diskcache.cache_dir() == str(cache.resolve())
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert diskcache.store("code", "k", b"payload")
    assert stat.S_IMODE((cache / "code").stat().st_mode) == 0o700
    entry = next((cache / "code").iterdir())
    assert stat.S_IMODE(entry.stat().st_mode) & 0o077 == 0


def test_default_directory_is_per_user(tmp_path, monkeypatch):
    monkeypatch.setattr(bytegrad.config, "cache_dir", None)
    monkeypatch.setattr(bytegrad.config, "disable_disk_cache", False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    diskcache._reset_for_tests()
    assert diskcache.cache_dir() == str((tmp_path / "xdg" / "bytegrad").resolve())
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert diskcache.cache_dir() == str((tmp_path / "home" / ".cache" / "bytegrad").resolve())
    if POSIX:
        assert stat.S_IMODE((tmp_path / "home" / ".cache" / "bytegrad").stat().st_mode) == 0o700
    diskcache._reset_for_tests()


def test_disable_env_turns_the_disk_cache_off(cache, monkeypatch):
    monkeypatch.setattr(bytegrad.config, "disable_disk_cache", True)
    assert diskcache.cache_dir() is None
    assert not diskcache.store("code", "k", b"x")
    assert not cache.exists()


@pytest.mark.skipif(not POSIX, reason="POSIX modes")
@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777])
def test_refuses_a_directory_others_can_write(cache, mode):
    cache.mkdir()
    os.chmod(cache, mode)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert diskcache.cache_dir() is None
        assert diskcache.load("code", "k") is None
        assert not diskcache.store("code", "k", b"x")
        check_gradient_still_right()
    found = cache_warnings(record)
    assert len(found) == 1 and "group or others can write" in str(found[0].message)
    assert list(cache.iterdir()) == []


@pytest.mark.skipif(not POSIX, reason="POSIX ownership")
def test_refuses_a_directory_another_user_owns(cache, monkeypatch):
    cache.mkdir(mode=0o700)
    real_uid = cache.stat().st_uid
    monkeypatch.setattr(os, "getuid", lambda: real_uid + 1)  # as if another user ran bytegrad
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert diskcache.cache_dir() is None
        assert diskcache.cache_dir() is None
        assert not diskcache.store("code", "k", b"x")
        check_gradient_still_right()
    found = cache_warnings(record)
    assert len(found) == 1 and "owned by another user" in str(found[0].message)


@pytest.mark.skipif(not POSIX, reason="POSIX modes")
def test_refuses_an_entry_others_can_write(cache):
    assert diskcache.store("code", "k", b"payload")
    assert diskcache.load("code", "k") == b"payload"
    entry = next((cache / "code").glob("*.bgc"))
    os.chmod(entry, 0o666)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert diskcache.load("code", "k") is None
        assert diskcache.load("code", "k") is None
    found = cache_warnings(record)
    assert len(found) == 1 and "refusing the cache file" in str(found[0].message)
    # rebuilding replaces it with an entry of ours
    assert diskcache.store("code", "k", b"payload")
    assert diskcache.load("code", "k") == b"payload"


@pytest.mark.skipif(not IS_ROOT, reason="chown to another user needs root")
def test_refuses_an_entry_another_user_owns(cache):
    assert diskcache.store("code", "k", b"payload")
    entry = next((cache / "code").glob("*.bgc"))
    os.chown(entry, 12345, -1)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert diskcache.load("code", "k") is None
    assert len(cache_warnings(record)) == 1
    assert entry.exists()  # not ours: never deleted


@pytest.mark.skipif(not POSIX, reason="symlinks")
def test_does_not_follow_a_symlinked_entry(cache, tmp_path):
    assert diskcache.store("code", "k", b"payload")
    entry = next((cache / "code").glob("*.bgc"))
    elsewhere = tmp_path / "elsewhere.bgc"
    entry.rename(elsewhere)
    entry.symlink_to(elsewhere)
    assert diskcache.load("code", "k") is None


# ---- damaged and foreign entries ----------------------------------------------------------------------


def _entry(cache: Path) -> Path:
    (entry,) = (cache / "code").glob("*.bgc")
    return entry


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["flip_payload", "flip_header", "flip_magic", "truncate", "truncate_header",
                                    "zero_length", "append"])
def test_damaged_entry_is_ignored_and_deleted(cache, damage):
    payload = bytes(range(256)) * 4
    assert diskcache.store("code", "k", payload)
    entry = _entry(cache)
    size = entry.stat().st_size
    if damage == "flip_payload":
        _flip(entry, size - 100)
    elif damage == "flip_header":
        _flip(entry, 30)
    elif damage == "flip_magic":
        _flip(entry, 0)
    elif damage == "truncate":
        entry.write_bytes(entry.read_bytes()[:-1])
    elif damage == "truncate_header":
        entry.write_bytes(entry.read_bytes()[:20])
    elif damage == "zero_length":
        entry.write_bytes(b"")
    else:
        entry.write_bytes(entry.read_bytes() + b"\0")
    assert diskcache.load("code", "k") is None
    assert diskcache.stats()["rejected"] == 1
    assert not entry.exists()
    assert diskcache.store("code", "k", payload)
    assert diskcache.load("code", "k") == payload


def test_entry_swapped_in_from_another_key_is_rejected(cache):
    assert diskcache.store("code", "k1", b"one")
    assert diskcache.store("code", "k2", b"two")
    path1 = Path(diskcache._entry_path(str(cache / "code"), "k1"))
    path2 = Path(diskcache._entry_path(str(cache / "code"), "k2"))
    path2.write_bytes(path1.read_bytes())
    assert diskcache.load("code", "k2") is None
    assert diskcache.load("code", "k1") == b"one"


def test_entry_of_another_bytegrad_version_is_rejected(cache, monkeypatch):
    monkeypatch.setattr(diskcache, "_version", "0.0.1+other")
    assert diskcache.store("code", "k", b"old")
    monkeypatch.setattr(diskcache, "_version", None)
    assert diskcache.load("code", "k") is None
    assert diskcache.stats()["rejected"] == 1


def test_entry_of_another_python_is_rejected(cache, monkeypatch):
    monkeypatch.setattr(sys.implementation, "cache_tag", "cpython-299")
    assert diskcache.store("code", "k", b"other python")
    monkeypatch.undo()
    monkeypatch.setattr(bytegrad.config, "cache_dir", str(cache))
    assert diskcache.load("code", "k") is None


def test_entry_with_another_extra_tag_is_rejected(cache):
    assert diskcache.store("kernels", "k", b"compiled", tag="numba 0.60.0")
    assert diskcache.load("kernels", "k", tag="numba 0.61.0") is None
    assert diskcache.store("kernels", "k", b"compiled", tag="numba 0.61.0")
    assert diskcache.load("kernels", "k", tag="numba 0.61.0") == b"compiled"


# ---- atomic writes ---------------------------------------------------------------------------------------


def test_leftover_temp_file_is_never_loaded_and_is_cleaned_later(cache):
    assert diskcache.store("code", "k", b"payload")
    entry = _entry(cache)
    tmp = entry.with_name(diskcache.TMP_PREFIX + "999-1-deadbeef")
    tmp.write_bytes(entry.read_bytes())
    entry.unlink()
    assert diskcache.load("code", "k") is None
    old = time.time() - 2 * diskcache._STALE_TMP_S
    os.utime(tmp, (old, old))
    fresh = entry.with_name(diskcache.TMP_PREFIX + "998-1-cafecafe")
    fresh.write_bytes(b"being written")
    diskcache.evict()
    assert not tmp.exists()
    assert fresh.exists()  # a live writer's file is left alone


def test_process_killed_between_write_and_rename_leaves_nothing_loadable(cache):
    script = (
        "import os, sys\n"
        "from bytegrad import diskcache\n"
        "def die(src, dst):\n"
        "    os._exit(3)\n"
        "os.replace = die\n"
        "diskcache.store('code', 'k', b'payload')\n"
    )
    env = dict(os.environ, BYTEGRAD_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr
    leftovers = list((cache / "code").iterdir())
    assert leftovers and all(p.name.startswith(diskcache.TMP_PREFIX) for p in leftovers)
    assert diskcache.load("code", "k") is None
    assert diskcache.store("code", "k", b"payload")
    assert diskcache.load("code", "k") == b"payload"


# ---- read-only and full directories ---------------------------------------------------------------------


@pytest.mark.parametrize("err, words", [(errno.EROFS, "Read-only"), (errno.EACCES, "ermission"),
                                         (errno.ENOSPC, "it is full")])
def test_unwritable_directory_degrades_with_one_warning(cache, monkeypatch, err, words):
    real_write = os.write

    def failing_write(fd, data):
        if err == errno.ENOSPC:
            raise OSError(err, os.strerror(err))
        return real_write(fd, data)

    def failing_replace(src, dst):
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(os, "write", failing_write)
    if err != errno.ENOSPC:
        monkeypatch.setattr(os, "replace", failing_replace)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert not diskcache.store("code", "k1", b"x")
        assert not diskcache.store("code", "k2", b"y")
        assert diskcache.write_source("kernels", "k.py", "x = 1\n") is None
        check_gradient_still_right()
    found = cache_warnings(record)
    assert len(found) == 1 and words in str(found[0].message)
    assert not any(p.is_file() for p in cache.rglob("*"))  # no temp file left behind


@pytest.mark.skipif(IS_ROOT or not POSIX, reason="root can write into a read-only directory")
def test_really_read_only_directory(cache):
    cache.mkdir(mode=0o500)
    try:
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            assert not diskcache.store("code", "k", b"x")
            assert not diskcache.store("code", "k", b"x")
            check_gradient_still_right()
        assert len(cache_warnings(record)) == 1
    finally:
        os.chmod(cache, 0o700)


# ---- size cap -------------------------------------------------------------------------------------------


def test_lru_eviction_under_a_small_cap(cache, monkeypatch):
    monkeypatch.setattr(bytegrad.config, "cache_max_mb", 20 / 1024)  # 20 KiB
    payload = b"x" * 3000
    base = time.time() - 1000
    for i in range(6):
        assert diskcache.store("code", f"k{i}", payload)
        path = Path(diskcache._entry_path(str(cache / "code"), f"k{i}"))
        os.utime(path, (base + i, base + i))  # deterministic ages: k0 oldest
    assert diskcache.load("code", "k0") == payload  # a load makes k0 the most recent
    for i in range(6, 9):
        assert diskcache.store("code", f"k{i}", payload)
    alive = {i for i in range(9) if Path(diskcache._entry_path(str(cache / "code"), f"k{i}")).exists()}
    total = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
    assert total <= diskcache.max_bytes()
    assert 0 in alive and {7, 8} <= alive
    assert 1 not in alive and 2 not in alive
    assert diskcache.stats()["evicted"] >= 2


def test_stores_do_not_walk_the_whole_cache_each_time(cache, monkeypatch):
    """The size is measured on the first store (no ledger yet), then counted in the ledger until the
    cap or a re-measure."""
    walks = []
    real = diskcache._groups
    monkeypatch.setattr(diskcache, "_groups", lambda root: walks.append(root) or real(root))
    for i in range(10):
        assert diskcache.store("code", f"w{i}", b"y" * 100)
    assert len(walks) == 1
    monkeypatch.setattr(bytegrad.config, "cache_max_mb", 1 / 1024)  # 1 KiB: the next store re-measures
    assert diskcache.store("code", "w10", b"y" * 100)
    assert len(walks) == 2


def _filesystem_calls_of_a_store(key: str) -> int:
    """The directory listings and stats one store makes, in a fresh process's state."""
    diskcache._reset_for_tests()
    diskcache.cache_dir(), diskcache.bytegrad_version()  # (a listing of bytegrad's own sources, not the cache)
    calls = []
    with pytest.MonkeyPatch.context() as patch:
        for name in ("scandir", "lstat", "stat", "listdir"):
            real = getattr(os, name)
            patch.setattr(os, name, lambda *a, _real=real, _name=name, **k: calls.append(_name) or _real(*a, **k))
        assert diskcache.store("code", key, b"z" * 200)
    return len(calls)


def test_a_store_costs_the_same_in_a_cache_of_a_thousand_entries(cache):
    """The size is kept in the ledger: a fresh process's store into a crowded cache lists and stats
    no more than one into a cache of ten entries (the cache of issue 25 saw 2,384 lstat calls)."""
    for i in range(10):
        assert diskcache.store("code", f"few{i}", b"y" * 200)
    few = _filesystem_calls_of_a_store("after ten")
    for i in range(1000):
        assert diskcache.store("code", f"many{i}", b"y" * 200)
    many = _filesystem_calls_of_a_store("after a thousand")
    assert many == few and many < 10, (few, many)
    assert diskcache.load("code", "many999") == b"y" * 200 and diskcache.load("code", "few0") == b"y" * 200


def test_a_cache_without_a_ledger_is_walked_once(cache, monkeypatch):
    """A cache written before the ledger existed (or whose ledger is damaged) is measured on the next
    store, which writes the ledger; the store after it does not walk again."""
    for i in range(20):
        assert diskcache.store("code", f"k{i}", b"y" * 200)
    ledger = cache / diskcache.LEDGER
    size = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file() and p != ledger)
    assert abs(diskcache._LEDGER.unpack(ledger.read_bytes())[1] - size) < 300
    ledger.write_bytes(b"garbage")
    walks = []
    real = diskcache._groups
    monkeypatch.setattr(diskcache, "_groups", lambda root: walks.append(root) or real(root))
    assert diskcache.store("code", "k20", b"y" * 200) and len(walks) == 1
    assert diskcache.store("code", "k21", b"y" * 200) and len(walks) == 1
    assert diskcache.info()["namespaces"].keys() == {"code"}  # the ledger is no entry


def test_default_cap_is_documented():
    assert diskcache.DEFAULT_MAX_MB == 256
    assert "BYTEGRAD_CACHE_MAX_MB" in (diskcache.__doc__ or "")
    readme = (ROOT / "README.md").read_text()
    assert "BYTEGRAD_CACHE_MAX_MB" in readme and "256" in readme


# ---- generated sources ------------------------------------------------------------------------------------


def test_write_source_is_atomic_and_keeps_unchanged_files(cache):
    written = diskcache.write_source("kernels", "fused_1.py", "def k(x):\n    return x\n")
    assert isinstance(written, str)
    path = Path(written)
    assert path.read_text() == "def k(x):\n    return x\n"
    old = time.time() - 100
    os.utime(path, (old, old))
    assert diskcache.write_source("kernels", "fused_1.py", "def k(x):\n    return x\n") == written
    assert path.stat().st_mtime == pytest.approx(old)  # Numba's cache keys on this mtime
    assert diskcache.write_source("kernels", "fused_1.py", "def k(x):\n    return 2 * x\n") == written
    assert "2 * x" in path.read_text()
    assert not [p for p in path.parent.iterdir() if p.name.startswith(diskcache.TMP_PREFIX)]
    with pytest.raises(ValueError):
        diskcache.write_source("kernels", "../escape.py", "")


# ---- restricted unpickling ------------------------------------------------------------------------------


@pytest.mark.parametrize("evil", [os.system, eval, getattr, subprocess.Popen, np.save])
def test_safe_loads_refuses_foreign_globals(evil):
    with pytest.raises(pickle.UnpicklingError):
        diskcache.safe_loads(pickle.dumps(evil))


def test_safe_roundtrip_keeps_identity_of_bytegrad_objects():
    from bytegrad.runtime import abi

    hooks = list(abi.BINARY_HOOKS.values())[:3]
    site = abi.Site("f.py", 3, "f", "call")
    out = diskcache.safe_loads(diskcache.safe_dumps([hooks, site, np.tanh, np.float64, len, bytegrad.ZERO]))
    assert all(a is b for a, b in zip(out[0], hooks))
    assert (out[1].filename, out[1].lineno, out[1].what) == ("f.py", 3, "call")
    assert out[2] is np.tanh and out[3] is np.float64 and out[4] is len and out[5] is bytegrad.ZERO


# ---- python -m bytegrad cache ----------------------------------------------------------------------------


def _cli(cache: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, BYTEGRAD_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "bytegrad", "cache", *args], env=env,
                          capture_output=True, text=True, cwd=str(ROOT))


def test_cli_info_and_clear(cache):
    assert diskcache.store("code", "k1", b"a" * 100, label="loss (model.py:3)")
    assert diskcache.store("code", "k2", b"b" * 100, label="loss (model.py:3)")
    assert diskcache.store("code", "k3", b"c" * 100, label="step (model.py:9)")
    assert diskcache.write_source("kernels", "fused_tanh.py", "x = 1\n")
    pyc = cache / "kernels" / "__pycache__"
    pyc.mkdir()
    (pyc / "fused_tanh.kernel-1.py311.nbi").write_bytes(b"i")
    (pyc / "fused_tanh.kernel-1.py311.1.nbc").write_bytes(b"c")
    out = _cli(cache, "info", "--list")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert str(cache.resolve()) in text
    assert "code: 3 entries" in text
    assert "   2  loss (model.py:3)" in text and "   1  step (model.py:9)" in text
    assert "kernels: 0 entries, 1 generated sources, 2 Numba cache files" in text
    assert "of 256.0 MiB" in text
    out = _cli(cache, "clear")
    assert out.returncode == 0 and "removed 6 files" in out.stdout, out.stdout + out.stderr
    assert not any(p.is_file() for p in cache.rglob("*"))
    out = _cli(cache, "info")
    assert "empty" in out.stdout


def test_cli_needs_a_subcommand(cache):
    out = _cli(cache)
    assert out.returncode != 0 and "info" in out.stderr
