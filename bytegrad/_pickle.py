"""How a differentiated function pickles: by reference when its function can be imported by name,
by value through cloudpickle (when installed) for lambdas and closures.

A `Differentiated` keeps caches (rewritten code, plans) that belong to one process; what crosses
to another process is only the function and `wrt`, and the receiver rebuilds the rest (its own
disk cache, `BYTEGRAD_CACHE_DIR`, makes that cheap). `bytegrad.grad(f)` and `value_and_grad(f)`
are bound methods of a `Differentiated`: Python pickles them as `getattr(d, "grad")`, so they go
the same way.
"""
from __future__ import annotations

import pickle
import sys
from typing import Any, Callable

__all__ = ["reduce_differentiated", "from_value"]


def _lookup(module: str, qualname: str) -> Any:
    """The object `module.qualname` names, or None."""
    obj: Any = sys.modules.get(module)
    if obj is None or "<locals>" in qualname:
        return None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def reduce_differentiated(d: Any, cls: type[Any]) -> Any:
    """`d.__reduce__()`: a global name, `(cls, (fn, wrt))`, or `(from_value, (cls, payload, wrt))`."""
    fn, wrt = d.fn, d._wrt_spec
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    # a script's functions (`__main__`) go by value when they can, as cloudpickle sends them: a
    # Dask worker's `__main__` is not the script (a spawn pool's is, and by reference works there)
    if module is not None and qualname is not None and not (module == "__main__" and _has_cloudpickle()):
        found = _lookup(module, qualname)
        if found is d:  # `@differentiate` on a module-level function: the module holds `d` itself
            return qualname
        if found is fn or (isinstance(found, cls) and found.fn is fn):
            return cls, (found, wrt)
    if not isinstance(fn, _FunctionType):  # a bound method or a callable object: pickle's own rules
        return cls, (fn, wrt)
    try:
        import cloudpickle
    except ImportError:
        raise pickle.PicklingError(
            f"cannot pickle the differentiated function {qualname or fn!r}: it is a lambda, a closure "
            "or a function that cannot be imported by name, and cloudpickle is not installed. Fix: "
            "`pip install cloudpickle` (or `bytegrad[dask]`), or define the function at module level."
        ) from None
    return from_value, (cls, cloudpickle.dumps(fn), wrt)


def _has_cloudpickle() -> bool:
    try:
        import cloudpickle  # noqa: F401
    except ImportError:
        return False
    return True


def from_value(cls: type, payload: bytes, wrt: Any) -> Any:
    """The receiving side of a function pickled by value (cloudpickle's output loads with pickle):
    `cls` is `bytegrad.Differentiated`, pickled by reference beside it."""
    fn: Callable[..., Any] = pickle.loads(payload)
    return cls(fn, wrt)


_FunctionType = type(_lookup)
