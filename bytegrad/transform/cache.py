"""The cache of rewritten code: per code object, keyed by what the rewrite depended on.

A key holds the activity of each parameter, the registry version, and (for top-level entries)
each argument's type: the rewrite depends on nothing else (dtypes and shapes do not change it). Past `CACHE_SIZE_LIMIT` entries for one code object the
oldest is dropped and a warning, once, names the argument that keeps changing.
"""
from __future__ import annotations

import _thread
import sys
import types
import warnings
from collections import OrderedDict
from typing import Any, Callable, Optional

from bytegrad._config import config as _config, edited_stamp

CACHE_SIZE_LIMIT = 8
COMPILE_LOCK = _thread.RLock()  # threading.RLock, without importing threading (2-3 ms)


class RecompileWarning(UserWarning):
    """A function keeps being rewritten for new argument signatures."""


class CodeCache:
    """Rewritten code objects of one original code object."""

    __slots__ = ("code", "entries", "warned", "hits", "misses")

    def __init__(self, code: types.CodeType) -> None:
        self.code = code  # kept alive so id(code) stays unique
        self.entries: OrderedDict[Any, Any] = OrderedDict()
        self.warned = False
        self.hits = 0
        self.misses = 0


_CACHES: dict[int, CodeCache] = {}


def lookup(code: types.CodeType, key: Any, build: Callable[[], Any],
           arg_names: Optional[tuple[str, ...]] = None) -> Any:
    """The cached value for (code, key), building it under the compile lock on a miss."""
    cc = _CACHES.get(id(code))
    if cc is not None and cc.code is code:
        value = cc.entries.get(key)
        if value is not None:
            cc.hits += 1
            return value
    with COMPILE_LOCK:
        cc = _CACHES.get(id(code))
        if cc is None or cc.code is not code:
            cc = _CACHES[id(code)] = CodeCache(code)
        value = cc.entries.get(key)
        if value is not None:
            cc.hits += 1
            return value
        value = build()
        cc.misses += 1
        cc.entries[key] = value
        if len(cc.entries) > CACHE_SIZE_LIMIT:
            _too_many(cc, arg_names)
            cc.entries.popitem(last=False)
        return value


def _too_many(cc: CodeCache, arg_names: Optional[tuple[str, ...]]) -> None:
    if cc.warned:
        return
    cc.warned = True
    keys = list(cc.entries)
    changing = "an argument"
    specs = [k[2] for k in keys if isinstance(k, tuple) and len(k) > 2 and isinstance(k[2], tuple)]
    if specs and all(len(s) == len(specs[0]) for s in specs):
        for pos in range(len(specs[0])):
            if len({s[pos] for s in specs}) > 1:
                name = arg_names[pos] if arg_names and pos < len(arg_names) else f"#{pos}"
                changing = f"argument {name!r}"
                break
    warnings.warn(
        f"{cc.code.co_name} ({cc.code.co_filename}:{cc.code.co_firstlineno}) was rewritten for more than "
        f"{CACHE_SIZE_LIMIT} argument signatures; {changing} keeps changing its type. "
        "Older rewritten code is dropped and rebuilt on demand (gradients stay correct, but each new "
        "signature pays the rewrite again).", RecompileWarning, stacklevel=4)


def stats(code: types.CodeType) -> dict[str, int]:
    cc = _CACHES.get(id(code))
    if cc is None or cc.code is not code:
        return {"entries": 0, "hits": 0, "misses": 0}
    return {"entries": len(cc.entries), "hits": cc.hits, "misses": cc.misses}


def clear() -> None:
    """Forget the rewrites held in memory (those not yet on disk are written first)."""
    flush_stores()
    with COMPILE_LOCK:
        _CACHES.clear()


# ---- rewritten code on disk ------------------------------------------------------------------------
#
# A fresh process that needs a rewrite an earlier process already made loads it from the disk
# cache (bytegrad.diskcache, namespace "code") instead of running the rewriter. The entry key is
# the sha256 of the original code (marshal), the CPython cache tag, the bytegrad version and the
# rewrite's inputs (active and immutable parameters). The registry version is process-local, so
# instead every entry records what the rewrite assumed (each global and module attribute the
# analysis resolved, and the rule each resolved object had) and a load checks that it still holds.
#
# Rewritten code holds constants marshal cannot write (hook functions, Site objects, fused sites):
# they are replaced by placeholder strings, recursively in nested code objects, and kept in a side
# table: in marshal's terms where it holds only those (transform/sidetable.py, read by `table_loads`
# without pickle), else pickled and loaded through diskcache.safe_loads (bytegrad, NumPy and plain
# builtins only).

DISK_NAMESPACE = "code"
#: bytegrad's sources that shape a stored rewrite (relative to the package; "dir/": its .py files): the
#: rewriter, the runtime modules whose hooks and objects rewritten code holds or whose tables the rewrite
#: reads, the registry's rule types, the operators' rules (their kernels decide fusion; every other rule
#: the rewrite read is recorded in the entry's assumptions: kind, definition site, kernel arity), and the
#: cache's own formats. An entry is keyed by their sizes and mtimes (`rewrite_version`), not by every file
#: of bytegrad; tests/test_rewrite_stamp.py checks that every bytegrad module transform/ imports is here.
REWRITE_SOURCES = (
    "__init__.py", "_bytecode.py", "_config.py", "_operators.py", "errors.py", "transform/", "transform/opcodes/", "transform/code/",
    "runtime/abi.py", "diskcache.py", "runtime/dispatch.py", "runtime/fused.py", "runtime/guards.py",
    "runtime/keys.py", "runtime/monitor.py", "runtime/records.py", "runtime/refs.py", "runtime/safepickle.py",
    "rules/registry.py", "rules/_types.py", "rules/builtins.py",
)
#: the switches (bytegrad.config) that change what the rewrite emits: part of the disk key
DISK_KEY_SWITCHES = ("disable_numba", "disable_fusion", "check")
_ENTRY_FORMAT = 3  # 2: keyed by REWRITE_SOURCES; a rule's kernel arity recorded. 3: the side table in marshal's terms
_PLACEHOLDER = "\x00bytegrad-const:"
_SIMPLE = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis))

_disk = {"rewrites": 0, "disk_hits": 0, "disk_misses": 0, "disk_stale": 0, "disk_stores": 0,
         "disk_unstorable": 0, "rewrite_ns": 0, "load_ns": 0}


def disk_stats() -> dict[str, int]:
    """Counters of this process: rewrites run, rewrites loaded from disk (disk_hits), entries whose
    assumptions no longer held (disk_stale), stores (pending ones written first), and the time spent
    rewriting and loading."""
    flush_stores()
    return dict(_disk)


def _describe(value: Any) -> tuple:
    """What the rewrite may have relied on about a value: its type, and for modules, classes and
    functions which one it is (module + qualified name)."""
    if isinstance(value, types.ModuleType):
        return ("module", value.__name__)
    t = type(value)
    tname = f"{t.__module__}.{t.__qualname__}"
    if callable(value) and hasattr(value, "__name__"):
        return ("object", tname, str(getattr(value, "__module__", None) or ""),
                str(getattr(value, "__qualname__", None) or value.__name__))
    return ("value", tname)


def _rule_of(value: Any, stamped: bool = False) -> Optional[tuple]:
    """What the rewrite read of `value`'s rule: its kind, where it is defined, and the arity of its kernel
    formula (fusion), or -1 for a formula made per constant (`x ** c`). `stamped` (the key's operators):
    a rule rules/builtins.py registers is recorded as defined there, without its line (that file is in
    REWRITE_SOURCES: its stamp, in the key, fixes its registrations; finding a line scans the module's
    line table, SourceLoc.lineno: 0.13 ms of a first gradient for the key's five operators)."""
    from bytegrad.rules import registry

    rule = registry.lookup(value)
    if rule is None:
        return None
    at = rule.defined_at
    k = rule.kernel
    where = None if at is None else ("rules/builtins.py", "stamped") if stamped and at.filename == _builtins_file() \
        else (at.filename, at.lineno)
    return (rule.kind.value, where, None if k is None else len(k.partials) if isinstance(k, tuple) else -1)


class Assumptions:
    """The globals and module attributes one rewrite resolved (filled in by `activity.analyze`)."""

    __slots__ = ("globals", "attrs")

    def __init__(self) -> None:
        self.globals: dict[str, tuple[bool, Any]] = {}
        self.attrs: dict[tuple[str, str], Any] = {}

    def note_global(self, name: str, value: Any, in_module: bool) -> None:
        self.globals[name] = (in_module, value)

    def note_attr(self, module: types.ModuleType, name: str, value: Any) -> None:
        self.attrs[(module.__name__, name)] = value

    def freeze(self) -> tuple:
        """A marshal-able record: (name, in module, description, rule) per global, and
        (module, attribute, description, rule) per module attribute."""
        g = tuple(sorted((name, in_module, _describe(v), _rule_of(v))
                         for name, (in_module, v) in self.globals.items()))
        a = tuple(sorted((mod, name, _describe(v), _rule_of(v)) for (mod, name), v in self.attrs.items()))
        return (g, a)


def _assumptions_hold(frozen: Any, fn_globals: dict[str, Any]) -> bool:
    import builtins
    import sys

    bltns = fn_globals.get("__builtins__", builtins)
    if isinstance(bltns, types.ModuleType):
        bltns = bltns.__dict__
    g, a = frozen
    for name, in_module, desc, rule in g:
        value = fn_globals.get(name, bltns.get(name))
        if (name in fn_globals) != in_module or _describe(value) != desc or _rule_of(value) != rule:
            return False
    for modname, name, desc, rule in a:
        module = sys.modules.get(modname)
        if module is None:
            return False
        value = getattr(module, name, None)
        if _describe(value) != desc or _rule_of(value) != rule:
            return False
    return True


def _disk_key(code: types.CodeType, active: frozenset[str], immutable: frozenset[str],
              made: bool = False) -> Optional[str]:
    import marshal
    import sys

    from bytegrad import diskcache

    try:
        raw = marshal.dumps(code, 2)  # version 2 writes no refcount-dependent back-references: stable
    except ValueError:
        return None
    h = diskcache.sha256(raw)
    options = tuple(getattr(_config, name) for name in DISK_KEY_SWITCHES) + (("made",) if made else ())
    import operator

    # the rules of the operators fusion may fuse (transform/fusion.py's _FUSED_BINARY): no global records them
    ops = (operator.add, operator.mul, operator.pow, operator.sub, operator.truediv)
    fused_ops = tuple(_rule_of(op, stamped=True) for op in ops)
    h.update(repr((sys.implementation.cache_tag, rewrite_version(), _ENTRY_FORMAT,
                   sorted(active), sorted(immutable), options, fused_ops)).encode())
    return h.hexdigest()


def _builtins_file() -> Optional[str]:
    module = sys.modules.get("bytegrad.rules.builtins")
    return getattr(module, "__file__", None) if "rules/builtins.py" in REWRITE_SOURCES else None


_rewrite_version: list[str] = []


def rewrite_version() -> str:
    """The bytegrad a stored rewrite must come from: the release and a fingerprint (size, mtime) of the
    files of `REWRITE_SOURCES`, where `diskcache.bytegrad_version` stats every file of bytegrad (~170,
    0.3-0.8 ms of a first gradient). An edit of one of them (in place or by rename) in an editable
    checkout makes every stored rewrite stale. Computed once per process, on first use: one edited since this
    process imported bytegrad makes its stamp its own (`_config.edited_stamp`)."""
    if _rewrite_version:
        return _rewrite_version[0]
    import os

    from bytegrad import diskcache

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    lines = []
    for rel in REWRITE_SOURCES:
        names = [rel]
        if rel.endswith("/"):
            try:
                names = sorted(rel + n for n in os.listdir(os.path.join(root, rel)) if n.endswith(".py"))
            except OSError:
                names = [rel + "-"]
        for name in names:
            try:
                st = os.stat(os.path.join(root, name))
                lines.append(f"{name}:{st.st_size}:{st.st_mtime_ns};")
            except OSError:
                lines.append(f"{name}:-;")
    release = getattr(sys.modules.get("bytegrad"), "__version__", "0")
    stamp = f"{release}+{diskcache.sha256(''.join(lines).encode()).hexdigest()[:16]}{edited_stamp(lines)}"
    _rewrite_version.append(stamp)
    return _rewrite_version[0]


def _strip(code: types.CodeType, nonce: str, table: list[Any]) -> types.CodeType:
    """`code` with every constant marshal cannot write replaced by a placeholder (recursively)."""
    consts = []
    changed = False
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            new: Any = _strip(c, nonce, table)
        elif _marshalable(c):
            new = c
        else:
            new = f"{_PLACEHOLDER}{nonce}:{len(table)}"
            table.append(c)
        changed = changed or new is not c
        consts.append(new)
    return code.replace(co_consts=tuple(consts)) if changed else code


def _marshalable(c: Any) -> bool:
    t = type(c)
    if t in _SIMPLE:
        return not (t is str and c.startswith(_PLACEHOLDER))
    if t is tuple or t is frozenset:
        return all(_marshalable(x) for x in c)
    return False


def _restore(code: types.CodeType, nonce: str, table: list[Any]) -> types.CodeType:
    prefix = f"{_PLACEHOLDER}{nonce}:"
    consts = []
    changed = False
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            new = _restore(c, nonce, table)
        elif type(c) is str and c.startswith(prefix):
            new = table[int(c[len(prefix):])]
        else:
            new = c
        changed = changed or new is not c
        consts.append(new)
    return code.replace(co_consts=tuple(consts)) if changed else code


def _label(code: types.CodeType) -> str:
    import os

    name = getattr(code, "co_qualname", code.co_name)
    return f"{name} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"


def _encode(new_code: types.CodeType, frozen: tuple) -> Optional[bytes]:
    import marshal
    import os
    import pickle

    from bytegrad import diskcache
    from bytegrad.transform import sidetable

    nonce = os.urandom(8).hex()
    table: list[Any] = []
    try:
        stripped = _strip(new_code, nonce, table)
        side: Any = sidetable.dumps(table, TABLE_FORMAT, table_global, table_ufunc)  # (None: pickled instead)
        if side is None:
            side = diskcache.safe_dumps(table)
        return marshal.dumps((_ENTRY_FORMAT, nonce, stripped, frozen, side))
    except (pickle.PicklingError, TypeError, AttributeError, ValueError, RecursionError) as exc:
        # a constant that cannot be serialized only means "not stored": this process keeps working
        import logging
        logging.getLogger("bytegrad.cache").debug("not storing the rewrite of %s: %s", new_code.co_name, exc)
        return None


def _decode(payload: bytes, fn_globals: dict[str, Any]) -> Optional[types.CodeType]:
    """The stored rewrite, or None when it is malformed or its assumptions no longer hold."""
    import marshal
    import pickle

    from bytegrad import diskcache

    try:
        fmt, nonce, stripped, frozen, side = marshal.loads(payload)
    except (ValueError, EOFError, TypeError):
        return None
    if fmt != _ENTRY_FORMAT or not isinstance(stripped, types.CodeType) or type(side) not in (bytes, tuple):
        return None
    try:
        if not _assumptions_hold(frozen, fn_globals):
            _disk["disk_stale"] += 1
            return None
        table = table_loads(side) if type(side) is tuple else diskcache.safe_loads(side)
        return _restore(stripped, nonce, table)
    except (pickle.UnpicklingError, AttributeError, ImportError, EOFError, ValueError, TypeError,
            IndexError, KeyError):
        return None  # an entry that does not fit this process: a fresh rewrite is always safe


# ---- the side table without pickle (transform/sidetable.py writes it) ---------------------------------

TABLE_FORMAT = "t1"
_TABLE_PLAIN = (type(None), bool, int, float, complex, str, bytes)


def table_global(module: str, name: str) -> Any:
    """The function `module.name` where the format allows it (else None): `operator` and `math`
    functions, NumPy ufuncs and NumPy functions that have a rule; modules are not imported."""
    from bytegrad.runtime import refs

    if not name.isidentifier() or name.startswith("_"):
        return None
    if module in refs.STDLIB_FUNCTION_MODULES:
        return getattr(sys.modules.get(module), name, None)
    if module == "numpy" or module.startswith("numpy."):
        import numpy as np

        from bytegrad.rules import registry

        obj = getattr(sys.modules.get(module), name, None)
        if obj is not None and (type(obj) is np.ufunc or (callable(obj) and registry.lookup(obj) is not None)):
            return obj
    return None


def table_loads(data: Any) -> list[Any]:
    """The side table transform/sidetable.py's `dumps` wrote; ValueError (or TypeError, IndexError) for
    anything else (a damaged or foreign entry). runtime/fused.py is imported only for a fused site."""
    if type(data) is not tuple or len(data) != 3 or data[0] != TABLE_FORMAT:
        raise ValueError("not a side table")
    from bytegrad.runtime import refs
    from bytegrad.runtime.records import Site

    objects: list[Any] = []

    def value(e: tuple) -> Any:
        tag = e[0]
        if tag == "v":
            if type(e[1]) not in _TABLE_PLAIN:
                raise ValueError("not a plain value")
            return e[1]
        if tag == "o":
            return objects[e[1]]
        if tag == "r":
            return refs.resolve_ref((e[1], e[2], e[3]))
        if tag == "u" or tag == "g":
            found = table_ufunc(e[1]) if tag == "u" else table_global(e[1], e[2])
            if found is None:
                raise ValueError(f"the table refers to {e[1:]!r}, which this format does not load")
            return found
        raise ValueError(f"unknown tag {tag!r}")

    for rec in data[1]:
        kind = rec[0]
        if kind == "site":
            obj: Any = Site(rec[1], rec[2], rec[3], rec[4], value(rec[5]))
        elif kind == "node":
            from bytegrad.runtime.fused import Node
            obj = Node(rec[1], value(rec[2]), value(rec[3]), tuple((tag, value(v)) for tag, v in rec[4]),
                       value(rec[5]))
        elif kind == "fused":
            from bytegrad.runtime.fused import FusedSite
            obj = FusedSite(value(rec[1]), rec[2], tuple(value(n) for n in rec[3]), rec[4])
        else:
            raise ValueError(f"unknown object kind {kind!r}")
        objects.append(obj)
    return [value(e) for e in data[2]]


def table_ufunc(name: str) -> Any:
    import numpy as np

    obj = getattr(np, name, None) if type(name) is str and name.isidentifier() else None
    return obj if type(obj) is np.ufunc else None


def rewrite_cached(code: types.CodeType, active: frozenset[str], immutable: frozenset[str],
                   fn_globals: dict[str, Any], rewrite: Callable[[Assumptions], types.CodeType],
                   made: bool = False) -> types.CodeType:
    """The rewrite of `code`, from the disk cache when an earlier process stored one whose
    assumptions still hold; else `rewrite(assumptions)` is run and its result stored. `made`: a
    capture's rewrite (`transform.rewrite_code`), stored under a key of its own.

    The cyclic collector is paused meanwhile: a rewrite (and the imports of its first run) makes tens
    of thousands of objects, nearly all freed by reference counting, and the young-generation
    collections they would trigger (a first gradient's ~8, one of them of the middle generation, which
    holds every object `import bytegrad` made: 1.5 ms) would find nothing to free."""
    import gc

    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return _rewrite_cached(code, active, immutable, fn_globals, rewrite, made)
    finally:
        if paused:
            gc.enable()


def _rewrite_cached(code: types.CodeType, active: frozenset[str], immutable: frozenset[str],
                    fn_globals: dict[str, Any], rewrite: Callable[[Assumptions], types.CodeType],
                    made: bool) -> types.CodeType:
    import time

    from bytegrad import diskcache

    key = _disk_key(code, active, immutable, made) if diskcache.cache_dir() is not None else None
    if key is not None:
        t0 = time.perf_counter_ns()
        payload = diskcache.load(DISK_NAMESPACE, key, version=rewrite_version())
        loaded = _decode(payload, fn_globals) if payload is not None else None
        if loaded is not None:
            _disk["disk_hits"] += 1
            _disk["load_ns"] += time.perf_counter_ns() - t0
            return loaded
        _disk["disk_misses"] += 1
    assumed = Assumptions()
    t0 = time.perf_counter_ns()
    new_code = rewrite(assumed)
    _disk["rewrite_ns"] += time.perf_counter_ns() - t0
    _disk["rewrites"] += 1
    if key is not None:
        _defer_store(key, code, new_code, assumed.freeze(), diskcache.cache_dir())
    return new_code


# ---- the store, after the gradient -----------------------------------------------------------------
#
# Encoding a rewrite (its side table's pickling indexes bytegrad's module-level objects) and writing
# it cost an empty cache's first gradient ~4 ms that only a later process gains from: the entry is
# written on the next gradient of a differentiated function (`_differentiated`), at `disk_stats`,
# `clear`, or at exit.
# What the rewrite assumed is frozen when it runs (a rule registered in between must not be recorded
# as one the rewrite saw); the rest (the code object, Sites and fused sites, which pickle from their
# definition alone) does not change after the rewrite. An entry is written only into the directory
# it was made for.

PENDING: list[tuple[str, types.CodeType, types.CodeType, tuple, Optional[str]]] = []
#: past this many pending entries the rewrite that adds one writes them all (a program that
#: differentiates thousands of functions once each does not hold them all until exit)
PENDING_LIMIT = 64
_exit_hook = [False]


def _defer_store(key: str, code: types.CodeType, new_code: types.CodeType, frozen: tuple,
                 directory: Optional[str]) -> None:
    PENDING.append((key, code, new_code, frozen, directory))
    if len(PENDING) > PENDING_LIMIT or worker_process():
        flush_stores()
    if not _exit_hook[0]:
        import atexit

        _exit_hook[0] = True
        atexit.register(flush_stores)


def worker_process() -> bool:
    """Whether this is a process multiprocessing started (a Pool's worker, a Dask worker): its pool may
    end it without running `atexit` (`Pool.terminate`, which `with Pool(...)` calls), and its rewrites
    are what the disk cache shares with the other workers, so it writes them at once."""
    mp = sys.modules.get("multiprocessing")
    return mp is not None and mp.parent_process() is not None


def flush_stores() -> None:
    """Write the rewrites made since the last flush into the disk cache (see above)."""
    from bytegrad import diskcache

    while PENDING:
        try:
            key, code, new_code, frozen, directory = PENDING.pop(0)
        except IndexError:  # another thread took the last one
            return
        if diskcache.cache_dir() != directory:
            continue  # the cache moved or was switched off since: not this entry's directory
        payload = _encode(new_code, frozen)
        if payload is None:
            _disk["disk_unstorable"] += 1
        elif diskcache.store(DISK_NAMESPACE, key, payload, label=_label(code), version=rewrite_version()):
            _disk["disk_stores"] += 1


def param_names(code: types.CodeType) -> tuple[str, ...]:
    """The names of `code`'s parameters, positional, keyword-only, *args and **kwargs, in order."""
    n = code.co_argcount + code.co_kwonlyargcount
    n += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
    return code.co_varnames[:n]
