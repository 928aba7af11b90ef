"""What bytegrad's disk entries may name besides plain data, and how a name is found again: one
policy for the pickled side tables and programs (runtime/safepickle.py) and for the side tables
written in marshal's terms (transform/cache.py `table_loads`, transform/sidetable.py). It imports
nothing, so that a warm first gradient reads its entry without loading pickle's machinery.
"""
from __future__ import annotations

import sys
from typing import Any

__all__ = ["STDLIB_FUNCTION_MODULES", "lookup_ref", "resolve_ref", "numpy_ok"]

#: modules whose public functions an entry may name (pure functions: rules are attached to them)
STDLIB_FUNCTION_MODULES = ("operator", "_operator", "math")


def lookup_ref(ref: tuple) -> Any:
    """The object a reference (module, attribute, key or None) to bytegrad's module-level objects
    names in this process, or None."""
    modname, name, key = ref
    value = getattr(sys.modules.get(modname), name, None)
    if key is not None:
        try:
            value = value[key]  # type: ignore[index]
        except (KeyError, IndexError, TypeError):
            return None
    return value


def resolve_ref(pid: Any) -> Any:
    """`lookup_ref` of a reference read from disk, importing its bytegrad module if need be; ValueError
    for a reference outside bytegrad, or one this process lacks."""
    if not (isinstance(pid, tuple) and len(pid) == 3 and isinstance(pid[0], str) and isinstance(pid[1], str)
            and (pid[0] == "bytegrad" or pid[0].startswith("bytegrad.")) and type(pid[2]) in (int, str, type(None))):
        raise ValueError(f"bytegrad's cache does not load the reference {pid!r}")
    if pid[0] not in sys.modules:
        import importlib

        importlib.import_module(pid[0])
    value = lookup_ref(pid)
    if value is None:
        raise ValueError(f"bytegrad's cache refers to {pid!r}, which this process lacks")
    return value


def numpy_ok(obj: Any, name: str) -> bool:
    """Whether an entry may name `obj`, found as `name` in a NumPy module: ufuncs, dtypes, scalar and
    array types, NumPy's reconstructors, and the functions that have a rule (rewritten code calls those)."""
    import numpy as np

    if isinstance(obj, (np.ufunc, np.dtype)) or (isinstance(obj, type) and issubclass(obj, (np.generic, np.ndarray, np.dtype))):
        return True
    if name in ("_reconstruct", "scalar", "_frombuffer", "_ufunc_reconstruct"):
        return True
    from bytegrad.rules import registry

    return registry.lookup(obj) is not None
