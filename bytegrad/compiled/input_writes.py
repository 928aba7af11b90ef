"""Writes a capture run made into the caller's arrays, whatever they wrote.

compiled/effects.py compares the caller's state before and after a capture run, so it misses a
write that happened to leave the bytes as they were (`np.maximum(buf, y, out=buf)` where `buf`
already held the larger values, `buf[:] = buf`). A program never writes into an argument's or a
global's array, and the static check cannot see such a write where its operands are arguments;
compiled/writes.py refuses one at build time only where the program needs the write's value, and
the dead-code pass drops a write nothing reads. So the capture tape's writes (`CaptureTape.writes`)
are checked here: one whose memory is an array reachable from the arguments (not differentiated:
those are never written) or a global array the program reads keeps the signature general.
"""
from __future__ import annotations

from typing import Any, Iterator, Optional

import numpy as np

__all__ = ["input_write"]

_ndarray = np.ndarray
_DEPTH = 4


def input_write(tape: Any, args: tuple, names: tuple, arrays: tuple) -> Optional[str]:
    """Why the run's writes reach the caller's memory (an argument, by name, or a global array), or None."""
    writes = getattr(tape, "writes", None)
    if not writes:
        return None
    owners = [owner if type(owner) is _ndarray else obj for obj, owner, _, _ in writes.values()]
    owners = [o for o in owners if type(o) is _ndarray]
    if not owners:
        return None
    targets = [(names[k] if k < len(names) else f"argument {k}", a) for k, arg in enumerate(args)
               for a in _arrays(arg, _DEPTH)] + [("an array read from a global", a) for a in arrays]
    for what, a in targets:
        if any(np.may_share_memory(o, a) for o in owners):
            return (f"it writes into {what} (an array of the caller's, in place or through `out=`): a compiled "
                    "program does not redo writes into the caller's arrays")
    return None


def _arrays(value: Any, depth: int) -> Iterator[np.ndarray]:
    t = type(value)
    if t is _ndarray:
        yield value
    elif depth and (t is list or t is tuple):
        for v in value:
            yield from _arrays(v, depth - 1)
    elif depth and t is dict:
        for v in value.values():
            yield from _arrays(v, depth - 1)
    elif depth and hasattr(value, "__dict__") and not isinstance(value, type):
        for v in vars(value).values():
            yield from _arrays(v, depth - 1)
