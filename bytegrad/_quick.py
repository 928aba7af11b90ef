"""A first gradient from a stored standalone program, without loading the general path.

When the compiled tier stores a NumPy program (bytegrad/compiled/policy.py, on a capture under
`auto` and by `bytegrad.precompile`), it also stores the program's standalone form
(bytegrad/compiled/quick.py): the module `bytegrad.export` writes, which imports NumPy and `math`
only, beside the checks that export leaves out because they read the process (the globals,
module attributes and functions the program assumes), as code and references. A fresh process's
first gradient of a `differentiate`, `grad` or `value_and_grad` function (bytegrad/_front.py) asks here: it
costs a key, one read and a marshal load, where the general path would import bytegrad's rules,
runtime and transform (about 11 ms) and load the rewrite.

The program serves the call only where the general path would give the same result:

- the process has not loaded bytegrad's rules (`bytegrad.rules`): nothing can have been registered
  (a rule, an opt-out, a pytree class) that the program, stored by a process that had registered
  nothing of its own (quick.py checks), would ignore; once they are loaded, the compiled tier's own
  record serves the calls;
- every reference resolves in this process, without importing anything, to an object of the same
  module and name (a function monkeypatched in its place is another object), and every check holds;
- the settings are the defaults that a stored program assumes (`tier` auto, no `debug_nans`, no
  `dump`, the disk cache on);
- the call raises nothing and meets no floating-point error that NumPy's settings report (`np.seterr`:
  not underflow, by default): an error or a warning is the general path's to report, at the user's
  line, so such a call runs there (a program has no effects that running again would double:
  bytegrad/compiled/effects.py).

Anything else returns None and the caller runs the general path, having spent a key and a missed read.
"""
from __future__ import annotations

import builtins
import marshal
import math
import os
import sys
import types
from typing import Any, Optional

from bytegrad._config import config as _config

__all__ = ["NAMESPACE", "FORMAT", "enabled", "find", "first_call", "key", "path_of", "run_stored", "worth_waiting"]

NAMESPACE = "quick"
#: the payload: marshal of (FORMAT, module code, checks code, references)
FORMAT = 1

_MISSING = object()


def enabled() -> bool:
    """Whether the settings let a stored program serve a first call."""
    c = _config
    return c.tier == "auto" and not c.debug_nans and not c.disable_disk_cache and not c.dump


def worth_waiting() -> bool:
    """Whether `import bytegrad` leaves the general path for a first call to need: only where the settings
    let a stored program serve one and the disk cache holds some (else every first gradient needs it)."""
    if not enabled():
        return False
    from bytegrad import diskcache

    root = diskcache.cache_dir()  # (its folder's trust is checked when an entry is read)
    return root is not None and os.path.isdir(os.path.join(root, NAMESPACE))


def key(code: Any, wrt: Any, signature: tuple) -> Optional[str]:
    """The disk key of the standalone program of `code`, differentiated in `wrt` (positions), for
    arguments of these types; None for code marshal cannot write. bytegrad's version is not part of it:
    the entry's header holds it, checked when an entry is found (bytegrad/diskcache.py `load`), so a first
    call that finds none does not fingerprint bytegrad's sources (about a millisecond)."""
    from bytegrad import diskcache

    try:
        raw = marshal.dumps(code, 2)
    except ValueError:
        return None
    h = diskcache.sha256(raw)
    h.update(repr((sys.implementation.cache_tag, FORMAT, repr(wrt),
                   tuple(f"{t.__module__}.{t.__qualname__}" for t in signature))).encode())
    return h.hexdigest()


def path_of(obj: Any) -> Optional[tuple[str, str]]:
    """(module, qualname) naming `obj` by its own attributes, where that path finds `obj` itself in
    a module already imported; None otherwise (a ufunc's module is numpy)."""
    qual = getattr(obj, "__qualname__", None)
    module = getattr(obj, "__module__", None) or getattr(getattr(obj, "__objclass__", None), "__module__", None)
    if not isinstance(qual, str) or not isinstance(module, str) or "<" in qual:
        return None
    if type(obj).__name__ == "ufunc" and type(obj).__module__ == "numpy":
        module = "numpy"
    return (module, qual) if find(module, qual) is obj else None


def find(module: str, qual: str) -> Any:
    """The object `module.qual` names in a module already imported, or None."""
    value: Any = sys.modules.get(module)
    for part in qual.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value


def _resolve(ref: tuple, fn: Any) -> Any:
    """The object a reference names in this process (nothing is imported), or _MISSING."""
    tag = ref[0]
    if tag == "value":
        return ref[1]
    if tag == "globals":
        return fn.__globals__
    if tag == "module" or tag == "dict":
        module = sys.modules.get(ref[1])
        if module is None:
            return _MISSING
        return module if tag == "module" else vars(module)
    if tag == "path":
        obj = find(ref[1], ref[2])
        return obj if obj is not None and path_of(obj) == (ref[1], ref[2]) else _MISSING
    return _MISSING


def first_call(fn: Any, wrt: Any, args: tuple) -> Optional[tuple[Any, Any]]:
    """`(value, gradient)` of `fn` at `args` from its stored standalone program, or None: the caller
    runs the general path (see the module's docstring)."""
    if "bytegrad.rules" in sys.modules or not enabled() or len(args) != fn.__code__.co_argcount:
        return None
    k = key(fn.__code__, wrt, tuple(map(type, args)))
    if k is None:
        return None
    from bytegrad import diskcache

    payload = diskcache.load(NAMESPACE, k)
    return None if payload is None else run_stored(payload, fn, args)


def run_stored(payload: bytes, fn: Any, args: tuple) -> Optional[tuple[Any, Any]]:
    """`(value, gradient)` from the standalone program `payload` (compiled/quick.py) of `fn` at `args`, or
    None where a reference does not resolve, a check fails, the program raises or sets a floating-point flag."""
    try:
        fmt, module_code, checks_code, refs = marshal.loads(payload)
        if fmt != FORMAT:
            return None
        ns: dict[str, Any] = {"__builtins__": builtins, "_copysign": math.copysign, "_same_code": _same_code}
        for name, ref in refs:
            obj = _resolve(ref, fn)
            if obj is _MISSING:
                return None
            ns[name] = obj
        exec(marshal.loads(checks_code), ns)  # noqa: S102 - code this user's own cache holds (bytegrad/diskcache.py)
        if ns["checks"]() is not True:
            return None
        module: dict[str, Any] = {"__name__": "bytegrad.stored_program", "__builtins__": builtins}
        exec(marshal.loads(module_code), module)  # noqa: S102
    except Exception:  # noqa: BLE001 - an entry this process cannot use: the general path serves the call
        return None
    return _run(module["value_and_grad"], args)


def _same_code(f: Any, code: bytes) -> bool:
    """A callee's `code` guard: `f` is a Python function with this (marshalled) code and no defaults."""
    return type(f) is types.FunctionType and f.__defaults__ is None and f.__kwdefaults__ is None \
        and marshal.dumps(f.__code__, 2) == code


def _run(program: Any, args: tuple) -> Optional[tuple[Any, Any]]:
    import numpy as np

    flagged: list[Any] = []
    # the floating-point errors the current settings report (not those set to "ignore", as underflow is by
    # default): the general path would report them, so a call that meets one is left to it
    watched: dict[str, Any] = {kind: "call" for kind, mode in np.geterr().items() if mode != "ignore"}
    try:
        with np.errstate(call=lambda kind, flag: flagged.append(kind), **watched):
            result = program(*args)
    except Exception:  # noqa: BLE001 - the general path raises it again, at the user's line
        return None
    return None if flagged else result
