"""Recording: how a call with a rule becomes a tape record (runtime/records.py).

The hooks (runtime/abi.py) and the dispatcher (runtime/dispatch.py) decide that a call is to be
recorded; the functions here find its parents (tracked values, views of written memory, entries
overwritten since they were recorded), run the primal or the rule, and push the record and its
output, items of a tuple output included.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from bytegrad.errors import DifferentiationError, qualname
from bytegrad.runtime import writes, zerosafe
from bytegrad.runtime.backward import (  # the record kinds (runtime/records.py)
    ELEMENTWISE as EW_RECORD, RULE as RULE_RECORD, RULE_TRUSTED as TRUSTED_RECORD, TUPLE_ITEM,
)
from bytegrad.runtime.records import IDENTITY, Site, TupleOut
from bytegrad.runtime.tape import Tape

__all__ = ["parent_of", "refresh_parents", "untracked_views", "record_elementwise", "record_rrule", "bind_tracked_keywords", "push_output",
           "trackable", "as_array", "snapshot"]

_ndarray = np.ndarray
_np_where = np.where
_float64 = np.float64


def parent_of(ids: dict[int, int], a: Any) -> Any:
    """The node index of `a`, a (nested) list of them for a list/tuple holding tracked values, or None."""
    t = type(a)
    if t is list or t is tuple:
        subs = [parent_of(ids, x) for x in a]
        for s in subs:
            if s is not None:
                return subs
        return None
    return ids.get(id(a))


def refresh_parents(tape: Tape, parents: Any, site: Site) -> Any:
    """Parents with out-of-date entries (memory overwritten since) replaced by current ones."""
    out: list[Any] = []
    for p in parents:
        if type(p) is int:
            out.append(writes.refresh(tape, site, p) if p in tape.stale else p)
        elif p is not None:
            out.append(refresh_parents(tape, p, site))
        else:
            out.append(None)
    return out if type(parents) is list else tuple(out)


def untracked_views(tape: Tape, site: Site, args: tuple, parents: Any) -> Any:
    """Parents for untracked arrays that are views of memory written with tracked values."""
    out = list(parents)
    for k, (a, p) in enumerate(zip(args, parents)):
        if p is None and type(a) is _ndarray:
            out[k] = writes.view_parent(tape, site, a)
    return out if type(parents) is list else tuple(out)


def record_elementwise(tape: Tape, site: Site, rule: Any, fn: Any, args: tuple, kwargs: Optional[dict]) -> Any:
    """`fn(*args, **kwargs)` recorded with its elementwise rule (the dispatcher has made arrays of
    lists holding tracked values, and handled `out=`)."""
    ids = tape.ids
    n = len(rule.partials)
    parents = tuple(ids.get(id(a)) for a in args[:n])
    if tape.capturing and (kwargs or len(args) > n):  # the record keeps args[:n] only
        tape.refuse(f"passes options to {qualname(fn)} (a compiled program replays its positional arguments)", site)
    if tape.owners:
        parents = untracked_views(tape, site, args, parents)
    if tape.stale:
        parents = refresh_parents(tape, parents, site)
    out = fn(*args, **kwargs) if kwargs else fn(*args)
    if all(p is None for p in parents):
        return out
    node = (EW_RECORD, parents, site, rule, tuple(as_array(a) for a in args[:n]), fn)
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


def bind_tracked_keywords(tape: Tape, site: Site, rule: Any, fn: Any, args: tuple,
                          kwargs: dict) -> tuple[tuple, Optional[dict]]:
    """Keyword arguments holding tracked values moved into their positional places (a rule sees
    positions: `np.clip(x, a_min=-t, a_max=t)`); one without a place is an error, never a silent zero."""
    ids = tape.ids
    if not any(parent_of(ids, v) is not None for v in kwargs.values()):
        return args, kwargs
    args, kwargs = _bind_positional(fn, args, kwargs, site, rule)
    if any(parent_of(ids, v) is not None for v in kwargs.values()) and getattr(rule, "rrule", None) is not None:
        args, kwargs = _bind_positional(rule.rrule, args, kwargs, site)  # keyword-only (np.var's mean=)
    left = {k: v for k, v in kwargs.items() if parent_of(ids, v) is not None}
    if left:
        # (values only a capture tracks, an array made from constants as `where=`: the general path passes
        # them as they are, and so does the run, its capture refused: compiled/plainly.py)
        if tape.capturing and tape.plain(fn, (), left, site):
            return args, kwargs or None
        raise DifferentiationError(
            f"a differentiated value was passed to {qualname(fn)} as a keyword argument that "
            "has no positional place, so its rule cannot return a cotangent for it.",
            site.loc(), "pass it positionally, or compute it outside this call.")
    return args, kwargs or None


def record_rrule(tape: Tape, site: Site, rule: Any, fn: Any, args: tuple, kwargs: Optional[dict]) -> Any:
    """`fn(*args, **kwargs)` recorded with its reverse rule (the dispatcher has handled `out=`; a
    RuleCaseError of the rule reaches the caller, `dispatch.record_rule`)."""
    ids = tape.ids
    if kwargs:
        args, kwargs = bind_tracked_keywords(tape, site, rule, fn, args, kwargs)
    ids_get = ids.get
    parents = []
    tracked = False
    owners = tape.owners
    for a in args:
        ta = type(a)
        p = parent_of(ids, a) if (ta is list or ta is tuple) else ids_get(id(a))
        if p is None and owners and ta is _ndarray:
            p = writes.view_parent(tape, site, a)
        if p is not None:
            tracked = True
        parents.append(p)
    if not tracked:
        return fn(*args, **kwargs) if kwargs else fn(*args)
    if tape.stale:
        parents = refresh_parents(tape, parents, site)
    try:
        out, pullback = rule.rrule(*args, **kwargs) if kwargs else rule.rrule(*args)
    except Exception:  # (a rule refusing a value only a capture tracks, `x.view(dtype)`: compiled/plainly.py)
        if not (tape.capturing and tape.plain(fn, tuple(args), kwargs, site)):
            raise
        return fn(*args, **kwargs) if kwargs else fn(*args)
    # kwargs ride along (node[6]) for the forward sweep's frules; the reverse pass ignores them
    node = (TRUSTED_RECORD if rule.trusted else RULE_RECORD, parents, site, pullback, args, fn, kwargs)
    to = type(out)
    if to is _ndarray or to is float or to is _float64:
        return tape.push(node, out)
    return push_output(tape, node, out)


def push_output(tape: Tape, node: tuple, out: Any) -> Any:
    t = type(out)
    if t is tuple or t is list or (isinstance(out, tuple) and hasattr(out, "_fields")):
        idx = len(tape.values)
        tape.push(node, TupleOut(out))
        _push_items(tape, idx, out, node[2])
        if tape.capturing:  # (`m, e = math.frexp(t)`: e is data a program would hold as a constant)
            _refuse_integer_items(tape, node, out)
        return out
    if t is int or t is bool or out is None:
        if tape.capturing and out is not None:
            tape.refuse(f"computes a {t.__name__} from a differentiated value with {qualname(node[5])}", node[2])
        return out
    return tape.push(node, out)


def _refuse_integer_items(tape: Tape, node: tuple, out: Any) -> None:
    """A rule's tuple output holding an int, a bool or an integer array (`math.frexp`'s exponent,
    `np.linalg.lstsq`'s rank): computed from a differentiated value and never tracked, so a compiled
    program would hold the capture's value; the capture is refused, as for an int output alone."""
    for item in out:
        if type(item) is int or type(item) is bool or isinstance(item, (np.integer, np.bool_)) or \
                (type(item) is _ndarray and item.dtype.kind in "biu"):
            kind = type(item).__name__ if type(item) is not _ndarray else f"{item.dtype} array"
            tape.refuse(f"computes a {kind} from a differentiated value with {qualname(node[5])}", node[2])
            return


def _push_items(tape: Tape, idx: int, out: Any, site: Site) -> None:
    """Record each float element of the sequence `out` (held on the tape at `idx`); a nested list
    (`M.tolist()` of a matrix: rows of floats) stands on the tape as its own holder, recursively."""
    n = len(out)
    for k, item in enumerate(out):
        if trackable(item):
            tape.push((TUPLE_ITEM, (idx,), site, k, n), item)
        elif type(item) is list and item:
            sub = len(tape.values)
            tape.push((TUPLE_ITEM, (idx,), site, k, n), TupleOut(item))
            _push_items(tape, sub, item, site)


def trackable(v: Any) -> bool:
    t = type(v)
    if t is _ndarray:
        return v.dtype.kind in "fc"
    return t is float or t is complex or isinstance(v, (np.floating, np.complexfloating))


def as_array(v: Any) -> Any:
    return np.asarray(v) if type(v) is list or type(v) is tuple else v


def snapshot(tape: Tape, site: Site, a: np.ndarray) -> np.ndarray:
    """A copy of `a` that stands for its current value on the tape (so `a` can then be overwritten)."""
    i = writes.current(tape, site, a)
    copy = a.copy()
    if i is not None:
        tape.push((IDENTITY, (i,), site), copy)
    return copy
