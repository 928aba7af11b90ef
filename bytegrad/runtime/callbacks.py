"""C functions that call back into Python code: run the Python they call rewritten.

`getattr(obj, "p")` runs a property's getter from C, `dict(m)` a mapping's `keys` and `__getitem__`,
`np.asarray(obj)` its `__array__`, `d[k]` a `defaultdict`'s factory or a dict subclass's
`__missing__`. Called plain, that Python code computes with differentiated values out of the
tape's sight, and its results carry no derivative. Each handler here does the C function's work
through the hooks of `runtime.abi`, so the Python it reaches runs rewritten like any callee.
`dispatch.dispatch` consults `dispatch.CALLBACKS` (keyed by the function) and
`dispatch.CALL_HANDLERS` (keyed by the callable's type); `abi.getitem` and `dispatch.construct` call
`missing` and `metaclass_call`.

This module fills those two tables when it is imported (the package's __init__ imports it), rather than being
imported by dispatch: a genuine cycle, not a dodge of the layering. Its handlers do the C
function's work through `abi`'s hooks and `dispatch` itself, and abi imports dispatch, so dispatch
cannot import this module before it is complete.
"""
from __future__ import annotations

import collections
import operator
import types
from typing import Any, Optional

import numpy as np

from bytegrad import _operators
from bytegrad.runtime import abi
from bytegrad.runtime import keys as _keys
from bytegrad.runtime.dispatch import CALL_HANDLERS, CALLBACKS, call_python, class_attr, dispatch
from bytegrad.runtime.records import Site
from bytegrad.runtime.tape import Tape

_FunctionType = types.FunctionType


def _getattr(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: Optional[dict]) -> Any:
    """`getattr(obj, name[, default])`, as `obj.name` would run in rewritten code."""
    if kwargs or not 2 <= len(args) <= 3 or type(args[1]) is not str:
        return fn(*args, **(kwargs or {}))
    try:
        return abi.getattr_(tape, site, args[0], args[1])
    except AttributeError:
        if len(args) == 3:
            return args[2]
        raise


def _setattr(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: Optional[dict]) -> Any:
    """`setattr(obj, name, value)`, as `obj.name = value` would run in rewritten code."""
    if kwargs or len(args) != 3 or type(args[1]) is not str:
        return fn(*args, **(kwargs or {}))
    abi.setattr_(tape, site, args[2], args[0], args[1])
    return None


def _attrgetter(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: Optional[dict]) -> Any:
    """`operator.attrgetter("a.b", "c")(obj)`: each dotted name read through `abi.getattr_`."""
    names = fn.__reduce__()[1]
    if kwargs or len(args) != 1 or not all(type(n) is str for n in names):
        return fn(*args, **(kwargs or {}))
    values = []
    for name in names:
        v = args[0]
        for part in name.split("."):
            v = abi.getattr_(tape, site, v, part)
        values.append(v)
    return values[0] if len(values) == 1 else tuple(values)


def _python_mapping(m: Any) -> bool:
    """A mapping whose items C would read through Python methods (`keys`, `__getitem__`)."""
    t = type(m)
    if isinstance(m, dict) and t.__iter__ is dict.__iter__:
        return False  # C copies a dict (and a subclass keeping dict's iteration) without calling Python
    return hasattr(t, "keys") and (type(getattr(t, "keys", None)) is _FunctionType or
                                   type(getattr(t, "__getitem__", None)) is _FunctionType)


def _dict(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: Optional[dict]) -> Any:
    """`dict(mapping)` (and `dict.update`'s reading of it) with a mapping written in Python."""
    if len(args) != 1 or not _python_mapping(args[0]):
        if tape.capturing and fn is dict:  # (`dict([(t, v)])`: which entries it keeps depends on t)
            args = _keys.dict_source(tape, site, fn, args, kwargs)
        return fn(*args, **(kwargs or {}))
    m = args[0]
    keys = dispatch(tape, site, getattr(m, "keys"), (), None)
    out = {k: abi.getitem(tape, site, m, k) for k in keys}
    if kwargs:
        out.update(kwargs)
    return out


def _asarray(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: Optional[dict]) -> Any:
    """`np.asarray(obj)` (`np.array`, `np.asanyarray`) of an object whose `__array__` is Python."""
    meth = class_attr(type(args[0]), "__array__") if args else None
    if type(meth) is not _FunctionType:
        return NotImplemented  # no Python `__array__`: the rule of `fn` as usual
    value = call_python(tape, site, meth, (args[0],), None)
    return dispatch(tape, site, fn, (value,) + tuple(args[1:]), kwargs)


def missing(tape: Tape, site: Site, obj: dict, key: Any) -> Any:
    """`obj[key]` for a dict subclass when `key` is absent: `__missing__` or the default factory,
    run rewritten; NotImplemented when neither applies (the C lookup raises KeyError as usual)."""
    meth = class_attr(type(obj), "__missing__")
    if type(meth) is _FunctionType:
        return call_python(tape, site, meth, (obj, key), None)
    if isinstance(obj, collections.defaultdict) and obj.default_factory is not None:
        value = dispatch(tape, site, obj.default_factory, (), None)
        obj[key] = value
        return value
    return NotImplemented


def metaclass_call(tape: Tape, site: Site, cls: type, args: tuple, kwargs: Optional[dict]) -> Any:
    """`cls(*args)` whose metaclass defines `__call__` in Python: that `__call__`, rewritten."""
    call = class_attr(type(cls), "__call__")
    if type(call) is not _FunctionType:
        return NotImplemented
    return call_python(tape, site, call, (cls,) + tuple(args), kwargs)


# a handler returns NotImplemented where the call needs no callback (dispatch goes on as usual)
CALLBACKS.update({getattr: _getattr, setattr: _setattr, dict: _dict, np.asarray: _asarray,
                      np.array: _asarray, np.asanyarray: _asarray,
                      "missing": missing, "metaclass": metaclass_call})
CALL_HANDLERS[operator.attrgetter] = _attrgetter


def _dunder_ops() -> dict[str, tuple[Any, bool, bool]]:
    """{dunder name: (the hook of the operator it spells, reflected, in place)}: `__add__`, `__radd__`,
    `__iadd__`... for every binary operator."""
    table = {}
    for op in _operators.BINARY.values():
        hook = abi.BINARY_HOOKS[op.symbol]
        name = op.reflected[3:]  # "__radd__" -> "add__"
        if op.inplace:
            table["__i" + name] = (hook, False, True)
        else:
            table["__" + name] = (hook, False, False)
            table[op.reflected] = (hook, True, False)
    return table


_DUNDER_OPS = _dunder_ops()
#: dunders that spell a call: `a.__neg__()` is `-a` (operator.neg's rule), `a.__float__()` is `float(a)`
_DUNDER_CALLS = {"__neg__": operator.neg, "__pos__": operator.pos, "__abs__": abs, "__invert__": operator.invert,
                 "__float__": float, "__complex__": complex}


def _dunder(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: Optional[dict]) -> Any:
    """An explicit dunder call runs as the statement or expression it spells, through the same hook:
    `a.__setitem__(k, v)` as `a[k] = v` (a write into a differentiated input is a MutationError, into
    an intermediate a recorded write), `a.__iadd__(b)` as `a += b`, `a.__add__(b)` as `a + b`
    (when the type takes `b`: NotImplemented is returned as the plain call returns it),
    `a.__getitem__(k)` as `a[k]`, `a.__neg__()` as `-a`, `a.__float__()` as `float(a)`; also spelled
    unbound, `np.ndarray.__setitem__(a, k, v)`."""
    if kwargs:
        return NotImplemented
    if type(fn) is types.MethodWrapperType:
        obj, rest = fn.__self__, args
    elif args and isinstance(args[0], fn.__objclass__):
        obj, rest = args[0], args[1:]
    else:
        return NotImplemented
    name = fn.__name__
    if name in ("__setitem__", "__getitem__") and type(getattr(type(obj), name, None)) is types.FunctionType:
        return _base_item(tape, site, fn, obj, rest, args)
    if name == "__setitem__" and len(rest) == 2:
        abi.setitem(tape, site, rest[1], obj, rest[0])
        return None
    if name == "__getitem__" and len(rest) == 1:
        return abi.getitem(tape, site, obj, rest[0])
    if name in _DUNDER_CALLS and not rest:
        return dispatch(tape, site, _DUNDER_CALLS[name], (obj,), None)
    op = _DUNDER_OPS.get(name)
    if op is None or len(rest) != 1:
        return NotImplemented
    hook, reflected, inplace = op
    if not inplace and fn(*args) is NotImplemented:  # (an out-of-place operator computes nothing else)
        return NotImplemented
    return hook(tape, site, rest[0], obj) if reflected else hook(tape, site, obj, rest[0])


def _base_item(tape: Tape, site: Site, fn: Any, obj: Any, rest: tuple, args: tuple) -> Any:
    """`super().__setitem__(k, v)` or `super().__getitem__(k)` inside a class's own `__setitem__`/`__getitem__`
    (written in Python, running rewritten): the base class's store or read. Spelled as `obj[k] = v` it would
    call the override again, without end. A list's or a dict's is the plain call (their entries are tracked
    as they are); an ndarray subclass's store is refused where a derivative would flow through it
    (`abi.subclass_store`), and a read of a tracked one goes through the indexing rule."""
    if isinstance(obj, np.ndarray):
        if fn.__name__ == "__setitem__" and len(rest) == 2:
            abi.subclass_store(tape, site, obj, rest[1])
        elif tape.ids.get(id(obj)) is not None:
            return abi.getitem(tape, site, obj, rest[0])
    return fn(*args)


CALL_HANDLERS[types.MethodWrapperType] = _dunder
CALL_HANDLERS[types.WrapperDescriptorType] = _dunder
