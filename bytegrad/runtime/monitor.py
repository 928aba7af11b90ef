"""Python code that runs blind during a gradient: found and stopped, never left to drop derivatives.

A frame that is not rewritten code, started from C (or from a site the rewrite left alone) while a
gradient's forward pass runs, computes out of the tape's sight. On CPython 3.12+ `sys.monitoring`
sees each such frame start (PY_START, enabled only while a forward pass runs; code known to be
safe, such as rewritten code, bytegrad's, NumPy's and the rules', is disabled per code object after
its first start): one that receives a differentiated value, or an object holding one, raises
`BlindCallError` at the user's line. `runtime/callbacks.py` runs the usual cases (getattr, dict(),
a defaultdict's factory...) rewritten instead, so this only meets what nothing else covers.

On 3.11 the same watch runs through `sys.setprofile`, from the same moment (a forward pass handing
a Python object or function to C) to the end of the pass. With `BYTEGRAD_CHECK=1` (the test suite
sets it) the watch runs from the start of every forward pass, and every site the rewrite left
alone as inactive checks its operands (`GUARDS`): a differentiated value there raises
`BlindCallError` instead of passing through (those guards are runtime/guards.py's).

`runtime/dispatch.py` imports this module and calls `arm` when a C function is handed a Python
function or object; this module imports nothing that imports dispatch.
"""
from __future__ import annotations

import builtins
import functools
import os
import sys
import types
from typing import Any, Optional

import numpy as np

from bytegrad._config import config as _config
from bytegrad.errors import BlindCallError, SourceLoc, library_file
from bytegrad.rules.closures import hidden
from bytegrad.runtime import tape as _tape

__all__ = ["CHECK", "BlindCallError", "start", "arm", "stop", "check_c_call", "refuse_at_user_line", "user_loc"]

#: the checking mode (BYTEGRAD_CHECK=1): guards at inactive sites, and the frame watch on 3.11 too
CHECK = _config.bind("check", __name__, "CHECK")

_MONITORING: Any = getattr(sys, "monitoring", None)  # (3.12+: not in 3.11's stubs)


# dunders whose result never carries a derivative: they may look at differentiated values freely
_NONDIFF_DUNDERS = frozenset({
    "__len__", "__hash__", "__repr__", "__str__", "__format__", "__bool__", "__index__", "__int__",
    "__contains__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__instancecheck__",
    "__subclasscheck__", "__sizeof__", "__reduce__", "__reduce_ex__", "__getstate__", "__del__",
    "__init_subclass__", "__set_name__", "__class_getitem__", "__subclasshook__", "__dir__", "__exit__",
    "__copy__", "__deepcopy__", "__iter__", "__length_hint__",
})

_SAFE_DIRS: Optional[tuple[str, ...]] = None


def _forget_safe_dirs() -> None:  # the cache directory changed (bytegrad.config.cache_dir)
    global _SAFE_DIRS
    _SAFE_DIRS = None


_config.on_change(("cache_dir", "disable_disk_cache"), _forget_safe_dirs)


def _safe_dirs() -> tuple[str, ...]:
    """bytegrad's own code (with the fused sites and kernels it generates) and NumPy's: rules run
    NumPy on differentiated values by design."""
    global _SAFE_DIRS
    if _SAFE_DIRS is None:
        import numpy

        from bytegrad import diskcache

        dirs = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                os.path.dirname(os.path.abspath(numpy.__file__))]
        cache = diskcache.cache_dir()
        if cache:
            dirs.append(os.path.abspath(cache))
        _SAFE_DIRS = tuple(d.rstrip(os.sep) + os.sep for d in dirs) + ("<bytegrad",)
    return _SAFE_DIRS


def _holds_tracked(v: Any, ids: dict[int, int]) -> bool:
    """`v` is differentiated, or a list, tuple, dict or object holding one at its first level."""
    if id(v) in ids:
        return True
    t = type(v)
    if t is list or t is tuple:
        return any(id(x) in ids for x in v)
    if t is dict:
        return any(id(x) in ids for x in v.values())
    d = getattr(v, "__dict__", None) if t not in _INERT else None
    if type(d) is dict:
        return any(id(x) in ids for x in d.values())
    return False


_INERT = frozenset({int, float, complex, bool, str, bytes, type(None), types.FunctionType, types.ModuleType,
                    type, types.BuiltinFunctionType, types.MethodType})


def _rule_codes() -> set:
    """The code objects of every registered rule's functions and of the functions they cover (a
    user's `@rrule`, and the primal an elementwise rule calls, receive differentiated values by
    design), refreshed when the registry changes."""
    from bytegrad.rules import registry

    version = registry.current_version
    if _rule_cache[0] != version:
        codes: set = set()
        todo = []
        for rule in list(registry.all_rules().values()):
            for f in (rule.fn, getattr(rule, "rrule", None), getattr(rule, "frule", None), getattr(rule, "impl", None)):
                c = getattr(f, "__code__", None)
                if c is not None:
                    todo.append(c)
        while todo:  # with the pullbacks defined inside them
            c = todo.pop()
            if c not in codes:
                codes.add(c)
                todo.extend(x for x in c.co_consts if isinstance(x, types.CodeType))
        _rule_cache[:] = [version, codes]
    return _rule_cache[1]


_rule_cache: list = [None, set()]


def _known_safe(code: types.CodeType) -> bool:
    """Code that may meet differentiated values without losing a derivative (checked once per code)."""
    return ("__bg_tape__" in code.co_varnames or code.co_filename.startswith(_safe_dirs())
            or code.co_name in _NONDIFF_DUNDERS or code in _rule_codes())


def _entered_blind(frame: Any) -> bool:
    """Whether `frame` was started by rewritten code or by bytegrad's runtime (directly, or through
    a C function they called), not by code that itself runs blind by design (a rule)."""
    back = frame.f_back
    if back is None:
        return False
    code = back.f_code
    return "__bg_tape__" in code.co_varnames or code.co_filename.startswith(_RUNTIME_DIR)


_RUNTIME_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _under_rule(frame: Any) -> bool:
    """Whether the plain frames below `frame` were started by a rule's own code (bytegrad's, not
    rewritten, not the runtime's) rather than by rewritten code or the runtime."""
    while frame is not None:
        code = frame.f_code
        if "__bg_tape__" in code.co_varnames:
            return False
        name = code.co_filename
        if name.startswith(_PACKAGE_DIR):
            return not name.startswith(_RUNTIME_DIR)
        frame = frame.f_back
    return False


def _check_frame(frame: Any, code: types.CodeType) -> None:
    tape = _tape.current_tape()
    if tape is None:
        return
    ids = tape.ids
    made = getattr(tape, "made", None)
    if made:  # arrays a capture made from constants (`np.zeros(n)`, tracked by it alone: the general path
        # does not track them): what plain code computes from them is fixed (compiled/reach_objects.py)
        ids = {k: i for k, i in ids.items() if i not in made}
    name = _blind_name(frame, code, ids)
    if name is None:
        return
    general = _general_ids(tape, ids)  # (a capture's: of the values the general path tracks too)
    if general is None:
        raise _blind_error(frame, code, name)
    name = _blind_name(frame, code, general)
    if name is not None:
        raise _as_general(_blind_error(frame, code, name), general)
    _refuse_blind(tape, f"{getattr(code, 'co_qualname', code.co_name)} is called from C code (or a call bytegrad "
                  "leaves alone) with a value the call does not differentiate: it runs blind, as on the general "
                  "path, and a program would not run it", user_loc(frame.f_back))


def _general_ids(tape: Any, ids: dict[int, int]) -> Optional[dict[int, int]]:
    """A capture tape's `ids` less the values the general path does not track (those that depend on no
    differentiated argument: compiled/plainly.py `general_ids`), or None for any other tape. A blind
    call that meets only such values runs on the general path: the capture lets it run too, and refuses."""
    narrow = getattr(tape, "general_ids", None)
    return narrow(ids) if narrow is not None else None


def _as_general(exc: BlindCallError, general: Optional[dict]) -> BlindCallError:
    """`exc`, marked as the general path's error too when a capture raises it on the values the general
    path tracks (compiled/plainly.py `raised`: the capture run's error is the call's, raised once)."""
    if general is not None:
        exc.__dict__["_bytegrad_general"] = True
    return exc


def refuse_at_user_line(tape: Any, why: str, frame: Any) -> None:
    """A capture tape's refusal `why`, at the user's line that the stack at `frame` runs under."""
    _refuse_blind(tape, why, user_loc(frame))


def _refuse_blind(tape: Any, why: str, loc: Optional[SourceLoc]) -> None:
    site = _LocSite(loc) if loc is not None else None
    tape.refuse(why, site)


class _LocSite:
    """A SourceLoc as a refusal's site (`lineno`, `function`, `filename`: compiled/source.py `Ineligible`)."""

    __slots__ = ("filename", "lineno", "function", "_loc")

    def __init__(self, loc: SourceLoc) -> None:
        self.filename, self.lineno, self.function, self._loc = loc.filename, loc.lineno, loc.function, loc

    def loc(self) -> SourceLoc:
        return self._loc


def _blind_name(frame: Any, code: types.CodeType, ids: dict[int, int]) -> Optional[str]:
    """The name through which a frame started blind holds a value of `ids` (so must be stopped), or None."""
    # a global holding a differentiated value, read by code that runs plain (however it started: a
    # module-level function the user's lambda calls from inside a C solver), unless a rule runs it
    # plain by design (a solver rule's solve: rules/scipy/_implicit.py)
    g = frame.f_globals
    for name in code.co_names:
        v = g.get(name)
        if v is not None and id(v) in ids and not _under_rule(frame.f_back):
            return name
    if not _entered_blind(frame):
        # (and what it closes over: np.vectorize's ufunc calling a lambda over a differentiated value)
        for name in code.co_freevars:
            if _holds_tracked(frame.f_locals.get(name), ids) and not _under_rule(frame.f_back):
                return name
        return None
    f_locals = frame.f_locals
    n = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
    for name in code.co_varnames[:n]:
        if _holds_tracked(f_locals.get(name), ids):
            return name
    # what it closes over (a lambda over a differentiated value, which np.frompyfunc's ufunc calls
    # with plain numbers), with the functions held there (a library's wrapper of the user's function)
    for name in code.co_freevars:
        v = f_locals.get(name)
        if _holds_tracked(v, ids) or (type(v) in _CALLABLES and hidden(v, lambda x: id(x) in ids, limit=500)):
            return name
    return None


_CALLABLES = frozenset({types.FunctionType, types.MethodType})


def user_loc(frame: Any) -> Optional[SourceLoc]:
    """The line of the user's rewritten code that the stack at `frame` runs under: the innermost
    rewritten frame outside NumPy, SciPy, the standard library and bytegrad, else the innermost
    rewritten frame; None when there is none."""
    first = None
    while frame is not None:
        c = frame.f_code
        if "__bg_tape__" in c.co_varnames:
            if not library_file(c.co_filename):
                return SourceLoc(c.co_filename, frame.f_lineno, c.co_name)
            first = first or frame
        frame = frame.f_back
    return SourceLoc(first.f_code.co_filename, first.f_lineno, first.f_code.co_name) if first else None


def _blind_error(frame: Any, code: types.CodeType, name: str) -> BlindCallError:
    caller = user_loc(frame.f_back) or SourceLoc(code.co_filename, code.co_firstlineno, code.co_name)
    qual = getattr(code, "co_qualname", code.co_name)
    return BlindCallError(
        f"{qual} ({code.co_filename}:{code.co_firstlineno}) was called from C code (or a call bytegrad left "
        f"alone) with a differentiated value in {name!r}: it would run without being rewritten, and what "
        "it computes from that value would have no derivative.", caller,
        f"call {code.co_name} directly from the differentiated code, give the C function that calls it a "
        "rule with @bytegrad.rrule, or register the class holding the value with bytegrad.register_pytree.")


# ---- C functions handed Python callables (runtime/dispatch.py's last case) ------------------------

#: C functions that only look at a callable, never call it (`__build_class__` runs a class body,
#: which only defines the methods: the transform refuses a body that reads a differentiated value)
_INSPECTS = frozenset({id, callable, hash, repr, hasattr, vars, dir, print, format, str,
                       builtins.__build_class__})


def check_c_call(ids: dict[int, int], fn: Any, args: tuple, kwargs: Optional[dict], tracked: bool,
                 tape: Any = None) -> None:
    """A C function without a rule is about to run: when it is handed a Python function, method or
    partial (SciPy's MINPACK, QUADPACK and C root finders, odeint, a ufunc's `reduce` of objects...)
    and a differentiated value reaches that callable, as an argument beside it (`args=(theta,)`) or
    through what it closes over, raise BlindCallError at the user's line: the values the C code
    computes from the callable's results would carry no derivative. A ufunc of Python objects made
    by np.frompyfunc hides its function: the frame watch starts, and `_check_frame` looks at it."""
    callables = [v for v in args if type(v) in _CALLABLE_TYPES]
    if kwargs:
        callables += [v for v in kwargs.values() if type(v) in _CALLABLE_TYPES]
    if not callables:
        if type(fn) is _ufunc and "O" in fn.types[0]:
            arm()
        return
    try:
        if fn in _INSPECTS:
            return
    except TypeError:
        pass
    is_tracked = lambda x: id(x) in ids  # noqa: E731
    for c in callables:
        found = hidden(c, is_tracked)
        if found or tracked:
            general = _general_ids(tape, ids) if tape is not None else None
            if general is None:
                raise _c_call_error(fn, c, found)
            # a capture: raise where the general path raises, else let it run (and refuse)
            _check_captured_c_call(tape, ids, general, fn, args, kwargs, tracked, callables)
            return


def _check_captured_c_call(tape: Any, ids: dict[int, int], general: dict[int, int], fn: Any, args: tuple,
                           kwargs: Optional[dict], tracked: bool, callables: list) -> None:
    """`check_c_call` in a capture run, whose `ids` hold the arguments the call does not differentiate too:
    raise, as the general path's error, where a value of `general` (those the general path tracks) reaches
    the callable; else a call that a value of `ids` reaches runs, as on the general path, and the capture is
    refused (called where a value of `ids` reaches it)."""
    plain = tracked and not (any(_deep_tracked(a, general) for a in (*args, *(kwargs or {}).values()))
                             or (type(fn) is types.BuiltinMethodType and id(fn.__self__) in general))
    for c in callables:
        found = hidden(c, lambda x: id(x) in general)
        if found or (tracked and not plain):
            raise _as_general(_c_call_error(fn, c, found), general)
    _refuse_blind(tape, f"the C function {qualname_of(fn)} is handed a Python callable and a value the call does "
                  "not differentiate: it runs as on the general path, and a program would not run it",
                  user_loc(sys._getframe(2)))


def _deep_tracked(a: Any, ids: dict[int, int]) -> bool:
    """Whether `a`, or a value a (nested) list or tuple of it holds, is in `ids` (as runtime/recording.py
    `parent_of` looks, which decides whether a C function is handed a tracked value)."""
    t = type(a)
    if t is list or t is tuple:
        return any(_deep_tracked(x, ids) for x in a)
    return id(a) in ids


def qualname_of(fn: Any) -> str:
    """A C function's name as a blind call's error gives it (`scipy.optimize._minpack._lmdif`)."""
    from bytegrad.errors import qualname

    name = getattr(fn, "__module__", None)
    return f"{name}.{fn.__name__}" if name and hasattr(fn, "__name__") else qualname(fn)


def _c_call_error(fn: Any, c: Any, found: list) -> BlindCallError:
    from bytegrad.errors import qualname

    name = qualname_of(fn)
    how = ("a differentiated value passed beside it" if not found else
           "a differentiated value it reads through " + _describe(found[0][0][0]))
    return BlindCallError(
        f"the C function {name} is handed the Python callable {qualname(c)}, which it calls on plain "
        f"numbers, with {how}: what the C code computes from its results would have no derivative "
        "(a silent zero).", user_loc(sys._getframe(1)),
        "compute this part outside the differentiated function, or write a rule for the SciPy or NumPy "
        "function you called with @bytegrad.rrule (see docs/solvers.md for the solvers bytegrad "
        "differentiates: root, brentq, quad, minimize, solve_ivp...).")


def _describe(path: tuple) -> str:
    parts = []
    for step in path:
        kind = step[0]
        parts.append({"cell": "a closure variable", "default": "a default argument", "kwdefault": "a keyword default",
                      "global": f"the global {step[1] if len(step) > 1 else ''}", "self": "its bound object",
                      "func": "its function", "arg": "a partial's argument", "keyword": "a partial's keyword",
                      "item": "an item", "key": f"the key {step[1]!r}" if len(step) > 1 else "a key",
                      "attr": f"the attribute {step[1] if len(step) > 1 else ''}"}[kind])
    return ", then ".join(parts)


_CALLABLE_TYPES = frozenset({types.FunctionType, types.MethodType, functools.partial})


_ufunc = np.ufunc


# ---- the watch: sys.monitoring (3.12+), sys.setprofile in the checking mode on 3.11 ---------------

_TOOL: Optional[int] = None
_depth = 0
_on = False  # events are enabled now


def _on_start(code: types.CodeType, offset: int) -> Any:
    if _known_safe(code):
        return _MONITORING.DISABLE
    _check_frame(sys._getframe(1), code)
    return None


def _on_profile(frame: Any, event: str, arg: Any) -> None:
    if event == "call":
        code = frame.f_code
        if code not in _SAFE_CODES:
            if _known_safe(code):
                _SAFE_CODES.add(code)
            else:
                _check_frame(frame, code)


_SAFE_CODES: set = set()


def _claim_tool() -> Optional[int]:
    global _TOOL
    if _TOOL is None and _MONITORING is not None:
        for tool in (4, 3):
            if _MONITORING.get_tool(tool) is None:
                _MONITORING.use_tool_id(tool, "bytegrad")
                _MONITORING.register_callback(tool, _MONITORING.events.PY_START, _on_start)
                _TOOL = tool
                break
    return _TOOL


def start() -> Any:
    """A forward pass begins. In the checking mode the watch starts now; otherwise `arm` starts
    it (on 3.12+) when the pass first hands an object of a Python class to a C function, so a
    gradient that never does so pays nothing. Returns what `stop` needs."""
    global _depth
    _depth += 1
    if _depth == 1 and CHECK:
        return arm()
    return None


def arm() -> Any:
    """Start watching until the outermost forward pass ends (safe to call repeatedly)."""
    global _on
    if _on or _depth == 0:
        return None
    tool = _claim_tool()
    if tool is not None:
        _MONITORING.set_events(tool, _MONITORING.events.PY_START)
        _on = True
        return None
    # 3.11 (no sys.monitoring): a profile function for the rest of this forward pass. It costs a
    # Python call per call, but only gradients that hand a Python object or function to C pay it.
    _on = True
    _saved[:] = [_install(sys.getprofile(), sys.gettrace())]
    return None


#: how `stop` puts back what `arm` replaced on 3.11: a callable of no arguments
_saved: list = [None]


def _install(profiler: Any, tracer: Any) -> Any:
    """Start the 3.11 watch beside whatever profiler or tracer runs (cProfile, a debugger, coverage)
    and return how to restore it exactly. `sys.getprofile()` returns cProfile's `Profile` object,
    which `sys.setprofile` cannot re-install (it is not callable: it was installed from C), so a
    running profiler is left alone and the watch uses the trace hook instead (its global function
    sees every call just as a profile function does, and starts no line tracing)."""
    if profiler is None:
        sys.setprofile(_on_profile)
        return lambda: sys.setprofile(None)
    if tracer is None:
        sys.settrace(_on_trace)
        return lambda: sys.settrace(None)
    if callable(profiler):  # a profile function written in Python: it keeps receiving every event
        def chained(frame: Any, event: str, arg: Any) -> Any:
            _on_profile(frame, event, arg)
            return profiler(frame, event, arg)
        sys.setprofile(chained)
        return lambda: sys.setprofile(profiler)
    # a C profiler and a tracer both run: cProfile's `enable()` re-installs it (the calls of the
    # watched forward pass go unprofiled); another C profiler cannot be put back from Python
    enable = getattr(profiler, "enable", None)
    sys.setprofile(_on_profile)
    return enable if callable(enable) else (lambda: sys.setprofile(None))


def _on_trace(frame: Any, event: str, arg: Any) -> None:
    _on_profile(frame, event, arg)
    return None  # no local trace function: no line events


def stop(token: Any) -> None:
    global _depth, _on
    _depth -= 1
    if _depth > 0 or not _on:
        return
    _on = False
    if _TOOL is not None:
        _MONITORING.set_events(_TOOL, 0)
    else:
        restore, _saved[0] = _saved[0], None
        restore()
