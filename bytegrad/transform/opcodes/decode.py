"""Reading instructions: every instruction classified into an `OpKind` (the passes dispatch on
kinds, through tables checked complete at import), and arguments decoded (BINARY_OP's operator
number maps to an operator of `bytegrad._operators`)."""
from __future__ import annotations

import dis
import enum
import operator
import sys
from typing import Any, Final, Sequence

from bytegrad.transform.code import Instr

from bytegrad._operators import BINARY, BinaryOperator

__all__ = ["NULL_BELOW_CALLABLE", "OpKind", "PY", "attr_parts", "binary_operator", "call_ex_has_kwargs",
           "call_ex_pops", "callable_slot", "cell_reads", "check_complete", "container_add_parts",
           "for_iter_jump_pushes", "global_parts", "int_arg", "is_plain_builder", "is_resume", "is_terminator", "TERMINATOR_KINDS",
           "is_unary_positive_intrinsic", "kind_of", "local_names", "make_function_pops", "predicate_fn",
           "predicate_pops", "receives_sent_value", "stack_effect", "super_attr_is_method", "tests_truth",
           "unpack_count", "unpacks_operand", "adds_map_entry", "uses_sent_values", "var_name"]

PY: Final = sys.version_info[:2]
# 3.11/3.12 lay a call out as [NULL|method, callable|self, args...]; 3.13 as [callable, NULL|self, args...].
NULL_BELOW_CALLABLE: Final = PY < (3, 13)


class OpKind(enum.Enum):
    # pushes
    LOAD_CONST = enum.auto()
    LOAD_LOCAL = enum.auto()        # LOAD_FAST and its checked / clearing variants
    LOAD_LOCAL_PAIR = enum.auto()   # 3.13 LOAD_FAST_LOAD_FAST
    LOAD_CELL = enum.auto()         # LOAD_DEREF, LOAD_CLOSURE, LOAD_CLASSDEREF, ...
    LOAD_GLOBAL = enum.auto()
    LOAD_NAME = enum.auto()
    LOAD_ATTR = enum.auto()
    LOAD_METHOD = enum.auto()       # 3.11 LOAD_METHOD: [NULL, attr] or [meth, self], known at run time
    LOAD_SUPER_ATTR = enum.auto()
    PUSH_NULL = enum.auto()
    # stores
    STORE_LOCAL = enum.auto()
    STORE_LOCAL_LOAD = enum.auto()  # 3.13 STORE_FAST_LOAD_FAST
    STORE_LOCAL_PAIR = enum.auto()  # 3.13 STORE_FAST_STORE_FAST
    STORE_CELL = enum.auto()
    STORE_GLOBAL = enum.auto()
    STORE_ATTR = enum.auto()
    STORE_SUBSCR = enum.auto()
    STORE_SLICE = enum.auto()
    # stack shuffles
    SWAP = enum.auto()
    COPY = enum.auto()
    POP = enum.auto()
    # operations that may touch a differentiated value
    BINARY = enum.auto()
    SUBSCR = enum.auto()
    SLICE = enum.auto()
    UNARY_NEG = enum.auto()
    UNARY_POS = enum.auto()
    INTRINSIC_1 = enum.auto()
    GET_ITER = enum.auto()
    UNPACK = enum.auto()
    UNPACK_EX = enum.auto()
    # calls
    PRECALL = enum.auto()
    KW_NAMES = enum.auto()
    CALL = enum.auto()
    CALL_KW = enum.auto()
    CALL_EX = enum.auto()
    MAKE_FUNCTION = enum.auto()
    # results that never carry a derivative
    PREDICATE = enum.auto()         # comparisons, `not`, `is`, `in`, to-bool, `~`
    # containers built in place (comprehensions, displays)
    CONTAINER_ADD = enum.auto()
    # control flow
    WITH = enum.auto()              # BEFORE_WITH: [mgr] -> [exit, mgr.__enter__()]
    IMPORT = enum.auto()            # IMPORT_NAME / IMPORT_FROM: modules, never differentiable
    FOR_ITER = enum.auto()
    JUMP = enum.auto()              # unconditional
    POP_JUMP = enum.auto()          # pops its condition, jumps or falls through
    JUMP_OR_POP = enum.auto()       # 3.11 JUMP_IF_TRUE_OR_POP: keeps the value when it jumps
    RETURN = enum.auto()            # ends the block
    OTHER = enum.auto()             # modelled by its stack effect, result activity = join of inputs


_KIND_BY_NAME: Final[dict[str, OpKind]] = {
    "LOAD_CONST": OpKind.LOAD_CONST,
    "LOAD_ASSERTION_ERROR": OpKind.LOAD_CONST,
    "LOAD_BUILD_CLASS": OpKind.LOAD_CONST,
    "LOAD_FAST": OpKind.LOAD_LOCAL,
    "LOAD_FAST_CHECK": OpKind.LOAD_LOCAL,
    "LOAD_FAST_AND_CLEAR": OpKind.LOAD_LOCAL,
    "LOAD_FAST_LOAD_FAST": OpKind.LOAD_LOCAL_PAIR,
    "LOAD_DEREF": OpKind.LOAD_CELL,
    "LOAD_CLOSURE": OpKind.LOAD_CELL,
    "LOAD_CLASSDEREF": OpKind.LOAD_CELL,
    "LOAD_FROM_DICT_OR_DEREF": OpKind.LOAD_CELL,
    "LOAD_GLOBAL": OpKind.LOAD_GLOBAL,
    "LOAD_NAME": OpKind.LOAD_NAME,
    "LOAD_ATTR": OpKind.LOAD_ATTR,
    "LOAD_METHOD": OpKind.LOAD_METHOD,
    "LOAD_SUPER_ATTR": OpKind.LOAD_SUPER_ATTR,
    "PUSH_NULL": OpKind.PUSH_NULL,
    "STORE_FAST": OpKind.STORE_LOCAL,
    "STORE_FAST_LOAD_FAST": OpKind.STORE_LOCAL_LOAD,
    "STORE_FAST_STORE_FAST": OpKind.STORE_LOCAL_PAIR,
    "STORE_DEREF": OpKind.STORE_CELL,
    "STORE_GLOBAL": OpKind.STORE_GLOBAL,
    "STORE_NAME": OpKind.STORE_GLOBAL,
    "STORE_ATTR": OpKind.STORE_ATTR,
    "STORE_SUBSCR": OpKind.STORE_SUBSCR,
    "STORE_SLICE": OpKind.STORE_SLICE,
    "SWAP": OpKind.SWAP,
    "COPY": OpKind.COPY,
    "POP_TOP": OpKind.POP,
    "BINARY_OP": OpKind.BINARY,
    "BINARY_SUBSCR": OpKind.SUBSCR,
    "BINARY_SLICE": OpKind.SLICE,
    "UNARY_NEGATIVE": OpKind.UNARY_NEG,
    "UNARY_POSITIVE": OpKind.UNARY_POS,
    "CALL_INTRINSIC_1": OpKind.INTRINSIC_1,
    "GET_ITER": OpKind.GET_ITER,
    "UNPACK_SEQUENCE": OpKind.UNPACK,
    "UNPACK_EX": OpKind.UNPACK_EX,
    "PRECALL": OpKind.PRECALL,
    "KW_NAMES": OpKind.KW_NAMES,
    "CALL": OpKind.CALL,
    "CALL_KW": OpKind.CALL_KW,
    "CALL_FUNCTION_EX": OpKind.CALL_EX,
    "MAKE_FUNCTION": OpKind.MAKE_FUNCTION,
    "COMPARE_OP": OpKind.PREDICATE,
    "IS_OP": OpKind.PREDICATE,
    "CONTAINS_OP": OpKind.PREDICATE,
    "UNARY_NOT": OpKind.PREDICATE,
    "UNARY_INVERT": OpKind.PREDICATE,
    "TO_BOOL": OpKind.PREDICATE,
    "LIST_APPEND": OpKind.CONTAINER_ADD,
    "SET_ADD": OpKind.CONTAINER_ADD,
    "MAP_ADD": OpKind.CONTAINER_ADD,
    "LIST_EXTEND": OpKind.CONTAINER_ADD,
    "SET_UPDATE": OpKind.CONTAINER_ADD,
    "DICT_UPDATE": OpKind.CONTAINER_ADD,
    "DICT_MERGE": OpKind.CONTAINER_ADD,
    "FOR_ITER": OpKind.FOR_ITER,
    "BEFORE_WITH": OpKind.WITH,
    "IMPORT_NAME": OpKind.IMPORT,
    "IMPORT_FROM": OpKind.IMPORT,
    "JUMP_FORWARD": OpKind.JUMP,
    "JUMP_BACKWARD": OpKind.JUMP,
    "JUMP_BACKWARD_NO_INTERRUPT": OpKind.JUMP,
    "JUMP": OpKind.JUMP,
    "JUMP_NO_INTERRUPT": OpKind.JUMP,
    "POP_JUMP_IF_TRUE": OpKind.POP_JUMP,
    "POP_JUMP_IF_FALSE": OpKind.POP_JUMP,
    "POP_JUMP_IF_NONE": OpKind.POP_JUMP,
    "POP_JUMP_IF_NOT_NONE": OpKind.POP_JUMP,
    "POP_JUMP_FORWARD_IF_TRUE": OpKind.POP_JUMP,
    "POP_JUMP_FORWARD_IF_FALSE": OpKind.POP_JUMP,
    "POP_JUMP_FORWARD_IF_NONE": OpKind.POP_JUMP,
    "POP_JUMP_FORWARD_IF_NOT_NONE": OpKind.POP_JUMP,
    "POP_JUMP_BACKWARD_IF_TRUE": OpKind.POP_JUMP,
    "POP_JUMP_BACKWARD_IF_FALSE": OpKind.POP_JUMP,
    "POP_JUMP_BACKWARD_IF_NONE": OpKind.POP_JUMP,
    "POP_JUMP_BACKWARD_IF_NOT_NONE": OpKind.POP_JUMP,
    "JUMP_IF_TRUE_OR_POP": OpKind.JUMP_OR_POP,
    "JUMP_IF_FALSE_OR_POP": OpKind.JUMP_OR_POP,
    "RETURN_VALUE": OpKind.RETURN,
    "RETURN_CONST": OpKind.RETURN,
    "RAISE_VARARGS": OpKind.RETURN,
    "RERAISE": OpKind.RETURN,
}

# Opcodes whose pre/post stack effect from `bytecode` is a correct "consume n, produce m" model.
_OTHER_OK: Final = frozenset({
    "NOP", "RESUME", "CACHE", "EXTENDED_ARG", "COPY_FREE_VARS", "MAKE_CELL", "RETURN_GENERATOR",
    "BUILD_TUPLE", "BUILD_LIST", "BUILD_SET", "BUILD_MAP", "BUILD_CONST_KEY_MAP", "BUILD_STRING",
    "BUILD_SLICE", "LIST_TO_TUPLE", "FORMAT_VALUE", "FORMAT_SIMPLE", "FORMAT_WITH_SPEC",
    "CONVERT_VALUE", "GET_LEN", "YIELD_VALUE", "SEND", "END_SEND", "GET_YIELD_FROM_ITER",
    "PUSH_EXC_INFO", "POP_EXCEPT", "CHECK_EXC_MATCH", "CHECK_EG_MATCH", "WITH_EXCEPT_START",
    "BEFORE_ASYNC_WITH", "CLEANUP_THROW", "GET_AWAITABLE", "GET_AITER", "GET_ANEXT",
    "END_ASYNC_FOR", "ASYNC_GEN_WRAP", "DELETE_FAST", "DELETE_DEREF",
    "DELETE_GLOBAL", "DELETE_NAME", "DELETE_ATTR", "DELETE_SUBSCR", "SET_FUNCTION_ATTRIBUTE",
    "CALL_INTRINSIC_2", "END_FOR", "MATCH_CLASS", "MATCH_MAPPING", "MATCH_SEQUENCE", "MATCH_KEYS",
    "PRINT_EXPR", "SETUP_ANNOTATIONS", "LOAD_LOCALS", "INTERPRETER_EXIT", "EXIT_INIT_CHECK",
    "ENTER_EXECUTOR", "POP_BLOCK", "SETUP_FINALLY", "SETUP_CLEANUP", "SETUP_WITH", "IMPORT_STAR",
    "PREP_RERAISE_STAR", "LOAD_FROM_DICT_OR_GLOBALS",
})
# Pseudo-instructions of the compiler: they never appear in a code object.
_PSEUDO: Final = frozenset({"RESERVED", "LOAD_SUPER_METHOD", "LOAD_ZERO_SUPER_METHOD", "LOAD_ZERO_SUPER_ATTR"})

#: the intrinsic that implements unary `+` since 3.12
_INTRINSIC_UNARY_POSITIVE: Final = 5


def kind_of(instr: Instr) -> OpKind:
    """The kind of one instruction; OTHER for the ones modelled by their stack effect alone."""
    kind = _KIND_BY_NAME.get(instr.name)
    if kind is not None:
        return kind
    if instr.name in _OTHER_OK:
        return OpKind.OTHER
    raise KeyError(instr.name)


def stack_effect(instr: Instr, jump: bool) -> tuple[int, int]:
    """(consumed, produced) for an OTHER instruction."""
    pre, post = instr.pre_and_post_stack_effect(jump=jump)
    if pre > 0:  # `bytecode` writes pushes-before-use as a positive pre
        pre, post = 0, pre + post
    consumed, produced = -pre, post
    net = instr.stack_effect(jump=jump)
    if produced - consumed != net:
        produced = consumed + net
    if instr.name == "RETURN_GENERATOR":  # the generator resumes with the sent value pushed
        produced = 1
    return consumed, produced


def receives_sent_value(instr: Instr) -> bool:
    """True for the instruction whose result is the value a generator is sent (`v = yield x`)."""
    return instr.name == "YIELD_VALUE"


def uses_sent_values(code: Any) -> bool:
    """Whether a generator's code uses what its `yield` evaluates to (a value `gen.send(v)` passes in)."""
    names = [i.opname for i in dis.get_instructions(code) if i.opname not in ("RESUME", "CACHE")]
    return any(a == "YIELD_VALUE" and b != "POP_TOP" for a, b in zip(names, names[1:]))


_CELL_READS: Final = frozenset({"LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_DEREF"})
_OPTIMIZED = 0x1  # inspect.CO_OPTIMIZED: a function body (a class body is not)


def cell_reads(code: Any) -> frozenset[str]:
    """The free variables a class body reads itself (or through a class nested in it), as opposed to
    those it only hands on to the closures of its methods (`LOAD_CLOSURE`), which run rewritten."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in _CELL_READS}
    for const in code.co_consts:
        if hasattr(const, "co_flags") and not const.co_flags & _OPTIMIZED:
            names |= cell_reads(const) & set(const.co_freevars)
    return frozenset(names)


#: the kinds after which control never falls through to the next instruction (a tuple: `in` compares
#: by identity, where a set would call the enum's `__hash__`, a Python function on 3.11)
TERMINATOR_KINDS: Final = (OpKind.JUMP, OpKind.RETURN)


def is_terminator(instr: Instr) -> bool:
    """True when control never falls through to the next instruction."""
    return _KIND_BY_NAME.get(instr.name) in TERMINATOR_KINDS


# ---- decoding arguments --------------------------------------------------------------------


def int_arg(instr: Instr) -> int:
    """The argument of an instruction whose argument is a number (BINARY_OP, CALL, COPY, ...)."""
    arg: Any = instr.arg  # `Instr.arg`'s type is the union of every opcode's argument type
    return int(arg)


def global_parts(instr: Instr) -> tuple[str, bool]:
    """(name, pushes_null) of a LOAD_GLOBAL."""
    arg: Any = instr.arg
    if isinstance(arg, tuple):
        return arg[1], bool(arg[0])
    return arg, False


def attr_parts(instr: Instr) -> tuple[str, bool]:
    """(name, is_method_load) of a LOAD_ATTR or LOAD_METHOD."""
    arg: Any = instr.arg
    if instr.name == "LOAD_METHOD":
        return arg, True
    if isinstance(arg, tuple):
        return arg[1], bool(arg[0])
    return arg, False


def super_attr_is_method(instr: Instr) -> bool:
    arg: Any = instr.arg
    return bool(arg[0])


def var_name(arg: Any) -> str:
    """The variable name of a local / cell / free variable argument."""
    return arg if isinstance(arg, str) else arg.name


def local_names(instr: Instr) -> tuple[str, ...]:
    arg = instr.arg
    return tuple(var_name(a) for a in arg) if isinstance(arg, tuple) else (var_name(arg),)


#: BINARY_OP's argument, CPython's NB_* numbering: the operators out of place, then the same ones
#: in place from NB_INPLACE_ADD (13)
_NB_SYMBOLS: Final = ("+", "&", "//", "<<", "@", "*", "%", "|", "**", ">>", "-", "/", "^")
_NB_OPERATORS: Final[dict[int, BinaryOperator]] = {
    **{k: BINARY[sym] for k, sym in enumerate(_NB_SYMBOLS)},
    **{k + len(_NB_SYMBOLS): BINARY[sym + "="] for k, sym in enumerate(_NB_SYMBOLS)},
}


def binary_operator(instr: Instr) -> BinaryOperator:
    """The operator of a BINARY_OP (`+`, `+=`, ...)."""
    return _NB_OPERATORS[int_arg(instr)]


def is_unary_positive_intrinsic(instr: Instr) -> bool:
    return int_arg(instr) == _INTRINSIC_UNARY_POSITIVE


def unpack_count(instr: Instr) -> int:
    """The values an UNPACK_SEQUENCE or UNPACK_EX pushes."""
    arg = int_arg(instr)
    if instr.name == "UNPACK_EX":
        return (arg & 0xFF) + (arg >> 8) + 1
    return arg


def make_function_pops(instr: Instr) -> int:
    """How many values MAKE_FUNCTION consumes (the code object plus flagged extras before 3.13)."""
    if PY >= (3, 13):
        return 1
    flags = int_arg(instr)
    return 1 + bin(flags & 0x0F).count("1")


def callable_slot(nargs: int, stack: Sequence[Any]) -> Any:
    """The stack slot (an `activity.Slot`) holding the callable of a CALL with `nargs` arguments,
    or None when the layout has no NULL (the callable is then not known)."""
    x, y = stack[-(nargs + 2)], stack[-(nargs + 1)]
    if NULL_BELOW_CALLABLE:
        return y if x.null else None
    return x if y.null else None


def call_ex_pops(instr: Instr) -> int:
    """Values consumed by CALL_FUNCTION_EX: the NULL, the callable, the args, maybe the kwargs."""
    return 3 + call_ex_has_kwargs(instr)


def call_ex_has_kwargs(instr: Instr) -> bool:
    """Whether a CALL_FUNCTION_EX takes a `**kwargs` mapping."""
    return bool(int_arg(instr) & 1)


def is_resume(instr: Instr) -> bool:
    """RESUME: where a frame starts running (and resumes, in a generator)."""
    return instr.name == "RESUME"


def unpacks_operand(instr: Instr) -> bool:
    """Whether the instruction iterates over its top operand: UNPACK_SEQUENCE, UNPACK_EX, and the
    LIST_EXTEND / SET_UPDATE of `[*x]`, `{*x}` and `f(*x)`."""
    return instr.name in ("UNPACK_SEQUENCE", "UNPACK_EX", "LIST_EXTEND", "SET_UPDATE")


def adds_map_entry(instr: Instr) -> bool:
    """MAP_ADD: a dict comprehension's entry, its key below its value on the stack."""
    return instr.name == "MAP_ADD"


def for_iter_jump_pushes() -> int:
    """FOR_ITER on exhaustion: 3.11 pops the iterator; 3.12+ model a dummy value for END_FOR."""
    return -1 if PY < (3, 12) else 1


def tests_truth(instr: Instr) -> bool:
    """A POP_JUMP that tests its operand's truth (not one that tests `is None`)."""
    return not instr.name.endswith("NONE")


def predicate_pops(instr: Instr) -> int:
    """Operands of a PREDICATE instruction: one for `not`, `~` and to-bool, else two."""
    return 1 if instr.name in ("UNARY_NOT", "UNARY_INVERT", "TO_BOOL") else 2


def _contains(a: Any, b: Any) -> bool:
    return a in b


def _not_contains(a: Any, b: Any) -> bool:
    return a not in b


def _bool_lt(a: Any, b: Any) -> bool:
    return bool(a < b)


def _bool_le(a: Any, b: Any) -> bool:
    return bool(a <= b)


def _bool_eq(a: Any, b: Any) -> bool:
    return bool(a == b)


def _bool_ne(a: Any, b: Any) -> bool:
    return bool(a != b)


def _bool_gt(a: Any, b: Any) -> bool:
    return bool(a > b)


def _bool_ge(a: Any, b: Any) -> bool:
    return bool(a >= b)


#: COMPARE_OP's operators by its argument, and (3.13) with its to-bool flag (16) set
_COMPARE_OPS = (operator.lt, operator.le, operator.eq, operator.ne, operator.gt, operator.ge)
_CAST_OPS = (_bool_lt, _bool_le, _bool_eq, _bool_ne, _bool_gt, _bool_ge)


def predicate_fn(instr: Instr) -> Any:
    """The function a PREDICATE instruction applies to its operands (`operator.lt` for `<`)."""
    name = instr.name
    if name == "COMPARE_OP":
        arg = int_arg(instr)
        return (_CAST_OPS if arg & 16 else _COMPARE_OPS)[arg & 15]
    if name == "IS_OP":
        return operator.is_not if instr.arg else operator.is_
    if name == "CONTAINS_OP":
        return _not_contains if instr.arg else _contains
    return {"UNARY_NOT": operator.not_, "UNARY_INVERT": operator.invert, "TO_BOOL": bool}[name]


#: OTHER instructions that only build values from their operands or do nothing (a compiled program
#: replays them as they are); every other OTHER instruction keeps a function on the general path
_PLAIN_BUILDERS: Final = frozenset({
    "NOP", "RESUME", "CACHE", "EXTENDED_ARG", "BUILD_TUPLE", "BUILD_LIST", "BUILD_MAP", "BUILD_CONST_KEY_MAP",
    "BUILD_SLICE", "LIST_TO_TUPLE", "END_FOR", "POP_ITER", "COPY_FREE_VARS",
})
#: CALL_INTRINSIC_1 operands that are plain value operations: unary `+` (5), list to tuple (6)
_PLAIN_INTRINSICS: Final = frozenset({5, 6})


def is_plain_builder(instr: Instr) -> bool:
    """Whether an OTHER or CALL_INTRINSIC_1 instruction only builds a value from its operands."""
    if instr.name == "CALL_INTRINSIC_1":
        return int_arg(instr) in _PLAIN_INTRINSICS
    return instr.name in _PLAIN_BUILDERS


def container_add_parts(instr: Instr) -> tuple[int, int]:
    """(values popped, depth of the container below them) for LIST_APPEND & co."""
    popped = 2 if instr.name == "MAP_ADD" else 1
    return popped, int_arg(instr)


def check_complete() -> None:
    """Every opcode of this CPython is classified (checked by the tests)."""
    missing = [n for n in dis.opmap if n not in _KIND_BY_NAME and n not in _OTHER_OK and n not in _PSEUDO
               and not n.startswith(("INSTRUMENTED_", "BINARY_OP_", "CALL_", "LOAD_ATTR_", "LOAD_GLOBAL_",
                                     "STORE_ATTR_", "STORE_SUBSCR_", "FOR_ITER_", "COMPARE_OP_",
                                     "UNPACK_SEQUENCE_", "BINARY_SUBSCR_", "LOAD_SUPER_ATTR_", "TO_BOOL_",
                                     "CONTAINS_OP_", "RESUME_", "SEND_", "LOAD_CONST_", "LOAD_FAST_",
                                     "STORE_FAST_", "JUMP_BACKWARD_", "RETURN_", "POP_JUMP_IF_"))]
    if missing:
        raise AssertionError(f"unclassified opcodes: {missing}")
