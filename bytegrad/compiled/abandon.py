"""A capture run stopped by an error only the capture raises: the call's answer without running the body twice.

A capture run (compiled/capture.py `capture_run`) is the call's only run: its effects (an append, a print
through a callee, an RNG draw, a write into an argument) are the call's. It tracks more than the general
path (every float argument), so an operation can fail there that the general path would run; the known
cases behave as the general path does at the operation itself and refuse the capture (compiled/plainly.py
for an operation without a derivative rule; runtime/monitor.py for a blind call from C). An error of the
capture's own that still reaches `capture_run` cannot be undone, and the call needs the general path's
result, which only running the body again gives. So (`settle`):

- raised before the body started (preparing the arguments, rewriting the function): the general path
  runs the body, once;
- raised after it started, by a run that showed nothing a program replay would not redo (`_effects`:
  the checks that decide whether a program may stand in for the body, compiled/effects.py,
  input_writes.py, the callees' static check, the handled-exception watch): running the body again is
  as unseen as running a compiled program in its place, and the general path runs it;
- raised after it started by a run that did show such an effect: the body is not run again. The error is
  raised as the call's, with a note that says why, and the signature stays on the general path from
  then on (`ABANDONED` marks it for compiled/policy.py), so the next call runs the general path.

The last case is a failure of this call that the general path would not have had; it is the price of never
doubling an effect, and is met only by an error class no source fix covers yet (none is known).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from bytegrad.compiled import plainly

__all__ = ["ABANDONED", "abandoned", "effects", "failed", "settle"]

#: the key, on an error raised as the call's by `settle`, of the reason its signature stays general
ABANDONED = "_bytegrad_abandoned"


def abandoned(exc: BaseException) -> Optional[str]:
    """Why a capture was abandoned after its body ran (the error `settle` raised), or None."""
    return getattr(exc, "__dict__", {}).get(ABANDONED)


def settle(exc: BaseException, d: Any, watch: Any, changed: Callable[[], Optional[str]], inputs: tuple,
           callees: Callable[[Any], Optional[str]]) -> str:
    """The reason a capture run stopped by `exc` (a DifferentiationError the general path is not known to
    raise) makes no program, when the general path may run the body again; else raise `exc` as the call's
    error. The rest: what `effects` reads (`callees(tape)`: why a Python callee cannot be in a program)."""
    why = f"the capture run raised {type(exc).__name__}: {exc}"
    tape = plainly.started(exc)
    if tape is None:  # (the body had not started: the general path runs it, once)
        return why
    effect = effects(d, tape, changed, inputs, watch, lambda: callees(tape))
    if effect is None:
        return why
    reason = (f"{why}; the function's body had run, with an effect a second run would repeat ({effect}), so "
              "the call was not run again: the error is the call's, and this signature stays on the general path")
    exc.__dict__[ABANDONED] = reason
    exc.add_note(f"bytegrad: raised by the compiled tier's capture run of this call after the body had run with an "
                 f"effect ({effect}), so it was not run again on the general path. The capture tracks the arguments "
                 "that are not differentiated too: the general path may raise this error as well, or not. The next "
                 "call of this signature runs the general path (differentiate(..., tier='general') avoids the capture).")
    raise exc


def effects(d: Any, tape: Any, changed: Callable[[], Optional[str]], inputs: tuple, watch: Any,
            callees: Callable[[], Optional[str]]) -> Optional[str]:
    """What a capture run stopped by an error did that a program replay would not redo (the checks a capture
    that completes makes before a program may stand in for the body), or None: `changed` (compiled/effects.py
    `Snapshot.changed`), `inputs` (the arguments not differentiated, their names, the arrays read from globals:
    compiled/input_writes.py), the run's refusals (any, conservatively), the handled-exception `watch`, and
    `callees` (why a Python function the run called cannot be part of a program). Any of them that cannot be
    read counts as an effect."""
    from bytegrad.compiled import errstate, input_writes

    try:  # (a refusal may be one: `print` of a tracked value is refused at run time, as no static check sees it)
        found = changed() or input_writes.input_write(tape, *inputs) or _refused(tape)
        if found is None:
            codes = [d._code, *(c[0].__code__ for c in tape.callees)]
            found = watch.handled(codes) or watch.unseen([d._target, *(c[0] for c in tape.callees)])
        if found is None:
            found = callees() or errstate.refused_callees(d._code, d._target.__globals__, tape.callees)
    except Exception as exc:  # noqa: BLE001 - what cannot be read is not known to be free of effects
        found = f"its effects could not be read ({type(exc).__name__})"
    return found


def _refused(tape: Any) -> Optional[str]:
    """The first reason the run refused a program for (with its line), or None."""
    if not tape.refusals:
        return None
    why, site = tape.refusals[0]
    return f"{why} (line {site.lineno})" if site is not None and getattr(site, "lineno", None) else why


def failed(exc: BaseException, count: int, most: int) -> Optional[str]:
    """Why a signature whose capture raised `exc` (the `count`th time) is not captured again, or None while it
    may be: at once for a capture `settle` abandoned, else after `most` of them (compiled/policy.py)."""
    why = abandoned(exc)
    if why is None and count >= most:
        why = (f"its capture run raised {type(exc).__name__}{_raised_at(exc)}, the call's error (raised once, as the "
               f"general path raises it), on {count} calls: it is not captured again")
    return why


def _raised_at(exc: BaseException) -> str:
    """` (line N of f)`: where an error a capture run raised comes from (its loc, else its innermost frame)."""
    loc = getattr(exc, "loc", None)
    if loc is not None and getattr(loc, "lineno", None):
        return f" (line {loc.lineno} of {loc.function})"
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return f" (line {tb.tb_lineno} of {tb.tb_frame.f_code.co_name})" if tb is not None else ""
