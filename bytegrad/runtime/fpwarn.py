"""Floating-point warnings (division by zero, invalid value...) that NumPy raises while a gradient is
computed are reported at the user's line, not at bytegrad's: a primal computed by a hook at the line
that runs it, a derivative in a pullback at the line that recorded the operation.

NumPy is told to call `_report` instead of warning (`np.errstate(call=...)`, per context, so threads
do not interfere) for the categories the user left at "warn"; "ignore", "raise", "print" and "log"
are untouched. `_report` runs only when NumPy meets such an error, and only then walks the stack.
"""
from __future__ import annotations

import functools
import sys
import warnings
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional

import numpy as np

if TYPE_CHECKING:
    from types import FrameType

from bytegrad.errors import library_file, qualname

__all__ = ["at_user_lines", "sweeps"]

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
        elif not library_file(code.co_filename) and not code.co_filename.startswith("<frozen"):
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
        current = _EXTOBJ.get()
        known = _REDIRECTED.get(id(current))
        if known is None or known[0] is not current:
            redirect = _redirected()
            if len(_REDIRECTED) > 64:
                _REDIRECTED.clear()
            known = _REDIRECTED[id(current)] = (current, _make_extobj(call=_report, **redirect) if redirect else None)
        self._token = _EXTOBJ.set(known[1]) if known[1] is not None else None

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
