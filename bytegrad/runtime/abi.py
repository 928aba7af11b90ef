"""The entry points that rewritten code calls: `hook(tape, site, *operands)` for every active site.

Each hook runs the plain operation when no tape is active or no operand is being differentiated;
otherwise it looks up the rule, runs the primal and records a node. Emitted code calls these names
and, for a fused elementwise expression, `runtime.fused.fused_hook` (in the checking mode, at
sites left alone, their guarded twins: runtime/guards.py). The hot paths (one-argument
calls, binary operators, subscripts) record inline, their commonest cases pushing onto the tape
without a method call; everything else delegates: calls to runtime/dispatch.py, recording to runtime/recording.py,
operators off the fast path to runtime/operators.py, writes to runtime/writes.py.
"""
from __future__ import annotations

import functools
import operator
import types
from typing import Any, Callable, Optional

import numpy as np

from bytegrad import _operators
from bytegrad.errors import MutationError, NoRuleError, RuleCaseError
from bytegrad.rules import registry
from bytegrad.rules.registry import RuleKind
from bytegrad.runtime import keys, writes
from bytegrad.runtime.backward import (  # the record kinds (runtime/records.py)
    ELEMENTWISE as EW_RECORD, RULE as RULE_RECORD, RULE_TRUSTED as TRUSTED_RECORD, UNARY as UNARY_RECORD,
)
from bytegrad.runtime.dispatch import (
    CALLBACKS, PLAIN, call_python, class_attr, dispatch, other_case, record_rule, set_rewriter, write_value,
)
from bytegrad.runtime.operators import (
    binary_tracked, inplace_array, list_as_array, python_operator, user_binary,
)
from bytegrad.runtime.records import Site
from bytegrad.runtime.recording import as_array, parent_of, push_output, trackable, untracked_views
from bytegrad.runtime.tape import Tape, current_tape

__all__ = ["Site", "current_tape", "BINARY_HOOKS", "call", "call0", "call1", "call2",
           "call_kw", "call_ex", "getitem", "getslice", "setitem", "setslice", "getattr_", "neg", "pos",
           "iter_", "unpack", "before_with", "set_rewriter", "predicate_hook"]

_ndarray = np.ndarray
_float64 = np.float64
_FunctionType = types.FunctionType
_DataDescriptors = (types.GetSetDescriptorType, types.MemberDescriptorType)  # `.real` of an array; of a complex
_rules_get = registry.get_rule
_deferred = registry.DEFERRED_PENDING  # bytegrad's own rules modules not imported yet (shrinks)
_PLAIN = PLAIN
ELEMENTWISE = RuleKind.ELEMENTWISE
RRULE = RuleKind.RRULE


# ---- hooks: calls -----------------------------------------------------------------------------


def call0(tape: Optional[Tape], site: Site, fn: Any) -> Any:
    if tape is None:
        return fn()
    return dispatch(tape, site, fn, (), None)


def call1(tape: Optional[Tape], site: Site, fn: Any, a: Any) -> Any:
    if tape is None:
        return fn(a)
    try:
        rule = _rules_get(fn)
    except TypeError:
        rule = None
    if rule is not None and rule.kind is ELEMENTWISE:
        i = tape.ids.get(id(a))
        if i is None:
            if tape.owners or type(a) not in _PLAIN or type(a) is list:
                return dispatch(tape, site, fn, (a,), None)
            return fn(a)
        if tape.stale and i in tape.stale:
            i = writes.refresh(tape, site, i)
        out = fn(a)
        values = tape.values
        tape.ids[id(out)] = len(values)
        values.append(out)
        tape.nodes.append((UNARY_RECORD, i, site, rule, (a,), fn))
        return out
    if rule is not None and rule.kind is RRULE and rule.rrule is not None and type(a) is not list \
            and type(a) is not tuple:
        i = tape.ids.get(id(a))
        if i is None:
            if tape.owners or type(a) not in _PLAIN:
                return dispatch(tape, site, fn, (a,), None)
            return fn(a)
        if tape.stale and i in tape.stale:
            i = writes.refresh(tape, site, i)
        try:
            out, pullback = rule.rrule(a)
        except RuleCaseError as exc:
            if exc.loc is not None:
                raise
            return other_case(tape, site, fn, (a,), None, exc)
        node = (TRUSTED_RECORD if rule.trusted else RULE_RECORD, (i,), site, pullback, (a,), fn)
        to = type(out)
        if to is _ndarray or to is float or to is _float64:
            return tape.push(node, out)
        return push_output(tape, node, out)
    return dispatch(tape, site, fn, (a,), None)


def call2(tape: Optional[Tape], site: Site, fn: Any, a: Any, b: Any) -> Any:
    if tape is None:
        return fn(a, b)
    return dispatch(tape, site, fn, (a, b), None)


def call(tape: Optional[Tape], site: Site, fn: Any, args: tuple) -> Any:
    if tape is None:
        return fn(*args)
    return dispatch(tape, site, fn, args, None)


def call_kw(tape: Optional[Tape], site: Site, fn: Any, packed: tuple) -> Any:
    names = packed[-1]
    k = len(names)
    args = packed[:-1]
    kwargs = dict(zip(names, args[len(args) - k:]))
    args = args[: len(args) - k]
    if tape is None:
        return fn(*args, **kwargs)
    return dispatch(tape, site, fn, args, kwargs)


def call_ex(tape: Optional[Tape], site: Site, fn: Any, args: Any, kwargs: Optional[dict]) -> Any:
    if tape is None:
        return fn(*args, **kwargs) if kwargs else fn(*args)
    if type(args) is not tuple:  # `f(*x)`: a differentiated array unpacks into its rows
        args = unpack(tape, site, args)
    return dispatch(tape, site, fn, tuple(args), dict(kwargs) if kwargs else None)


_PREDICATE_HOOKS: dict[Any, Callable[..., Any]] = {}


def predicate_hook(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The hook of a comparison, `is`, `in`, `not` or truth test `fn` with a tracked operand: the
    plain operation, which a capture run records as a decision its program must check."""
    hook = _PREDICATE_HOOKS.get(fn)
    if hook is None:
        def hook(tape: Tape, site: Site, *operands: Any) -> Any:  # (called with a tracked operand: a tape)
            out = fn(*operands)
            if tape.capturing:
                tape.check(fn, operands, None, out, site)
            return out

        hook.__qualname__ = f"predicate_hook.<{getattr(fn, '__name__', fn)}>"
        hook = _PREDICATE_HOOKS[fn] = hook
    return hook


# ---- hooks: operators -----------------------------------------------------------------------


def _make_binary(op: Any) -> Callable[..., Any]:
    def binary_hook(tape: Optional[Tape], site: Site, a: Any, b: Any) -> Any:
        if tape is not None:
            ids = tape.ids
            ia = ids.get(id(a))
            ib = ids.get(id(b))
            ta, tb = type(a), type(b)
            mixed = ta is not _ndarray or tb is not _ndarray  # (two arrays skip the next two checks)
            if mixed and (ta is list or ta is tuple or tb is list or tb is tuple) and list_as_array(ids, op, a, b):
                return dispatch(tape, site, op, (a, b), None)  # records the list's scalars too
            if ia is not None or ib is not None:
                if mixed and (ta not in _PLAIN or tb not in _PLAIN) and python_operator(op, ta, tb):
                    return user_binary(tape, site, op, a, b)  # `V(x) * x`: V's operator, rewritten
                rule = _rules_get(op)
                if rule is None or tape.stale:
                    return binary_tracked(tape, site, op, a, b, ia, ib)
                if rule.kind is not ELEMENTWISE:
                    if rule.kind is not RRULE or rule.rrule is None:
                        return binary_tracked(tape, site, op, a, b, ia, ib)
                    try:
                        out, pullback = rule.rrule(a, b)  # matmul and friends, recorded inline
                    except RuleCaseError as exc:
                        if exc.loc is not None:
                            raise
                        return other_case(tape, site, op, (a, b), None, exc)
                    node = (TRUSTED_RECORD if rule.trusted else RULE_RECORD, (ia, ib), site, pullback, (a, b), op)
                    if type(out) is _ndarray:
                        values = tape.values
                        ids[id(out)] = len(values)
                        values.append(out)
                        tape.nodes.append(node)
                        return out
                    return push_output(tape, node, out)
                out = op(a, b)
                to = type(out)
                if to is _ndarray or to is float or to is _float64 or trackable(out):
                    if ta is list or ta is tuple or tb is list or tb is tuple:  # `x * [2.0]`: the
                        a, b = as_array(a), as_array(b)                       # partials need arrays
                    values = tape.values
                    ids[id(out)] = len(values)
                    values.append(out)
                    tape.nodes.append((EW_RECORD, (ia, ib), site, rule, (a, b), op))
                elif tape.capturing and out is not None:  # (`"%s" % t`: data a program would hold as a constant)
                    tape.refuse(f"computes a {to.__name__} from a differentiated value with `{op.__name__}`", site)
                return out
            if tape.owners:
                ia, ib = untracked_views(tape, site, (a, b), (None, None))
                if ia is not None or ib is not None:
                    return binary_tracked(tape, site, op, a, b, ia, ib)
            if ta not in _PLAIN or tb not in _PLAIN:
                return user_binary(tape, site, op, a, b)
        return op(a, b)

    binary_hook.__name__ = f"binary_{op.__name__}"
    return binary_hook


def _make_inplace(iop: Any, op: Any) -> Callable[..., Any]:
    def inplace_hook(tape: Optional[Tape], site: Site, a: Any, b: Any) -> Any:
        if tape is not None:
            ids = tape.ids
            ia = ids.get(id(a))
            ib = ids.get(id(b))
            if type(a) is _ndarray:
                return inplace_array(tape, site, iop, op, a, b, ia, ib)
            ta, tb = type(a), type(b)
            untracked = ia is None and ib is None
            if ta not in _PLAIN:
                meth = getattr(ta, f"__i{op.__name__.strip('_')}__", None)
                if type(meth) is _FunctionType:
                    out = call_python(tape, site, meth, (a, b), None)
                    if out is not NotImplemented:
                        return out
                if untracked or python_operator(op, ta, tb):
                    return user_binary(tape, site, op, a, b)
            elif tb not in _PLAIN and (untracked or python_operator(op, ta, tb)):
                return user_binary(tape, site, op, a, b)
            if not untracked:
                return binary_tracked(tape, site, op, a, b, ia, ib)
        return iop(a, b)

    inplace_hook.__name__ = f"inplace_{op.__name__}"
    return inplace_hook


#: the hook of each binary operator, by symbol ("+", "+="): the rewrite emits them for BINARY_OP
BINARY_HOOKS: dict[str, Callable[..., Any]] = {
    sym: _make_inplace(op.fn, op.base) if op.inplace else _make_binary(op.fn) for sym, op in _operators.BINARY.items()}


def _make_unary(op: Any) -> Callable[..., Any]:
    def unary_hook(tape: Optional[Tape], site: Site, a: Any) -> Any:
        if tape is not None:
            i = writes.current(tape, site, a)
            if i is not None:
                rule = _rules_get(op)
                if rule is None:
                    raise NoRuleError(op, site.loc())
                return dispatch(tape, site, op, (a,), None)
        return op(a)

    unary_hook.__name__ = f"unary_{op.__name__}"
    return unary_hook


def _make_unary_user(op: Any, dunder: str) -> Callable[..., Any]:
    plain = _make_unary(op)

    def unary_hook(tape: Optional[Tape], site: Site, a: Any) -> Any:
        if tape is not None and type(a) not in _PLAIN and tape.ids.get(id(a)) is None:
            meth = getattr(type(a), dunder, None)
            if type(meth) is _FunctionType:
                return call_python(tape, site, meth, (a,), None)
        return plain(tape, site, a)

    unary_hook.__name__ = f"unary_{op.__name__}"
    return unary_hook


neg = _make_unary_user(operator.neg, "__neg__")


pos = _make_unary_user(operator.pos, "__pos__")


# ---- hooks: subscripts, attributes, iteration -----------------------------------------------------


_getitem = operator.getitem


def getitem(tape: Optional[Tape], site: Site, obj: Any, key: Any) -> Any:
    if tape is not None:
        i = tape.ids.get(id(obj))
        if i is not None:
            rule = _rules_get(_getitem)
            if rule is None or rule.rrule is None:
                raise NoRuleError(_getitem, site.loc())
            if tape.stale and i in tape.stale:
                i = writes.refresh(tape, site, i)
            # an index never carries a derivative: only the container is a parent
            out, pullback = rule.rrule(obj, key)
            node = (TRUSTED_RECORD if rule.trusted else RULE_RECORD, (i, None), site, pullback, (obj, key), _getitem)
            if type(out) is _ndarray or type(out) is _float64:
                values = tape.values
                tape.ids[id(out)] = len(values)
                values.append(out)
                tape.nodes.append(node)
                return out
            return push_output(tape, node, out)
        to = type(obj)
        if tape.capturing and to is not _ndarray:  # `d[t]`: which entry depends on t's value
            keys.refuse_subscript(tape, site, key, obj)
        if to is _ndarray:
            if tape.owners and writes.view_parent(tape, site, obj) is not None:
                return getitem(tape, site, obj, key)
        elif to not in _PLAIN:
            method = getattr(to, "__getitem__", None)
            if type(method) is _FunctionType:
                return call_python(tape, site, method, (obj, key), None)
            if isinstance(obj, dict) and key not in obj:  # `__missing__`, a defaultdict's factory
                out = CALLBACKS["missing"](tape, site, obj, key)
                if out is not NotImplemented:
                    return out
        if tape.capturing:  # an index read where nothing is recorded (compiled/writes.py)
            tape.note_index(key)
    return obj[key]


def getslice(tape: Optional[Tape], site: Site, obj: Any, start: Any, stop: Any) -> Any:
    return getitem(tape, site, obj, slice(start, stop))


def setitem(tape: Optional[Tape], site: Site, value: Any, obj: Any, key: Any) -> None:
    if tape is None or type(obj) is not _ndarray:
        if tape is not None and tape.capturing:  # `d[t] = v`: which entry depends on t's value
            keys.refuse_subscript(tape, site, key, obj)
        if tape is not None and type(obj) not in _PLAIN:
            meth = class_attr(type(obj), "__setitem__")
            if type(meth) is _FunctionType:  # a user container's `__setitem__`, rewritten
                call_python(tape, site, meth, (obj, key, value), None)
                return
            if type(obj) is _FlatIter and type(obj.base) is _ndarray:  # `a.flat[k] = v`: flat positions
                base = obj.base                                          # as indices into `a`
                write_value(tape, site, base, np.unravel_index(np.arange(base.size)[key], base.shape), value)
                return
            if isinstance(obj, _ndarray):
                subclass_store(tape, site, obj, value)
        obj[key] = value
        return
    write_value(tape, site, obj, key, value)


_FlatIter = np.flatiter


def subclass_store(tape: Tape, site: Site, obj: np.ndarray, value: Any) -> None:
    """Refuse a store into an instance of an ndarray subclass that a derivative would flow through (the value
    or the array is differentiated): the tape records writes into plain ndarrays only, and a plain store
    would drop the derivative without a word. A store of constants into a constant array is plain; so is one
    a capture run tracks but the general path does not (`Tape.plain_write`: the capture is refused)."""
    ids = tape.ids
    parents = [p for p in (parent_of(ids, value), ids.get(id(obj)), ids.get(id(writes.owner_of(obj)))) if p is not None]
    if parents and not tape.plain_write(parents, site, [], why=(  # (a capture's: those the general path tracks too)
            f"stores into an instance of {type(obj).__qualname__}, a subclass of numpy.ndarray, values that depend on "
            "no differentiated argument: the general path stores them as they are, and a program would track them")):
        raise MutationError(
            f"this write stores into an instance of {type(obj).__qualname__}, a subclass of numpy.ndarray, and a "
            "derivative would flow through it: bytegrad records writes into plain ndarrays only.", site.loc(),
            f"write into a plain array (`np.asarray(a)`, or make it without `.view({type(obj).__name__})`).")


def setattr_(tape: Optional[Tape], site: Site, value: Any, obj: Any, name: str) -> None:
    """`obj.name = value` where value may be differentiated: a property setter, a descriptor's
    `__set__` or a `__setattr__` written in Python runs rewritten, like any callee."""
    if tape is not None and type(obj) not in _PLAIN:
        found = _python_setter(type(obj), obj, name, value)
        if found is not None:
            call_python(tape, site, found[0], found[1], None)
            return
    setattr(obj, name, value)


def _python_setter(cls: type, obj: Any, name: str, value: Any) -> Optional[tuple[Any, tuple]]:
    """(function, arguments) of the Python code that `obj.name = value` runs, or None."""
    desc = class_attr(cls, name)
    if type(desc) is property:
        if type(desc.fset) is _FunctionType:
            return desc.fset, (obj, value)
    elif desc is not None and type(getattr(type(desc), "__set__", None)) is _FunctionType:
        return type(desc).__set__, (desc, obj, value)
    hook = class_attr(cls, "__setattr__")
    return (hook, (obj, name, value)) if type(hook) is _FunctionType else None


def setslice(tape: Optional[Tape], site: Site, value: Any, obj: Any, start: Any, stop: Any) -> None:
    setitem(tape, site, value, obj, slice(start, stop))


def getattr_(tape: Optional[Tape], site: Site, obj: Any, name: str) -> Any:
    """`obj.name` where obj may be differentiated: array attributes with rules (`.T`, `.real`), and
    properties written in Python, whose getter is rewritten like any other callee."""
    if tape is not None:
        if tape.ids.get(id(obj)) is not None:
            desc: Any = getattr(type(obj), name, None)
            # only data descriptors (`.T`, `.real`) are values; methods are bound and called later
            rule = _rules_get(desc) if type(desc) in _DataDescriptors else None
            if rule is None and _deferred and type(desc) in _DataDescriptors and registry.load_deferred(desc):
                rule = _rules_get(desc)  # (its rules module is one rules/_deferred.py defers)
            if rule is not None and rule.kind is RRULE:
                return record_rule(tape, site, rule, desc.__get__, (obj,), None)
            if (name == "real" or name == "imag") and type(obj) is not _ndarray and trackable(obj):
                # a scalar's `.real` (Python's complex has no rule of its own): as a 0-d array's
                return getitem(tape, site, getattr_(tape, site, dispatch(tape, site, np.asarray, (obj,), None),
                                                    name), ())
            if rule is None and (type(obj) is _ndarray or isinstance(obj, np.generic)) and name in _ARRAY_DATA_ATTRS \
                    and not (tape.capturing and tape.plain((type(obj), name), (obj,), None, site)):  # (compiled/plainly.py)
                raise NoRuleError((type(obj), name), site.loc())
            return getattr(obj, name)
        to = type(obj)
        if to not in _PLAIN:
            desc = class_attr(to, name)
            td = type(desc)
            if td is property:
                if type(desc.fget) is _FunctionType:
                    return call_python(tape, site, desc.fget, (obj,), None)
            elif td is functools.cached_property:
                d = getattr(obj, "__dict__", None)
                if d is not None and desc.attrname in d:
                    return d[desc.attrname]
                value = call_python(tape, site, desc.func, (obj,), None)
                if d is not None:
                    d[desc.attrname] = value
                return value
            elif desc is not None and td not in (_FunctionType, staticmethod, classmethod) and \
                    type(getattr(td, "__get__", None)) is _FunctionType and \
                    (hasattr(td, "__set__") or name not in getattr(obj, "__dict__", {})):
                return call_python(tape, site, td.__get__, (desc, obj, to), None)
            elif desc is None and name not in getattr(obj, "__dict__", {}):
                hook = getattr(to, "__getattr__", None)
                if type(hook) is _FunctionType:
                    try:
                        return object.__getattribute__(obj, name)
                    except AttributeError:
                        return call_python(tape, site, hook, (obj, name), None)
    return getattr(obj, name)


#: array attributes that expose the values (everything else is metadata or a method)
_ARRAY_DATA_ATTRS = frozenset({"T", "mT", "real", "imag", "flat", "base", "data"})


def _iter_rows(tape: Tape, site: Site, obj: Any) -> Any:
    if type(obj) is _ndarray:
        for k in range(len(obj)):
            yield getitem(tape, site, obj, k)
        return
    k = 0  # the old sequence protocol: __getitem__ until IndexError
    while True:
        try:
            item = getitem(tape, site, obj, k)
        except IndexError:
            return
        yield item
        k += 1


def iter_(tape: Optional[Tape], site: Site, obj: Any) -> Any:
    if tape is not None:
        if tape.capturing and keys.keyed_dict(tape.ids, obj):  # (its order depends on the keys' values)
            keys.refuse_subscript(tape, site, None, obj)
        to = type(obj)
        if to is _ndarray:
            if writes.current(tape, site, obj) is not None:
                if obj.ndim == 0:
                    raise TypeError("iteration over a 0-d array")
                return _iter_rows(tape, site, obj)
        elif to not in _PLAIN:
            meth = getattr(to, "__iter__", None)
            if type(meth) is _FunctionType:
                it = call_python(tape, site, meth, (obj,), None)
                step = getattr(type(it), "__next__", None)
                if type(step) is _FunctionType:  # an iterator class written in Python
                    return _python_steps(tape, site, it, step)
                return it
            if meth is None and type(getattr(to, "__getitem__", None)) is _FunctionType:
                return _iter_rows(tape, site, obj)
    return iter(obj)


def _python_steps(tape: Tape, site: Site, it: Any, step: Any) -> Any:
    """The items of an iterator whose `__next__` is written in Python, each step run rewritten."""
    while True:
        try:
            item = call_python(tape, site, step, (it,), None)
        except StopIteration:
            return
        yield item


def unpack(tape: Optional[Tape], site: Site, obj: Any) -> Any:
    if tape is not None:
        if tape.capturing and keys.keyed_dict(tape.ids, obj):
            keys.refuse_subscript(tape, site, None, obj)
        to = type(obj)
        if to is _ndarray:
            if writes.current(tape, site, obj) is not None:
                return tuple(_iter_rows(tape, site, obj))
        elif to not in _PLAIN and (type(getattr(to, "__iter__", None)) is _FunctionType or
                                   type(getattr(to, "__getitem__", None)) is _FunctionType):
            return tuple(iter_(tape, site, obj))
    return obj


def before_with(tape: Optional[Tape], site: Site, mgr: Any) -> tuple[Any, Any]:
    """BEFORE_WITH: (enter result, bound __exit__), unpacked by the rewritten code; a Python
    `__enter__` is differentiated like any callee."""
    cls = type(mgr)
    enter = class_attr(cls, "__enter__")
    exit_ = class_attr(cls, "__exit__")
    if enter is None or exit_ is None:
        raise TypeError(f"'{cls.__name__}' object does not support the context manager protocol")
    bound_exit = exit_.__get__(mgr, cls)
    if tape is not None and tape.capturing and (type(enter) is not _FunctionType or type(exit_) is not _FunctionType):
        tape.refuse(f"uses a `with` block on a {cls.__qualname__}, whose __enter__ or __exit__ is not Python code "
                    "(what it does would not be replayed)", site)
    if tape is not None and type(enter) is _FunctionType:
        return call_python(tape, site, enter, (mgr,), None), bound_exit
    return enter.__get__(mgr, cls)(), bound_exit

