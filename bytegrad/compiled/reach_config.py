"""An attribute read off a local that holds an object the call built on constants: `cfg = Config(); cfg.scale`.

A configuration object (a dataclass of numbers, strings and flags) built in the function on constants
(`cfg = Config(scale=0.25)`, or `cfg = cfg or Config()` with `cfg=None` passed) is a constant-class
call the static check already takes (compiled/reach_objects.py `constant_class`: the class a module
global whose identity and every `__dict__` entry of its MRO are guarded, `object.__new__`, an
`__init__` eligible on constants that writes only its own attributes, its code, defaults and keyword
defaults guarded by value). Such a call builds a new object every time, and what its `__init__`
stores is a function of the constants it was passed and of those guarded values: an attribute read
off it gives, on every call the guards admit, what it gave at capture, which the program holds as a
constant. The read was refused as "reads the attribute .name of an object that is not an argument"
(compiled/eligibility.py); `allowed_config_reads` drops that reason (compiled/reasons.py: by kind,
line and name) for a read that:

- loads a value (not a method: a method call could write the object) directly off a local `n`;
- where every store into `n` is the result of such a constant-class call, and a jump to the store
  carries only `n` itself (`n = n or Config()`) when `n` is a parameter the call passed a constant
  (None: `immutable`, fixed by value by the program's guards); a parameter never stored is not taken.

Nothing else can reach the object in between: an attribute write is refused by the static check, a
method call too (its load is not taken here), and a function called with it on constants is refused
("calls ... on constants"); a callee handed it with differentiated values is checked by the capture.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Optional

from bytegrad.compiled import reach_objects
from bytegrad.compiled.reach_params import minus
from bytegrad.compiled.reasons import ATTR_OFF_CONSTANT
from bytegrad.transform import opcodes
from bytegrad.transform.opcodes import OpKind

__all__ = ["allowed_config_reads", "constant_params"]

_STORES = (OpKind.STORE_LOCAL, OpKind.STORE_LOCAL_LOAD, OpKind.STORE_LOCAL_PAIR)


def allowed_config_reads(bc: Any, stacks: list, params: tuple, immutable: frozenset[str], fn_globals: dict[str, Any],
                         reasons: list[str], check: Callable[..., Any], configs: Optional[dict[str, Any]] = None
                         ) -> list[str]:
    """`reasons` less one "reads the attribute" reason per read off a local holding an object built
    on constants (see the module's docstring), or off a parameter in `configs` the call left to its
    default, a configuration object (`config_params`), and never stored into. `params`: the function's
    parameter names; `check`: eligibility.check (for `constant_class`)."""
    if not any(getattr(r, "kind", None) == ATTR_OFF_CONSTANT for r in reasons):
        return reasons
    instrs = list(bc)
    configs = configs or {}
    built: dict[str, list[type]] = {}  # local -> the classes of what it holds (none: not a built object)
    allowed: Counter[tuple[str, int, str]] = Counter()
    for k, ins in enumerate(instrs):
        if not hasattr(ins, "name") or _kind(ins) is not OpKind.LOAD_ATTR:
            continue
        name, method = opcodes.attr_parts(ins)
        local = _loaded_local(instrs, k)
        if method or local is None:
            continue
        if local not in built:
            classes: list[type] = []
            if local in configs:
                ok = _default_config(instrs, local, configs, immutable)
                classes.append(type(configs[local]))
            else:
                ok = _holds_built(instrs, stacks, local, params, immutable, fn_globals, check, classes)
            built[local] = classes if ok else []
        # (a property or other descriptor computes what it gives when read, unhooked: not a constant)
        if built[local] and not any(computed_attribute(c, name) for c in built[local]) and ins.lineno is not None:
            allowed[ATTR_OFF_CONSTANT, ins.lineno, name] += 1
    return minus(reasons, allowed) if allowed else reasons


def config_params(code: Any, defaults: tuple) -> dict[str, Any]:
    """The positional parameters whose default is a configuration object (`def loss(w, hp=Hyper())`:
    compiled/objects.py `config_default`), which eligibility.check guards by content ("config"), with
    their defaults."""
    from bytegrad.compiled.objects import config_default

    if code.co_kwonlyargcount:  # (`defaults` ends with the keyword defaults' values, whose names it lacks)
        return {}
    names = code.co_varnames[:code.co_argcount]
    first = len(names) - len(defaults)
    return {names[first + k]: v for k, v in enumerate(defaults) if config_default(v)}


def computed_attribute(cls: type, name: str) -> bool:
    """Whether reading attribute `name` off an object of `cls` may run code: the class (or a base) holds
    it as a descriptor (a property, a method, anything with `__get__`), which takes precedence over or
    stands beside the object's own `__dict__`."""
    for c in cls.__mro__:
        v = vars(c).get(name)
        if v is not None:
            return hasattr(type(v), "__get__")
    return False


def _default_config(instrs: list, local: str, configs: dict[str, Any], immutable: frozenset[str]) -> bool:
    """Whether parameter `local` holds its default configuration object: the call left it out
    (`constant_params` counts it in `immutable`) and the code never stores into or deletes it."""
    if local not in configs or local not in immutable:
        return False
    return not any(hasattr(ins, "name") and (ins.name.startswith(("STORE_FAST", "DELETE_FAST")))
                   and local in opcodes.local_names(ins) for ins in instrs)


def constant_params(fn: Any, names: tuple, args: tuple, offset: int) -> frozenset[str]:
    """The parameters of `fn` (`names`: those after a partial's `offset`) whose value a program guards:
    those the call passed an int, string, flag or None (`args`), and the positional ones it omitted
    (a keyword is moved into place first), which hold their defaults: constants (eligibility.py
    refuses others), in a tuple whose replacement drops the programs (compiled/policy.py)."""
    from bytegrad.compiled.objects import config_default
    from bytegrad.compiled.policy import CONSTANT_TYPES

    passed = frozenset(n for n, a in zip(names, args) if type(a) in CONSTANT_TYPES)
    code = fn.__code__
    defaults = fn.__defaults__ or ()
    first_default = code.co_argcount - len(defaults)
    omitted = frozenset(n for k, n in enumerate(code.co_varnames[:code.co_argcount]) if k >= offset + len(args)
                        and k >= first_default and (type(defaults[k - first_default]) in CONSTANT_TYPES
                                                    or config_default(defaults[k - first_default])))
    return passed | omitted


def _kind(ins: Any) -> Any:
    try:
        return opcodes.kind_of(ins)
    except KeyError:
        return None


def _loaded_local(instrs: list, k: int) -> Any:
    """The local whose value instruction k (an attribute load) reads off the stack, if the instruction
    before it loads it (LOAD_FAST, or the second of LOAD_FAST_LOAD_FAST, STORE_FAST_LOAD_FAST)."""
    prev = instrs[k - 1] if k else None
    if prev is None or not hasattr(prev, "name"):
        return None
    kind = _kind(prev)
    if kind is OpKind.LOAD_LOCAL:
        return opcodes.local_names(prev)[0]
    if kind is OpKind.LOAD_LOCAL_PAIR or kind is OpKind.STORE_LOCAL_LOAD:
        return opcodes.local_names(prev)[-1]
    return None


def _holds_built(instrs: list, stacks: list, local: str, params: tuple, immutable: frozenset[str],
                 fn_globals: dict[str, Any], check: Callable[..., Any], classes: list[type]) -> bool:
    """Whether every store into `local` is a constant-class call's result (and a parameter is a constant);
    the classes called are added to `classes`."""
    from bytegrad.transform.code import Label  # (not at import: bytegrad's import stays light)

    if local in params and local not in immutable:
        return False
    stores = 0
    for j, ins in enumerate(instrs):
        if not hasattr(ins, "name"):
            continue
        kind = _kind(ins)
        if ins.name.startswith("DELETE_FAST") and local in opcodes.local_names(ins):
            return False
        if kind not in _STORES or local not in opcodes.local_names(ins):
            continue
        if kind is not OpKind.STORE_LOCAL and opcodes.local_names(ins)[0] != local:
            return False  # (the second of STORE_FAST_STORE_FAST: what it stores is not the call's result)
        stores += 1
        p = j - 1
        labels = []
        while p >= 0 and isinstance(instrs[p], Label):
            labels.append(instrs[p])
            p -= 1
        call = instrs[p] if p >= 0 else None
        ck = _kind(call) if call is not None and hasattr(call, "name") else None
        if ck is not OpKind.CALL and ck is not OpKind.CALL_KW:
            return False
        if reach_objects.constant_class(call, stacks[p], ck, fn_globals, [], "", check) is not None:
            return False
        cls = reach_objects.called_class(call, stacks[p], ck, fn_globals)
        if cls is None:
            return False
        classes.append(cls)
        if not all(_only_itself(instrs, label, local, params) for label in labels):
            return False
    return stores > 0


def _only_itself(instrs: list, label: Any, local: str, params: tuple) -> bool:
    """Whether every jump to `label` carries `local` itself (`local or Config()`: LOAD_FAST local, then
    JUMP_IF_TRUE_OR_POP (3.11), or COPY 1, a to-bool (3.13) and POP_JUMP_IF_TRUE; no label between)."""
    for q, ins in enumerate(instrs):
        if getattr(ins, "arg", None) is not label:
            continue
        kind = _kind(ins)
        if local not in params or kind not in (OpKind.JUMP_OR_POP, OpKind.POP_JUMP):
            return False
        before = []
        for i in reversed(instrs[max(0, q - 4):q]):
            if not hasattr(i, "name"):
                return False  # (a label: another path joins between)
            if not (_kind(i) is OpKind.PREDICATE and opcodes.predicate_fn(i) is bool):  # (3.13 TO_BOOL)
                before.append(i)
            if len(before) == (1 if kind is OpKind.JUMP_OR_POP else 2):
                break
        if kind is OpKind.POP_JUMP:
            if len(before) != 2 or _kind(before[0]) is not OpKind.COPY or before[0].arg != 1:
                return False
            before = before[1:]
        if not before or _kind(before[0]) is not OpKind.LOAD_LOCAL or opcodes.local_names(before[0]) != (local,):
            return False
    return True
