"""Calls with keywords of keyword-only parameters (and of `**kwargs`) on compiled programs.

Programs serve positional arguments: `Tiers` keys a signature by the arguments' types, and the capture,
guards and back ends read arguments by position. A call `loss(w, x, l2=0.1)` of
`def loss(w, x, *, l2=1e-3, training=True)` is served by the programs of a *positional twin* of the
function: the same code object with its first `m` keyword-only parameters made positional
(`co_argcount + m`, `co_kwonlyargcount - m`; the parameters keep their slots, so the body is the
user's, byte for byte), `m` reaching the last keyword-only parameter the call passes. The twin is
called with every positional parameter (an omitted one's default, as it is at this call), then those
`m` keyword-only parameters in declaration order: the call's value where it passed one, else the
function's keyword default as it is at this call. Each is then an argument like any positional
one: a float an input of the program, an int, bool, string or None guarded by value, an array tracked.
The twin's remaining keyword-only parameters keep the function's own `__kwdefaults__` dict (the
twin's `Tiers` starts again when it changes, as the function's own does).

So `f(w, x, l2=0.1)` and `f(w, x, scale=2.0)` (`m` = 1 and 2) have programs of their own twins,
`f(w, x)` the function's own programs, and keywords passed in any order reach the same twin.
With `**kwargs` (and no `*args`), a call passing keywords it takes makes every keyword-only parameter
and the `**kwargs` parameter positional: the function receives a fresh dict of the caller's keys in
the caller's order, an argument like any dict argument (guarded by its keys, in order).

The twin's own general path is never the call's fallback: when its programs do not answer, the caller
runs the general path on the function itself, with the call's keywords (`Differentiated._grad_now`);
a capture run (which is the call's one run) runs the twin.
"""
from __future__ import annotations

import types
import weakref
from typing import Any, Optional

from bytegrad.runtime.sentinels import MISS

__all__ = ["explained", "grad", "merge", "twin_call"]

_VARARGS, _VARKEYWORDS = 0x04, 0x08


class _Twins:
    """The positional twins of one differentiated function, for its current code: (m, **kwargs positional)
    -> the twin function; (the caller's wrt, has_aux and tier; m, **kwargs positional, the twin's wrt) -> its
    `Differentiated`."""

    __slots__ = ("code", "fns", "ds")

    def __init__(self, code: types.CodeType) -> None:
        self.code = code
        self.fns: dict[tuple[int, bool], types.FunctionType] = {}
        self.ds: dict[tuple, Any] = {}


#: function -> its twins (weakly held, as compiled/policy.py holds its programs: shared by every `grad(fn)`)
_TWINS: "weakref.WeakKeyDictionary[types.FunctionType, _Twins]" = weakref.WeakKeyDictionary()


def _owner(d: Any) -> tuple:
    """What `d`'s twins are kept under, beside the layout of the call: its `wrt`, `has_aux` and tier."""
    spec = d._wrt_spec
    return (tuple(spec) if isinstance(spec, list) else spec, d._has_aux, d._tier)


def _twin_fn(target: types.FunctionType, m: int, varkw: bool) -> types.FunctionType:
    """`target` with its first `m` keyword-only parameters (and `**kwargs` when `varkw`) positional."""
    code = target.__code__
    flags = code.co_flags & ~_VARKEYWORDS if varkw else code.co_flags
    twin_code = code.replace(co_argcount=code.co_argcount + m + varkw, co_kwonlyargcount=code.co_kwonlyargcount - m,
                             co_flags=flags)
    fn = types.FunctionType(twin_code, target.__globals__, target.__name__, None, target.__closure__)
    fn.__kwdefaults__ = target.__kwdefaults__  # (the same dict: written in place, the twin's Tiers see it)
    fn.__qualname__ = target.__qualname__
    fn.__module__ = target.__module__
    fn.__doc__ = target.__doc__
    return fn


def _twin_wrt(d: Any, nargs: int, argc: int, shift: int, kwonly: tuple, call_kw: dict) -> Any:
    """The twin's `wrt` for a call with `nargs` positional arguments, or None where the general path
    answers (it raises: a position out of range, a keyword-only parameter not passed; or a `**kwargs` key)."""
    spec = d._wrt_spec
    positional = d._target.__code__.co_varnames[:argc]
    items = spec if isinstance(spec, (tuple, list)) else (spec,)
    out: list[Any] = []
    for w in items:
        if isinstance(w, bool) or not isinstance(w, (int, str)):
            return None
        if isinstance(w, str):
            if w in kwonly and w not in call_kw or w not in kwonly and w not in positional:
                return None
            out.append(w)
            continue
        p = w + nargs if w < 0 else w
        if not 0 <= p < nargs:
            return None
        out.append(p if p < argc else p + shift)  # (past the positional parameters: `*args`, after the twin's)
    return tuple(out) if isinstance(spec, (tuple, list)) else out[0]


def twin_call(d: Any, call_args: tuple, call_kw: dict) -> Any:
    """(the twin's `Differentiated`, its positional arguments) for `d`'s call `d(*call_args, **call_kw)`
    (keywords of positional parameters already in place); a string: why it stays on the general path;
    None: the general path raises (a missing argument, an unexpected keyword)."""
    target = d._target
    code = target.__code__
    argc, k, flags = code.co_argcount, code.co_kwonlyargcount, code.co_flags
    kwonly = code.co_varnames[argc:argc + k]
    extra = [n for n in call_kw if n not in kwonly]
    if extra and (not flags & _VARKEYWORDS or any(n in code.co_varnames[code.co_posonlyargcount:argc] for n in extra)):
        return None  # (an unexpected keyword, or a positional parameter passed twice: TypeError)
    if extra and flags & _VARARGS:
        return (f"it is called with the keyword argument{'s' if len(extra) > 1 else ''} {', '.join(extra)}, which "
                "**kwargs takes, of a function with *args too: such a call runs on the general path")
    m = k if extra else 1 + max(kwonly.index(n) for n in call_kw)
    positional = list(call_args[:argc])
    if len(positional) < argc:  # (omitted positional parameters: their defaults, as they are now)
        defaults = target.__defaults__ or ()
        first = argc - len(defaults)
        if len(positional) < first:
            return None
        positional.extend(defaults[len(positional) - first:])
    kwdefaults = target.__kwdefaults__ or {}
    named = []
    for n in kwonly[:m]:
        if n in call_kw:
            named.append(call_kw[n])
        elif n in kwdefaults:
            named.append(kwdefaults[n])
        else:
            return None  # (a required keyword-only parameter not passed)
    if extra:
        named.append({n: call_kw[n] for n in extra})  # (a fresh dict, in the caller's order)
    shift = m + bool(extra)
    wrt = _twin_wrt(d, len(call_args), argc, shift, kwonly, call_kw)
    if wrt is None:
        return None
    twins = _TWINS.get(target)
    if twins is None or twins.code is not code:
        twins = _TWINS[target] = _Twins(code)
    fn = twins.fns.get((m, bool(extra)))
    if fn is None:
        fn = twins.fns[(m, bool(extra))] = _twin_fn(target, m, bool(extra))
    elif fn.__kwdefaults__ is not target.__kwdefaults__:  # (replaced: `f.__kwdefaults__ = {...}`)
        fn.__kwdefaults__ = target.__kwdefaults__
    key = (_owner(d), m, bool(extra), wrt)
    twin = twins.ds.get(key)
    if twin is None:
        twin = twins.ds[key] = type(d)(fn, wrt, d._has_aux, d._tier)
    return twin, (*positional, *named, *call_args[argc:])


def grad(tiers: Any, d: Any, call_args: tuple, call_kw: dict, value: bool) -> Any:
    """`Tiers.call` for `d`'s call with keywords that name no positional parameter: the result of a
    program of the twin (or of its capture), or MISS (the caller runs the general path on `d`)."""
    found = twin_call(d, call_args, call_kw)
    if found is None:
        return MISS
    if isinstance(found, str):
        return tiers.keywords(call_args, call_kw, found)
    twin, args = found
    twin_tiers = twin._tiers
    if twin_tiers is None:
        return MISS
    return twin_tiers.call(twin._target, args, twin._capture, value=value)


def merge(described: dict[str, Any], d: Any) -> dict[str, Any]:
    """`Tiers.describe` of `d` with its twins' programs and signatures added: each program says the
    keywords it takes (`keywords`), each signature names them (`ndarray, ndarray, l2=float`)."""
    twins = _TWINS.get(d._target)
    if twins is None or twins.code is not d._target.__code__:
        return described
    argc, owner = twins.code.co_argcount, _owner(d)
    for key, twin in twins.ds.items():
        if key[0] != owner:
            continue
        tiers = twin._tiers_obj
        if tiers is None:
            continue
        names = twin._target.__code__.co_varnames[argc:twin._target.__code__.co_argcount]
        varkw = names[-1] if not twin._target.__code__.co_flags & _VARKEYWORDS and twins.code.co_flags & _VARKEYWORDS \
            else None  # (its `**kwargs` parameter, positional in the twin)
        more = tiers.describe()
        for prog in more["programs"]:
            guards = [_guard_text(g, argc, names, varkw) for g in prog["guards"]]
            described["programs"].append({**prog, "guards": guards, "keywords": list(names)})
        for sig, why in more["not_compiled"].items():
            parts = sig.split(", ")
            parts[argc:argc + len(names)] = [f"**{n}={t}" if n == varkw else f"{n}={t}"
                                             for n, t in zip(names, parts[argc:argc + len(names)])]
            if varkw is not None and why.startswith("a dict argument holding floats"):
                why = (f"the **{varkw} dict receives a float (a float in it is not an input a program can track; "
                       "a keyword-only parameter's is): the call runs on the general path")
            described["not_compiled"][", ".join(parts)] = why
        for count in ("compiled_calls", "general_calls", "loaded_from_disk", "disagreements"):
            described[count] += more[count]
        described["capture_s"] = round(described["capture_s"] + more["capture_s"], 6)
    return described


def _guard_text(text: str, argc: int, names: tuple, varkw: Optional[str]) -> str:
    """A twin's guard as the user reads it: its count of positional arguments is the call's positional ones
    and keywords (the twin's `3 positional arguments` is `2 positional arguments, then l2`)."""
    if text.endswith(" positional arguments") or text.endswith(" positional argument"):
        kwonly = [n for n in names if n != varkw]
        return (f"{argc} positional argument{'s' if argc != 1 else ''}, then the keyword-only {', '.join(kwonly)} "
                "(as passed, else their defaults at the call)" if kwonly else
                f"{argc} positional argument{'s' if argc != 1 else ''}") + \
            (f", then the keywords **{varkw} takes (a fresh dict each call)" if varkw else "")
    return text


def explained(d: Any) -> list[str]:
    """`bytegrad.explain`'s lines for `d`'s twins: each program, with the keywords it takes and its guards."""
    described = merge({"programs": [], "not_compiled": {}, "compiled_calls": 0, "general_calls": 0,
                       "loaded_from_disk": 0, "disagreements": 0, "capture_s": 0.0}, d)
    return [f"  program for calls with keywords {', '.join(p['keywords'])}: {p['backend']} back end, "
            f"{p['operations']} operations; guards: {'; '.join(p['guards'])}" for p in described["programs"]] + \
        [f"  not compiled for ({sig}): {why}" for sig, why in described["not_compiled"].items()]
