"""`Bytecode`: a function's instructions (a list of `Instr`, `Label`, `TryBegin`, `TryEnd`) and the
attributes of its code object the transform reads and the assembler writes back."""
from __future__ import annotations

import types
from typing import Any, Iterable, Optional

from bytegrad.errors import SourceLoc
from bytegrad.transform.code.instr import CodeError

__all__ = ["Bytecode"]


class Bytecode(list):
    """Instructions and code attributes. `from_code` reads a code object (`disasm.from_code`);
    `to_code` assembles one (`asm.to_code`), keeping the original's constants, names and local
    variables in place and appending what the instructions add."""

    def __init__(self, instructions: Iterable[Any] = ()) -> None:
        super().__init__(instructions)
        self.name = "<module>"
        self.qualname = "<module>"
        self.filename = "<string>"
        self.flags = 0
        self.argcount = 0
        self.posonlyargcount = 0
        self.kwonlyargcount = 0
        self.first_lineno = 1
        self.cellvars: list[str] = []
        self.freevars: list[str] = []
        # the original code object's tables: the assembler starts from them (None: from nothing)
        self.consts: Optional[tuple] = None
        self.names: Optional[tuple] = None
        self.varnames: Optional[tuple] = None

    def _set_code(self, code: types.CodeType) -> None:
        self.name = code.co_name
        self.qualname = code.co_qualname
        self.filename = code.co_filename
        self.flags = code.co_flags
        self.argcount = code.co_argcount
        self.posonlyargcount = code.co_posonlyargcount
        self.kwonlyargcount = code.co_kwonlyargcount
        self.first_lineno = code.co_firstlineno
        self.cellvars = list(code.co_cellvars)
        self.freevars = list(code.co_freevars)
        self.consts = code.co_consts
        self.names = code.co_names
        self.varnames = code.co_varnames

    def _copy_attr_from(self, other: Bytecode) -> None:
        for attr in ("name", "qualname", "filename", "flags", "argcount", "posonlyargcount", "kwonlyargcount",
                     "first_lineno", "consts", "names", "varnames"):
            setattr(self, attr, getattr(other, attr))
        self.cellvars = list(other.cellvars)
        self.freevars = list(other.freevars)

    @property
    def argnames(self) -> tuple:
        """The parameters' names."""
        n = self.argcount + self.kwonlyargcount + bool(self.flags & 0x04) + bool(self.flags & 0x08)
        return tuple(self.varnames or ())[:n]

    @classmethod
    def from_code(cls, code: types.CodeType, *, conserve_exception_block_stackdepth: bool = True) -> Bytecode:
        """The instructions of `code`, exception handlers' stack depths included (always: the
        keyword is accepted for the `bytecode` package's spelling)."""
        from bytegrad.transform.code.disasm import from_code
        try:
            return from_code(code, cls())
        except CodeError as exc:
            raise _located(exc, code.co_filename, code.co_firstlineno, code.co_qualname, "read") from None

    def to_code(self, stacksize: Optional[int] = None) -> types.CodeType:
        from bytegrad.transform.code.asm import to_code
        try:
            return to_code(self, stacksize)
        except CodeError as exc:
            raise _located(exc, self.filename, self.first_lineno, self.qualname, "assemble") from None


def _located(exc: CodeError, filename: str, lineno: int, function: str, verb: str) -> CodeError:
    if exc.loc is not None:
        return exc
    return CodeError(f"bytegrad cannot {verb} the bytecode of {function} ({exc.problem}).",
                     SourceLoc(filename, lineno, function),
                     "differentiate a function that avoids this construct, or report it as a bytegrad bug.")
