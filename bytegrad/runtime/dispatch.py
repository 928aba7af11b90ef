"""Dispatch: what a call with the tape active becomes.

A callable with a rule is recorded (runtime/recording.py); a Python function is run rewritten
(the transform registers how, `set_rewriter`, when bytegrad.api is imported: a genuine inversion,
the runtime calling the layer above it, which it may not import); bound methods,
`functools.partial`, classes (`construct`), callable objects and NumPy functions written in Python
are followed to the code they run; an in-place function or method (`a.sort()`, `np.copyto`,
`np.add.at`, `out=`) is recorded as a write of its new value (runtime/writes.py); a C function
without a rule that meets a differentiated value raises NoRuleError. A C function handed a Python
function or object arms the frame watch (runtime/monitor.py) for the rest of the forward pass.
"""
from __future__ import annotations

import collections
import functools
import operator
import types
from typing import Any, Callable, Optional

import numpy as np

from bytegrad.errors import RULE_CASE_FIX, DifferentiationError, NoRuleError, NotImplementedRuleError, RuleCaseError, qualname
from bytegrad.rules import registry
from bytegrad.rules.registry import RuleKind
from bytegrad.runtime import keys, monitor, writes, zerosafe, tape as _tape
from bytegrad.runtime.records import Site
from bytegrad.runtime.recording import bind_tracked_keywords, parent_of, record_elementwise, record_rrule, snapshot
from bytegrad.runtime.tape import Tape, constant_tree

__all__ = ["dispatch", "call_python", "set_rewriter", "construct", "with_out", "write_value", "any_tracked", "MAKERS",
           "record_rule", "other_case", "method_key", "class_attr", "PLAIN", "CALL_HANDLERS", "CALLBACKS",
           "CAPTURE_SAFE"]

_ndarray = np.ndarray
_FunctionType = types.FunctionType
_MethodType = types.MethodType
_BuiltinMethod = types.BuiltinMethodType
_BuiltinFunction = types.BuiltinFunctionType
_ModuleType = types.ModuleType
_rules_get = registry.get_rule
_lazy_rules = registry.LAZY_PENDING  # the modules whose rules are not loaded yet (shrinks)
_deferred = registry.DEFERRED_PENDING  # bytegrad's own rules modules not imported yet (rules/_deferred.py)
ELEMENTWISE, RRULE, NONDIFF, TRANSPARENT, THROUGH, NOT_IMPLEMENTED = (
    RuleKind.ELEMENTWISE, RuleKind.RRULE, RuleKind.NONDIFF, RuleKind.TRANSPARENT,
    RuleKind.THROUGH, RuleKind.NOT_IMPLEMENTED)

#: types whose operators never run user Python code
PLAIN = frozenset({int, float, bool, complex, str, bytes, list, tuple, dict, set, type(None), np.ndarray,
                    np.float64, np.float32, np.int64, np.int32, np.bool_, np.complex128, slice, range})


# The transform registers how to get rewritten code for a Python callee (runtime never imports it), of
_Rewriter = Callable[[Any, tuple, Optional[dict], dict, bool], Optional[Callable[..., Any]]]  # (.., capturing)
_rewriter: Optional[_Rewriter] = None


def set_rewriter(fn: _Rewriter) -> None:
    global _rewriter
    _rewriter = fn


#: the modules of bytegrad's own API (bytegrad.api fills it): a function of theirs that differentiated
#: code calls (`grad(f)(x)` inside a loss) runs as it is, not rewritten, and finds the active tape
API_MODULES: set[str] = set()


def call_python(tape: Tape, site: Site, f: Any, args: tuple, kwargs: Optional[dict]) -> Any:
    if tape.capturing:
        if f.__class__ is types.FunctionType and f.__module__ not in API_MODULES:
            tape.callees.append((f, args, kwargs, site))  # its code is checked as the caller's is
        else:
            tape.refuse(f"calls {qualname(f)}, which compiled programs do not follow (only plain functions)", site)
    if f.__module__ in API_MODULES and f.__name__ != "__call__":
        return _call_api(site, f, args, kwargs)
    rewritten = _rewriter(f, args, kwargs, tape.ids, tape.capturing) if _rewriter is not None else None
    if rewritten is None:
        return f(*args, **kwargs) if kwargs else f(*args)
    return rewritten(*args, **kwargs) if kwargs else rewritten(*args)


def _call_api(site: Site, f: Any, args: tuple, kwargs: Optional[dict]) -> Any:
    """A derivative taken inside differentiated code (`grad(f)(x)` within a loss): bytegrad's own API
    runs as it is, not rewritten; it finds the active tape and records its work there (see
    api.py, nested derivatives). The call site is kept so that its errors can name the user's line."""
    old = getattr(_tape.tls, "site", None)
    _tape.tls.site = site
    try:
        return f(*args, **kwargs) if kwargs else f(*args)
    finally:
        _tape.tls.site = old


def any_tracked(ids: dict[int, int], args: tuple, kwargs: Optional[dict]) -> bool:
    for a in args:
        if parent_of(ids, a) is not None:
            return True
    if kwargs:
        for a in kwargs.values():
            if parent_of(ids, a) is not None:
                return True
    return False


_GeneratorType = types.GeneratorType


def _drain_generators(tape: Tape, args: tuple) -> tuple:
    """A generator argument hides the values it yields from the tape: run it now, so a rule sees
    the items (as a list) and a function without a rule raises instead of dropping derivatives.
    A generator that yields nothing differentiated is handed on as an iterator over its items."""
    if not any(type(a) is _GeneratorType for a in args):
        return args
    out = []
    for a in args:
        if type(a) is _GeneratorType:
            items = list(a)
            a = items if parent_of(tape.ids, items) is not None else iter(items)
        out.append(a)
    return tuple(out)


def resolve(fn: Any) -> tuple[Any, Any]:
    """(rule, self) for a callable: bound C methods are looked up by their type's descriptor."""
    try:
        rule = _rules_get(fn)
    except TypeError:
        rule = None
    if rule is not None:
        return rule, None
    if type(fn) is _BuiltinMethod:
        owner = fn.__self__
        if owner is not None and type(owner) is not _ModuleType:
            desc = getattr(type(owner), fn.__name__, None)
            if desc is not None:
                try:
                    rule = _rules_get(desc)
                except TypeError:
                    rule = None
                if rule is not None:
                    return rule, owner
                if _deferred and registry.load_deferred(desc):  # (rules/_deferred.py)
                    return resolve(fn)
    if _deferred and registry.load_deferred(fn):  # bytegrad's own rules, not imported yet
        return resolve(fn)
    if _lazy_rules and registry.load_lazy_rules():  # a module whose rules load lazily was imported since
        return resolve(fn)
    return None, None


#: builtins that call a dunder of their argument
_DUNDER_BUILTINS = {float: "__float__", complex: "__complex__", abs: "__abs__", len: None, int: "__int__",
                    next: "__next__"}


#: NumPy functions that make an array from shapes and numbers alone: the rewrite hooks their calls on
#: constants too, so that a capture run records how the array was made (`make` of a capturing tape) and
#: its program makes it again on every call (bytegrad/compiled/policy.py)
MAKERS: frozenset[Any] = frozenset({np.zeros, np.ones, np.full, np.eye, np.identity, np.arange, np.linspace, np.tri, np.array,
                    np.asarray, np.zeros_like, np.ones_like, np.full_like,
                    np.empty})  # (np.empty: a buffer the function fills, compiled/writes.py)


def _made_from_constants(tape: Tape, fn: Any, args: tuple, kwargs: Optional[dict]) -> bool:
    """A MAKERS call whose arguments are all numbers, strings, dtypes or lists of them, none tracked."""
    try:
        if fn not in MAKERS:
            return False
    except TypeError:  # (an unhashable callable object)
        return False
    return all(map(constant_tree, args)) and (not kwargs or all(map(constant_tree, kwargs.values()))) \
        and not any_tracked(tape.ids, args, kwargs)


def dispatch(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: Optional[dict]) -> Any:
    """A call with the tape active: rule, rewritten Python callee, or plain call."""
    if len(args) == 1 and not kwargs and type(args[0]) not in PLAIN:
        dunder = _DUNDER_BUILTINS.get(fn) if type(fn) in (type, _BuiltinFunction) else None
        if dunder is not None:
            meth = class_attr(type(args[0]), dunder)
            if type(meth) is _FunctionType:
                return call_python(tape, site, meth, (args[0],), None)
    if tape.capturing:  # (a dict keyed by a tracked value: runtime/keys.py)
        keys.refuse_keyed_dicts(tape, site, fn, args, kwargs)
    rule, owner = resolve(fn)
    if tape.capturing and owner is None and _made_from_constants(tape, fn, args, kwargs):
        return tape.make(fn, args, kwargs)
    if args and rule is not None and (rule.kind is ELEMENTWISE or rule.kind is RRULE):
        args = _drain_generators(tape, tuple(args))
    if rule is not None:
        return _with_rule(tape, site, fn, rule, owner, args, kwargs)
    t = type(fn)
    if t is _FunctionType:
        return call_python(tape, site, fn, tuple(args), kwargs)
    if t is _MethodType:  # `obj.method(x)`: a rule registered on the class's function applies
        f = fn.__func__
        if type(f) is _FunctionType and _rules_get(f) is None and not (_deferred and registry.load_deferred(f)):
            return call_python(tape, site, f, (fn.__self__,) + tuple(args), kwargs)
        return dispatch(tape, site, f, (fn.__self__,) + tuple(args), kwargs)
    if t is functools.partial:
        kw = dict(fn.keywords)
        if kwargs:
            kw.update(kwargs)
        return dispatch(tape, site, fn.func, fn.args + tuple(args), kw or None)
    if isinstance(fn, type):
        return construct(tape, site, fn, tuple(args), kwargs)
    inplace = _INPLACE.get(method_key(fn))
    if inplace is not None:
        return inplace(tape, site, fn, tuple(args), kwargs or {})
    if t is _Dispatcher and type(fn._implementation) is _FunctionType:
        # a NumPy function written in Python (np.diff, np.pad...): differentiate through its code
        return call_python(tape, site, fn._implementation, tuple(args), kwargs)
    handler = CALL_HANDLERS.get(t)
    if handler is not None:  # C callables that call back into Python (operator.attrgetter: runtime/callbacks.py)
        out = handler(tape, site, fn, tuple(args), kwargs)  # or explicit dunders (`a.__setitem__(k, v)`)
        if out is not NotImplemented:  # (declined: dispatched as usual)
            return out
    own = getattr(t, "__bytegrad_call__", None)
    if own is not None:  # a callable that takes over its calls from rewritten code (runtime/checkpoint.py)
        return own(fn, tape, site, tuple(args), kwargs)
    dunder_call = getattr(t, "__call__", None)
    # a callable object (`np.vectorize(f)(x)`, `operator.itemgetter(0)(x)`, an lru_cache wrapper):
    # the rule of its type's `__call__`, or that method's Python code
    if dunder_call is not None and (_rules_get(dunder_call) is not None or
                                    (_deferred and registry.load_deferred(dunder_call))):
        return dispatch(tape, site, dunder_call, (fn,) + tuple(args), kwargs)
    if type(dunder_call) is _FunctionType:
        return call_python(tape, site, dunder_call, (fn,) + tuple(args), kwargs)
    args = _drain_generators(tape, tuple(args))  # a C function: look inside generator arguments
    tracked = any_tracked(tape.ids, tuple(args), kwargs) or (type(fn) is _BuiltinMethod and
                                                             tape.ids.get(id(fn.__self__)) is not None)
    if tracked and registry.load_plugins():
        return dispatch(tape, site, fn, args, kwargs)
    # a Python function handed to C (a SciPy solver's MINPACK, QUADPACK...) that reads a differentiated
    # value, through its arguments or what it closes over: a blind call, refused at the user's line
    monitor.check_c_call(tape.ids, fn, args, kwargs, tracked, tape if tape.capturing else None)
    if tracked and not (tape.capturing and tape.plain(fn, args, kwargs, site)):  # (plain: compiled/plainly.py)
        raise NoRuleError(method_key(fn), site.loc())
    _watch_objects(args, kwargs)
    return fn(*args, **kwargs) if kwargs else fn(*args)


def _with_rule(tape: Tape, site: Site, fn: Any, rule: Any, owner: Any, args: tuple, kwargs: Optional[dict]) -> Any:
    """`dispatch` of a callable with a rule: recorded, run, followed into its Python code, or refused
    (`owner`: the object a bound C method found by its type's descriptor is bound to)."""
    cb = _callbacks_get(rule.fn)
    if cb is not None:  # a C function that calls back into Python (runtime/callbacks.py)
        out = cb(tape, site, fn, tuple(args), kwargs)
        if out is not NotImplemented:
            return out
    kind = rule.kind
    if owner is not None:
        call_fn = rule.fn
        args = (owner,) + tuple(args)
    else:
        call_fn = fn
    if kwargs and "out" in kwargs and (kind is ELEMENTWISE or (kind is RRULE and rule.rrule is not None)):
        buf = kwargs["out"]
        if buf is Ellipsis and kind is ELEMENTWISE:  # out=... asks a ufunc for an array, even 0-d
            pass
        elif not no_buffer(buf):
            return with_out(tape, site, call_fn, tuple(args), kwargs)
        else:
            kwargs = without_out(kwargs) or None
    if kind is ELEMENTWISE:
        if kwargs:  # (`np.clip(x, a_min=-t, a_max=t)`: the rule's partials are positional)
            args, kwargs = bind_tracked_keywords(tape, site, rule, call_fn, tuple(args), kwargs)
        return record_elementwise(tape, site, rule, call_fn, _lists_as_arrays(tape, site, len(rule.partials),
                                                                               tuple(args)), kwargs)
    if kind is RRULE and rule.rrule is not None:
        return record_rule(tape, site, rule, call_fn, tuple(args), kwargs)
    if kind is NONDIFF or kind is TRANSPARENT:
        _watch_objects(args, kwargs)
        out = fn(*args[1:] if owner is not None else args, **kwargs) if kwargs else \
            fn(*(args[1:] if owner is not None else args))
        if tape.capturing and rule.fn in keys.KEYED:  # (`d.get(t)`: the lookup depends on t's value)
            keys.refuse_keyed(tape, site, rule.fn, tuple(args), kwargs)
        if tape.capturing and rule.fn not in CAPTURE_SAFE and any_tracked(tape.ids, tuple(args), kwargs):
            if kind is NONDIFF:  # Python code may decide on its result: the program checks it
                tape.check(rule.fn if owner is not None else fn, tuple(args), kwargs, out, site)
            else:
                tape.refuse(f"passes a differentiated value through {qualname(rule.fn)}", site)
        return out
    if kind is THROUGH:  # a Python implementation runs rewritten; any other callable is dispatched
        if type(rule.impl) is _FunctionType:
            return call_python(tape, site, rule.impl, tuple(args), kwargs)
        return dispatch(tape, site, rule.impl, tuple(args), kwargs)
    if kind is NOT_IMPLEMENTED and any_tracked(tape.ids, tuple(args), kwargs) and not tape.plain(fn, args, kwargs, site):
        raise NotImplementedRuleError(
            f"differentiating {qualname(rule.fn)} is not supported: {rule.reason}.", site.loc(),
            "compute this part without differentiating through it, or write a rule with @bytegrad.rrule.")
    if kind is RRULE and any_tracked(tape.ids, tuple(args), kwargs) and not tape.plain(fn, args, kwargs, site):
        raise NoRuleError(rule.fn, site.loc(), " (it has only a forward rule)")
    return fn(*args[1:], **(kwargs or {})) if owner is not None else fn(*args, **(kwargs or {}))


def _watch_objects(args: tuple, kwargs: Optional[dict]) -> None:
    """A C function handed a Python function, or an object of a Python class (alone or first in a
    list or tuple), may run Python code blind: the frame watch (runtime/monitor.py) starts for the
    rest of this forward pass."""
    for a in (args if not kwargs else (*args, *kwargs.values())):
        t = type(a)
        if (t is list or t is tuple) and a:
            t = type(a[0])
        if t.__flags__ & _HEAPTYPE or t is _FunctionType or t is _MethodType:
            monitor.arm()
            return


_Dispatcher = type(np.concatenate)


#: C functions that call back into Python, run through the hooks: `handler(tape, site, fn, args,
#: kwargs)`, NotImplemented to dispatch as usual; "missing" and "metaclass" are the dict-subclass
#: lookup and the metaclass `__call__` (runtime/callbacks.py fills it in)
CALLBACKS: dict[Any, Callable[..., Any]] = {}


_callbacks_get = CALLBACKS.get


#: C callable types that call back into Python, by type: `handler(tape, site, fn, args, kwargs)`,
#: NotImplemented to dispatch as usual (runtime/callbacks.py fills it in, as CALLBACKS; a Python
#: class takes over its own calls with a `__bytegrad_call__(self, tape, site, args, kwargs)` method
#: instead: runtime/checkpoint.py's)
CALL_HANDLERS: dict[type, Callable[..., Any]] = {}


#: functions without a derivative that a capture run may meet on differentiated values: their
#: results depend on shapes and container structure only, which a compiled program's guards fix.
#: The container methods among them move values without looking at them (none compares, sorts or
#: hashes one); a write into a container the call did not make is an argument's (its change keeps the
#: signature general, compiled/effects.py) or a global's (refused by the static check)
CAPTURE_SAFE = frozenset({len, isinstance, type, np.shape, np.ndim, np.size, list.append, list.copy,
                          list.insert, list.extend, list.pop, list.__getitem__, tuple.__getitem__, dict.get,
                          dict.items, dict.keys, dict.values, dict.__getitem__, dict.update, dict.pop,
                          dict.setdefault, dict.copy, collections.deque.append, collections.deque.appendleft,
                          collections.deque.extend, collections.deque.pop, collections.deque.popleft,
                          functools.partial})


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class written in Python


def construct(tape: Tape, site: Site, cls: type[Any], args: tuple, kwargs: Optional[dict]) -> Any:
    """`cls(*args)`: a Python `__init__` is differentiated like any callee; a C class needs a rule."""
    tracked = any_tracked(tape.ids, args, kwargs) or (tape.capturing and tape.holds_built(args, kwargs))
    plain = cls.__flags__ & _HEAPTYPE and type(cls) is type and cls.__new__ is object.__new__ and \
        type(cls.__init__) is _FunctionType  # (a capturing tape is told of such an object: `Tape.built`)
    local = plain and not tracked and tape.capturing  # (built on constants: its `__init__` recorded too)
    # an object argument may hold differentiated values (`W(p)`, whose `__init__` reads `p.v`)
    if not tracked and not local and not (cls.__flags__ & _HEAPTYPE and type(cls.__init__) is _FunctionType and
                                          any(type(a) not in PLAIN for a in args)):
        _watch_objects(args, kwargs)  # `itertools.groupby(objs, key=f)`, `W(obj)` reading obj's values
        return cls(*args, **kwargs) if kwargs else cls(*args)
    if tracked and tape.capturing and not plain:
        tape.refuse(f"builds a {qualname(cls)} from a differentiated value", site)
    if not cls.__flags__ & _HEAPTYPE:
        if not issubclass(cls, BaseException):  # (`raise ValueError(x)`: it only holds its arguments)
            if registry.load_plugins():
                return dispatch(tape, site, cls, args, kwargs)
            if not tape.plain(cls, args, kwargs, site):  # (a capture's argument not differentiated: compiled/plainly.py)
                raise NoRuleError(cls, site.loc())
        return cls(*args, **kwargs) if kwargs else cls(*args)
    init = cls.__init__
    meta = type(cls)
    # a metaclass that keeps type.__call__ (abc.ABCMeta) constructs as `type` does
    if meta is not type and getattr(meta, "__call__", None) is not _type_call:
        out = CALLBACKS["metaclass"](tape, site, cls, args, kwargs)
        if out is not NotImplemented:
            return out
        return cls(*args, **kwargs) if kwargs else cls(*args)
    new = cls.__new__
    if new is object.__new__:
        if type(init) is not _FunctionType:
            return cls(*args, **kwargs) if kwargs else cls(*args)
        obj: Any = object.__new__(cls)  # raises as `cls(...)` would for an abstract class
        if tape.capturing and (tracked or local):
            tape.built(obj, site, not tracked)
    elif type(new) is _FunctionType:  # a `__new__` written in Python, rewritten
        obj = call_python(tape, site, new, (cls,) + args, kwargs)
    else:
        obj = new(cls, *args, **(kwargs or {}))
    if isinstance(obj, cls) and type(init) is _FunctionType:
        call_python(tape, site, init, (obj,) + args, kwargs)
    elif isinstance(obj, cls) and init is not object.__init__:
        init(obj, *args, **(kwargs or {}))
    return obj


_type_call = type.__call__


def class_attr(cls: type, name: str) -> Any:
    """`name` as stored on the class (without running a descriptor's __get__), or None."""
    for c in cls.__mro__:
        d = c.__dict__
        if name in d:
            return d[name]
    return None


def _lists_as_arrays(tape: Tape, site: Site, n: int, args: tuple) -> tuple:
    """`args` with each of its first `n` that is a list or tuple holding tracked values made an
    array (recorded), as NumPy would (`np.exp([a, b])`)."""
    ids = tape.ids
    return tuple(dispatch(tape, site, np.asarray, (a,), None)
                 if (type(a) is list or type(a) is tuple) and parent_of(ids, a) is not None else a
                 for a in args[:n]) + args[n:]


def record_rule(tape: Tape, site: Site, rule: Any, fn: Any, args: tuple, kwargs: Optional[dict]) -> Any:
    """`recording.record_rrule`, with a call its rule does not cover (RuleCaseError) sent on to `other_case`."""
    try:
        return record_rrule(tape, site, rule, fn, args, kwargs)
    except RuleCaseError as exc:
        if exc.loc is not None:
            raise
        return other_case(tape, site, fn, args, kwargs, exc)


def other_case(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: Optional[dict], exc: RuleCaseError) -> Any:
    """A call that the rule of `fn` does not cover: differentiated through NumPy's own Python code for
    `fn` when there is some, else the rule's error at the user's line."""
    impl = getattr(fn, "_implementation", None)
    if type(fn) is _Dispatcher and type(impl) is _FunctionType:
        return call_python(tape, site, impl, args, kwargs)
    raise RuleCaseError(exc.problem, site.loc(), exc.fix or RULE_CASE_FIX) from exc


# ---- in-place functions and methods, and out=: recorded as writes -------------------------------------


def no_buffer(buf: Any) -> bool:
    """`out=None` (or a ufunc's `out=(None,)`): no output buffer."""
    return buf is None or (type(buf) is tuple and all(b is None for b in buf))


def without_out(kwargs: dict) -> dict:
    """kwargs less an `out=None` (NumPy's own Python code passes it on: np.nanvar, np.linalg.outer)."""
    return {k: v for k, v in kwargs.items() if k != "out"}


def with_out(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: dict) -> Any:
    """`fn(..., out=buf)`: compute a new value, then write it into `buf` as a recorded assignment."""
    kwargs = dict(kwargs)
    buf = kwargs.pop("out")
    if type(buf) is tuple and len(buf) == 1:
        buf = buf[0]
    if type(buf) is not _ndarray:
        raise DifferentiationError(f"bytegrad supports out= only with a single array, got {type(buf).__name__}.",
                                   site.loc(), "drop out= and assign the result instead.")
    tape.check_protected(buf, site)
    # an argument that is (a view of) the output buffer enters as a recorded copy of its current
    # value (`np.multiply(a, x, out=a)`): what the operation saves is not then overwritten
    args = tuple(snapshot(tape, site, v) if type(v) is _ndarray and np.may_share_memory(v, buf) else v
                 for v in args)
    where = kwargs.pop("where", True)
    if where is not True and type(fn) is np.ufunc:
        _masked_ufunc(tape, site, fn, args, kwargs, buf, where)
        return buf
    if where is not True:
        kwargs["where"] = where
    value = dispatch(tape, site, fn, args, kwargs)
    write_value(tape, site, buf, Ellipsis, value)
    return buf


def _masked_ufunc(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: dict, buf: np.ndarray, where: Any) -> None:
    """`ufunc(*args, out=buf, where=mask)`: the ufunc runs on the selected elements only, and they
    are written into `buf`; the other slots keep buf's value and its derivative. (Computed whole, the
    masked-out slots would hold uninitialised memory, and the partials there, 1 / b at b == 0 for the
    safe-division idiom, would turn the zero cotangent into NaN.)"""
    mask = np.broadcast_to(np.asarray(where, dtype=bool), buf.shape)
    picked = []
    for a in args[:fn.nin]:
        if np.ndim(a) == 0:
            picked.append(a)
            continue
        if np.shape(a) != buf.shape:
            a = dispatch(tape, site, np.broadcast_to, (a, buf.shape), None)
        picked.append(dispatch(tape, site, operator.getitem, (a, mask), None))
    value = dispatch(tape, site, fn, tuple(picked) + args[fn.nin:], kwargs or None)
    write_value(tape, site, buf, mask, value)


def write_value(tape: Tape, site: Site, obj: np.ndarray, key: Any, value: Any) -> None:
    if type(key) is _ndarray and key.dtype.kind == "b":  # `y[mask] = v`: what it overwrote contributes zeros
        zerosafe.guard(tape)
    iv = parent_of(tape.ids, value)
    if iv is None and tape.owners and type(value) is _ndarray:
        iv = writes.view_parent(tape, site, value)
    if iv is not None and type(iv) is not int:  # a list holding tracked values: make it an array
        value = dispatch(tape, site, np.asarray, (value,), None)
        iv = tape.ids.get(id(value))
    elif iv is not None and tape.stale and iv in tape.stale:
        iv = writes.refresh(tape, site, iv)
    writes.write(tape, site, obj, key, value, iv)


def _inplace_sort(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: dict) -> None:
    """`a.sort()` and `a.partition(kth)`: np.sort or np.partition of a's value, written into a.
    (writes.write checks the write; a view of an allocated array is written through.)"""
    a = fn.__self__
    sort = np.sort if fn.__name__ == "sort" else np.partition
    write_value(tape, site, a, Ellipsis, dispatch(tape, site, sort, (snapshot(tape, site, a),) + args, kwargs or None))


def _inplace_fill(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: dict) -> None:
    write_value(tape, site, fn.__self__, Ellipsis, args[0] if args else kwargs["value"])


def _inplace_fill_diagonal(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: dict) -> None:
    a, val = args[0], args[1]
    wrap = args[2] if len(args) > 2 else kwargs.get("wrap", False)
    if a.ndim == 2:
        n = a.shape[1] + 1
        end = None if wrap else a.shape[1] * a.shape[1]
        flat_idx = np.arange(a.size)[:end:n]
        key = np.unravel_index(flat_idx, a.shape)
    else:
        i = np.arange(min(a.shape))
        key = (i,) * a.ndim
    value = val if np.ndim(val) == 0 else dispatch(tape, site, np.resize, (val, key[0].shape), None)
    write_value(tape, site, a, key, value)


def _inplace_copyto(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: dict) -> None:
    dst, src = args[0], args[1]
    where = kwargs.get("where", args[3] if len(args) > 3 else True)
    if where is not True:
        src = dispatch(tape, site, np.where, (where, src, dst), None)
    write_value(tape, site, dst, Ellipsis, src)


def _inplace_put(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: dict) -> None:
    if type(fn) is _BuiltinMethod and type(fn.__self__) is _ndarray:
        a, rest = fn.__self__, args
    else:
        a, rest = args[0], args[1:]
    ind, v = rest[0], rest[1]
    flat = a.reshape(-1) if a.flags.c_contiguous else None
    if flat is None or flat.base is not (a.base if a.base is not None else a) and flat.base is not a:
        return writes.put_strided(tape, site, fn, args, kwargs, a, v)  # (a plain store, or MutationError)
    ind = np.asarray(ind).ravel()
    n = ind.size
    value = v if np.ndim(v) == 0 else dispatch(tape, site, np.resize, (v, n), None)
    write_value(tape, site, flat, ind, value)


def _inplace_ufunc_at(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: dict) -> None:
    ufunc = fn.__self__
    a, indices = args[0], args[1]
    b = args[2] if len(args) > 2 else None
    if ufunc not in (np.add, np.subtract) or b is None:
        if writes.current(tape, site, a) is None and (b is None or parent_of(tape.ids, b) is None):
            tape.check_write(a, a, site)
            return fn(*args, **kwargs)
        # np.multiply.at and the others: run as rounds of fancy writes, in index order
        from bytegrad.rules.numpy.ufunc_methods import ufunc_at_in_rounds  # (a rules module loaded on demand)
        return call_python(tape, site, ufunc_at_in_rounds, (ufunc,) + args, kwargs or None)
    ib = parent_of(tape.ids, b)
    if ib is None and tape.owners and type(b) is _ndarray:
        ib = writes.view_parent(tape, site, b)
    writes.add_at(tape, site, a, indices, b, ib, 1 if ufunc is np.add else -1)


def _generator_send(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: dict) -> Any:
    """`gen.send(v)`: a differentiated value may only go into a generator whose code bytegrad rewrote."""
    gen = fn.__self__
    code = getattr(gen, "gi_code", None)
    if any_tracked(tape.ids, args, kwargs) and (code is None or "__bg_tape__" not in code.co_varnames):
        raise NoRuleError(method_key(fn), site.loc(),
                          " (the generator was created before bytegrad could rewrite its code: pass the "
                          "differentiated values to the generator function as arguments instead)")
    return fn(*args, **kwargs)


_INPLACE: dict[Any, Callable[..., Any]] = {
    (types.GeneratorType, "send"): _generator_send,
    (np.ndarray, "sort"): _inplace_sort,
    (np.ndarray, "partition"): _inplace_sort,
    (np.ndarray, "fill"): _inplace_fill,
    (np.ndarray, "put"): _inplace_put,
    np.fill_diagonal: _inplace_fill_diagonal,
    np.copyto: _inplace_copyto,
    np.put: _inplace_put,
    (np.ufunc, "at"): _inplace_ufunc_at,
}


def method_key(fn: Any) -> Any:
    """A hashable name for a callable: (type, name) for a bound C method, else the callable."""
    if type(fn) is _BuiltinMethod and fn.__self__ is not None and type(fn.__self__) is not _ModuleType:
        return (type(fn.__self__), fn.__name__)
    try:
        hash(fn)
    except TypeError:
        return id(fn)
    return fn
