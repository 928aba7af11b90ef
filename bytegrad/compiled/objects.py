"""Objects as arguments of compiled programs: a model class, a dataclass of parameters, layers in a list.

An object argument that is not differentiated (`model` in `loss(x, model, y)`, the `self` of a
bound method: compiled/capture.py) is taken apart by the capture as it is, never copied:

- its float arrays are tracked in place (what the function computes from `self.W` is recorded);
  the program reads each again at call time (`model.__dict__["W"]`), so an in-place write into
  `model.W` or a rebinding `model.W = other` between calls is what the next call computes with;
  the type, shape and dtype of each are guarded;
- its numbers, strings, flags and None are guarded by exact value (floats by bits), as the
  globals are (compiled/guards.py);
- lists, tuples and dicts in it by type, length (keys in order) and item by item; objects in it
  (layers in a list, `self.cfg`) the same way, recursively;
- functions, classes and modules by identity (a function's code and defaults by content);
- the instance by its class (identity) and its attribute names in order; the class by the
  identity of every entry of its own and its bases' `__dict__` (a method replaced, a class
  attribute rebound fails the guard). A class attribute that can change in place (a list, a
  dict, an object) is refused: a guard could not see the change.

What the capture cannot take this way (an object with `__slots__` and no `__dict__`, a class with
its own `__getattribute__`, the same array or object reached twice, anything deeper than
`MAX_DEPTH`) raises `Unobservable` before the function runs, and the call runs the general path.
Writes into the object during the call are refused by the static check (`self.count += 1` is a
STORE_ATTR) and seen by compiled/effects.py's snapshot, which compares objects' `__dict__`.
"""
from __future__ import annotations

import types
from typing import Any, Optional

import numpy as np

from bytegrad.compiled.effects import MAX_DEPTH as EFFECTS_DEPTH
from bytegrad.compiled.guards import callable_state, number_condition
from bytegrad.rules import pytrees
from bytegrad.runtime import pytree

__all__ = ["Node", "Unobservable", "class_state", "copies", "holds_any", "holds_built", "track_read", "dataclass_gradient", "leaves", "local_refusal", "node_of", "pytree_gradient", "walk_pytree", "shift_wrt", "without_self_writes", "walk_argument", "walk_dataclass", "same_class", "takes_apart", "track", "walk"]

_ndarray = np.ndarray
_HEAPTYPE = 1 << 9
#: how deep objects, lists and dicts in an object argument are taken apart: no deeper than the effect
#: snapshot compares them (a write into what a program reads is seen there)
MAX_DEPTH = EFFECTS_DEPTH
#: values guarded by exact value
_VALUES = (int, float, complex, bool, str, bytes, type(None))
#: class attributes that cannot change in place (guarded by identity)
_FIXED = (types.FunctionType, staticmethod, classmethod, property, type, types.ModuleType, int, float, complex,
          bool, str, bytes, type(None), types.BuiltinFunctionType, types.MethodDescriptorType,
          types.WrapperDescriptorType, types.GetSetDescriptorType, types.MemberDescriptorType, np.ufunc)


class Unobservable(Exception):
    """An argument the capture cannot take apart in place (compiled/capture.py re-raises it as its own)."""


class Node:
    """The capture spec of a part of an object argument that is not a tracked array: `kind` is
    "object" (`t` its class, `subs` attribute -> spec), "seq" (a list or tuple, `subs` a list),
    "dict" (`subs` key -> spec), "value" (a number, string, flag or None, guarded by value),
    "ident" (a function, class or module, by identity)."""

    __slots__ = ("kind", "t", "subs")

    def __init__(self, kind: str, t: type, subs: Any = None) -> None:
        self.kind = kind
        self.t = t
        self.subs = subs


def takes_apart(value: Any) -> bool:
    """Whether `value` is an object of a class written in Python that `track` takes apart."""
    t = type(value)
    return bool(t.__flags__ & _HEAPTYPE) and not isinstance(value, (type, types.FunctionType, types.MethodType,
                                                                     types.ModuleType, tuple, list, dict,
                                                                     BaseException, _ndarray, np.generic))


def track(value: Any, tape: Any, ids: set[int], depth: int = MAX_DEPTH) -> Any:
    """The spec of object argument `value` (see the module's docstring): its float arrays tracked
    on `tape` in place; `ids` collects the ids of the objects and containers taken apart (the
    capture lets Python callees take them). Raises Unobservable."""
    t = type(value)
    if t is _ndarray:
        if id(value) in tape.ids:
            raise Unobservable("an object argument holds an array that another argument holds too")
        if value.dtype.kind in "fc":
            return pytree.Leaf(tape.leaf(value), value)
        # (an integer array: what Python code makes of its items, `idx[0]`, would not be recorded)
        raise Unobservable(f"an object argument holds an array of dtype {value.dtype}")
    if t in _VALUES or (isinstance(value, np.generic) and value.dtype.kind in "biuf"):
        return Node("value", t)
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type, types.ModuleType, np.ufunc)):
        return Node("ident", t)
    if depth <= 0:
        raise Unobservable("an object argument nested too deep for the capture to take apart")
    if id(value) in ids:
        raise Unobservable(f"an object argument that holds the same {t.__name__} twice")
    if t is list or t is tuple:
        ids.add(id(value))
        return Node("seq", t, [track(v, tape, ids, depth - 1) for v in value])
    if t is dict:
        if not all(type(k) is str for k in value):
            raise Unobservable("an object argument holds a dict with keys that are not strings")
        ids.add(id(value))
        return Node("dict", t, {k: track(v, tape, ids, depth - 1) for k, v in value.items()})
    if not takes_apart(value):
        raise Unobservable(f"an object argument holds a {t.__name__}, which a guard cannot fix")
    attrs = getattr(value, "__dict__", None)
    if type(attrs) is not dict:
        raise Unobservable(f"an object argument: a {t.__qualname__} object without a __dict__ (__slots__)")
    why = _class_refusal(t)
    if why is not None:
        raise Unobservable(f"an object argument: {why}")
    ids.add(id(value))
    if not all(type(k) is str for k in attrs):
        raise Unobservable(f"a {t.__qualname__} object with attribute names that are not strings")
    return Node("object", t, {k: track(v, tape, ids, depth - 1) for k, v in attrs.items()})


def leaves(spec: Any) -> list[pytree.Leaf]:
    """The tracked arrays of an object argument's spec."""
    if type(spec) is pytree.Leaf:
        return [spec]
    if type(spec) is not Node or spec.kind not in ("object", "seq", "dict"):
        return []
    subs = spec.subs.values() if isinstance(spec.subs, dict) else spec.subs
    return [leaf for sub in subs for leaf in leaves(sub)]


def _class_refusal(cls: type) -> Optional[str]:
    """Why objects of `cls` cannot be guarded by their class and `__dict__`, or None."""
    if cls.__getattribute__ is not object.__getattribute__:
        return f"{cls.__qualname__} defines __getattribute__"
    if getattr(cls, "__getattr__", None) is not None:  # (what it computes for a missing name is no guard's)
        return f"{cls.__qualname__} defines __getattr__"
    for c in cls.__mro__[:-1]:
        if not c.__flags__ & _HEAPTYPE:
            return f"{cls.__qualname__} derives from {c.__qualname__}, a class written in C"
        for k, v in vars(c).items():
            if not _fixed(v) and not (k.startswith("__") and k.endswith("__")):
                return (f"its class {c.__qualname__} holds {k}, a {type(v).__name__} that can change in place "
                        "(a guard cannot see that)")
    return None


def _fixed(v: Any) -> bool:
    return isinstance(v, _FIXED) or (type(v) is tuple and all(_fixed(x) for x in v))


def class_state(cls: type) -> tuple:
    """What `same_class` compares: every class of `cls`'s MRO written in Python, with its own
    `__dict__`'s names and values."""
    return tuple((c, tuple(vars(c)), tuple(vars(c).values())) for c in cls.__mro__ if c.__flags__ & _HEAPTYPE)


def config_default(value: Any) -> bool:
    """Whether a default argument value is a configuration object (`def loss(w, hp=Hyper())`): of a
    plain class (`_class_refusal`), its `__dict__` holding numbers, strings, flags, None and tuples of
    them only. A program fixes it by `config_state` (`same_config`), as a read of a global number."""
    cls = type(value)
    d = getattr(value, "__dict__", None)
    return (type(d) is dict and bool(cls.__flags__ & _HEAPTYPE) and getattr(cls, "__slots__", None) is None
            and _class_refusal(cls) is None and len(d) <= 64 and all(_constant_attr(v) for v in d.values()))


def _constant_attr(v: Any) -> bool:
    return type(v) in (int, float, str, bool, bytes, complex, type(None)) or \
        (type(v) is tuple and all(_constant_attr(x) for x in v))


def config_state(value: Any) -> tuple:
    """What `same_config` compares: the object's class (and its state) and a copy of its `__dict__`."""
    return (type(value), class_state(type(value)), dict(vars(value)))


class Live:
    """A program's reference to the user's object itself (a configuration default): a program that
    holds one is not stored on disk (`bytegrad.precompile`), where a copy would stand for the object
    and its guard would watch the copy."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __reduce__(self) -> Any:
        import pickle

        raise pickle.PicklingError("a program guarding a live object is not stored")


def same_config(live: Live, state: tuple) -> bool:
    """Whether a configuration default (`config_default`) holds what the capture read: the same class,
    unchanged, and the same attributes in the same order, numbers by value and sign (guards.same_value)."""
    from bytegrad.compiled.guards import same_value

    value = live.obj
    cls = type(value)
    return cls is state[0] and same_class(cls, state[1]) and same_value(vars(value), state[2])


def same_class(cls: type, state: tuple) -> bool:
    """Whether `cls` (its bases included) has the attributes `class_state` read, each the same object."""
    mro = [c for c in cls.__mro__ if c.__flags__ & _HEAPTYPE]
    if len(mro) != len(state):
        return False
    for c, (was, names, values) in zip(mro, state):
        d = vars(c)
        if c is not was or len(d) != len(names) or tuple(d) != names:
            return False
        for a, b in zip(d.values(), values):
            if a is not b:
                return False
    return True


def walk(inputs: Any, expr: str, value: Any, spec: Any) -> None:
    """The guards and variables of object argument `value`, read by `expr`, whose capture spec
    is `spec` (`track`'s); `inputs`: compiled/source.py's `Inputs`."""
    src = inputs.src
    label = inputs.label(expr)
    if type(spec) is pytree.Leaf:
        if spec.idx in inputs.leaf_var:  # (track refuses an array held twice: never here)
            raise AssertionError("an array tracked twice")
        inputs.walk(expr, value, spec, False)
        return
    kind = spec.kind
    t = src.const(spec.t, "T")
    if kind == "value":
        if isinstance(value, np.floating):
            c = src.const(float(value))
            cond = number_condition(expr, float(value), c)
        else:
            c = src.const(value)
            cond = number_condition(expr, value, c) if spec.t in (float, complex) else f"{expr} == {c}"
        src.guard("value", f"{expr}.__class__ is {t} and {cond}", f"{label} == {value!r}")
    elif kind == "ident":
        state = callable_state(value)
        src.guard("value", f"{expr} is {src.const(value)}", f"{label} is {getattr(value, '__qualname__', value)!r}")
        if state is not None:
            src.guard("code", f"_same_state({expr}, {src.const(state, 'S')})",
                      f"{label} keeps its code, defaults and keyword defaults")
    elif kind == "seq":
        src.guard("type", f"{expr}.__class__ is {t} and len({expr}) == {len(spec.subs)}",
                  f"{label}: {spec.t.__name__} of {len(spec.subs)}")
        for k, sub in enumerate(spec.subs):
            _item(inputs, f"{expr}[{k}]", f"{label}[{k}]", value[k], sub)
    elif kind == "dict":
        keys = src.const(tuple(spec.subs), "K")
        src.guard("type", f"{expr}.__class__ is {t} and tuple({expr}) == {keys}",
                  f"{label}: dict with keys {tuple(spec.subs)!r} in this order")
        for k, sub in spec.subs.items():
            _item(inputs, f"{expr}[{k!r}]", f"{label}[{k!r}]", value[k], sub)
    else:
        same = src.const(same_class, "F")
        state = src.const(class_state(spec.t), "S")
        keys = src.const(tuple(spec.subs), "K")
        src.guard("object", f"{expr}.__class__ is {t} and {same}({t}, {state}) and tuple({expr}.__dict__) == {keys}",
                  f"{label}: a {spec.t.__qualname__} with attributes {', '.join(spec.subs)} (in this order), "
                  "its class's attributes unchanged")
        attrs = inputs.temp()
        src.emit(f"{attrs} = {expr}.__dict__")
        for k, sub in spec.subs.items():
            _item(inputs, f"{attrs}[{k!r}]", f"{label}.{k}", value.__dict__[k], sub)


def _item(inputs: Any, read: str, label: str, value: Any, sub: Any) -> None:
    var = inputs.temp()
    inputs.labels[var] = label
    inputs.src.emit(f"{var} = {read}")
    walk(inputs, var, value, sub)


def walk_argument(inputs: Any, expr: str, value: Any, spec: Any, fresh: bool, error: type) -> None:
    """`walk` of an object argument, `walk_dataclass` of a dataclass, `walk_pytree` of a registered
    pytree; `error` (compiled/source.py's Ineligible) raised where the program cannot take it."""
    if type(spec) is Node:
        walk(inputs, expr, value, spec)
        return
    if spec[0] == "pytree":
        walk_pytree(inputs, expr, value, spec, fresh)
        return
    try:
        walk_dataclass(inputs, expr, value, spec, fresh)
    except Unobservable as exc:
        raise error(str(exc)) from None


def walk_dataclass(inputs: Any, expr: str, value: Any, spec: tuple, fresh: bool) -> None:
    """The guards and variables of a dataclass argument (spec `("dataclass", original, {field:
    spec})` of runtime/pytree.py), differentiated (`fresh`) or not: its class as an object's, its
    attributes exactly its fields, each field walked as an argument. Raises Unobservable."""
    src = inputs.src
    t = type(value)
    fields = tuple(spec[2])
    why = _class_refusal(t)
    attrs = getattr(value, "__dict__", None)
    if why is None and attrs is not None and tuple(attrs) != fields:
        why = f"a {t.__qualname__} object with attributes that are not its fields"
    if why is not None:
        raise Unobservable(f"a dataclass argument: {why}")
    tc = src.const(t, "T")
    cond = f"{expr}.__class__ is {tc} and {src.const(same_class, 'F')}({tc}, {src.const(class_state(t), 'S')})"
    if attrs is not None:
        cond += f" and tuple({expr}.__dict__) == {src.const(fields, 'K')}"
    src.guard("object", cond, f"{inputs.label(expr)}: a {t.__qualname__} with fields {', '.join(fields)}, "
              "its class's attributes unchanged")
    for name, sub in spec[2].items():
        var = inputs.temp()
        inputs.labels[var] = f"{inputs.label(expr)}.{name}"
        src.emit(f"{var} = {expr}.__dict__[{name!r}]" if attrs is not None else f"{var} = {expr}.{name}")
        inputs.walk(var, getattr(value, name), sub, fresh)


def dataclass_gradient(original: Any, fields: dict[str, Any]) -> Any:
    """A dataclass's gradient as runtime/pytree.py's `gradient` makes it: a copy with each field
    set to its gradient."""
    out = pytrees.shallow_copy(original)
    for name, v in fields.items():
        object.__setattr__(out, name, v)
    return out


def copies(values: Any, specs: list, tape: Any) -> set[int]:
    """The ids of those of `values` that are the capture's copy of a differentiated dataclass
    argument (spec `("dataclass", original, fields)`): of its class, with exactly its fields, each
    the tracked leaf or the value of the capture's (a Python callee may be handed one: all its
    state is the program's)."""
    found: set[int] = set()
    dcs = [s for s in specs if type(s) is tuple and s and s[0] == "dataclass"]
    for v in values:
        for spec in dcs:
            if type(v) is type(spec[1]) and _is_copy(v, spec, tape):
                found.add(id(v))
    return found


def _is_copy(v: Any, spec: tuple, tape: Any) -> bool:
    attrs = getattr(v, "__dict__", None)
    if type(attrs) is not dict or tuple(attrs) != tuple(spec[2]):
        return False
    for name, sub in spec[2].items():
        now = attrs[name]
        if type(sub) is pytree.Leaf:
            if now is not tape.values[sub.idx]:
                return False
        elif sub is not None or type(now) not in _VALUES or now != getattr(spec[1], name) or \
                type(now) is not type(getattr(spec[1], name)):
            return False
    return True


def shift_wrt(wrt: Any, offset: int) -> Any:
    """`wrt` of a bound method or partial as the positions of its function's parameters (the bound
    arguments in front); None where it is not ints from the start, names and tuples or lists of them."""
    if isinstance(wrt, bool):
        return None
    if isinstance(wrt, int):
        return wrt + offset if wrt >= 0 else None
    if isinstance(wrt, str):
        return wrt
    if isinstance(wrt, (tuple, list)):
        items = [shift_wrt(w, offset) for w in wrt]
        return None if any(w is None for w in items) else type(wrt)(items)
    return None


def track_read(tape: Any, value: Any) -> None:
    """`CaptureTape.track_read`: an array read from a global or a closure tracked as a leaf; an object
    of a plain class taken apart as an object argument is (`track`; raises Unobservable), its spec
    kept for the program's walk of it (compiled/source.py `static_guards`)."""
    if type(value) is _ndarray:
        tape.leaf(value)
    elif not tape.takes_objects:
        raise Unobservable("reads an object from a global or a closure, which only a gradient's capture takes apart")
    else:
        tape.taken[id(value)] = track(value, tape, tape.objects)


def holds_built(tape: Any, args: tuple, kwargs: Optional[dict]) -> bool:
    """`CaptureTape.holds_built`: whether a class's call is handed an object the run built."""
    return bool(tape.local) and holds_any({id(o) for o in tape.local}, (*args, *(kwargs or {}).values()))


def holds_any(ids: set[int], values: Any, depth: int = 0) -> bool:
    """Whether `values` (a tuple, list or dict's values, to depth 4) hold an object whose id is in `ids`."""
    for v in values:
        if id(v) in ids:
            return True
        t = type(v)
        if depth < 4 and (t is list or t is tuple or t is dict) and holds_any(ids, v.values() if t is dict else v,
                                                                            depth + 1):
            return True
    return False


def local_refusal(cls: type) -> Optional[str]:
    """Why an object of `cls` built inside the call from differentiated values cannot be a local of
    a capture (its attributes set and read only through Python code the capture runs), or None."""
    for hook in ("__getattribute__", "__getattr__", "__setattr__", "__delattr__", "__del__"):
        if getattr(cls, hook, None) is not getattr(object, hook, None):  # (a program never makes the object)
            return f"it defines {hook}"
    return _class_refusal(cls)


_WRITE_ATTR = {"STORE_ATTR", "DELETE_ATTR"}
_SELF_LOADS = {"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR"}


def without_self_writes(code: types.CodeType, reasons: list[str], f: Any = None, tape: Any = None) -> list[str]:
    """`reasons` (compiled/eligibility.py's) less "writes an attribute" when every attribute write
    of `code` is `self.name = value` or `self.name op= value` (its first parameter, never rebound); and
    less those of its zero-argument `super()` lookups (compiled/reach_super.py) and of attribute reads
    off a parameter that holds a number in the calls of `f` the capture `tape` saw (compiled/reach_params.py)."""
    import dis

    from bytegrad.compiled.reach_params import allowed_param_reads
    from bytegrad.compiled.reach_super import allowed_super

    reasons = allowed_super(code, reasons)
    if f is not None:
        reasons = allowed_param_reads(f, reasons, tape)
    if not code.co_argcount:
        return reasons
    from bytegrad.compiled.reach_self import augmented_self_write

    me = code.co_varnames[0]
    prev: Any = None
    instrs = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    for k, ins in enumerate(instrs):
        if ins.opname in ("STORE_FAST", "DELETE_FAST", "STORE_FAST_STORE_FAST", "STORE_FAST_LOAD_FAST") and \
                me in str(ins.argval):
            return reasons
        if ins.opname in _WRITE_ATTR:
            ok = prev is not None and ((prev.opname in _SELF_LOADS and prev.argval == me) or
                                      (prev.opname == "LOAD_FAST_LOAD_FAST" and prev.argval[1] == me)) \
                or augmented_self_write(instrs, k, me)  # `self.total += v`
            if not ok:
                return reasons
        prev = ins
    return [r for r in reasons if not r.startswith("writes an attribute")]


def walk_pytree(inputs: Any, expr: str, value: Any, spec: tuple, fresh: bool) -> None:
    """The guards and variables of an argument of a class registered with `register_pytree` (spec
    `("pytree", node, aux, [spec])` of runtime/pytree.py): the registration the same object, the
    registered flatten called on the call's argument (as the general path calls it on every call),
    its aux the capture's (`same_value`: by value, or identity), its children walked as a list."""
    src = inputs.src
    node, aux, subs = spec[1], spec[2], spec[3]
    label = inputs.label(expr)
    n = src.const(node, "N")
    src.guard("object", f"{src.const(node_of, 'F')}({expr}) is {n}",
              f"{label}: a {node.cls.__qualname__}, registered as at capture")
    var = inputs.temp()
    src.emit(f"{var} = {src.const(pytrees.flatten, 'F')}({n}, {expr})")
    src.guard("value", f"len({var}[0]) == {len(subs)} and _same_value({var}[1], {src.const(aux, 'A')})",
              f"{label} flattens to {len(subs)} children and the aux it had at capture")
    children = pytrees.flatten(node, value)[0]
    for k, sub in enumerate(subs):
        child = inputs.temp()
        inputs.labels[child] = f"{label}<child {k}>"
        src.emit(f"{child} = {var}[0][{k}]")
        inputs.walk(child, children[k], sub, fresh)


def node_of(value: Any) -> Any:
    """The registration of `value`'s class (`register_pytree`), or None."""
    return pytrees.node_for(value)


def pytree_gradient(node: Any, aux: Any, children: list) -> Any:
    """A registered pytree's gradient as runtime/pytree.py's `gradient` makes it."""
    return pytrees.unflatten(node, aux, children)
