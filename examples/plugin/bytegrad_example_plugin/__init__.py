"""Functions bytegrad cannot see into: C functions of the system math library, called through ctypes.

`erf(x)` and `hypot(x, y)` take and return Python floats. Their rules live in
`bytegrad_example_plugin.rules`, which bytegrad imports through the `bytegrad.rules` entry point the
first time it meets a function it has no rule for; importing this module does not import bytegrad.
"""
from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["erf", "hypot"]


def _libm() -> ctypes.CDLL:
    name = ctypes.util.find_library("m")
    return ctypes.CDLL(name) if name else ctypes.CDLL(None)  # the interpreter itself links libm


def _bind(name: str, nargs: int) -> object:
    """The C function `double name(double, ...)` of libm, as a hashable ctypes function object.

    (Plain ctypes function pointers are unhashable, and bytegrad attaches rules to objects by hash.)
    """
    proto = ctypes.CFUNCTYPE(ctypes.c_double, *[ctypes.c_double] * nargs)
    hashable = type(f"libm_{name}", (proto,), {
        "_flags_": proto._flags_, "_restype_": proto._restype_, "_argtypes_": proto._argtypes_,
        "__hash__": object.__hash__, "__module__": __name__, "__qualname__": name,
    })
    fn = hashable((name, _libm()))
    fn.__name__ = name
    return fn


erf = _bind("erf", 1)      # the error function
hypot = _bind("hypot", 2)  # sqrt(x**2 + y**2) without overflow
