"""The instructions of bytegrad's own bytecode representation: `Instr`, `Label`, `TryBegin`, `TryEnd`,
the argument types (`CellVar`, `FreeVar`, and named integers for BINARY_OP, COMPARE_OP and the
intrinsics), and the opcode tables they read (jumps, inline caches, stack effects) for the running
CPython (3.11 to 3.13).

The API is the part of the `bytecode` package's that the transform uses, with the same names and
the same stack-effect model (`pre_and_post_stack_effect`: what an instruction needs on the stack
before it runs, and what it leaves), so that the passes read both alike; tests/test_code_asm.py
compares the two instruction by instruction.
"""
from __future__ import annotations

import dis
import opcode as _opcode
import sys
from typing import Any, Final, Optional

from bytegrad.errors import UnsupportedOpcodeError

__all__ = ["PY312", "PY313", "UNSET", "ENDS_PATH", "CodeError", "Label", "TryBegin", "TryEnd", "Instr", "InstrLocation", "CellVar",
           "FreeVar", "BinaryOp", "Compare", "Intrinsic1Op", "Intrinsic2Op", "FormatValue", "CompilerFlags",
           "MONITORING_ONLY_JUMP_OPS", "cache_count", "opcode_has_arg"]

PY: Final = sys.version_info[:2]
PY312: Final = PY >= (3, 12)
PY313: Final = PY >= (3, 13)


class CodeError(UnsupportedOpcodeError):
    """Code that bytegrad's disassembler or assembler does not support (or that is invalid): an
    `UnsupportedOpcodeError`, so the rewrite declines as it does for an unsupported construct.
    `Bytecode.from_code` / `to_code` raise it again with the function's location."""


class _Unset(int):
    """The argument of an instruction that takes none (an int printing as 0, as `bytecode`'s UNSET)."""

    def __repr__(self) -> str:
        return "0"


UNSET: Final = _Unset(0)


class CompilerFlags:
    """The code flags the transform tests (inspect.CO_*)."""
    GENERATOR: Final = 0x20
    COROUTINE: Final = 0x80
    ASYNC_GENERATOR: Final = 0x200


class Label:
    """A jump target; placed in the instruction list before the instruction it names."""
    __slots__ = ()


class TryBegin:
    """The start of a range of the exception table: an exception raised in it jumps to `target`
    with the stack cut to `stack_depth` (then the offset of the instruction if `push_lasti`, then the exception)."""
    __slots__ = ("target", "push_lasti", "stack_depth")

    def __init__(self, target: Label, push_lasti: bool, stack_depth: Any = UNSET) -> None:
        self.target = target
        self.push_lasti = push_lasti
        self.stack_depth = stack_depth

    def copy(self) -> TryBegin:
        return TryBegin(self.target, self.push_lasti, self.stack_depth)


class TryEnd:
    """The end of the range `entry` began (after the last instruction it covers)."""
    __slots__ = ("entry",)

    def __init__(self, entry: TryBegin) -> None:
        self.entry = entry

    def copy(self) -> TryEnd:
        return TryEnd(self.entry)


class InstrLocation:
    """An instruction's source position (`co_positions()`): any part may be None."""
    __slots__ = ("lineno", "end_lineno", "col_offset", "end_col_offset")

    def __init__(self, lineno: Optional[int], end_lineno: Optional[int] = None, col_offset: Optional[int] = None,
                 end_col_offset: Optional[int] = None) -> None:
        self.lineno = lineno
        self.end_lineno = end_lineno
        self.col_offset = col_offset
        self.end_col_offset = end_col_offset

    def _key(self) -> tuple:
        return (self.lineno, self.end_lineno, self.col_offset, self.end_col_offset)

    def __eq__(self, other: Any) -> bool:
        return type(other) is InstrLocation and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return "InstrLocation(%r, %r, %r, %r)" % self._key()


class _Var:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: Any) -> bool:
        return type(self) is type(other) and self.name == other.name

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.name))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class CellVar(_Var):
    """A cell of this code object (LOAD_DEREF, STORE_DEREF, MAKE_CELL...)."""
    __slots__ = ()


class FreeVar(_Var):
    """A free variable: a cell of an enclosing function."""
    __slots__ = ()


class _NamedInt(int):
    """An argument that is a number with a name (`BinaryOp.ADD`): `.name` names it, as an enum member would."""
    _names: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        names = self._names
        return names[self] if 0 <= self < len(names) and names[self] else str(int(self))

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}: {int(self)}>"


class BinaryOp(_NamedInt):
    _names = tuple(n[3:] if n.startswith("NB_") else n for n, _ in dis._nb_ops)  # type: ignore[attr-defined]


_CMP = ("LT", "LE", "EQ", "NE", "GT", "GE")


class Compare(_NamedInt):
    """COMPARE_OP's operator (0-5); on 3.13, 16 more for the comparison cast to bool (`LT_CAST`)."""
    _names = _CMP + ("",) * 10 + tuple(n + "_CAST" for n in _CMP)


class Intrinsic1Op(_NamedInt):
    _names = tuple(getattr(dis, "_intrinsic_1_descs", ()))


class Intrinsic2Op(_NamedInt):
    _names = tuple(getattr(dis, "_intrinsic_2_descs", ()))


class FormatValue(_NamedInt):
    _names = ("NONE", "STR", "REPR", "ASCII")


# ---- opcode tables -----------------------------------------------------------------------------

OPMAP: Final = dis.opmap
_HAS_ARG: Final = frozenset(dis.hasarg if PY312 else range(dis.HAVE_ARGUMENT, 256))  # type: ignore[attr-defined]
JUMPS: Final = frozenset(o for o in (dis.hasjump if PY313 else dis.hasjrel) if o < 256)  # type: ignore[attr-defined]
BACKWARD_JUMPS: Final = frozenset(o for o in JUMPS if "BACKWARD" in dis.opname[o])
FORWARD_JUMPS: Final = JUMPS - BACKWARD_JUMPS
_COND_JUMPS: Final = frozenset(o for o in JUMPS if any(s in dis.opname[o] for s in ("IF_", "FOR_ITER", "SEND")))
_UNCOND_JUMPS: Final = JUMPS - _COND_JUMPS
#: control never goes on to the next instruction
_FINAL: Final = _UNCOND_JUMPS | frozenset(OPMAP[n] for n in ("RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE")
                                          if n in OPMAP)
#: the opcodes after which control never falls through (`Instr.is_final`)
ENDS_PATH: Final = _FINAL
#: jumps whose target only monitoring reads (none before 3.14)
MONITORING_ONLY_JUMP_OPS: Final[frozenset[int]] = frozenset()
_CONST_OPS: Final = frozenset(dis.hasconst)
_CACHES = _opcode._inline_cache_entries  # type: ignore[attr-defined]


def opcode_has_arg(op: int) -> bool:
    return op in _HAS_ARG


#: the inline CACHE entries that follow each opcode in co_code
_NCACHE: Final = tuple((_CACHES.get(dis.opname[op], 0) if type(_CACHES) is dict else _CACHES[op]) for op in range(256))


def cache_count(op: int) -> int:
    """The inline CACHE entries that follow the opcode `op` in co_code."""
    return _NCACHE[op]


# The stack-effect model: (pre, post), the change before the instruction runs (what it takes; a
# positive pre: pushed before use) and the one after (what it leaves). Instructions not named here
# take their whole effect before: (effect, 0).
_FIXED: dict[str, tuple[int, int]] = {
    "GET_LEN": (-1, 2), "GET_ITER": (-1, 1), "GET_YIELD_FROM_ITER": (-1, 1), "GET_AWAITABLE": (-1, 1),
    "GET_AITER": (-1, 1), "GET_ANEXT": (-1, 2), "LIST_TO_TUPLE": (-1, 1), "LIST_EXTEND": (-2, 1),
    "SET_UPDATE": (-2, 1), "DICT_UPDATE": (-2, 1), "DICT_MERGE": (-2, 1), "COMPARE_OP": (-2, 1), "IS_OP": (-2, 1),
    "CONTAINS_OP": (-2, 1), "IMPORT_NAME": (-2, 1), "ASYNC_GEN_WRAP": (-1, 1), "PUSH_EXC_INFO": (-1, 2),
    "BEFORE_ASYNC_WITH": (-1, 2), "IMPORT_FROM": (-1, 2), "WITH_EXCEPT_START": (-4, 5), "MATCH_CLASS": (-3, 1),
    "MATCH_MAPPING": (-1, 2), "MATCH_SEQUENCE": (-1, 2), "MATCH_KEYS": (-2, 3), "CHECK_EXC_MATCH": (-2, 2),
    "CHECK_EG_MATCH": (-2, 2), "PREP_RERAISE_STAR": (-2, 1),
    **{n: (-1, 1) for n in OPMAP if n.startswith("UNARY_")},
    **{n: (-2, 1) for n in OPMAP if n.startswith("BINARY_")},
    "BINARY_SLICE": (-3, 1), "LOAD_FROM_DICT_OR_GLOBALS": (-1, 1), "LOAD_FROM_DICT_OR_DEREF": (-1, 1),
    "SET_FUNCTION_ATTRIBUTE": (-2, 1), "CONVERT_VALUE": (-1, 1), "FORMAT_SIMPLE": (-1, 1), "TO_BOOL": (-1, 1),
}
_FIXED_BY_OP: Final = {OPMAP[n]: v for n, v in _FIXED.items() if n in OPMAP}
_TAKES_ALL: Final = frozenset(OPMAP[n] for n in OPMAP if n.startswith("BUILD_") or n in ("MAKE_FUNCTION",
                                                                                        "CALL_FUNCTION_EX"))
_BITFLAG: Final = frozenset(OPMAP[n] for n in (("LOAD_GLOBAL", "LOAD_ATTR") if PY312 else ("LOAD_GLOBAL",)))
_BITFLAG2: Final = frozenset({OPMAP["LOAD_SUPER_ATTR"]} if PY312 else ())


#: the opcodes whose (pre, post) `_split_effect` reads from the argument itself: for every other
#: instruction, and these with a plain int argument (then the oparg), (pre, post) is a function of
#: (opcode, oparg, jump), computed once per process (`_PRE_POST`: the stack-depth walk of the
#: assembler and the passes ask for it for every instruction)
_SPLIT_READS_ARG: Final = frozenset(OPMAP[n] for n in ("CALL", "CALL_KW", "SWAP", "COPY", "SET_ADD", "LIST_APPEND",
                                                       "MAP_ADD") if n in OPMAP)
_PRE_POST: dict[tuple[int, Optional[int], Optional[bool]], tuple[int, int]] = {}


def _split_effect(op: int, name: str, arg: Any, effect: int, jump: Optional[bool]) -> tuple[int, int]:
    fixed = _FIXED_BY_OP.get(op)
    if fixed is not None:
        return fixed
    if op in _TAKES_ALL or name == "FORMAT_VALUE":
        return effect - 1, 1
    if name == "CALL":
        return (-2 - arg if PY312 else -2), 1
    if name == "CALL_KW":
        return -3 - arg, 1
    if name == "LOAD_ATTR":
        return -1, 1 + effect
    if name == "LOAD_SUPER_ATTR":
        return -3, 3 + effect
    if name == "SWAP":
        return -arg, arg
    if name == "COPY":
        return -arg, arg + effect
    if name in ("SET_ADD", "LIST_APPEND"):
        return -arg, arg - 1
    if name == "MAP_ADD":
        return -arg, arg - 2
    if name == "FOR_ITER":
        return (effect, 0) if jump else (-1, 2)
    if name in ("UNPACK_SEQUENCE", "UNPACK_EX"):
        return -1, effect + 1
    return effect, 0


class Instr:
    """One instruction: `name` (its opcode's name), `arg` (a constant, a name, a `Label`, a
    `CellVar`/`FreeVar`, a number; `UNSET` when it takes none) and `location` (or None)."""
    __slots__ = ("_name", "_opcode", "arg", "location")

    def __init__(self, name: str, arg: Any = UNSET, *, lineno: Optional[int] = None,
                 location: Optional[InstrLocation] = None) -> None:
        op = OPMAP.get(name)
        if op is None or op >= 256:
            raise CodeError(f"unknown opcode {name}")
        if (arg is UNSET) == (op in _HAS_ARG) and name != "NOP":
            raise CodeError(f"{name} {'needs an argument' if arg is UNSET else 'takes no argument'}")
        self._name = name
        self._opcode = op
        self.arg = arg
        if location is None and lineno is not None:
            location = InstrLocation(lineno)
        self.location = location

    @classmethod
    def _trusted(cls, name: str, op: int, arg: Any, location: Optional[InstrLocation]) -> Instr:
        new = object.__new__(cls)
        new._name = name
        new._opcode = op
        new.arg = arg
        new.location = location
        return new

    @property
    def name(self) -> str:
        return self._name

    @property
    def opcode(self) -> int:
        return self._opcode

    @property
    def lineno(self) -> Optional[int]:
        loc = self.location
        return loc.lineno if loc is not None else None

    def copy(self) -> Instr:
        return Instr._trusted(self._name, self._opcode, self.arg, self.location)

    def has_jump(self) -> bool:
        return self._opcode in JUMPS

    def is_cond_jump(self) -> bool:
        return self._opcode in _COND_JUMPS

    def is_uncond_jump(self) -> bool:
        return self._opcode in _UNCOND_JUMPS

    def is_final(self) -> bool:
        return self._opcode in _FINAL

    def is_forward_rel_jump(self) -> bool:
        return self._opcode in FORWARD_JUMPS

    def is_backward_rel_jump(self) -> bool:
        return self._opcode in BACKWARD_JUMPS

    def _effect_oparg(self) -> Optional[int]:
        """The oparg `dis.stack_effect` is asked with for this argument."""
        op, arg = self._opcode, self.arg
        if op not in _HAS_ARG:
            return None
        if type(arg) is tuple and (op in _BITFLAG or op in _BITFLAG2):
            return int(arg[0])
        if not isinstance(arg, int) or op in _CONST_OPS:
            return 0
        return int(arg)

    def stack_effect(self, jump: Optional[bool] = None) -> int:
        """The net change of the stack's depth (`dis.stack_effect` of the oparg this argument encodes)."""
        return dis.stack_effect(self._opcode, self._effect_oparg(), jump=jump)

    def pre_and_post_stack_effect(self, jump: Optional[bool] = None) -> tuple[int, int]:
        """(pre, post): the change before the instruction runs (what it takes) and after (what it leaves)."""
        op, arg = self._opcode, self.arg
        if op not in _HAS_ARG:
            oparg = None
        elif type(arg) is int and op not in _CONST_OPS:  # (the frequent case of `_effect_oparg`, inline)
            oparg = arg
        else:
            oparg = self._effect_oparg()
        if op in _SPLIT_READS_ARG and type(arg) is not int:  # (computed each time: not a function of the key)
            return _split_effect(op, self._name, arg, dis.stack_effect(op, oparg, jump=jump), jump)
        key = (op, oparg, jump)
        found = _PRE_POST.get(key)
        if found is None:
            found = _PRE_POST[key] = _split_effect(op, self._name, arg, dis.stack_effect(op, oparg, jump=jump), jump)
        return found

    def __repr__(self) -> str:
        if self.arg is UNSET:
            return f"<{self._name} location={self.location}>"
        return f"<{self._name} arg={self.arg!r} location={self.location}>"
