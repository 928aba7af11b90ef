"""The stack size of a `Bytecode`, and the stack depth of each exception handler's range, in one walk.

From the entry, each path follows jumps (`pre_and_post_stack_effect` for the jump taken and not
taken; an unconditional jump or a return or raise ends a path); a `TryBegin` starts its handler at the
depth the exception table recorded (read from the original code: the rewrite keeps the stack below
protected code as it was), plus lasti when pushed, plus the exception. An instruction that pops more
than the stack holds, a jump to something that is not a label, a handler without a known depth or
too many states raise `CodeError`.
"""
from __future__ import annotations

from typing import Any

from bytegrad.transform.code.instr import (
    ENDS_PATH, JUMPS, PY313, UNSET, CodeError, CompilerFlags, Instr, Label, TryBegin, TryEnd)

__all__ = ["stack_size"]

_GENERATORS = CompilerFlags.GENERATOR | CompilerFlags.COROUTINE | CompilerFlags.ASYNC_GENERATOR


def stack_size(bc: Any) -> int:
    """The largest depth `bc` reaches (handlers included)."""
    items = list(bc)
    labels: dict[int, int] = {}
    tries: list[TryBegin] = []
    for i, x in enumerate(items):
        if type(x) is Label:
            labels[id(x)] = i
        elif type(x) is TryBegin:
            tries.append(x)
    # (before 3.13, a generator or coroutine starts with the value sent in on the stack)
    start = 1 if not PY313 and bc.flags & _GENERATORS else 0
    depths: dict[int, int] = {}
    walk = _Walk(items, labels, depths, _floors(items))
    top = walk.run([(0, start)], start)
    while True:  # handlers whose range no path enters at its TryBegin: the depth they were read with
        todo = [tb for tb in tries if id(tb) not in depths and type(tb.stack_depth) is int
                and tb.stack_depth is not UNSET and id(tb.target) in labels]
        if not todo:
            break
        for tb in todo:
            depths[id(tb)] = tb.stack_depth
        top = max(top, walk.run([(labels[id(tb.target)], tb.stack_depth + 1 + bool(tb.push_lasti)) for tb in todo],
                                top))
    return top


def _floors(items: list[Any]) -> list[int]:
    """The depth of the handler protecting each item (0 outside every range): the stack never goes
    below it there, or the handler would find fewer values than it cuts the stack to."""
    out = []
    depth = 0
    for x in items:
        if type(x) is TryBegin:
            if depth:
                raise CodeError("nested exception handler ranges")
            depth = x.stack_depth if type(x.stack_depth) is int and x.stack_depth is not UNSET else 0
        elif type(x) is TryEnd:
            depth = 0
        out.append(depth)
    return out


class _Walk:
    def __init__(self, items: list[Any], labels: dict[int, int], depths: dict[int, int], floors: list[int]) -> None:
        self.items = items
        self.floors = floors
        self.labels = labels
        self.depths = depths
        self.seen: set[tuple[int, int]] = set()

    def run(self, work: list[tuple[int, int]], top: int) -> int:
        items, labels, seen, floors = self.items, self.labels, self.seen, self.floors
        n = len(items)
        while work:
            i, size = work.pop()
            if size > top:
                top = size
            while i < n and (i, size) not in seen:
                seen.add((i, size))
                x = items[i]
                i += 1
                t = type(x)
                if t is TryBegin:
                    self._enter(x, size, work)
                    continue
                if t is not Instr:
                    continue  # a label or a TryEnd
                if size < floors[i - 1]:
                    raise CodeError(f"{x.name} runs with the stack below its exception handler's depth")
                op = x.opcode
                if op in JUMPS:
                    pre, post = x.pre_and_post_stack_effect(jump=True)
                    target = labels.get(id(x.arg)) if type(x.arg) is Label else None
                    if size + pre < 0 or target is None:
                        raise CodeError(f"{x.name} underflows the stack or jumps to no label")
                    work.append((target, size + pre + post))
                    if size + pre + post > top:
                        top = size + pre + post
                    if x.is_uncond_jump():
                        break
                pre, post = x.pre_and_post_stack_effect(jump=False)
                if size + pre < 0:
                    raise CodeError(f"{x.name} pops more than the stack holds")
                size += pre + post
                if size > top:
                    top = size
                if op in ENDS_PATH:
                    break
            if len(seen) > 4 * n + 16:
                raise CodeError("the stack depth does not settle")
        return top

    def _enter(self, tb: TryBegin, size: int, work: list[tuple[int, int]]) -> None:
        """A range of the exception table: its handler starts at the depth the table records (the
        stack below the protected code, which the rewrite leaves as it is), plus lasti, plus the exception."""
        depth = tb.stack_depth
        if type(depth) is not int or depth is UNSET or depth > size:
            raise CodeError("an exception handler's stack depth is unknown or above the stack")
        target = self.labels.get(id(tb.target))
        if target is None:
            raise CodeError("an exception handler that is not a label")
        if id(tb) not in self.depths:
            self.depths[id(tb)] = depth
            work.append((target, depth + 1 + bool(tb.push_lasti)))
