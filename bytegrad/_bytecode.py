"""Which parameters a function's code reads: the one question about bytecode asked below the
transform. The runtime asks it of a rule's partials (runtime/backward.py, `partial_uses`), to keep
only the arrays they read; opcode names are otherwise transform/opcodes.py's alone. A module of its
own, beside bytegrad/_operators.py, because the runtime may not import the transform.
"""
from __future__ import annotations

import dis
import types
from typing import Final

__all__ = ["parameters_read"]

#: the reads of a plain local: LOAD_FAST and its checked (3.12+), clearing (3.12+) and paired
#: (3.13+: LOAD_FAST_LOAD_FAST, whose argval is a pair of names) forms
_LOCAL_READS: Final = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "LOAD_FAST_LOAD_FAST"})
#: 3.13+: a store and a load in one instruction (`c = out * 0.0; y = x * 2.0` on one line), argval
#: (stored name, loaded name)
_STORE_THEN_READ: Final = "STORE_FAST_LOAD_FAST"

_CO_VARARGS: Final = 0x04


def parameters_read(code: types.CodeType) -> frozenset[str] | None:
    """The names of the positional parameters `code` reads, or None when it takes `*args` (then
    any of them may be). A parameter held in a cell (a nested function or comprehension captures
    it, read with LOAD_DEREF or handed on with LOAD_CLOSURE) counts as read."""
    if code.co_flags & _CO_VARARGS:
        return None
    params = code.co_varnames[: code.co_argcount]
    loaded: set[str] = set(code.co_cellvars)
    for ins in dis.get_instructions(code):
        name = ins.opname
        if name in _LOCAL_READS:
            if isinstance(ins.argval, tuple):
                loaded.update(ins.argval)
            else:
                loaded.add(ins.argval)
        elif name == _STORE_THEN_READ:
            loaded.add(ins.argval[1])
    return frozenset(n for n in params if n in loaded)
