"""Writing instructions: the few sequences the rewrite emits (calls of hooks, NULL pushes, loads
and stores, SWAP permutations), spelled for the running CPython."""
from __future__ import annotations

from typing import Any, Final, Sequence

from bytegrad.transform.code import UNSET, Instr

from bytegrad.transform.opcodes.decode import NULL_BELOW_CALLABLE, PY

__all__ = ["call", "load_const", "load_local", "store_local", "pop_top", "push_null", "build_tuple", "unpack_sequence",
           "plain_attr_load", "plain_super_attr_load", "plain_global_load", "is_simple_load", "is_variable_load",
           "simple_load_pushes", "is_const_load", "tests_membership_next", "returns_value", "binds_names",
           "is_push_null", "is_kw_names", "method_load_as_plain", "call_zero_args", "swap", "permute", "call_hook"]


_UNSET = object()


#: (name, takes an argument) -> opcode, for the instructions `Instr`'s constructor already accepted
_CHECKED: dict[tuple[str, bool], int] = {}


def _instr(name: str, arg: Any = _UNSET, loc: Any = None) -> Instr:
    # (what `Instr(...)` checks depends on the name and on whether an argument is given: once checked,
    # the same kind of instruction is made without the check; the rewrite emits hundreds)
    op = _CHECKED.get((name, arg is _UNSET))
    if op is not None:
        return Instr._trusted(name, op, UNSET if arg is _UNSET else arg, loc)
    new = Instr(name, location=loc) if arg is _UNSET else Instr(name, arg, location=loc)
    _CHECKED[(name, arg is _UNSET)] = new.opcode
    return new


def call(nargs: int, loc: Any) -> list[Instr]:
    """A call of the callable laid out below `nargs` arguments (PRECALL first on 3.11)."""
    if PY < (3, 12):
        return [_instr("PRECALL", nargs, loc), _instr("CALL", nargs, loc)]
    return [_instr("CALL", nargs, loc)]


def load_const(value: Any, loc: Any) -> Instr:
    return _instr("LOAD_CONST", value, loc)


def load_local(name: str, loc: Any) -> Instr:
    return _instr("LOAD_FAST", name, loc)


def store_local(name: str, loc: Any) -> Instr:
    return _instr("STORE_FAST", name, loc)


def pop_top(loc: Any) -> Instr:
    return _instr("POP_TOP", loc=loc)


def push_null(loc: Any) -> Instr:
    return _instr("PUSH_NULL", loc=loc)


def build_tuple(n: int, loc: Any) -> Instr:
    return _instr("BUILD_TUPLE", n, loc)


def unpack_sequence(n: int, loc: Any) -> Instr:
    return _instr("UNPACK_SEQUENCE", n, loc)


def plain_attr_load(name: str, loc: Any) -> Instr:
    """LOAD_ATTR that pushes just the attribute (a bound method for methods)."""
    if PY >= (3, 12):
        return _instr("LOAD_ATTR", (False, name), loc)
    return _instr("LOAD_ATTR", name, loc)


def plain_super_attr_load(instr: Instr) -> Instr:
    arg: Any = instr.arg
    return _instr("LOAD_SUPER_ATTR", (False, arg[1], arg[2]), instr.location)


def plain_global_load(name: str, loc: Any) -> Instr:
    """LOAD_GLOBAL that pushes just the value, no NULL."""
    return _instr("LOAD_GLOBAL", (False, name), loc)


#: loads with no side effect that push one variable or constant each (two for the 3.13 pair)
_SIMPLE_LOADS: Final = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_CONST", "LOAD_DEREF", "LOAD_FAST_LOAD_FAST"})
_VARIABLE_LOADS: Final = _SIMPLE_LOADS - {"LOAD_CONST"}


def is_simple_load(instr: Instr) -> bool:
    """A load with no side effect of one variable or constant (two for the 3.13 pair)."""
    return instr.name in _SIMPLE_LOADS


def is_variable_load(instr: Instr) -> bool:
    """A simple load of a variable (or two): loads of one variable with no store between see one value."""
    return instr.name in _VARIABLE_LOADS


def simple_load_pushes(instr: Instr) -> int:
    """How many values a simple load pushes."""
    return 2 if instr.name == "LOAD_FAST_LOAD_FAST" else 1


def is_const_load(instr: Any) -> bool:
    """A LOAD_CONST, of `bytecode` (`.name`) or of `dis` (`.opname`)."""
    return getattr(instr, "name", None) == "LOAD_CONST" or getattr(instr, "opname", None) == "LOAD_CONST"


def tests_membership_next(instrs: Sequence[Any], i: int) -> bool:
    """Whether the value instruction `i` pushes is consumed at once by `in` / `not in` (CONTAINS_OP
    with it on the right, nothing but line markers between): pytest's rewritten asserts test
    `'x' in @py_builtins.locals()`, which reads the dictionary's keys, never the values."""
    for ins in instrs[i + 1:]:
        if isinstance(ins, Instr):
            return ins.name == "CONTAINS_OP"
        if type(ins).__name__ != "SetLineno":
            return False  # a label (another path may join) or an exception-table marker
    return False


def returns_value(instr: Instr) -> bool:
    """RETURN_VALUE or RETURN_CONST: the function returns here."""
    return instr.name in ("RETURN_VALUE", "RETURN_CONST")


def binds_names(instr: Instr) -> bool:
    """Stores and deletes: they may rebind a variable between two loads of it."""
    return instr.name.startswith(("STORE_", "DELETE_"))


def is_push_null(instr: Instr) -> bool:
    return instr.name == "PUSH_NULL"


def is_kw_names(instr: Instr) -> bool:
    return instr.name == "KW_NAMES"


def method_load_as_plain(instr: Instr, name: str) -> list[Instr]:
    """Replace a method load ([NULL, attr] or [meth, self], known only at run time) by a fixed layout."""
    loc = instr.location
    load = plain_super_attr_load(instr) if instr.name == "LOAD_SUPER_ATTR" else plain_attr_load(name, loc)
    if NULL_BELOW_CALLABLE:
        return [load, push_null(loc), swap(2, loc)]
    return [load, push_null(loc)]


def call_zero_args(fn_const: Any, loc: Any) -> list[Instr]:
    """Call a constant function with no arguments, leaving its result on the stack."""
    if NULL_BELOW_CALLABLE:
        return [push_null(loc), load_const(fn_const, loc), *call(0, loc)]
    return [load_const(fn_const, loc), push_null(loc), *call(0, loc)]


def swap(i: int, loc: Any) -> Instr:
    return _instr("SWAP", i, loc)


def permute(current: Sequence[object], target: Sequence[object], loc: Any) -> list[Instr]:
    """SWAP instructions turning the top of the stack from `current` into `target` (bottom first)."""
    cur = list(current)
    assert sorted(map(id, cur)) == sorted(map(id, target)), "permute needs the same items"
    out: list[Instr] = []
    k = len(cur)

    def do_swap(depth: int) -> None:  # depth 2..k, SWAP with TOS
        i = k - depth
        cur[i], cur[-1] = cur[-1], cur[i]
        out.append(swap(depth, loc))

    for pos in range(k - 1):
        want = target[pos]
        if cur[pos] is want:
            continue
        if cur[-1] is not want:
            do_swap(k - next(j for j in range(pos, k) if cur[j] is want))
        do_swap(k - pos)
    assert all(a is b for a, b in zip(cur, target)), "permute failed"
    return out


def call_hook(n_operands: int, hook: Any, tape_local: str, site: Any, loc: Any, null: bool = False) -> list[Instr]:
    """Call `hook(tape, site, *operands)` with the `n_operands` operands already on top of the stack.

    `null` says that the original call left a NULL in its layout that must be consumed: on 3.11/3.12
    it sits under the operands, on 3.13 between the first operand (the callable) and the rest.
    """
    seq: list[Instr] = [load_const(hook, loc), load_local(tape_local, loc), load_const(site, loc)]
    seq += [swap(depth, loc) for depth in _hook_swaps(n_operands, null)]
    # Without a NULL, [hook, tape, site, *ops] calls hook(tape, site, *ops): hook sits in the
    # method slot and tape plays `self`. With the NULL, hook is a plain callable of all the rest.
    seq += call(n_operands + (2 if null else 1), loc)
    return seq


_HOOK_SWAPS: dict[tuple[int, bool], tuple[int, ...]] = {}


def _hook_swaps(n_operands: int, null: bool) -> tuple[int, ...]:
    """The SWAP depths of `call_hook`'s permutation (`permute`'s, once per process for each layout:
    the rewrite emits one for every hooked site)."""
    key = (n_operands, bool(null))
    found = _HOOK_SWAPS.get(key)
    if found is None:
        h, t, s = object(), object(), object()
        ops = [object() for _ in range(n_operands)]
        if null and not NULL_BELOW_CALLABLE:
            n = object()
            swaps = permute([ops[0], n, *ops[1:], h, t, s], [h, n, t, s, *ops], None)
        else:
            swaps = permute([*ops, h, t, s], [h, t, s, *ops], None)
        found = _HOOK_SWAPS[key] = tuple(int(ins.arg) for ins in swaps)
    return found
