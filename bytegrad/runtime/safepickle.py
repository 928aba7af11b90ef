"""Restricted pickling for the disk cache (diskcache.py): what a cache entry's side table
may hold, and how bytegrad's own module-level objects travel in it.

`safe_dumps` writes bytegrad's module-level objects (hook functions made by factories, singletons,
the callables of its public module-level tables) as references by (module, attribute[, key]), so
they need not be picklable and keep their identity; `safe_loads` finds only bytegrad's own names,
NumPy's ufuncs, types and reconstructors, `operator` and `math` functions, and plain builtins, and
refuses every other global: loading an entry must not run code from elsewhere.
"""
from __future__ import annotations

import io
import pickle
import _thread
import sys
from typing import Any

from bytegrad.runtime import refs
from bytegrad.runtime.refs import lookup_ref as lookup_ref

__all__ = ["safe_dumps", "safe_loads", "SafeUnpickler", "ref_index", "lookup_ref", "resolve_ref"]

_lock = _thread.allocate_lock()  # threading.Lock, without importing threading


_SAFE_BUILTINS = frozenset({
    "bool", "bytearray", "bytes", "complex", "dict", "float", "frozenset", "int", "list", "object",
    "range", "set", "slice", "str", "tuple", "type", "Ellipsis", "NotImplemented",
    "abs", "divmod", "len", "max", "min", "pow", "round", "sum", "all", "any", "sorted", "reversed",
    "enumerate", "zip", "map", "filter", "iter", "next", "isinstance", "hash", "repr", "format",
})


_SAFE_STDLIB = {"functools": frozenset({"partial"}), "collections": frozenset({"OrderedDict"})}


class SafeUnpickler(pickle.Unpickler):
    """Finds only bytegrad's own names, NumPy ufuncs, types and reconstructors, `operator` and `math`
    functions, and plain builtins."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in _SAFE_BUILTINS:
            return super().find_class(module, name)
        if module == "bytegrad" or module.startswith("bytegrad."):
            return super().find_class(module, name)
        if module == "numpy" or module.startswith("numpy."):
            obj = super().find_class(module, name)
            if refs.numpy_ok(obj, name):
                return obj
        if module in _SAFE_STDLIB and name in _SAFE_STDLIB[module]:
            return super().find_class(module, name)
        if module in refs.STDLIB_FUNCTION_MODULES and not name.startswith("_"):
            return super().find_class(module, name)  # pure functions: rules are attached to them
        if module == "copyreg" and name in ("_reconstructor", "__newobj__", "__newobj_ex__"):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"bytegrad's cache does not load {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        return resolve_ref(pid)


def safe_loads(data: bytes) -> Any:
    """pickle.loads that refuses every global outside bytegrad, NumPy's ufuncs/types and plain builtins."""
    return SafeUnpickler(io.BytesIO(data)).load()


class _RefPickler(pickle.Pickler):
    """Pickles objects that live at module level in bytegrad (hook functions made by factories,
    singletons) as references by path, so they need not be picklable and keep their identity."""

    def __init__(self, file: Any, index: dict[int, tuple]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._index = index

    def persistent_id(self, obj: Any) -> Any:
        ref = self._index.get(id(obj))
        if ref is not None and lookup_ref(ref) is obj:
            return ref
        return None


def safe_dumps(obj: Any) -> bytes:
    """pickle.dumps for what `safe_loads` reads back: bytegrad's module-level objects become
    references by (module, attribute[, key]). Raises pickle.PicklingError (or TypeError,
    AttributeError) for an object that cannot be written."""
    buf = io.BytesIO()
    _RefPickler(buf, ref_index()).dump(obj)
    return buf.getvalue()


_REF_INDEX: dict[int, tuple] = {}
_REF_INDEXED: set[str] = set()


#: the types `ref_index` leaves out (values pickled as themselves, or by name)
_UNREFABLE = frozenset({type(None), bool, int, float, complex, str, bytes, tuple, frozenset, type, type(sys)})


def _refable(value: Any) -> bool:
    return not isinstance(value, (type(None), bool, int, float, complex, str, bytes, tuple, frozenset,
                                  type, type(sys)))


def ref_index() -> dict[int, tuple]:
    """id -> (module, attribute, key or None) for bytegrad's module-level objects, and the
    callables held in its public module-level dicts, lists and tuples (e.g. abi.BINARY_HOOKS).

    Built once per process and extended by the modules imported since; a module's attributes go in
    with one dict comprehension (the first store of a process walked ~3,000 objects one by one, 2 ms
    of an empty cache's first gradient). Where two modules hold an object the first in sorted order
    names it."""
    with _lock:
        new = sorted((m for m in list(sys.modules) if (m == "bytegrad" or m.startswith("bytegrad."))
                      and m not in _REF_INDEXED), reverse=True)
        found: dict[int, tuple] = {}
        for modname in new:  # (last to first: an earlier module's name overwrites a later one's)
            _REF_INDEXED.add(modname)
            attrs = list(vars(sys.modules[modname]).items())
            tables = [(n, v) for n, v in attrs if isinstance(v, (dict, list, tuple)) and n[:1] != "_"]
            for name, value in tables:  # (a module's own attribute names an object before its tables do)
                items = value.items() if isinstance(value, dict) else enumerate(value)
                found.update({id(x): (modname, name, k) for k, x in list(items)
                              if type(k) in (int, str) and callable(x) and _refable(x)})
            found.update({id(v): (modname, k, None) for k, v in attrs if type(v) not in _UNREFABLE})
        found.update(_REF_INDEX)  # (what an earlier call indexed keeps its name)
        _REF_INDEX.update(found)
        return _REF_INDEX


def resolve_ref(pid: Any) -> Any:
    """refs.resolve_ref, failing as an unpickler does."""
    try:
        return refs.resolve_ref(pid)
    except ValueError as exc:
        raise pickle.UnpicklingError(str(exc)) from None
