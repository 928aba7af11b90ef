"""bytegrad's own disassembler and assembler for CPython 3.11-3.13 bytecode: the representation the
transform rewrites (`Bytecode`, a list of `Instr`, `Label`, `TryBegin`, `TryEnd`), read from a code
object and written back to one. It replaces the `bytecode` package on bytegrad's code paths (it
keeps its names and the part of its API the passes use); tests/test_code_asm.py compares the two.
What it cannot read or write raises `CodeError`, an `UnsupportedOpcodeError`: the rewrite declines."""
from __future__ import annotations

from bytegrad.transform.code.bytecode import Bytecode
from bytegrad.transform.code.instr import (
    MONITORING_ONLY_JUMP_OPS, PY313, UNSET, BinaryOp, CellVar, CodeError, Compare, CompilerFlags, FreeVar, Instr,
    InstrLocation, Intrinsic1Op, Intrinsic2Op, Label, TryBegin, TryEnd)

__all__ = ["Bytecode", "Instr", "Label", "TryBegin", "TryEnd", "CellVar", "FreeVar", "InstrLocation", "CodeError",
           "CompilerFlags", "BinaryOp", "Compare", "Intrinsic1Op", "Intrinsic2Op", "MONITORING_ONLY_JUMP_OPS",
           "PY313", "UNSET"]
