"""Rewritten bytecode to a code object: bytegrad's own assembler (`transform/code/asm.py`), whose
stack size is computed in one pass over the instructions (`transform/code/stack.py`: from the
entry, following jumps, each exception handler from the depth the exception table recorded).
Code it cannot assemble (an underflow, a jump to no label...) raises `CodeError`, an
`UnsupportedOpcodeError`: the rewrite declines."""
from __future__ import annotations

import types
from typing import Optional

from bytegrad.transform.code import Bytecode, CodeError
from bytegrad.transform.code.stack import stack_size as _stack_size

__all__ = ["to_code", "stack_size"]


def to_code(bc: Bytecode) -> types.CodeType:
    """The code object of `bc`."""
    return bc.to_code()


def stack_size(bc: Bytecode) -> Optional[int]:
    """The largest stack depth `bc` reaches, or None where the walk finds the code invalid."""
    try:
        return _stack_size(bc)
    except CodeError:
        return None
