"""Floating-point warnings (division by zero, invalid value...) that NumPy raises while a gradient is
computed are reported at the user's line, not at bytegrad's: a primal computed by a hook at the line
that runs it, a derivative in a pullback at the line that recorded the operation.

NumPy is told to call `_report` instead of warning (`np.errstate(call=...)`, per context, so threads
do not interfere) for the categories the user left at "warn"; "ignore", "raise", "print" and "log"
are untouched. `_report` runs only when NumPy meets such an error, and only then walks the stack.

A compiled program (bytegrad/compiled/) runs under the same redirection (`redirect`/`restore`, what
`at_user_lines` does without its object). Its namespace
holds PROGRAM_SITES: its source and, for each line of it, the record that line computes; `_report`
finds the line of the instruction that met the error (`_program_site`) and names the record's
callee, forward or "the derivative of", at the record's file and line, as the general path does.
"""
from __future__ import annotations

import functools
import sys
import warnings
from _thread import get_ident  # (not threading: importing bytegrad does not import it)
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional

import numpy as np

if TYPE_CHECKING:
    from types import FrameType

from bytegrad.errors import library_file, qualname

__all__ = ["PROGRAM_SITES", "at_user_lines", "redirect", "restore", "sweeps"]

#: the name of a compiled program's sites in its namespace: (source, file name, for each line of the
#: source (filename, lineno, what it computes, whether a derivative) or None)
PROGRAM_SITES = "_fpsites"

#: code objects that run compiled programs whose result they may not use (compiled/policy.py's
#: `Tiers.call`: a program that answers MISS or DECIDED): the warnings of a program they call are
#: held (per thread, in _HELD) until `restore` says whether the result is used
HOLDERS: set[Any] = set()
_HELD: dict[int, list[tuple]] = {}

#: code objects of the reverse (and tangent) sweeps, whose local `node` is the record being run
_SWEEP_CODES: set[Any] = set()


def _callee(site: Any) -> str:
    callee = getattr(site, "callee", None)
    return qualname(callee) if callee is not None else f"this line's {getattr(site, 'what', 'operation')}"


def _report(err: str, flag: int) -> None:
    frame: Optional[FrameType] = sys._getframe(1)
    site = None
    while frame is not None:
        code = frame.f_code
        if code in _SWEEP_CODES:  # a pullback: the record knows the line that made it
            node = frame.f_locals.get("node")
            rec_site = node[2] if isinstance(node, tuple) and len(node) > 2 else None
            if rec_site is not None and getattr(rec_site, "lineno", None) is not None:
                message = f"{err} encountered in the derivative of {_callee(rec_site)}"
                warnings.warn_explicit(RuntimeWarning(message), RuntimeWarning, rec_site.filename, rec_site.lineno)
                return
        elif PROGRAM_SITES in frame.f_globals:  # a compiled program: the record its line computes
            found = _program_site(frame)
            if found is None:
                item: tuple = (f"{err} encountered in a NumPy operation", code.co_filename, frame.f_lineno, None)
            else:  # a derivative's, as the sweep's, shown each time; a primal's registered in the program
                filename, lineno, what, derivative = found  # ("default" shows it once, as a user line's)
                item = (f"{err} encountered in {'the derivative of ' if derivative else ''}{what}", filename,
                        lineno, None if derivative else frame.f_globals.setdefault("__warningregistry__", {}))
            caller = frame.f_back
            if caller is not None and caller.f_code in HOLDERS:  # until the call's result is known
                _HELD.setdefault(get_ident(), []).append(item)
            else:
                _warn(*item)
            return
        elif not library_file(code.co_filename) and not code.co_filename.startswith(("<frozen", "<bytegrad")):
            g = frame.f_globals  # the user's line: registered there, so filters and "once" work as usual
            what = _callee(site) if site is not None else "a NumPy operation"
            warnings.warn_explicit(RuntimeWarning(f"{err} encountered in {what}"), RuntimeWarning,
                                   code.co_filename, frame.f_lineno, g.get("__name__"),
                                   g.setdefault("__warningregistry__", {}))
            return
        elif site is None:
            candidate = frame.f_locals.get("site")
            if hasattr(candidate, "what") and hasattr(candidate, "callee"):
                site = candidate
        frame = frame.f_back
    warnings.warn(f"{err} encountered in a NumPy operation", RuntimeWarning, stacklevel=2)


def _warn(message: str, filename: str, lineno: int, registry: Optional[dict]) -> None:
    if registry is None:
        warnings.warn_explicit(RuntimeWarning(message), RuntimeWarning, filename, lineno)
    else:
        warnings.warn_explicit(RuntimeWarning(message), RuntimeWarning, filename, lineno, registry=registry)


def _program_site(frame: "FrameType") -> Optional[tuple]:
    """(filename, lineno, what, derivative) of the record whose step a compiled program's frame runs,
    or None. The program's code has the user's lines; the same source compiled with its own lines
    (once per program, on its first error) has the same instructions but for NOPs, whose lines
    name the step (a source line's entry in PROGRAM_SITES)."""
    g = frame.f_globals
    code = frame.f_code
    try:
        lines = g.setdefault("_fpsites_lines", {})
        found = lines.get(code.co_name)
        if found is None:
            source, filename, sites = g[PROGRAM_SITES]
            found = lines[code.co_name] = _generated_lines(code, compile(source, filename, "exec"), sites)
        offsets, at = found  # (f_lasti of a frame inside a call: one of the call's cache entries)
        import bisect  # (only on a program's error: `import bytegrad` leaves it out, tests/test_lazy_rules.py)

        k = bisect.bisect_right(offsets, frame.f_lasti) - 1
        return at[k] if k >= 0 else None
    except Exception:  # noqa: BLE001 - a program without its sites (or a compile that differs): the frame's line
        return None


def _generated_lines(code: Any, plain: Any, sites: tuple) -> tuple[list[int], list[Optional[tuple]]]:
    """The offsets of the instructions of `code`, and the site of the source line each one's twin in
    `plain` (the same source, compiled with its own lines) has; none when the two differ in more
    than NOPs and joined instructions."""
    stack = [plain]
    while stack and stack[-1].co_name != code.co_name:  # (`program`, or a pullback program's `back`)
        c = stack.pop()
        stack += [k for k in c.co_consts if hasattr(k, "co_code")]
    if not stack:
        return [], []
    ours, theirs = _units(code), _units(stack[-1])
    if [op for op, _, _ in ours] != [op for op, _, _ in theirs]:
        return [], []
    offsets: list[int] = []
    at: list[Optional[tuple]] = []
    for (_, offset, _), (_, _, n) in zip(ours, theirs):
        if not offsets or offset != offsets[-1]:
            offsets.append(offset)
            at.append(sites[n - 1] if n is not None and 0 < n <= len(sites) else None)
    return offsets, at


#: instructions that CPython 3.13 joins into one where both are on one line (so only in `code`,
#: whose lines are the user's: many statements on one line), read as the two they stand for
_JOINED = {"STORE_FAST_LOAD_FAST": ("STORE_FAST", "LOAD_FAST"), "LOAD_FAST_LOAD_FAST": ("LOAD_FAST", "LOAD_FAST"),
           "STORE_FAST_STORE_FAST": ("STORE_FAST", "STORE_FAST")}


def _units(code: Any) -> list[tuple[str, int, Optional[int]]]:
    """(operation, offset, line) of each instruction of `code` but NOPs, joined ones read apart."""
    import dis

    out = []
    for i in dis.get_instructions(code):
        if i.opname != "NOP":
            line = i.positions.lineno if i.positions else None
            out += [(op, i.offset, line) for op in _JOINED.get(i.opname, (i.opname,))]
    return out


def _redirected() -> dict[str, Literal["call"]]:
    return {k: "call" for k, v in np.geterr().items() if v == "warn"}


_EXTOBJ: Any  # (NumPy's private names: their stubs are not Optional)
_make_extobj: Any
try:  # what `np.errstate` does, without its cost per use (NumPy 2's error state is a context variable)
    from numpy._core.umath import _extobj_contextvar as _EXTOBJ, _make_extobj
except ImportError:  # (another NumPy layout: np.errstate every time)
    _EXTOBJ = _make_extobj = None

#: id of an error state -> (that state, the same with "warn" categories redirected to `_report`, or
#: None when none warns): made once per state the user sets, not per gradient (np.geterr() and a new
#: state cost about 7 us, twice a gradient: as much as the rest of a small gradient's bookkeeping)
_REDIRECTED: dict[int, tuple[Any, Any]] = {}


def _known(current: Any) -> Any:
    """The redirected error state of `current` (made once per state: see _REDIRECTED), or None."""
    known = _REDIRECTED.get(id(current))
    if known is None or known[0] is not current:
        redirect = _redirected()
        if len(_REDIRECTED) > 64:
            _REDIRECTED.clear()
        known = _REDIRECTED[id(current)] = (current, _make_extobj(call=_report, **redirect) if redirect else None)
    return known[1]


#: the error state `redirect` last met, and its redirected state (one tuple: threads read it whole)
_LAST: tuple[Any, Any] = (None, None)


def redirect() -> Any:
    """`at_user_lines().__enter__` as a function, for a compiled program's call: a token for
    `restore`, or None when nothing is redirected. Its cost (valgrind, Python 3.11, NumPy 2.4): a
    context variable set and reset, about 3,500 instructions a call, and about 70 more a ufunc
    while NumPy's error state is not its default (4-5% of a 10-operation program on small arrays)."""
    global _LAST
    if _EXTOBJ is None:
        state = _redirected()
        if not state:
            return None
        errstate = np.errstate(call=_report, **state)
        errstate.__enter__()
        return errstate
    current = _EXTOBJ.get()
    last = _LAST
    if current is not last[0]:
        last = _LAST = (current, _known(current))
    return _EXTOBJ.set(last[1]) if last[1] is not None else None


def restore(token: Any, keep: bool = True) -> None:
    """Undo `redirect`; the warnings of the programs a HOLDERS caller ran in this thread meanwhile are
    reported now, or, `keep` false (the call's result is not used: the general path computes it
    again, and reports them), dropped."""
    if token is not None:
        if _EXTOBJ is None:
            token.__exit__(None, None, None)
        else:
            _EXTOBJ.reset(token)
    if _HELD:
        held = _HELD.pop(get_ident(), None)
        if held and keep:
            for item in held:
                _warn(*item)


class at_user_lines:
    """Context manager: floating-point warnings inside are reported at the user's line."""

    __slots__ = ("_state", "_token")
    _state: Any
    _token: Any

    def __enter__(self) -> None:
        if _EXTOBJ is None:
            redirect = _redirected()
            self._state = np.errstate(call=_report, **redirect) if redirect else None
            if self._state is not None:
                self._state.__enter__()
            return
        self._state = None
        state = _known(_EXTOBJ.get())
        self._token = _EXTOBJ.set(state) if state is not None else None

    @staticmethod
    def run(fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` inside `at_user_lines()` (a compiled pullback program's `back`)."""
        with at_user_lines():
            return fn(*args)

    def __exit__(self, *exc: Any) -> None:
        if self._state is not None:
            self._state.__exit__(*exc)
        elif _EXTOBJ is not None and self._token is not None:
            _EXTOBJ.reset(self._token)


def sweeps(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator for a sweep over records whose loop variable is `node`: its warnings are reported at
    the line of the record that raised them."""
    _SWEEP_CODES.add(fn.__code__)

    @functools.wraps(fn)
    def reporting_sweep(*args: Any, **kwargs: Any) -> Any:
        with at_user_lines():
            return fn(*args, **kwargs)

    return reporting_sweep
