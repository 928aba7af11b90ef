"""Differentiating a function that has a rule but no Python code of its own (`bytegrad.grad(np.sum)`,
`bytegrad.vjp(np.add, x, y)`): a small Python caller stands in for it, so its rule runs as at any
call site in rewritten code."""
from __future__ import annotations

import types
from typing import Any, Callable

from bytegrad.errors import qualname
from bytegrad.rules import registry

__all__ = ["python_caller"]


def _differentiable(fn: Any) -> bool:
    """Whether calls of `fn` can be differentiated: it has a rule, or a NumPy function's Python code."""
    try:
        if registry.lookup(fn) is not None:
            return True
    except TypeError:  # unhashable
        return False
    if isinstance(getattr(fn, "_implementation", None), types.FunctionType):
        return True  # a NumPy function written in Python (np.diff): differentiated through its code
    if isinstance(fn, types.MethodType):  # a bound method of a compiled class (Cython)
        return _differentiable(fn.__func__)
    owner = getattr(fn, "__self__", None)
    if type(fn) is types.BuiltinMethodType and owner is not None and type(owner) is not types.ModuleType:
        desc = getattr(type(owner), fn.__name__, None)  # a bound method of an array (`x.sum`)
        return desc is not None and registry.lookup(desc) is not None
    return bool(registry.load_plugins()) and registry.lookup(fn) is not None


def python_caller(fn: Any) -> Callable[..., Any]:
    """A Python function calling `fn`; TypeError if `fn` has neither Python code nor a rule."""
    if not callable(fn) or not _differentiable(fn):
        raise TypeError(
            f"bytegrad can differentiate Python functions and functions with a differentiation rule; "
            f"{qualname(fn) if callable(fn) else repr(fn)} ({type(fn).__name__}) has neither. Fix: call it "
            f"from a Python function (`lambda x: f(x)`) after giving it a rule with @bytegrad.rrule, or "
            f"differentiate the Python function that calls it.")

    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    call.__name__ = getattr(fn, "__name__", type(fn).__name__)
    call.__qualname__ = getattr(fn, "__qualname__", call.__name__)
    return call
