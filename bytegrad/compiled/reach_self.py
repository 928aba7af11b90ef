"""`self.name op= value` in a method (compiled/objects.py `without_self_writes`): the augmented
assignment of an attribute of the method's own object, as `self.name = self.name op value` is."""
from __future__ import annotations

from typing import Any

__all__ = ["augmented_self_write"]


def augmented_self_write(instrs: list, k: int, me: str) -> bool:
    """Whether the STORE_ATTR at k (`dis` instructions) ends `me.name op= value`: LOAD_FAST me, COPY 1,
    LOAD_ATTR name, ..., BINARY_OP (in place), SWAP 2, STORE_ATTR name, the value computed between
    the LOAD_ATTR and the BINARY_OP."""
    store = instrs[k]
    if k < 2 or instrs[k - 1].opname != "SWAP" or instrs[k - 1].arg != 2 or instrs[k - 2].opname != "BINARY_OP":
        return False
    for j in range(k - 3, 0, -1):
        ins = instrs[j]
        if ins.opname == "COPY" and ins.arg == 1:
            before, after = instrs[j - 1], instrs[j + 1]
            return before.opname in ("LOAD_FAST", "LOAD_FAST_CHECK") and before.argval == me \
                and after.opname == "LOAD_ATTR" and _attr(after.argval) == _attr(store.argval)
    return False


def _attr(argval: Any) -> str:
    return argval if isinstance(argval, str) else str(argval)
