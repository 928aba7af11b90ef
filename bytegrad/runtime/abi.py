"""The entry points that rewritten code calls: `hook(tape, site, *operands)` for every active site.

Each hook runs the plain operation when no tape is active or no operand is being differentiated;
otherwise it looks up the rule, runs the primal and records a node. Emitted code calls only these
names; hot paths (one-argument calls, binary operators) are written out for speed.
"""
from __future__ import annotations

import functools
import operator
import types
from typing import Any, Callable, Optional

import numpy as np

from bytegrad import _operators
from bytegrad.errors import DifferentiationError, NoRuleError, NotImplementedRuleError, RuleCaseError, SourceLoc, qualname
from bytegrad.rules import registry
from bytegrad.rules.numpy.ufunc_methods import ufunc_at_in_rounds
from bytegrad.rules.registry import RuleKind
from bytegrad.runtime import tape as _tape
from bytegrad.runtime import writes, zerosafe
from bytegrad.runtime.backward import (
    _bw_elementwise, _bw_identity, _bw_rrule, _bw_rrule_trusted, _bw_tuple_item, _bw_unary, _TupleOut,
)
from bytegrad.runtime.tape import CaptureTape, Tape, current_tape

__all__ = ["Site", "current_tape", "BINARY_HOOKS", "call", "call0", "call1", "call2",
           "call_kw", "call_ex", "getitem", "getslice", "setitem", "setslice", "getattr_", "neg", "pos",
           "iter_", "unpack", "before_with", "set_rewriter"]

_ndarray = np.ndarray
_np_where = np.where
_float64 = np.float64
_FunctionType = types.FunctionType
_MethodType = types.MethodType
_BuiltinMethod = types.BuiltinMethodType
_BuiltinFunction = types.BuiltinFunctionType
_GetSetDescriptor = types.GetSetDescriptorType
_DataDescriptors = (types.GetSetDescriptorType, types.MemberDescriptorType)  # `.real` of an array; of a complex
_ModuleType = types.ModuleType
_rules_get = registry._RULES.get
ELEMENTWISE = RuleKind.ELEMENTWISE
RRULE = RuleKind.RRULE
NONDIFF = RuleKind.NONDIFF
TRANSPARENT = RuleKind.TRANSPARENT
THROUGH = RuleKind.THROUGH
NOT_IMPLEMENTED = RuleKind.NOT_IMPLEMENTED


class Site:
    """One rewritten operation in the user's code (a constant of the rewritten code object)."""

    __slots__ = ("filename", "lineno", "function", "what", "callee")

    def __init__(self, filename: str, lineno: Optional[int], function: str, what: str, callee: Any = None) -> None:
        self.filename = filename
        self.lineno = lineno
        self.function = function
        self.what = what
        self.callee = callee  # the callable the rewrite saw statically (np.sum), for explain; or None

    def loc(self) -> SourceLoc:
        return SourceLoc(self.filename, self.lineno, self.function)

    def __repr__(self) -> str:
        return f"<site {self.what} at {self.filename}:{self.lineno}>"


# The transform registers how to get rewritten code for a Python callee (runtime never imports it).
_rewriter: Optional[Callable[[Any, tuple, Optional[dict], dict], Optional[Callable[..., Any]]]] = None


def set_rewriter(fn: Callable[[Any, tuple, Optional[dict], dict], Optional[Callable[..., Any]]]) -> None:
    global _rewriter
    _rewriter = fn


# ---- recording ----------------------------------------------------------------------------------


def _parent_of(ids: dict[int, int], a: Any) -> Any:
    """The node index of `a`, a (nested) list of them for a list/tuple holding tracked values, or None."""
    t = type(a)
    if t is list or t is tuple:
        subs = [_parent_of(ids, x) for x in a]
        for s in subs:
            if s is not None:
                return subs
        return None
    return ids.get(id(a))


def _refresh(tape: Tape, parents: Any, site: Site) -> Any:
    """Parents with out-of-date entries (memory overwritten since) replaced by current ones."""
    out = []
    for p in parents:
        if type(p) is int:
            out.append(writes.refresh(tape, site, p) if p in tape.stale else p)
        elif p is not None:
            out.append(_refresh(tape, p, site))
        else:
            out.append(None)
    return out if type(parents) is list else tuple(out)


def _untracked_views(tape: Tape, site: Site, args: tuple, parents: Any) -> Any:
    """Parents for untracked arrays that are views of memory written with tracked values."""
    out = list(parents)
    for k, (a, p) in enumerate(zip(args, parents)):
        if p is None and type(a) is _ndarray:
            out[k] = writes.view_parent(tape, site, a)
    return out if type(parents) is list else tuple(out)


def _record_elementwise(tape: Tape, site: Site, rule: Any, fn: Any, args: tuple, kwargs: Optional[dict]) -> Any:
    ids = tape.ids
    n = len(rule.partials)
    parents = tuple(_parent_of(ids, a) for a in args[:n])
    if any(type(p) is list for p in parents):  # e.g. np.exp([a, b]): make the arrays first
        args = tuple(_dispatch(tape, site, np.asarray, (a,), None) if type(p) is list else a
                     for a, p in zip(args, parents)) + args[n:]
        parents = tuple(ids.get(id(a)) for a in args[:n])
    if kwargs and "out" in kwargs:
        buf = kwargs["out"]
        if buf is not Ellipsis and not _no_buffer(buf):  # out=... asks a ufunc for an array, even 0-d
            return _with_out(tape, site, fn, args, kwargs)
        if buf is not Ellipsis:
            kwargs = _without_out(kwargs) or None
    if tape.__class__ is CaptureTape and (kwargs or len(args) > n):  # the record keeps args[:n] only
        tape.refuse(f"passes options to {qualname(fn)} (a compiled program replays its positional arguments)", site)
    if tape.owners:
        parents = _untracked_views(tape, site, args, parents)
    if tape.stale:
        parents = _refresh(tape, parents, site)
    out = fn(*args, **kwargs) if kwargs else fn(*args)
    if all(p is None for p in parents):
        return out
    node = (_bw_elementwise, parents, site, rule, tuple(_as_array(a) for a in args[:n]), fn)
    if fn is _np_where:  # a mask: the branch it did not select contributes exact zeros
        return zerosafe.record_where(tape, node, out)
    return tape.push(node, out)


def _bind_positional(fn: Any, args: tuple, kwargs: dict, site: Site, rule: Any = None) -> tuple[tuple, dict]:
    """Move keyword arguments that hold tracked values into positional places (rules see positions).

    A rule whose function takes `**kwargs` (scipy.stats' `logpdf(x, *args, **kwds)`) may name the
    places: its rrule's `signature_for(args)` gives the signature to bind with, or None."""
    import inspect  # only on this rare path: importing it costs milliseconds

    signature_for = getattr(getattr(rule, "rrule", None), "signature_for", None)
    try:
        sig = (signature_for(args) if signature_for is not None else None) or inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None
    if sig is not None:
        params = list(sig.parameters.values())
        new_args = list(args)
        rest = dict(kwargs)
        for p in params[len(args):]:
            if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                break
            if p.name in rest:
                new_args.append(rest.pop(p.name))
            elif p.default is not p.empty and any(k in rest for k in (q.name for q in params)):
                new_args.append(p.default)
            else:
                break
        return tuple(new_args), rest
    raise DifferentiationError(
        f"a differentiated value was passed by keyword to {qualname(fn)}, whose parameters bytegrad "
        "cannot inspect.", site.loc(), "pass it positionally.")


def _record_rrule(tape: Tape, site: Site, rule: Any, fn: Any, args: tuple, kwargs: Optional[dict]) -> Any:
    ids = tape.ids
    if kwargs:
        if "out" in kwargs:
            if not _no_buffer(kwargs["out"]):
                return _with_out(tape, site, fn, args, kwargs)
            kwargs = _without_out(kwargs)
        if any(_parent_of(ids, v) is not None for v in kwargs.values()):
            args, kwargs = _bind_positional(fn, args, kwargs, site, rule)
            if any(_parent_of(ids, v) is not None for v in kwargs.values()):  # keyword-only (np.var's mean=)
                args, kwargs = _bind_positional(rule.rrule, args, kwargs, site)
            if any(_parent_of(ids, v) is not None for v in kwargs.values()):
                raise DifferentiationError(
                    f"a differentiated value was passed to {qualname(fn)} as a keyword argument that "
                    "has no positional place, so its rule cannot return a cotangent for it.",
                    site.loc(), "pass it positionally, or compute it outside this call.")
    ids_get = ids.get
    parents = []
    tracked = False
    owners = tape.owners
    for a in args:
        ta = type(a)
        p = _parent_of(ids, a) if (ta is list or ta is tuple) else ids_get(id(a))
        if p is None and owners and ta is _ndarray:
            p = writes.view_parent(tape, site, a)
        if p is not None:
            tracked = True
        parents.append(p)
    if not tracked:
        return fn(*args, **kwargs) if kwargs else fn(*args)
    if tape.stale:
        parents = _refresh(tape, parents, site)
    try:
        out, pullback = rule.rrule(*args, **kwargs) if kwargs else rule.rrule(*args)
    except RuleCaseError as exc:
        if exc.loc is not None:
            raise
        return _other_case(tape, site, fn, args, kwargs, exc)
    # kwargs ride along (node[6]) for the forward sweep's frules; the reverse pass ignores them
    node = (_bw_rrule_trusted if rule.trusted else _bw_rrule, parents, site, pullback, args, fn, kwargs)
    to = type(out)
    # Tape.push written out: the hooks inline it on their hot paths (a call costs ~0.1 us here)
    if to is _ndarray or to is float or to is _float64:
        values = tape.values
        ids[id(out)] = len(values)
        values.append(out)
        tape.nodes.append(node)
        return out
    return _push_output(tape, node, out)


def _no_buffer(buf: Any) -> bool:
    """`out=None` (or a ufunc's `out=(None,)`): no output buffer."""
    return buf is None or (type(buf) is tuple and all(b is None for b in buf))


def _without_out(kwargs: dict) -> dict:
    """kwargs less an `out=None` (NumPy's own Python code passes it on: np.nanvar, np.linalg.outer)."""
    return {k: v for k, v in kwargs.items() if k != "out"}


def _other_case(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: Optional[dict], exc: RuleCaseError) -> Any:
    """A call that the rule of `fn` does not cover: differentiated through NumPy's own Python code for
    `fn` when there is some, else the rule's error at the user's line."""
    impl = getattr(fn, "_implementation", None)
    if type(fn) is _Dispatcher and type(impl) is _FunctionType:
        return _call_python(tape, site, impl, args, kwargs)
    raise RuleCaseError(exc.problem, site.loc(), exc.fix or
                        "compute this part without differentiating through it, or write a rule with "
                        "@bytegrad.rrule(..., override=True) that covers it.") from exc


def _push_output(tape: Tape, node: tuple, out: Any) -> Any:
    t = type(out)
    if t is tuple or t is list or (isinstance(out, tuple) and hasattr(out, "_fields")):
        idx = len(tape.values)
        tape.push(node, _TupleOut(out))
        _push_items(tape, idx, out, node[2])
        return out
    if t is int or t is bool or out is None:
        if tape.__class__ is CaptureTape and out is not None:
            tape.refuse(f"computes a {t.__name__} from a differentiated value with {qualname(node[5])}", node[2])
        return out
    return tape.push(node, out)


def _push_items(tape: Tape, idx: int, out: Any, site: Site) -> None:
    """Record each float element of the sequence `out` (held on the tape at `idx`); a nested list
    (`M.tolist()` of a matrix: rows of floats) stands on the tape as its own holder, recursively."""
    n = len(out)
    for k, item in enumerate(out):
        if _trackable(item):
            tape.push((_bw_tuple_item, (idx,), site, k, n), item)
        elif type(item) is list and item:
            sub = len(tape.values)
            tape.push((_bw_tuple_item, (idx,), site, k, n), _TupleOut(item))
            _push_items(tape, sub, item, site)


def _trackable(v: Any) -> bool:
    t = type(v)
    if t is _ndarray:
        return v.dtype.kind in "fc"
    return t is float or t is complex or isinstance(v, (np.floating, np.complexfloating))


def _with_out(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: dict) -> Any:
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
    args = tuple(_snapshot(tape, site, v) if type(v) is _ndarray and np.may_share_memory(v, buf) else v
                 for v in args)
    where = kwargs.pop("where", True)
    if where is not True and type(fn) is np.ufunc:
        _masked_ufunc(tape, site, fn, args, kwargs, buf, where)
        return buf
    if where is not True:
        kwargs["where"] = where
    value = _dispatch(tape, site, fn, args, kwargs)
    _write(tape, site, buf, Ellipsis, value)
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
            a = _dispatch(tape, site, np.broadcast_to, (a, buf.shape), None)
        picked.append(getitem(tape, site, a, mask))
    value = _dispatch(tape, site, fn, tuple(picked) + args[fn.nin:], kwargs or None)
    _write(tape, site, buf, mask, value)


def _call_python(tape: Tape, site: Site, f: Any, args: tuple, kwargs: Optional[dict]) -> Any:
    if tape.__class__ is CaptureTape:
        if f.__class__ is types.FunctionType and f.__module__ != "bytegrad.api":
            tape.callees.append((f, args, kwargs, site))  # its code is checked as the caller's is
        else:
            tape.refuse(f"calls {qualname(f)}, which compiled programs do not follow (only plain functions)", site)
    if f.__module__ == "bytegrad.api" and f.__name__ != "__call__":
        return _call_api(site, f, args, kwargs)
    rewritten = _rewriter(f, args, kwargs, tape.ids) if _rewriter is not None else None
    if rewritten is None:
        return f(*args, **kwargs) if kwargs else f(*args)
    return rewritten(*args, **kwargs) if kwargs else rewritten(*args)


def _call_api(site: Site, f: Any, args: tuple, kwargs: Optional[dict]) -> Any:
    """A derivative taken inside differentiated code (`grad(f)(x)` within a loss): bytegrad's own API
    runs as it is, not rewritten; it finds the active tape and records its work there (see
    api.py, nested derivatives). The call site is kept so that its errors can name the user's line."""
    old = getattr(_tape._tls, "site", None)
    _tape._tls.site = site
    try:
        return f(*args, **kwargs) if kwargs else f(*args)
    finally:
        _tape._tls.site = old


def _any_tracked(ids: dict[int, int], args: tuple, kwargs: Optional[dict]) -> bool:
    for a in args:
        if _parent_of(ids, a) is not None:
            return True
    if kwargs:
        for a in kwargs.values():
            if _parent_of(ids, a) is not None:
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
            a = items if _parent_of(tape.ids, items) is not None else iter(items)
        out.append(a)
    return tuple(out)


def _resolve(fn: Any) -> tuple[Any, Any]:
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
    return None, None


#: builtins that call a dunder of their argument
_DUNDER_BUILTINS = {float: "__float__", complex: "__complex__", abs: "__abs__", len: None, int: "__int__",
                    next: "__next__"}


def _dispatch(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: Optional[dict]) -> Any:
    """A call with the tape active: rule, rewritten Python callee, or plain call."""
    if len(args) == 1 and not kwargs and type(args[0]) not in _PLAIN:
        dunder = _DUNDER_BUILTINS.get(fn) if type(fn) in (type, _BuiltinFunction) else None
        if dunder is not None:
            meth = _class_attr(type(args[0]), dunder)
            if type(meth) is _FunctionType:
                return _call_python(tape, site, meth, (args[0],), None)
    rule, owner = _resolve(fn)
    if args and rule is not None and (rule.kind is ELEMENTWISE or rule.kind is RRULE):
        args = _drain_generators(tape, tuple(args))
    if rule is not None:
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
        if kind is ELEMENTWISE:
            return _record_elementwise(tape, site, rule, call_fn, tuple(args), kwargs)
        if kind is RRULE and rule.rrule is not None:
            return _record_rrule(tape, site, rule, call_fn, tuple(args), kwargs)
        if kind is NONDIFF or kind is TRANSPARENT:
            if "watch" in CALLBACKS:
                _watch_objects(args, kwargs)
            out = fn(*args[1:] if owner is not None else args, **kwargs) if kwargs else \
                fn(*(args[1:] if owner is not None else args))
            if tape.__class__ is CaptureTape and rule.fn not in CAPTURE_SAFE and _any_tracked(tape.ids, tuple(args), kwargs):
                if kind is NONDIFF:  # Python code may decide on its result: the program checks it
                    tape.check(rule.fn if owner is not None else fn, tuple(args), kwargs, out, site)
                else:
                    tape.refuse(f"passes a differentiated value through {qualname(rule.fn)}", site)
            return out
        if kind is THROUGH:
            return _call_python(tape, site, rule.impl, tuple(args), kwargs)
        if kind is NOT_IMPLEMENTED and _any_tracked(tape.ids, tuple(args), kwargs):
            raise NotImplementedRuleError(
                f"differentiating {qualname(rule.fn)} is not supported: {rule.reason}.", site.loc(),
                "compute this part without differentiating through it, or write a rule with @bytegrad.rrule.")
        if kind is RRULE and _any_tracked(tape.ids, tuple(args), kwargs):  # a frule alone
            raise NoRuleError(rule.fn, site.loc(), " (it has only a forward rule)")
        return fn(*args[1:], **(kwargs or {})) if owner is not None else fn(*args, **(kwargs or {}))
    t = type(fn)
    if t is _FunctionType:
        return _call_python(tape, site, fn, tuple(args), kwargs)
    if t is _MethodType:  # `obj.method(x)`: a rule registered on the class's function applies
        f = fn.__func__
        if type(f) is _FunctionType and _rules_get(f) is None:
            return _call_python(tape, site, f, (fn.__self__,) + tuple(args), kwargs)
        return _dispatch(tape, site, f, (fn.__self__,) + tuple(args), kwargs)
    if t is functools.partial:
        kw = dict(fn.keywords)
        if kwargs:
            kw.update(kwargs)
        return _dispatch(tape, site, fn.func, fn.args + tuple(args), kw or None)
    if isinstance(fn, type):
        return _construct(tape, site, fn, tuple(args), kwargs)
    inplace = _INPLACE.get(_method_key(fn))
    if inplace is not None:
        return inplace(tape, site, fn, tuple(args), kwargs or {})
    if t is _Dispatcher and type(fn._implementation) is _FunctionType:
        # a NumPy function written in Python (np.diff, np.pad...): differentiate through its code
        return _call_python(tape, site, fn._implementation, tuple(args), kwargs)
    handler = CALL_HANDLERS.get(t)
    if handler is not None:  # bytegrad's own callables (runtime/checkpoint.py)
        return handler(tape, site, fn, tuple(args), kwargs)
    dunder_call = getattr(t, "__call__", None)
    # a callable object (`np.vectorize(f)(x)`, `operator.itemgetter(0)(x)`, an lru_cache wrapper):
    # the rule of its type's `__call__`, or that method's Python code
    if dunder_call is not None and _rules_get(dunder_call) is not None:
        return _dispatch(tape, site, dunder_call, (fn,) + tuple(args), kwargs)
    if type(dunder_call) is _FunctionType:
        return _call_python(tape, site, dunder_call, (fn,) + tuple(args), kwargs)
    args = _drain_generators(tape, tuple(args))  # a C function: look inside generator arguments
    if _any_tracked(tape.ids, tuple(args), kwargs) or (type(fn) is _BuiltinMethod and
                                                       tape.ids.get(id(fn.__self__)) is not None):
        if registry.load_plugins():
            return _dispatch(tape, site, fn, args, kwargs)
        raise NoRuleError(_method_key(fn), site.loc())
    if "watch" in CALLBACKS:
        _watch_objects(args, kwargs)
    return fn(*args, **kwargs) if kwargs else fn(*args)


def _watch_objects(args: tuple, kwargs: Optional[dict]) -> None:
    """A C function handed a Python function, or an object of a Python class (alone or first in a
    list or tuple), may run Python code blind: the frame watch (runtime/monitor.py) starts for the
    rest of this forward pass."""
    for a in (args if not kwargs else (*args, *kwargs.values())):
        t = type(a)
        if (t is list or t is tuple) and a:
            t = type(a[0])
        if t.__flags__ & _HEAPTYPE or t is _FunctionType or t is _MethodType:
            CALLBACKS["watch"]()
            return


_Dispatcher = type(np.concatenate)

#: C functions that call back into Python, run through the hooks: `handler(tape, site, fn, args,
#: kwargs)`, NotImplemented to dispatch as usual; "missing" and "metaclass" are the dict-subclass
#: lookup and the metaclass `__call__` (runtime/callbacks.py fills it in)
CALLBACKS: dict[Any, Callable[..., Any]] = {}
_callbacks_get = CALLBACKS.get

#: callable types that take over their own calls from rewritten code: `handler(tape, site, fn,
#: args, kwargs)` (runtime/checkpoint.py registers `Checkpointed`; runtime never imports upward)
CALL_HANDLERS: dict[type, Callable[..., Any]] = {}

#: functions without a derivative that a capture run may meet on differentiated values: their
#: results depend on shapes and container structure only, which a compiled program's guards fix
CAPTURE_SAFE = frozenset({len, isinstance, type, np.shape, np.ndim, np.size, list.append, list.copy,
                          list.__getitem__, tuple.__getitem__, dict.get, dict.items, dict.keys, dict.values,
                          dict.__getitem__})
_PREDICATE_HOOKS: dict[Any, Callable[..., Any]] = {}


def predicate_hook(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The hook of a comparison, `is`, `in`, `not` or truth test `fn` with a tracked operand: the
    plain operation, which a capture run records as a decision its program must check."""
    hook = _PREDICATE_HOOKS.get(fn)
    if hook is None:
        def hook(tape: Optional[Tape], site: Site, *operands: Any) -> Any:
            out = fn(*operands)
            if tape.__class__ is CaptureTape:
                tape.check(fn, operands, None, out, site)
            return out

        hook.__qualname__ = f"predicate_hook.<{getattr(fn, '__name__', fn)}>"
        hook = _PREDICATE_HOOKS[fn] = hook
    return hook


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class written in Python


def _construct(tape: Tape, site: Site, cls: type, args: tuple, kwargs: Optional[dict]) -> Any:
    """`cls(*args)`: a Python `__init__` is differentiated like any callee; a C class needs a rule."""
    tracked = _any_tracked(tape.ids, args, kwargs)
    # an object argument may hold differentiated values (`W(p)`, whose `__init__` reads `p.v`)
    if not tracked and not (cls.__flags__ & _HEAPTYPE and type(cls.__init__) is _FunctionType and
                            any(type(a) not in _PLAIN for a in args)):
        if "watch" in CALLBACKS:  # `itertools.groupby(objs, key=f)`, `W(obj)` reading obj's values
            _watch_objects(args, kwargs)
        return cls(*args, **kwargs) if kwargs else cls(*args)
    if tracked and tape.__class__ is CaptureTape:
        tape.refuse(f"builds a {qualname(cls)} from a differentiated value", site)
    if not cls.__flags__ & _HEAPTYPE:
        if issubclass(cls, BaseException):  # `raise ValueError(x)`: it only holds its arguments
            return cls(*args, **kwargs) if kwargs else cls(*args)
        if registry.load_plugins():
            return _dispatch(tape, site, cls, args, kwargs)
        raise NoRuleError(cls, site.loc())
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
        obj = object.__new__(cls)  # raises as `cls(...)` would for an abstract class
    elif type(new) is _FunctionType:  # a `__new__` written in Python, rewritten
        obj = _call_python(tape, site, new, (cls,) + args, kwargs)
    else:
        obj = new(cls, *args, **(kwargs or {}))
    if isinstance(obj, cls) and type(init) is _FunctionType:
        _call_python(tape, site, init, (obj,) + args, kwargs)
    elif isinstance(obj, cls) and init is not object.__init__:
        init(obj, *args, **(kwargs or {}))
    return obj


_type_call = type.__call__


# ---- in-place functions and methods: recorded as writes ---------------------------------------------


def _snapshot(tape: Tape, site: Site, a: np.ndarray) -> np.ndarray:
    """A copy of `a` that stands for its current value on the tape (so `a` can then be overwritten)."""
    i = writes.current(tape, site, a)
    copy = a.copy()
    if i is not None:
        tape.push((_bw_identity, (i,), site), copy)
    return copy


def _inplace_sort(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: dict) -> None:
    """`a.sort()` and `a.partition(kth)`: np.sort or np.partition of a's value, written into a.
    (writes.write checks the write; a view of an allocated array is written through.)"""
    a = fn.__self__
    sort = np.sort if fn.__name__ == "sort" else np.partition
    _write(tape, site, a, Ellipsis, _dispatch(tape, site, sort, (_snapshot(tape, site, a),) + args, kwargs or None))


def _inplace_fill(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: dict) -> None:
    _write(tape, site, fn.__self__, Ellipsis, args[0] if args else kwargs["value"])


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
    value = val if np.ndim(val) == 0 else _dispatch(tape, site, np.resize, (val, key[0].shape), None)
    _write(tape, site, a, key, value)


def _inplace_copyto(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: dict) -> None:
    dst, src = args[0], args[1]
    where = kwargs.get("where", args[3] if len(args) > 3 else True)
    if where is not True:
        src = _dispatch(tape, site, np.where, (where, src, dst), None)
    _write(tape, site, dst, Ellipsis, src)


def _inplace_put(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: dict) -> None:
    if type(fn) is _BuiltinMethod and type(fn.__self__) is _ndarray:
        a, rest = fn.__self__, args
    else:
        a, rest = args[0], args[1:]
    ind, v = rest[0], rest[1]
    flat = a.reshape(-1) if a.flags.c_contiguous else None
    if flat is None or flat.base is not (a.base if a.base is not None else a) and flat.base is not a:
        raise writes.MutationError("bytegrad supports np.put only on contiguous arrays.", site.loc(),
                                   "assign with a.reshape(-1)[ind] = v on a contiguous array instead.")
    ind = np.asarray(ind).ravel()
    n = ind.size
    value = v if np.ndim(v) == 0 else _dispatch(tape, site, np.resize, (v, n), None)
    _write(tape, site, flat, ind, value)


def _inplace_ufunc_at(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: dict) -> None:
    ufunc = fn.__self__
    a, indices = args[0], args[1]
    b = args[2] if len(args) > 2 else None
    if ufunc not in (np.add, np.subtract) or b is None:
        if writes.current(tape, site, a) is None and (b is None or _parent_of(tape.ids, b) is None):
            tape.check_write(a, a, site)
            return fn(*args, **kwargs)
        # np.multiply.at and the others: run as rounds of fancy writes, in index order
        return _call_python(tape, site, ufunc_at_in_rounds, (ufunc,) + args, kwargs or None)
    ib = _parent_of(tape.ids, b)
    if ib is None and tape.owners and type(b) is _ndarray:
        ib = writes.view_parent(tape, site, b)
    writes.add_at(tape, site, a, indices, b, ib, 1 if ufunc is np.add else -1)


def _generator_send(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: dict) -> Any:
    """`gen.send(v)`: a differentiated value may only go into a generator whose code bytegrad rewrote."""
    gen = fn.__self__
    code = getattr(gen, "gi_code", None)
    if _any_tracked(tape.ids, args, kwargs) and (code is None or "__bg_tape__" not in code.co_varnames):
        raise NoRuleError(_method_key(fn), site.loc(),
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


def _method_key(fn: Any) -> Any:
    """A hashable name for a callable: (type, name) for a bound C method, else the callable."""
    if type(fn) is _BuiltinMethod and fn.__self__ is not None and type(fn.__self__) is not _ModuleType:
        return (type(fn.__self__), fn.__name__)
    try:
        hash(fn)
    except TypeError:
        return id(fn)
    return fn


# ---- hooks: calls -----------------------------------------------------------------------------


def call0(tape: Optional[Tape], site: Site, fn: Any) -> Any:
    if tape is None:
        return fn()
    return _dispatch(tape, site, fn, (), None)


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
                return _dispatch(tape, site, fn, (a,), None)
            return fn(a)
        if tape.stale and i in tape.stale:
            i = writes.refresh(tape, site, i)
        out = fn(a)
        values = tape.values
        tape.ids[id(out)] = len(values)
        values.append(out)
        tape.nodes.append((_bw_unary, i, site, rule, (a,), fn))
        return out
    if rule is not None and rule.kind is RRULE and rule.rrule is not None and type(a) is not list \
            and type(a) is not tuple:
        i = tape.ids.get(id(a))
        if i is None:
            if tape.owners or type(a) not in _PLAIN:
                return _dispatch(tape, site, fn, (a,), None)
            return fn(a)
        if tape.stale and i in tape.stale:
            i = writes.refresh(tape, site, i)
        try:
            out, pullback = rule.rrule(a)
        except RuleCaseError as exc:
            if exc.loc is not None:
                raise
            return _other_case(tape, site, fn, (a,), None, exc)
        node = (_bw_rrule_trusted if rule.trusted else _bw_rrule, (i,), site, pullback, (a,), fn)
        to = type(out)
        if to is _ndarray or to is float or to is _float64:
            values = tape.values
            tape.ids[id(out)] = len(values)
            values.append(out)
            tape.nodes.append(node)
            return out
        return _push_output(tape, node, out)
    return _dispatch(tape, site, fn, (a,), None)


def call2(tape: Optional[Tape], site: Site, fn: Any, a: Any, b: Any) -> Any:
    if tape is None:
        return fn(a, b)
    return _dispatch(tape, site, fn, (a, b), None)


def call(tape: Optional[Tape], site: Site, fn: Any, args: tuple) -> Any:
    if tape is None:
        return fn(*args)
    return _dispatch(tape, site, fn, args, None)


def call_kw(tape: Optional[Tape], site: Site, fn: Any, packed: tuple) -> Any:
    names = packed[-1]
    k = len(names)
    args = packed[:-1]
    kwargs = dict(zip(names, args[len(args) - k:]))
    args = args[: len(args) - k]
    if tape is None:
        return fn(*args, **kwargs)
    return _dispatch(tape, site, fn, args, kwargs)


def call_ex(tape: Optional[Tape], site: Site, fn: Any, args: Any, kwargs: Optional[dict]) -> Any:
    if tape is None:
        return fn(*args, **kwargs) if kwargs else fn(*args)
    if type(args) is not tuple:  # `f(*x)`: a differentiated array unpacks into its rows
        args = unpack(tape, site, args)
    return _dispatch(tape, site, fn, tuple(args), dict(kwargs) if kwargs else None)


# ---- hooks: operators -----------------------------------------------------------------------


def _binary_tracked(tape: Tape, site: Site, op: Any, a: Any, b: Any, ia: Any, ib: Any) -> Any:
    rule = _rules_get(op)
    if rule is None:
        raise NoRuleError(op, site.loc())
    kind = rule.kind
    if kind is ELEMENTWISE:
        if tape.stale:
            ia, ib = _refresh(tape, (ia, ib), site)
        out = op(a, b)
        to = type(out)
        if to is not _ndarray and to is not float and to is not _float64 and not _trackable(out):
            return out  # e.g. `"%s" % x`: nothing to differentiate
        values = tape.values
        tape.ids[id(out)] = len(values)
        values.append(out)
        tape.nodes.append((_bw_elementwise, (ia, ib), site, rule, (_as_array(a), _as_array(b)), op))
        return out
    if kind is RRULE and rule.rrule is not None:
        try:
            out, pullback = rule.rrule(a, b)
        except RuleCaseError as exc:
            if exc.loc is not None:
                raise
            return _other_case(tape, site, op, (a, b), None, exc)
        node = (_bw_rrule_trusted if rule.trusted else _bw_rrule, (ia, ib), site, pullback, (a, b), op)
        return _push_output(tape, node, out)
    if kind is NONDIFF or kind is TRANSPARENT:
        if tape.__class__ is CaptureTape:
            tape.refuse(f"computes {qualname(op)} of a differentiated value (no derivative)", site)
        return op(a, b)
    return _dispatch(tape, site, op, (a, b), None)


#: types whose operators never run user Python code
_PLAIN = frozenset({int, float, bool, complex, str, bytes, list, tuple, dict, set, type(None), np.ndarray,
                    np.float64, np.float32, np.int64, np.int32, np.bool_, np.complex128, slice, range})

_REFLECTED = _operators.REFLECTED


def _python_operator(op: Any, ta: type, tb: type) -> bool:
    """Whether `a op b` would run an operator method written in Python (a's, or b's reflected one)."""
    if type(getattr(ta, f"__{op.__name__.strip('_')}__", None)) is _FunctionType:
        return True
    reflected = _REFLECTED.get(op)
    return reflected is not None and type(getattr(tb, reflected, None)) is _FunctionType


def _user_binary(tape: Tape, site: Site, op: Any, a: Any, b: Any) -> Any:
    """`a op b` where an operand's class implements the operator in Python: run that code rewritten."""
    name = f"__{op.__name__.strip('_')}__"
    ta, tb = type(a), type(b)
    reflected = _REFLECTED.get(op)
    # Python tries b's reflected method first when b's class is a subclass of a's
    # (and a NumPy scalar's operator hands an unknown operand to that operand's reflected method)
    b_first = (tb is not ta and issubclass(tb, ta)) or (
        issubclass(ta, np.generic) and reflected is not None and type(getattr(tb, reflected, None)) is _FunctionType)
    order = [(tb, reflected, b, a), (ta, name, a, b)] if b_first else [(ta, name, a, b), (tb, reflected, b, a)]
    for cls, meth_name, x, y in order:
        if meth_name is None or (cls is tb and ta is tb and meth_name == reflected):
            continue
        meth = getattr(cls, meth_name, None)
        if meth is None:
            continue
        if type(meth) is _FunctionType:
            out = _call_python(tape, site, meth, (x, y), None)
        else:
            out = meth(x, y)  # a C implementation (float.__mul__...): it may decline
        if out is not NotImplemented:
            return out
    return op(a, b)  # nobody took it: the plain operator raises the usual TypeError


def _list_as_array(ids: dict[int, int], op: Any, a: Any, b: Any) -> bool:
    """Whether `a op b` is NumPy arithmetic on a list or tuple that holds differentiated values
    (`x[:2] * [x[2], 1.0]`): the other operand is an array, or a NumPy scalar in an operator other
    than `*` (which is sequence repetition there, as two lists would concatenate)."""
    ta = type(a)
    if ta is list or ta is tuple:
        seq, other = a, b
    else:
        seq, other = b, a
    if type(other) is not _ndarray and (op is operator.mul or not isinstance(other, np.generic)):
        return False
    return _parent_of(ids, seq) is not None


def _as_array(v: Any) -> Any:
    return np.asarray(v) if type(v) is list or type(v) is tuple else v


def _make_binary(op: Any) -> Callable[..., Any]:
    def binary_hook(tape: Optional[Tape], site: Site, a: Any, b: Any) -> Any:
        if tape is not None:
            ids = tape.ids
            ia = ids.get(id(a))
            ib = ids.get(id(b))
            ta, tb = type(a), type(b)
            mixed = ta is not _ndarray or tb is not _ndarray  # (two arrays skip the next two checks)
            if mixed and (ta is list or ta is tuple or tb is list or tb is tuple) and _list_as_array(ids, op, a, b):
                return _dispatch(tape, site, op, (a, b), None)  # records the list's scalars too
            if ia is not None or ib is not None:
                if mixed and (ta not in _PLAIN or tb not in _PLAIN) and _python_operator(op, ta, tb):
                    return _user_binary(tape, site, op, a, b)  # `V(x) * x`: V's operator, rewritten
                rule = _rules_get(op)
                if rule is None or tape.stale:
                    return _binary_tracked(tape, site, op, a, b, ia, ib)
                if rule.kind is not ELEMENTWISE:
                    if rule.kind is not RRULE or rule.rrule is None:
                        return _binary_tracked(tape, site, op, a, b, ia, ib)
                    try:
                        out, pullback = rule.rrule(a, b)  # matmul and friends, recorded inline
                    except RuleCaseError as exc:
                        if exc.loc is not None:
                            raise
                        return _other_case(tape, site, op, (a, b), None, exc)
                    node = (_bw_rrule_trusted if rule.trusted else _bw_rrule, (ia, ib), site, pullback, (a, b), op)
                    if type(out) is _ndarray:
                        values = tape.values
                        ids[id(out)] = len(values)
                        values.append(out)
                        tape.nodes.append(node)
                        return out
                    return _push_output(tape, node, out)
                out = op(a, b)
                to = type(out)
                if to is _ndarray or to is float or to is _float64 or _trackable(out):
                    if ta is list or ta is tuple or tb is list or tb is tuple:  # `x * [2.0]`: the
                        a, b = _as_array(a), _as_array(b)                       # partials need arrays
                    values = tape.values
                    ids[id(out)] = len(values)
                    values.append(out)
                    tape.nodes.append((_bw_elementwise, (ia, ib), site, rule, (a, b), op))
                return out
            if tape.owners:
                ia, ib = _untracked_views(tape, site, (a, b), (None, None))
                if ia is not None or ib is not None:
                    return _binary_tracked(tape, site, op, a, b, ia, ib)
            if ta not in _PLAIN or tb not in _PLAIN:
                return _user_binary(tape, site, op, a, b)
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
                return _inplace_array(tape, site, iop, op, a, b, ia, ib)
            ta, tb = type(a), type(b)
            untracked = ia is None and ib is None
            if ta not in _PLAIN:
                meth = getattr(ta, f"__i{op.__name__.strip('_')}__", None)
                if type(meth) is _FunctionType:
                    out = _call_python(tape, site, meth, (a, b), None)
                    if out is not NotImplemented:
                        return out
                if untracked or _python_operator(op, ta, tb):
                    return _user_binary(tape, site, op, a, b)
            elif tb not in _PLAIN and (untracked or _python_operator(op, ta, tb)):
                return _user_binary(tape, site, op, a, b)
            if not untracked:
                return _binary_tracked(tape, site, op, a, b, ia, ib)
        return iop(a, b)

    inplace_hook.__name__ = f"inplace_{op.__name__}"
    return inplace_hook


def _inplace_array(tape: Tape, site: Site, iop: Any, op: Any, a: np.ndarray, b: Any, ia: Any, ib: Any) -> Any:
    if ia is None and ib is None and tape.owners:
        ia, ib = _untracked_views(tape, site, (a, b), (None, None))
    if ia is None and ib is None:
        tape.check_write(a, a, site)
        return iop(a, b)
    if tape.stale:
        ia, ib = _refresh(tape, (ia, ib), site)
    tape.check_protected(a, site)  # refuse writing into the caller's data before computing anything
    # The new value is computed out of place, from copies of the old value (and of an operand that
    # shares its memory: `y *= y`, `a += a.T`), then written back into `a` as a recorded assignment,
    # which first gives any operation that saved the old value a copy of it (tape.check_write).
    # (Recorded copies, `_snapshot`: a nested derivative differentiates the rule's use of them too.)
    old = _snapshot(tape, site, a)
    ids = tape.ids
    if ia is not None:
        ia = ids[id(old)]
    if b is a:
        b, ib = old, ia
    elif type(b) is _ndarray and np.may_share_memory(a, b):
        b = _snapshot(tape, site, b)
        if ib is not None:
            ib = ids[id(b)]
    res = _binary_tracked(tape, site, op, old, b, ia, ib)
    writes.write(tape, site, a, Ellipsis, res, tape.ids.get(id(res)))
    return a


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
                return _dispatch(tape, site, op, (a,), None)
        return op(a)

    unary_hook.__name__ = f"unary_{op.__name__}"
    return unary_hook


def _make_unary_user(op: Any, dunder: str) -> Callable[..., Any]:
    plain = _make_unary(op)

    def unary_hook(tape: Optional[Tape], site: Site, a: Any) -> Any:
        if tape is not None and type(a) not in _PLAIN and tape.ids.get(id(a)) is None:
            meth = getattr(type(a), dunder, None)
            if type(meth) is _FunctionType:
                return _call_python(tape, site, meth, (a,), None)
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
            node = (_bw_rrule_trusted if rule.trusted else _bw_rrule, (i, None), site, pullback, (obj, key), _getitem)
            if type(out) is _ndarray or type(out) is _float64:
                values = tape.values
                tape.ids[id(out)] = len(values)
                values.append(out)
                tape.nodes.append(node)
                return out
            return _push_output(tape, node, out)
        to = type(obj)
        if to is _ndarray:
            if tape.owners and writes.view_parent(tape, site, obj) is not None:
                return getitem(tape, site, obj, key)
        elif to not in _PLAIN:
            method = getattr(to, "__getitem__", None)
            if type(method) is _FunctionType:
                return _call_python(tape, site, method, (obj, key), None)
            if isinstance(obj, dict) and key not in obj:  # `__missing__`, a defaultdict's factory
                out = CALLBACKS["missing"](tape, site, obj, key)
                if out is not NotImplemented:
                    return out
    return obj[key]


def getslice(tape: Optional[Tape], site: Site, obj: Any, start: Any, stop: Any) -> Any:
    return getitem(tape, site, obj, slice(start, stop))


def _write(tape: Tape, site: Site, obj: np.ndarray, key: Any, value: Any) -> None:
    if type(key) is _ndarray and key.dtype.kind == "b":  # `y[mask] = v`: what it overwrote contributes zeros
        zerosafe.guard(tape)
    iv = _parent_of(tape.ids, value)
    if iv is None and tape.owners and type(value) is _ndarray:
        iv = writes.view_parent(tape, site, value)
    if iv is not None and type(iv) is not int:  # a list holding tracked values: make it an array
        value = _dispatch(tape, site, np.asarray, (value,), None)
        iv = tape.ids.get(id(value))
    elif iv is not None and tape.stale and iv in tape.stale:
        iv = writes.refresh(tape, site, iv)
    writes.write(tape, site, obj, key, value, iv)


def setitem(tape: Optional[Tape], site: Site, value: Any, obj: Any, key: Any) -> None:
    if tape is None or type(obj) is not _ndarray:
        if tape is not None and type(obj) not in _PLAIN:
            meth = _class_attr(type(obj), "__setitem__")
            if type(meth) is _FunctionType:  # a user container's `__setitem__`, rewritten
                _call_python(tape, site, meth, (obj, key, value), None)
                return
            if type(obj) is _FlatIter and type(obj.base) is _ndarray:  # `a.flat[k] = v`: flat positions
                base = obj.base                                          # as indices into `a`
                _write(tape, site, base, np.unravel_index(np.arange(base.size)[key], base.shape), value)
                return
        obj[key] = value
        return
    _write(tape, site, obj, key, value)


_FlatIter = np.flatiter


def setattr_(tape: Optional[Tape], site: Site, value: Any, obj: Any, name: str) -> None:
    """`obj.name = value` where value may be differentiated: a property setter, a descriptor's
    `__set__` or a `__setattr__` written in Python runs rewritten, like any callee."""
    if tape is not None:
        cls = type(obj)
        if cls not in _PLAIN:
            desc = _class_attr(cls, name)
            td = type(desc)
            if td is property:
                if type(desc.fset) is _FunctionType:
                    _call_python(tape, site, desc.fset, (obj, value), None)
                    return
            elif desc is not None and type(getattr(td, "__set__", None)) is _FunctionType:
                _call_python(tape, site, td.__set__, (desc, obj, value), None)
                return
            hook = _class_attr(cls, "__setattr__")
            if type(hook) is _FunctionType:
                _call_python(tape, site, hook, (obj, name, value), None)
                return
    setattr(obj, name, value)


def setslice(tape: Optional[Tape], site: Site, value: Any, obj: Any, start: Any, stop: Any) -> None:
    setitem(tape, site, value, obj, slice(start, stop))


def getattr_(tape: Optional[Tape], site: Site, obj: Any, name: str) -> Any:
    """`obj.name` where obj may be differentiated: array attributes with rules (`.T`, `.real`), and
    properties written in Python, whose getter is rewritten like any other callee."""
    if tape is not None:
        if tape.ids.get(id(obj)) is not None:
            desc = getattr(type(obj), name, None)
            # only data descriptors (`.T`, `.real`) are values; methods are bound and called later
            rule = _rules_get(desc) if type(desc) in _DataDescriptors else None
            if rule is not None and rule.kind is RRULE:
                return _record_rrule(tape, site, rule, desc.__get__, (obj,), None)
            if (name == "real" or name == "imag") and type(obj) is not _ndarray and _trackable(obj):
                # a scalar's `.real` (Python's complex has no rule of its own): as a 0-d array's
                return getitem(tape, site, getattr_(tape, site, _dispatch(tape, site, np.asarray, (obj,), None),
                                                    name), ())
            if rule is None and (type(obj) is _ndarray or isinstance(obj, np.generic)) and name in _ARRAY_DATA_ATTRS:
                raise NoRuleError((type(obj), name), site.loc())
            return getattr(obj, name)
        to = type(obj)
        if to not in _PLAIN:
            desc = _class_attr(to, name)
            td = type(desc)
            if td is property:
                if type(desc.fget) is _FunctionType:
                    return _call_python(tape, site, desc.fget, (obj,), None)
            elif td is functools.cached_property:
                d = getattr(obj, "__dict__", None)
                if d is not None and desc.attrname in d:
                    return d[desc.attrname]
                value = _call_python(tape, site, desc.func, (obj,), None)
                if d is not None:
                    d[desc.attrname] = value
                return value
            elif desc is not None and td not in (_FunctionType, staticmethod, classmethod) and \
                    type(getattr(td, "__get__", None)) is _FunctionType and \
                    (hasattr(td, "__set__") or name not in getattr(obj, "__dict__", {})):
                return _call_python(tape, site, td.__get__, (desc, obj, to), None)
            elif desc is None and name not in getattr(obj, "__dict__", {}):
                hook = getattr(to, "__getattr__", None)
                if type(hook) is _FunctionType:
                    try:
                        return object.__getattribute__(obj, name)
                    except AttributeError:
                        return _call_python(tape, site, hook, (obj, name), None)
    return getattr(obj, name)


def _class_attr(cls: type, name: str) -> Any:
    """`name` as stored on the class (without running a descriptor's __get__), or None."""
    for c in cls.__mro__:
        d = c.__dict__
        if name in d:
            return d[name]
    return None


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
        to = type(obj)
        if to is _ndarray:
            if writes.current(tape, site, obj) is not None:
                if obj.ndim == 0:
                    raise TypeError("iteration over a 0-d array")
                return _iter_rows(tape, site, obj)
        elif to not in _PLAIN:
            meth = getattr(to, "__iter__", None)
            if type(meth) is _FunctionType:
                it = _call_python(tape, site, meth, (obj,), None)
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
            item = _call_python(tape, site, step, (it,), None)
        except StopIteration:
            return
        yield item


def unpack(tape: Optional[Tape], site: Site, obj: Any) -> Any:
    if tape is not None:
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
    enter = _class_attr(cls, "__enter__")
    exit_ = _class_attr(cls, "__exit__")
    if enter is None or exit_ is None:
        raise TypeError(f"'{cls.__name__}' object does not support the context manager protocol")
    bound_exit = exit_.__get__(mgr, cls)
    if tape is not None and type(enter) is _FunctionType:
        return _call_python(tape, site, enter, (mgr,), None), bound_exit
    return enter.__get__(mgr, cls)(), bound_exit


from bytegrad.runtime import callbacks as _callbacks  # noqa: E402,F401  (fills CALLBACKS; imports abi)
