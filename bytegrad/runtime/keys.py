"""Lookups by a tracked key: what a capture run must not fold into a program.

A dict looked up, written or built with a key the run tracks (a float argument, a value computed
from one: `table.get(t)`, `d[t] = v`, `d.update({t: v})`, `dict([(t, v)])`) hashes that value:
which entry it finds, whether the key is new, the dict's length all depend on it. The runtime
moves such values without recording a decision, so a compiled program would replay the captured
lookup for every later key. The capture tape is told (`CaptureTape.refuse`) and the signature
stays on the general path. Keys the run does not track (strings, ints, constants) are fixed by the
program's guards and keep compiling.
"""
from __future__ import annotations

import types
from typing import Any, Optional

from bytegrad.runtime.recording import parent_of

__all__ = ["KEYED", "dict_source", "key_reason", "keyed_dict", "map_entry", "refuse_keyed", "refuse_keyed_dicts", "refuse_subscript",
           "subscript_reason"]

#: dict methods that hash the argument after the dict itself (`d.get(k)`: args are (d, k, ...))
_ONE_KEY = frozenset({dict.get, dict.__getitem__, dict.pop, dict.setdefault, dict.__contains__, dict.__setitem__,
                      dict.__delitem__})
#: callables that hash the keys of a mapping or of an iterable of pairs: (position of that argument)
_MANY_KEYS = {dict.update: 1, dict: 0}
KEYED = _ONE_KEY | frozenset(_MANY_KEYS)
_BOUND = (types.BuiltinMethodType, types.MethodType, types.MethodWrapperType)


def key_reason(ids: dict[int, int], fn: Any, args: tuple, kwargs: Optional[dict]) -> Optional[str]:
    """Why `fn(*args, **kwargs)` (a KEYED callable) cannot be replayed: it hashes a tracked key; or None."""
    if fn in _ONE_KEY:
        if len(args) > 1 and parent_of(ids, args[1]) is not None:
            return f"looks a dict up by a value computed from the arguments ({fn.__qualname__} with that key: " \
                   "which entry it finds depends on the value)"
        return None
    k = _MANY_KEYS.get(fn)
    if k is None or len(args) <= k:
        return None
    keys = args[k]
    if isinstance(keys, dict):
        keys = list(keys)  # (the mapping's keys)
    elif not isinstance(keys, (list, tuple)):
        return None  # (an iterator: its items reach the dict without a hook; see `subscript_reason`)
    if parent_of(ids, keys) is not None:
        return f"builds or updates a dict with a key computed from the arguments ({getattr(fn, '__qualname__', fn)}: " \
               "which entries it keeps depends on the key's value)"
    return None


def subscript_reason(ids: dict[int, int], key: Any, obj: Any = None) -> Optional[str]:
    """Why `obj[key]` (read, write or delete) on a container that is not an array cannot be replayed:
    the key is tracked, so the container hashes or compares its value, or `obj` is a dict holding a
    tracked key; or None."""
    if keyed_dict(ids, obj):
        return _HOLDS
    if parent_of(ids, key) is not None:
        return "indexes a dict (or another container) with a key computed from the arguments (`d[t]`: " \
               "which entry it finds depends on the value)"
    return None


def refuse_keyed(tape: Any, site: Any, fn: Any, args: tuple, kwargs: Optional[dict]) -> None:
    """A capturing tape told that `fn(*args, **kwargs)` (a KEYED callable) hashed a tracked key."""
    why = key_reason(tape.ids, fn, args, kwargs)
    if why is not None:
        tape.refuse(why, site)


def refuse_subscript(tape: Any, site: Any, key: Any, obj: Any = None) -> None:
    """A capturing tape told that `obj[key]` on a container that is not an array used a tracked key
    (or that `obj` is a dict holding one)."""
    why = subscript_reason(tape.ids, key, obj)
    if why is not None:
        tape.refuse(why, site)


_HOLDS = ("uses a dict holding a key computed from the arguments (`{t: v}`, `{k: v for k in ...}` with a float key: "
          "its entries, length and order depend on the key's value)")


def keyed_dict(ids: dict[int, int], obj: Any) -> bool:
    """Whether `obj` is a dict one of whose keys is tracked (or a tuple holding a tracked value)."""
    if not isinstance(obj, dict) or not ids:
        return False
    for k in obj:
        if parent_of(ids, k) is not None:
            return True
    return False


def refuse_keyed_dicts(tape: Any, site: Any, fn: Any, args: tuple, kwargs: Optional[dict]) -> None:
    """A capturing tape told that the call `fn(*args, **kwargs)` is handed a dict holding a tracked key
    (as an argument, or as the object a bound method `d.get` belongs to): whatever it does with the
    dict (`len(d)`, `list(d)`, `d.items()`, `f(d)`) depends on the key's value."""
    ids = tape.ids
    owner = fn.__self__ if isinstance(fn, _BOUND) else None  # (`d.get`; never a user `__getattr__`)
    if keyed_dict(ids, owner) or any(keyed_dict(ids, a) for a in args) or \
            (kwargs and any(keyed_dict(ids, a) for a in kwargs.values())):
        tape.refuse(_HOLDS, site)


def dict_source(tape: Any, site: Any, fn: Any, args: tuple, kwargs: Optional[dict]) -> tuple:
    """`dict(items)` in a capture run: an iterator of pairs (a generator, `zip(...)`) taken as a list first
    (so its keys can be seen), and the tape told when a key is tracked. The arguments to call `fn` with."""
    if args and not isinstance(args[0], (list, tuple, dict)) and not hasattr(type(args[0]), "keys"):
        args = (list(args[0]),) + tuple(args[1:])
    refuse_keyed(tape, site, fn, args, kwargs)
    return args


def map_entry(tape: Any, site: Any, key: Any, value: Any) -> tuple[Any, Any]:
    """A dict comprehension's entry `key: value` in a capture's rewrite (its MAP_ADD, hooked where the key
    may be active): a tracked key refuses the capture, as `{t: v}` does (the dict's length, read by an
    unhooked `len(d)`, depends on its value). (value, key), which the rewritten code unpacks back in place."""
    if tape is not None and tape.capturing and parent_of(tape.ids, key) is not None:
        tape.refuse(_HOLDS, site)
    return value, key
