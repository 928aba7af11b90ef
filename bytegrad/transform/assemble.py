"""Rewritten bytecode to a code object, with the stack size computed in one pass over the instructions.

`Bytecode.to_code()` builds the `bytecode` package's control-flow graph to compute the stack size
(and the stack depths of exception handlers), which is most of an empty cache's assembly time
(~1.8 ms of the MLP's first gradient). Code without exception handling (no `TryBegin`/`TryEnd`) needs
no handler depths: `stack_size` walks the instructions from the entry, following jumps as the
graph's computation does (the same effects: `pre_and_post_stack_effect` for the jump taken and not
taken; an unconditional jump or a final instruction ends a path), checks that no instruction pops
more than the stack holds, and gives the largest depth. Anything else (exception handling, a jump to
something that is not a label, an underflow, too many states) goes to `Bytecode.to_code()`, which
computes it its own way and raises its own error for invalid code.
"""
from __future__ import annotations

import types
from typing import Optional

from bytecode import Bytecode, CompilerFlags, Instr, Label, TryBegin, TryEnd
from bytecode.instr import MONITORING_ONLY_JUMP_OPS
from bytecode.utils import PY313

__all__ = ["to_code", "stack_size"]

_GENERATORS = CompilerFlags.GENERATOR | CompilerFlags.COROUTINE | CompilerFlags.ASYNC_GENERATOR


def to_code(bc: Bytecode) -> types.CodeType:
    """`bc.to_code()`, without the control-flow graph where `stack_size` can tell the stack size."""
    size = stack_size(bc)
    if size is None:
        return bc.to_code()
    return bc.to_code(stacksize=size, compute_exception_stack_depths=False)


def stack_size(bc: Bytecode) -> Optional[int]:
    """The largest stack depth `bc` reaches, or None where the one-pass walk does not apply."""
    items = list(bc)
    labels: dict[Label, int] = {}
    for i, x in enumerate(items):
        if type(x) is Label:
            labels[x] = i
        elif isinstance(x, (TryBegin, TryEnd)):
            return None
    # (before 3.13, a generator or coroutine starts with the value sent in on the stack)
    start = 1 if not PY313 and bc.flags & _GENERATORS else 0
    n, top = len(items), start
    seen: set[tuple[int, int]] = set()
    work = [(0, start)]
    while work:
        i, size = work.pop()
        while i < n and (i, size) not in seen:
            seen.add((i, size))
            x = items[i]
            i += 1
            if type(x) is not Instr:
                continue  # a label or a line number
            if x.has_jump() and x.opcode not in MONITORING_ONLY_JUMP_OPS:
                pre, post = x.pre_and_post_stack_effect(jump=True)
                target = labels.get(x.arg) if type(x.arg) is Label else None
                if size + pre < 0 or target is None:
                    return None
                work.append((target, size + pre + post))
                top = max(top, size + pre + post)
                if x.is_uncond_jump():
                    break
            pre, post = x.pre_and_post_stack_effect(jump=False)
            if size + pre < 0:
                return None
            size += pre + post
            top = max(top, size)
            if x.is_final():
                break
        if len(seen) > 4 * n + 16:
            return None
    return top
