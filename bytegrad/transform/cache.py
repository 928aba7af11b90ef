"""The cache of rewritten code: per code object, keyed by what the rewrite depended on.

A key holds the activity of each parameter, the registry version, and (for top-level entries)
each argument's type: the rewrite depends on nothing else (dtypes and shapes do not change it). Past `CACHE_SIZE_LIMIT` entries for one code object the
oldest is dropped and a warning, once, names the argument that keeps changing.
"""
from __future__ import annotations

import threading
import types
import warnings
from collections import OrderedDict
from typing import Any, Callable, Optional

CACHE_SIZE_LIMIT = 8
COMPILE_LOCK = threading.RLock()


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
    with COMPILE_LOCK:
        _CACHES.clear()
