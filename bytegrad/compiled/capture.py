"""The capture: one gradient (or pullback) run on a `CaptureTape`, from which a program is built.

A capture run is a general-path gradient whose tape also observes what a replay could not
reproduce (`Tape.capturing`: the runtime's hooks call `refuse`, `check`, `make` and append to
`callees`; runtime/tape.py documents that protocol). Every float argument is tracked, so the tape
holds every operation on the arguments, differentiated or not. `capture` then checks the
bytecode (compiled/eligibility.py) and the Python callees, and hands the tape to a back end
(compiled/lower_numpy.py). The capture's own result is the call's result: a capture that cannot
make a program still returns the gradient of the run it made.
"""
from __future__ import annotations

import time
import types
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

import numpy as np

from bytegrad import transform
from bytegrad.compiled import policy
from bytegrad.compiled.effects import ATOMS
from bytegrad.runtime import pytree
from bytegrad.runtime.tape import Tape, sweep

if TYPE_CHECKING:
    from bytegrad.compiled.lower_numpy import Program

__all__ = ["CaptureTape", "capture", "capture_pullback", "capture_run", "eligibility"]

_ndarray = np.ndarray


class CaptureTape(Tape):
    """The tape of a capture run (bytegrad/compiled/policy.py): every float argument is tracked, and the
    hooks report here what would make the recorded graph differ from the computation on other
    values of the same signature (a Python callee, a value computed from data that Python code then
    uses). The first such reason makes the capture fail; the gradient itself is unaffected."""

    __slots__ = ("refusals", "checks", "callees", "made")

    capturing = True

    def __init__(self) -> None:
        super().__init__()
        self.refusals: list[tuple[str, Any]] = []
        #: decisions on data: (records before it, fn, args, kwargs, result, site), one per call of a
        #: function without a derivative (or a comparison) on a tracked value; a compiled program
        #: computes each again and runs only where every one gives the captured result
        self.checks: list[tuple[int, Any, tuple, Optional[dict], Any, Any]] = []
        #: Python functions the run called with tracked values, (function, args, kwargs, site): their
        #: operations are on the tape like the caller's; their code must be as eligible (api.py)
        self.callees: list[tuple[Any, tuple, Optional[dict], Any]] = []
        #: arrays made from constants (`np.zeros(3)`, dispatch.MAKERS): tape index -> (fn, args,
        #: kwargs); tracked from there, so what the run computes from them is recorded
        self.made: dict[int, tuple[Any, tuple, Optional[dict]]] = {}

    def refuse(self, why: str, site: Any) -> None:
        self.refusals.append((why, site))

    def make(self, fn: Any, args: tuple, kwargs: Optional[dict]) -> Any:
        """`fn(*args, **kwargs)`, an array made from constants, tracked as a leaf a program makes again."""
        out = fn(*args, **kwargs) if kwargs else fn(*args)
        if type(out) is np.ndarray and id(out) not in self.ids:  # (lists copied: the run may change them later)
            self.made[self.leaf(out)] = (fn, _copied(args), {k: _copied(v) for k, v in kwargs.items()}
                                         if kwargs else None)
        return out

    def check(self, fn: Any, args: tuple, kwargs: Optional[dict], result: Any, site: Any) -> None:
        """`fn(*args, **kwargs)` gave `result` on tracked values: Python code may decide on it."""
        self.checks.append((len(self.nodes), fn, args, kwargs, result, site))


def _copied(value: Any) -> Any:
    t = type(value)
    if t is list or t is tuple:
        return t(_copied(v) for v in value)
    return value


class Unobservable(Exception):
    """An argument the capture would have to copy to track, so that writes into it would go unseen."""


def track_in_place(value: Any, tape: Tape) -> tuple[Any, Any]:
    """`pytree.prepare` for an argument the capture tracks but the call does not differentiate: its
    float arrays are tracked as they are, in the caller's own containers (no copy, so that what the
    function writes into a list, dict or array of the caller's is written there, as on the general
    path, and the effect check sees it). A float held by a list or dict is refused (`Unobservable`):
    tracking it needs a copy of its container."""
    t = type(value)
    if t is _ndarray:
        if value.dtype.kind not in "fc":
            return value, None
        return value, pytree.Leaf(tape.leaf(value), value)
    if t is list or t is dict:
        items = value.items() if t is dict else enumerate(value)
        subs = {}
        for k, v in items:
            tv = type(v)
            if tv is float or tv is complex or isinstance(v, (np.floating, np.complexfloating)):
                raise Unobservable(f"a {t.__name__} argument holding floats that is not differentiated (the capture "
                                   "would copy it, and writes into it would go unseen)")
            subs[k] = track_in_place(v, tape)[1]
        return value, (t, subs if t is dict else [subs[k] for k in range(len(value))])
    if isinstance(value, tuple) and not _copy_unseen(value):  # (holding a list, a dict, an object...)
        return value, (t, [track_in_place(v, tape)[1] for v in value])
    fresh, spec = pytree.prepare(value, tape)
    if fresh is not value and not _copy_unseen(value):
        raise Unobservable(f"a {t.__name__} argument that is not differentiated (the capture would track a copy "
                           "of it, and writes into it would go unseen)")
    return fresh, spec


def _copy_unseen(value: Any) -> bool:
    """Whether a copy of `value` behaves as `value` for every write the function can make: numbers,
    strings, arrays (a copy of one is a view of the same memory) and tuples of them."""
    t = type(value)
    if t in ATOMS or t is _ndarray or isinstance(value, (np.generic, np.ndarray)):
        return True
    return isinstance(value, tuple) and all(_copy_unseen(v) for v in value)


def _constant_arg(value: Any) -> bool:
    """An argument whose value a compiled program guards (an int, string, flag or None)."""
    return type(value) in policy.CONSTANT_TYPES


def _complete(spec: Any) -> bool:
    """Whether a differentiated argument's spec is a plain tree (dicts, lists, tuples) of
    differentiable leaves."""
    if spec is None:
        return False
    if type(spec) is pytree.Leaf:
        return True
    if isinstance(spec[0], str):  # a dataclass or registered pytree: compiled programs do not take them yet
        return False
    subs = spec[1]
    return all(_complete(s) for s in (subs.values() if isinstance(subs, dict) else subs))


def capture(d: Any, args: tuple, backends: Sequence[str] = ("numpy",)) -> tuple[tuple[Any, Any], Union[Program, str]]:
    """One gradient by a capture run: (its (value, gradient), the program made from it by the
    first of `backends` that can, or why none could). A function the capture cannot take runs
    on the general path instead."""
    from bytegrad.compiled.build import Ineligible, build as build_program
    norm_wrt, _ = d._plan(len(args), d._wrt)
    positions = policy.capture_positions(args)
    if any(p not in positions for p in norm_wrt):
        return d._grad_now(args, {}), "a differentiated argument is an int, a string or None"
    try:  # what the general path's strict check refuses, it refuses before running the function
        for p in norm_wrt:
            pytree.prepare(args[p], Tape(), strict=True)
    except pytree.NotDifferentiable:
        return d._grad_now(args, {}), "a differentiated argument holds values with no derivative"
    run = capture_run(d, args, positions)
    if isinstance(run, str):  # (not run, or stopped by a bytegrad error of the capture's own)
        return d._grad_now(args, {}), run
    out, aux, tape, specs, guards = run
    program_aux = (aux,) if d._has_aux else None
    d._check_scalar(out)
    spec_at = dict(zip(positions, specs))
    wrt_specs = [spec_at[p] for p in norm_wrt]
    callee_why, callee_guards = _callee_guards(tape)
    # the gradient of this run, as the general path sweeps it (the call's result: never run again)
    idx = tape.ids.get(id(out))
    seed = np.ones_like(out) if type(out) is _ndarray and out.ndim else 1.0
    cts = sweep(tape, {idx: seed}) if idx is not None else [None] * len(tape.nodes)
    grads = pytree.not_callers(tuple(pytree.project(cts[s.idx], s.primal) if type(s) is pytree.Leaf
                                     else pytree.gradient(s, cts) for s in wrt_specs), args)
    if len(grads) > 1:
        grads = pytree.unalias(grads)
    result = ((out, aux) if d._has_aux else out, grads if d._wrt_tuple else grads[0])
    if type(out) is _ndarray and out.ndim:
        return result, "the output is a one-element array, not a scalar"
    if not all(_complete(s) for s in wrt_specs):
        return result, "a differentiated argument holds a dataclass or a registered pytree"
    if tape.refusals:
        why, site = tape.refusals[0]
        return result, str(Ineligible(why, site))
    if callee_why is not None:
        return result, callee_why
    guards = guards + callee_guards
    why = "no back end"
    for backend in backends:  # the first that builds and agrees with the capture's gradient
        t0 = time.perf_counter()
        try:
            prog = build_program(tape, args, [spec_at.get(p) for p in range(len(args))], norm_wrt, out,
                                 d._wrt_tuple, guards, d._code, backend, aux=program_aux)
        except Ineligible as exc:
            why = str(exc)
            policy.log().debug("no %s program for %s: %s (%.3f s)", backend, d._code.co_qualname, why,
                             time.perf_counter() - t0)
            continue
        policy.log().debug("compiled a %s program of %d operations for %s in %.3f s", backend, prog.records,
                         d._code.co_qualname, time.perf_counter() - t0)
        why = d._tiers.agree(prog, args, result) if d._tiers is not None else None
        if why is None:
            return result, prog
    return result, why

def capture_run(d: Any, args: tuple, positions: tuple[int, ...]) -> Union[str, tuple]:
    """The capture's forward pass: (output, aux or None, tape, leaf specs, guards), or why the
    function cannot be captured for arguments like `args` (the caller then runs the general path)."""
    reasons, guards = eligibility(d, args)
    if reasons:
        return reasons[0] + (f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else "")
    from bytegrad.compiled import source as program_source
    from bytegrad.compiled.effects import Snapshot
    from bytegrad.errors import DifferentiationError

    wrt, _ = d._plan(len(args), d._wrt)
    names = d._params[d._offset:]
    tracked = program_source.read_arrays(guards)
    # what the run may write besides its result (differentiated arrays are protected: never written)
    snapshot = Snapshot(tuple(None if p in wrt else a for p, a in enumerate(args)), tuple(names), tuple(tracked))
    try:
        out, tape, specs, _ = d._forward(args, {}, positions, strict=False, capture=CaptureTape,
                                         tracked=tracked, protect=frozenset(wrt), prepare_other=track_in_place)
    except Unobservable as exc:  # (raised before the function ran)
        return str(exc)
    except DifferentiationError as exc:
        # tracking every float argument can refuse what the general path takes (a function without a
        # rule given a float that is not differentiated): the caller runs the general path, which
        # runs the function's body a second time (its effects too): see docs/compiled.md
        return f"the capture run raised {type(exc).__name__}: {exc}"
    # any other exception is the user's code raising, as it would on the general path: it propagates
    # from this run, the call's only one
    why = snapshot.changed()
    if why is not None:
        tape.refuse(why, None)
    aux = None
    if d._has_aux:
        out, aux = d._split_aux(out)
    return out, aux, tape, specs, guards

def eligibility(d: Any, args: tuple) -> tuple[list[str], list[tuple]]:
    """(reasons this function cannot be a compiled program for arguments like `args`, guards on
    the globals it reads): see compiled/eligibility.py."""
    from bytegrad.rules import registry as _registry
    from bytegrad.compiled import eligibility

    positions = policy.capture_positions(args)
    _, active = d._plan(len(args), positions)
    names = d._params[d._offset:]
    immutable = frozenset(n for n, a in zip(names, args) if _constant_arg(a))
    key = (active, immutable, _registry.settled_version())
    found = d._eligible.get(key)
    if found is None:
        target = d._target
        defaults = (target.__defaults__ or ()) + tuple((target.__kwdefaults__ or {}).values())
        found = d._eligible[key] = eligibility.check(d._code, active, target.__globals__, immutable,
                                                        defaults, target.__closure__ or ())
    return found

def capture_pullback(d: Any, args: tuple, general_back: Callable[..., Any],
                     backends: Sequence[str] = ()) -> tuple[Any, Union[policy.Pending, str]]:
    """One pullback by a capture run: ((output, back), the pullback program made from it, or why
    none could be). Pullback programs have the NumPy back end only."""
    from bytegrad.compiled.build import Ineligible, build as build_program
    compiled = policy
    positions = compiled.capture_positions(args)
    run = capture_run(d, args, positions)
    if isinstance(run, str):
        return d._pullback_now(args, {}), run
    out, aux, tape, specs, guards = run
    program_aux = (aux,) if d._has_aux else None
    spec_at = dict(zip(positions, specs))
    all_specs = [spec_at.get(p) for p in range(len(args))]
    result = (out, general_back(out, tape, all_specs, None), *(program_aux or ()))
    if tape.refusals:
        why, site = tape.refusals[0]
        return result, str(Ineligible(why, site))
    callee_why, callee_guards = _callee_guards(tape)
    if callee_why is not None:
        return result, callee_why
    try:
        prog = build_program(tape, args, all_specs, positions, out, True, guards + callee_guards, d._code,
                             pullback=True, aux=program_aux)
    except Ineligible as exc:
        return result, str(exc)
    pending, tiers, general_back = compiled.Pending(prog, args), d._pb_tiers, result[1]
    checked_out = (out, aux) if d._has_aux else out

    def back(out_bar: Any) -> tuple[Any, ...]:
        grads = general_back(out_bar)
        if tiers is not None:
            tiers.settle(pending, checked_out, out_bar, grads)
        return grads

    return (out, back, *(program_aux or ())), pending

_REPLAYABLE = (int, float, bool, str, bytes, complex, type(None), slice, range, type(Ellipsis), np.ndarray,
               np.generic, np.dtype, type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType, np.ufunc)


def _unreplayable(value: Any, ids: dict[int, int]) -> Optional[str]:
    """None when a value handed to a Python callee is one a program reproduces (a tracked value, a
    constant, an array, a function, a tuple, list or dict of them); else what it is."""
    if id(value) in ids or isinstance(value, _REPLAYABLE):
        return None
    t = type(value)
    if t is tuple or t is list or t is dict:
        for v in (value.values() if t is dict else value):
            bad = _unreplayable(v, ids)
            if bad is not None:
                return bad
        return None
    return f"a {t.__qualname__} object"


def _callee_guards(tape: CaptureTape) -> tuple[Optional[str], list[tuple]]:
    """(why a Python function the capture run called cannot be part of a program, or None; the guards
    on what those functions read: their globals, module attributes, code and defaults). Each is
    checked as the differentiated function is (compiled/eligibility.py), with the parameters that
    held tracked values in the capture active."""
    from bytegrad.compiled import eligibility

    guards: list[tuple] = []
    seen: set[tuple] = set()
    for f, args, kwargs, site in tape.callees:
        for v in (*args, *(kwargs or {}).values()):
            bad = _unreplayable(v, tape.ids)
            if bad is not None:
                return f"it passes {bad} to {f.__qualname__} (line {site.lineno}): its state is not guarded", []
        active, immutable = transform.callee_activity(f, args, kwargs, tape.ids)
        key = (f, active, immutable)
        if key in seen:
            continue
        seen.add(key)
        defaults = (f.__defaults__ or ()) + tuple((f.__kwdefaults__ or {}).values())
        reasons, more = eligibility.check(f.__code__, active, f.__globals__, immutable, defaults)
        if reasons:
            return f"it calls {f.__qualname__} (line {site.lineno}), which {reasons[0]}", []
        guards += more
        guards.append(("code", f, f.__code__, (f.__defaults__, f.__kwdefaults__)))
    return None, guards


