"""The on-disk cache directory: the one module that reads or writes it.

Loading a cached code object or kernel is running code, so the directory is trusted the way
CPython trusts `__pycache__`, by ownership and permissions: it (and every file loaded from it)
must belong to the current user and must not be writable by group or others; otherwise bytegrad
warns once and works without the disk cache. Every entry carries a header (magic, format version,
then a marshalled dict: bytegrad version, `sys.implementation.cache_tag`, an optional extra tag
such as the Numba version, the entry key, the payload length and its sha256); an entry that does
not match in every field is ignored, deleted, and rebuilt by the caller. Writes go to a temporary
file in the same folder and are renamed into place, so a reader sees a whole entry or none. A
read-only or full directory degrades to in-memory operation with one warning.

API (namespaces are short names such as "code" or "kernels", one sub-folder each):
    cache_dir() -> str | None             the usable cache directory, None when off or refused
    load(namespace, key, tag="", version=None) -> bytes | None
    store(namespace, key, payload, tag="", label="", version=None) -> bool     `label` names the function for `info`
    source_dir(namespace) -> str | None   a folder for generated `.py` files (Numba's `cache=True`
                                          files land next to them, in `__pycache__`)
    write_source(namespace, name, text) -> str | None    atomic; an unchanged file is not rewritten
                                          (its mtime is part of Numba's cache key)
    info() -> dict                        what `python -m bytegrad cache info` prints
    clear() -> int                        removes every entry, source and temporary file
    safe_dumps(obj) -> bytes              pickle.dumps; bytegrad's module-level objects go by reference
    safe_loads(data) -> object            pickle.loads restricted to bytegrad, NumPy and plain builtins
                                          (both runtime/safepickle.py's, imported on first use)
    stats() -> dict                       counters: hits, misses, rejected, stores, store_failures, evicted

Switches (bytegrad.config, read from the environment at import): `cache_dir` (BYTEGRAD_CACHE_DIR,
default $XDG_CACHE_HOME/bytegrad or ~/.cache/bytegrad), `cache_max_mb` (BYTEGRAD_CACHE_MAX_MB, size
cap, default 256; least recently loaded entries are evicted first; the size is kept in a ledger
file, `.size`, so that a store does not walk the directory), `disable_disk_cache`
(BYTEGRAD_DISABLE_DISK_CACHE=1, no disk cache at all).
"""
from __future__ import annotations

import errno
import marshal
import os
import stat
import struct
import sys
import _thread
import time
import warnings
from typing import Any, Iterator, Optional

from bytegrad._config import config as _config, edited_stamp as _edited_stamp, switch as _config_switch

__all__ = ["cache_dir", "load", "store", "source_dir", "write_source", "info", "clear", "stats", "sha256",
           "CacheWarning", "DEFAULT_MAX_MB", "safe_dumps", "safe_loads"]  # noqa: F822 (safe_*: `__getattr__`)


MAGIC = b"BYTEGRAD"
FORMAT_VERSION = 2  # 2: the header is a marshalled dict (was JSON: its import cost every first gradient)
DEFAULT_MAX_MB = int(_config_switch("cache_max_mb").default)  # (declared in bytegrad/_config.py)
ENTRY_SUFFIX = ".bgc"
TMP_PREFIX = ".tmp-"
_PREFIX = struct.Struct("<8sHI")        # magic, format version, header length
_MAX_HEADER = 1 << 16
_STALE_TMP_S = 3600.0                   # a temporary file this old belongs to a dead writer
_EVICT_TO = 0.9                         # evict down to this fraction of the cap


class CacheWarning(UserWarning):
    """The disk cache cannot be used safely (bytegrad keeps working without it)."""


try:  # CPython's own SHA-256: hashlib would load OpenSSL first, milliseconds of a first gradient
    if sys.version_info >= (3, 12):  # (the failed import of the other name costs a first gradient 0.07 ms)
        from _sha2 import sha256
    else:
        from _sha256 import sha256
except ImportError:  # pragma: no cover - a Python built without them
    from hashlib import sha256

_lock = _thread.RLock()  # threading.RLock, without importing threading
_resolved: dict[tuple, Optional[str]] = {}    # environment -> usable directory (None: refused/off)
_warned: set[str] = set()                     # one warning per kind of problem and directory
_read_only: set[str] = set()                  # directories where a write failed: in-memory from then on
_version: Optional[str] = None
_stats = {"hits": 0, "misses": 0, "rejected": 0, "stores": 0, "store_failures": 0, "evicted": 0}


# ---- where, and whether it can be trusted ----------------------------------------------------------


def __getattr__(name: str) -> Any:  # safe_dumps, safe_loads (a warm-cache load of a rewrite reads no pickle)
    if name not in ("safe_dumps", "safe_loads"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(__import__("bytegrad.runtime.safepickle", fromlist=[name]), name)


def _env_key() -> tuple:
    env = os.environ
    return (_config.disable_disk_cache, _config.cache_dir, env.get("XDG_CACHE_HOME", ""), env.get("HOME", ""))


def default_dir() -> str:
    """The per-user default: $XDG_CACHE_HOME/bytegrad, else ~/.cache/bytegrad."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = xdg if xdg and os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "bytegrad")


def cache_dir() -> Optional[str]:
    """The cache directory, created with mode 0700; None when disabled, refused or unusable."""
    key = _env_key()
    try:
        return _resolved[key]
    except KeyError:
        pass
    with _lock:
        if key not in _resolved:
            _resolved[key] = _resolve()
        return _resolved[key]


def _resolve() -> Optional[str]:
    if _config.disable_disk_cache:
        return None
    configured = _config.cache_dir
    path = os.path.expanduser(configured) if configured else default_dir()
    try:
        if not os.path.isdir(path):
            os.makedirs(path, mode=0o700, exist_ok=True)
            os.chmod(path, 0o700)
        path = os.path.realpath(path)
    except OSError as exc:
        _warn("mkdir", path, f"cannot create the cache directory {path} ({exc.strerror or exc}); "
              "bytegrad works without the disk cache")
        return None
    problem = _untrusted(path, directory=True)
    if problem:
        _warn("trust", path, f"refusing the cache directory {path}: {problem}. bytegrad works without "
              "the disk cache; fix with `chmod 700` on a directory you own, or set BYTEGRAD_CACHE_DIR")
        return None
    return path


def _untrusted(path: str, directory: bool, st: Optional[os.stat_result] = None) -> str:
    """Why `path` must not be trusted ('' when it can): not ours, writable by others, wrong type."""
    try:
        st = st or os.stat(path)
    except OSError as exc:
        return f"cannot stat it ({exc.strerror or exc})"
    if directory and not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if not directory and not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    getuid = getattr(os, "getuid", None)
    if getuid is not None and st.st_uid != getuid():
        return f"it is owned by another user (uid {st.st_uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"group or others can write to it (mode {stat.S_IMODE(st.st_mode):o})"
    return ""


def _warn(kind: str, path: str, message: str) -> None:
    tag = f"{kind}:{path}"
    with _lock:
        if tag in _warned:
            _debug(message)
            return
        _warned.add(tag)
    warnings.warn(message, CacheWarning, stacklevel=4)


def _debug(message: str) -> None:
    # logging is imported only here: it is a few milliseconds of every process's first gradient
    import logging
    logging.getLogger("bytegrad.cache").debug("bytegrad cache: %s", message)


def _namespace_dir(namespace: str, create: bool) -> Optional[str]:
    root = cache_dir()
    if root is None:
        return None
    if not namespace.isidentifier():
        raise ValueError(f"cache namespace must be an identifier, got {namespace!r}")
    path = os.path.join(root, namespace)
    if create and not os.path.isdir(path):
        try:
            os.mkdir(path, mode=0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            _write_failed(root, exc)
            return None
    if not os.path.isdir(path):
        return None
    problem = _untrusted(path, directory=True)
    if problem:
        _warn("trust", path, f"refusing the cache folder {path}: {problem}; bytegrad works without it")
        return None
    return path


# ---- entries ---------------------------------------------------------------------------------------


def bytegrad_version() -> str:
    """The installed bytegrad's version plus a fingerprint of its source files (sizes and mtimes),
    so that a changed bytegrad (a development checkout, an upgrade) never loads another's entries."""
    global _version
    if _version is None:
        h, lines = sha256(), sorted(_source_stamps(os.path.dirname(os.path.abspath(__file__)), ""))
        for line in lines:
            h.update(line.encode())
        release = getattr(sys.modules.get("bytegrad"), "__version__", "0")
        _version = f"{release}+{h.hexdigest()[:16]}{_edited_stamp(lines)}"
    return _version


def _source_stamps(directory: str, rel: str) -> Iterator[str]:
    """'path:size:mtime' for every .py file under `directory` (os.scandir: a fraction of a ms)."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if entry.name.endswith(".py"):
            try:
                st = entry.stat()
            except OSError:
                continue
            yield f"{rel}{entry.name}:{st.st_size}:{st.st_mtime_ns};"
        elif entry.name != "__pycache__" and not entry.name.startswith(".") and entry.is_dir():
            yield from _source_stamps(entry.path, f"{rel}{entry.name}/")


def _entry_path(directory: str, key: str) -> str:
    return os.path.join(directory, sha256(key.encode()).hexdigest()[:40] + ENTRY_SUFFIX)


def _header(key: str, payload: bytes, tag: str, label: str, version: Optional[str] = None) -> dict[str, Any]:
    return {"bytegrad": bytegrad_version() if version is None else version,
            "cache_tag": sys.implementation.cache_tag, "tag": tag, "key": key, "length": len(payload), "sha256": sha256(payload).hexdigest(),
            "label": label}


def encode_entry(key: str, payload: bytes, tag: str = "", label: str = "", version: Optional[str] = None) -> bytes:
    """Header + payload, as stored on disk (`version`: see `load`)."""
    head = marshal.dumps(_header(key, payload, tag, label, version))  # marshal: built in, no import
    return _PREFIX.pack(MAGIC, FORMAT_VERSION, len(head)) + head + payload


def read_header(data: bytes) -> Optional[tuple[dict[str, Any], bytes]]:
    """The header and payload of an entry, or None when it is not a well-formed entry."""
    if len(data) < _PREFIX.size:
        return None
    magic, fmt, hlen = _PREFIX.unpack_from(data)
    if magic != MAGIC or fmt != FORMAT_VERSION or hlen > _MAX_HEADER or len(data) < _PREFIX.size + hlen:
        return None
    try:
        head = marshal.loads(data[_PREFIX.size:_PREFIX.size + hlen])
    except (ValueError, EOFError, TypeError):
        return None
    if not isinstance(head, dict):
        return None
    return head, data[_PREFIX.size + hlen:]


def _decode(data: bytes, key: str, tag: str, version: Optional[str] = None) -> Optional[bytes]:
    parsed = read_header(data)
    if parsed is None:
        return None
    head, payload = parsed
    if (head.get("bytegrad") != (bytegrad_version() if version is None else version)
            or head.get("cache_tag") != sys.implementation.cache_tag
            or head.get("tag") != tag or head.get("key") != key or head.get("length") != len(payload)
            or head.get("sha256") != sha256(payload).hexdigest()):
        return None
    return payload


def load(namespace: str, key: str, tag: str = "", version: Optional[str] = None) -> Optional[bytes]:
    """The payload stored under (namespace, key, tag), or None. A damaged, foreign or stale entry
    is deleted (when ours) and reported as a miss: the caller rebuilds and stores it again. `version`:
    the bytegrad the entry must come from (default `bytegrad_version()`; for entries that depend on
    part of bytegrad's sources, transform/cache.py's `rewrite_version()`), given alike to `store`."""
    directory = _namespace_dir(namespace, create=False)
    if directory is None:
        return None
    path = _entry_path(directory, key)
    data = _read_trusted(path)
    if data is None:
        _count("misses")
        return None
    payload = _decode(data, key, tag, version)
    if payload is None:
        _debug(f"ignoring the damaged or stale entry {path}")
        _count("rejected")
        _count("misses")
        _remove(path)
        return None
    try:
        os.utime(path)  # the mtime is the last use, for LRU eviction
    except OSError:
        pass
    _count("hits")
    return payload


def _read_trusted(path: str) -> Optional[bytes]:
    """The bytes of `path` when it is a regular file we own that others cannot write; else None."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        problem = _untrusted(path, directory=False, st=st)
        if problem:
            _warn("trust", path, f"refusing the cache file {path}: {problem}; it is not loaded")
            return None
        chunks = [os.read(fd, st.st_size + 1)]  # the whole entry in one read (unless it grew since fstat)
        while chunks[-1]:
            chunks.append(os.read(fd, 1 << 20))
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def store(namespace: str, key: str, payload: bytes, tag: str = "", label: str = "",
          version: Optional[str] = None) -> bool:
    """Write an entry atomically; False (after one warning) when the directory cannot take it."""
    directory = _namespace_dir(namespace, create=True)
    if directory is None or os.path.dirname(directory) in _read_only:
        return False
    data = encode_entry(key, payload, tag, label, version)
    ok = _write_atomic(_entry_path(directory, key), data)
    if ok:
        _count("stores")
        _after_store(len(data))
    return ok


# The cache's size is kept in a ledger file in its root (`LEDGER`): the size the last walk measured
# plus what every process stored since, and how many stores that was. A store adds to it (one small
# read and write); a walk of the whole directory (`evict`) runs only when the ledger is missing or
# unreadable, passes the cap, or has counted `_REMEASURE` stores (what it does not see: files Numba
# writes, entries replaced or deleted, increments two processes raced on). So a store costs the same
# in a cache of ten entries or ten thousand, and the walks are amortised over many stores.
LEDGER = ".size"
_LEDGER = struct.Struct("<8sqq")        # magic, bytes, stores since the last walk
_LEDGER_MAGIC = b"BGSIZE01"
_REMEASURE = 1024


def _after_store(nbytes: int) -> None:
    root = cache_dir()
    if root is None:
        return
    counted = _ledger_add(root, nbytes)
    if counted is None or counted[0] > max_bytes() or counted[1] >= _REMEASURE:
        evict()


def _ledger_add(root: str, nbytes: int) -> Optional[tuple[int, int]]:
    """Add one store of `nbytes` to the ledger: (bytes, stores) counted now, or None when there is
    no ledger that can be trusted (the caller then walks the cache, which writes a new one)."""
    path = os.path.join(root, LEDGER)
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0))
    except OSError:
        return None
    try:
        if _untrusted(path, directory=False, st=os.fstat(fd)):
            return None
        data = os.read(fd, _LEDGER.size)
        if len(data) != _LEDGER.size:
            return None
        magic, size, stores = _LEDGER.unpack(data)
        if magic != _LEDGER_MAGIC or size < 0 or stores < 0:
            return None
        size, stores = size + nbytes, stores + 1
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, _LEDGER.pack(_LEDGER_MAGIC, size, stores))
        return size, stores
    except OSError:
        return None
    finally:
        os.close(fd)


def _write_atomic(path: str, data: bytes) -> bool:
    tmp = os.path.join(os.path.dirname(path),
                       f"{TMP_PREFIX}{os.getpid()}-{_thread.get_ident()}-{os.urandom(4).hex()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, path)
        return True
    except OSError as exc:
        _remove(tmp)
        root = cache_dir()
        _write_failed(root if root is not None else os.path.dirname(path), exc)
        return False


def _write_failed(root: str, exc: OSError) -> None:
    with _lock:
        _read_only.add(root)
    _count("store_failures")
    why = "it is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else (exc.strerror or str(exc))
    _warn("write", root, f"cannot write to the cache directory {root} ({why}); bytegrad keeps what it "
          "builds in memory for the rest of this process")


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _count(name: str) -> None:
    _stats[name] += 1  # a lost increment under a race only skews a statistic


def stats() -> dict[str, int]:
    """Counters of this process: hits, misses, rejected (damaged or stale), stores, failures, evicted."""
    return dict(_stats)


# ---- generated sources (Numba kernels) ----------------------------------------------------------


def source_dir(namespace: str) -> Optional[str]:
    """A folder of the cache for generated `.py` files, or None when the disk cache is unusable."""
    directory = _namespace_dir(namespace, create=True)
    if directory is None or os.path.dirname(directory) in _read_only:
        return None
    return directory


def write_source(namespace: str, name: str, text: str) -> Optional[str]:
    """Write a generated source file atomically and return its path (None: unusable cache).

    A file that already holds `text` is left untouched: Numba keys its cache on the source's mtime."""
    if os.sep in name or (os.altsep and os.altsep in name) or name.startswith("."):
        raise ValueError(f"a source file name must be a plain file name, got {name!r}")
    directory = source_dir(namespace)
    if directory is None:
        return None
    path = os.path.join(directory, name)
    data = text.encode()
    if _read_trusted(path) == data:
        return path
    return path if _write_atomic(path, data) else None


# ---- size cap, info, clear ----------------------------------------------------------------------------


def max_bytes() -> int:
    """The size cap: `bytegrad.config.cache_max_mb` (BYTEGRAD_CACHE_MAX_MB) megabytes (default DEFAULT_MAX_MB)."""
    return int(_config.cache_max_mb * (1 << 20))


def _walk(root: str) -> Iterator[tuple[str, os.stat_result]]:
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            try:
                yield path, os.lstat(path)
            except OSError:
                continue


def _groups(root: str) -> tuple[list[tuple[float, int, list[str]]], int]:
    """Evictable groups (last use, bytes, files) and the total size. A Numba index and its data
    files go together; generated sources are never evicted (Numba keys on their mtime)."""
    now = time.time()
    groups: dict[str, list[Any]] = {}
    total = 0
    for path, st in _walk(root):
        parent, name = os.path.split(path)
        if name.startswith(TMP_PREFIX):
            if now - st.st_mtime > _STALE_TMP_S:  # left by a writer that died before its rename
                _remove(path)
            continue
        total += st.st_size
        suffix = os.path.splitext(name)[1]
        if suffix == ENTRY_SUFFIX:
            gkey = path
        elif os.path.basename(parent) == "__pycache__" and suffix in (".nbi", ".nbc"):
            gkey = os.path.join(parent, name.split(".py", 1)[0])
        else:
            continue
        g = groups.setdefault(gkey, [0.0, 0, []])
        g[0] = max(g[0], st.st_mtime)
        g[1] += st.st_size
        g[2].append(path)
    return [tuple(g) for g in groups.values()], total


def evict(limit: Optional[int] = None) -> int:
    """Delete least recently used entries until the cache is under `limit` (default: the cap) by
    a margin. Returns how many entries (or kernel groups) were deleted."""
    root = cache_dir()
    if root is None:
        return 0
    cap = max_bytes() if limit is None else limit
    groups, total = _groups(root)
    removed = 0
    if total > cap:
        target = int(cap * _EVICT_TO)
        for _mtime, size, files in sorted(groups, key=lambda g: g[0]):
            if total <= target:
                break
            for path in files:
                _remove(path)
            total -= size
            removed += 1
        _stats["evicted"] += removed
    if root not in _read_only:
        _write_atomic(os.path.join(root, LEDGER), _LEDGER.pack(_LEDGER_MAGIC, total, 0))
    return removed


def info() -> dict[str, Any]:
    """Where the cache is and what it holds: per namespace, entries per function."""
    root = cache_dir()
    out: dict[str, Any] = {"dir": str(root) if root else None, "disabled": root is None,
                           "max_bytes": max_bytes(), "total_bytes": 0, "namespaces": {}}
    if root is None:
        return out
    for path, st in _walk(root):
        parent, name = os.path.split(path)
        if name.startswith(TMP_PREFIX) or name == LEDGER:
            continue
        out["total_bytes"] += st.st_size
        rel = os.path.relpath(path, root).split(os.sep)
        ns = out["namespaces"].setdefault(rel[0] if len(rel) > 1 else ".", {
            "entries": 0, "sources": 0, "kernel_files": 0, "bytes": 0, "functions": {}})
        ns["bytes"] += st.st_size
        suffix = os.path.splitext(name)[1]
        if suffix == ENTRY_SUFFIX:
            ns["entries"] += 1
            label = _label_of(path)
        elif suffix == ".py":
            ns["sources"] += 1
            continue
        elif os.path.basename(parent) == "__pycache__":
            ns["kernel_files"] += 1
            label = name.split(".py", 1)[0].rsplit("-", 1)[0]
        else:
            continue
        ns["functions"][label] = ns["functions"].get(label, 0) + 1
    return out


def _label_of(path: str) -> str:
    data = _read_trusted(path)
    parsed = read_header(data) if data else None
    if parsed is None:
        return "(damaged)"
    return str(parsed[0].get("label") or "(unnamed)")


def clear() -> int:
    """Delete everything bytegrad wrote in the cache directory; returns the number of files removed."""
    root = cache_dir()
    if root is None:
        return 0
    removed = 0
    for dirpath, dirs, files in os.walk(root, topdown=False):
        for name in files:
            try:
                os.unlink(os.path.join(dirpath, name))
                removed += name != LEDGER  # (bookkeeping, not something bytegrad cached)
            except OSError:
                pass
        for name in dirs:
            try:
                os.rmdir(os.path.join(dirpath, name))
            except OSError:
                pass
    return removed


def _reset_for_tests() -> None:
    """Forget resolved directories, warnings and counters (tests only)."""
    global _version
    with _lock:
        _resolved.clear()
        _warned.clear()
        _read_only.clear()
        _version = None
        for k in _stats:
            _stats[k] = 0
