"""`with obj:` on an object whose `__enter__` and `__exit__` are Python code.

The rewrite hooks BEFORE_WITH where the manager may hold differentiated values
(`runtime/abi.before_with`): its `__enter__` runs rewritten, as a callee of the capture; the normal
exit calls the bound `__exit__(None, None, None)` through a hooked call, also a callee. Both are
then checked as eligible and guarded by code like any callee (and the object's class by the class
guard). What a program cannot do is the exceptional exit: WITH_EXCEPT_START calls `__exit__` from C
with the exception, unhooked, and it may swallow it. A program never takes that path: an operation
of the body that raises makes the program raise, and the call goes to the general path
(compiled/policy.py), which runs the block as Python does. So the static check
(compiled/eligibility.py) takes a `with` on an active manager (`allowed`), and the capture is
refused after the run (`unpaired`) unless each `__enter__` it followed was followed later by the
same object's `__exit__(None, None, None)`: the exceptional exit ran in the capture otherwise.
A manager whose methods are not Python (`threading.Lock`, a file) is refused by the hook itself
during the capture: its effects would not be replayed.
"""
from __future__ import annotations

from typing import Any, Optional

__all__ = ["allowed", "unpaired"]


def allowed(instrs: list, stacks: list, k: int) -> bool:
    """Whether instruction k is a BEFORE_WITH on an active manager, or the WITH_EXCEPT_START of a code
    all of whose BEFORE_WITH are."""
    name = getattr(instrs[k], "name", "")
    if name == "BEFORE_WITH":
        return _active_top(stacks[k])
    if name == "WITH_EXCEPT_START":
        withs = [j for j, ins in enumerate(instrs) if getattr(ins, "name", "") == "BEFORE_WITH"]
        return bool(withs) and all(_active_top(stacks[j]) for j in withs)
    return False


def _active_top(stack: Any) -> bool:
    return stack is not None and len(stack) > 0 and bool(stack[-1].active)


def unpaired(callees: list) -> Optional[str]:
    """Why the capture's `with` blocks are not all replayable (an `__enter__` followed with no later
    `__exit__(None, None, None)` of the same object: the block was left by an exception), or None."""
    for k, (f, args, _, site) in enumerate(callees):
        if getattr(f, "__name__", None) != "__enter__" or len(args) != 1:
            continue
        obj = args[0]
        exit_ = getattr(type(obj), "__exit__", None)
        if not any(g is exit_ and len(a) == 4 and a[0] is obj and a[1] is None and a[2] is None and a[3] is None
                   for g, a, _, _ in callees[k + 1:]):
            return (f"leaves the `with` block on a {type(obj).__qualname__} (line {site.lineno}) other than by its "
                    "end (its __exit__ was called with an exception, from C: a program cannot replay that)")
    return None
