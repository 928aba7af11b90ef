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

import collections
import time
import types
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

import numpy as np

from bytegrad import transform
from bytegrad.compiled import abandon, decisions, errstate, input_writes, objects, plainly, policy, reach_objects
from bytegrad.compiled import reach_config, reach_labels
from bytegrad.compiled.constructs import has_handlers, watch_callee
from bytegrad.compiled.effects import ATOMS
from bytegrad.rules import pytrees
from bytegrad.runtime import pytree
from bytegrad.runtime.tape import Tape

if TYPE_CHECKING:
    from bytegrad.compiled.lower_numpy import Program

__all__ = ["CaptureTape", "capture", "capture_pullback", "capture_run", "eligibility"]

_ndarray = np.ndarray


class CaptureTape(Tape):
    """The tape of a capture run (bytegrad/compiled/policy.py): every float argument is tracked, and the
    hooks report here what would make the recorded graph differ from the computation on other
    values of the same signature (a Python callee, a value computed from data that Python code then
    uses). The first such reason makes the capture fail; the gradient itself is unaffected."""

    __slots__ = ("refusals", "checks", "callees", "made", "decided", "live", "escaped", "writes", "objects", "local",
                 "taken", "roots", "started")

    capturing = True
    #: whether object arguments are taken apart in place (compiled/objects.py): gradient captures only
    takes_objects = False

    def __init__(self) -> None:
        super().__init__()
        self.refusals: list[tuple[str, Any]] = []
        #: decisions on data: (records before it, fn, args, kwargs, result, site), one per call of a
        #: function without a derivative (or a comparison) on a tracked value; a compiled program
        #: computes each again and runs only where every one gives the captured result
        self.checks: list[tuple[int, Any, tuple, Optional[dict], Any, Any]] = []
        #: Python functions the run called with tracked values, (function, args, kwargs, site)
        self.callees: Callees = Callees(self.ids)
        #: arrays made from constants (`np.zeros(3)`, dispatch.MAKERS): tape index -> (fn, args,
        #: kwargs); tracked from there, so what the run computes from them is recorded
        self.made: dict[int, tuple[Any, tuple, Optional[dict]]] = {}
        #: float arrays decisions gave (`np.zeros_like(x)`, `np.empty_like(x)`): tape index -> the decision's
        #: position in `checks`; tracked from there, so what the run computes from them and writes into
        #: them is recorded (compiled/writes.py: a program reads them from the decision's variable)
        self.decided: dict[int, int] = {}
        self.live: dict[int, Any] = {}  # the arrays decisions gave, by position in `checks` (copied there)
        #: ids of those arrays used as an index where nothing was recorded (their values stay checked)
        self.escaped: set[int] = set()
        #: write records (runtime/writes.py): tape index -> (array written, its owner, key, value)
        self.writes: dict[int, tuple[Any, Any, Any, Any]] = {}
        #: ids of the objects, lists and dicts taken apart from object arguments (compiled/objects.py):
        #: guarded, so a Python callee may be handed them
        self.objects: set[int] = set()
        #: objects of plain Python classes the run built from tracked values (kept alive: their ids are
        #: theirs for the run): locals of the call, their state plumbing between recorded operations
        self.local: list[Any] = []
        self.taken: dict[int, Any] = {}
        self.started = False  # whether the user's body has started running (bytegrad/_differentiated.py)
        self.roots = plainly.Roots()  # its differentiated leaves (compiled/plainly.py: an operation without a rule)

    def built(self, obj: Any, site: Any, constants: bool = False) -> None:  # (on constants: compiled/reach_objects.py)
        why = objects.local_refusal(type(obj))
        if why is not None and not constants:
            self.refuse(f"builds a {type(obj).__qualname__} from a differentiated value ({why})", site)
        elif why is None:
            self.local.append(obj)

    holds_built = objects.holds_built  # (`Net([Linear(W1), ...])`: made of objects the run built)
    track_read = plainly.track_read  # (objects.track_read, a model at module level: `taken`, id -> its spec)
    leaf, plain = plainly.leaf, plainly.plain  # (what the differentiated leaves are; `Tape.plain`)
    general_ids, plain_write, general_tracked = plainly.general_ids, plainly.plain_write, plainly.general_tracked

    def refuse(self, why: str, site: Any) -> None:
        from bytegrad.compiled import nested

        if site is not None and not nested.user_site(site):  # inside bytegrad's own sum, zip, deque...:
            why = f"{why} (inside bytegrad's {site.function})"  # named at the user's call of it
            site = next((s for _, _, _, s in reversed(self.callees) if nested.user_site(s)), None)
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
        operands = Operands(*decisions.operands(self, fn, args, site))  # (compiled/decisions.py)
        if type(result) is np.ndarray:  # (as it is now: the function may write into it later)
            self.checks.append((len(self.nodes), fn, operands, kwargs, result.copy(), site))
            self.live[len(self.checks) - 1] = result
            if result.dtype.kind in "fc" and id(result) not in self.ids:  # (a mask stays untracked: the
                # code's own uses of it are not hooked, compiled/writes.py)
                self.decided[self.leaf(result)] = len(self.checks) - 1
            return
        self.checks.append((len(self.nodes), fn, operands, kwargs, result, site))

    def note_index(self, key: Any) -> None:
        """`key` indexed an array where nothing was recorded: a mask among it has its values checked."""
        if self.live:
            live = {id(a) for a in self.live.values()}
            for k in (key if type(key) is tuple else (key,)):
                if id(k) in live:
                    self.escaped.add(id(k))

    def note_write(self, obj: Any, owner: Any, key: Any, value: Any) -> None:
        """The write record just pushed wrote `value` at `key` of `obj` (whose memory `owner` owns)."""
        self.writes[len(self.nodes) - 1] = (obj, owner, key, value)


class Operands(tuple):
    """A decision's operands, with the tape index each had when it was made (`at_ids`): an object the
    run records again later (`float(a)` gives `a` itself) has a later index in `Tape.ids` by then
    (compiled/ir.py `operand_ids`)."""

    at_ids: tuple

    def __new__(cls, items: tuple, at_ids: tuple) -> "Operands":
        self = super().__new__(cls, items)
        self.at_ids = at_ids
        return self


class Callees(list):
    """`CaptureTape.callees`: each iterator handed to a Python callee is looked into as it is handed
    over (`_iterated`; after the run it is exhausted): `unseen` lists what one goes over that a
    program could not reproduce (an object read from a global, whose state no guard fixes)."""

    def __init__(self, ids: dict[int, int]) -> None:
        super().__init__()
        self.ids = ids
        self.unseen: list[str] = []
        #: per entry, (rewritten, active parameters, immutable parameters) as the call saw them (after
        #: the run, an argument written in place is no longer in `ids`)
        self.activity: list[tuple[bool, frozenset[str], frozenset[str]]] = []

    def append(self, entry: Any) -> None:
        f, args, kwargs, site = entry
        watch_callee(f.__code__)  # (one that handles exceptions: the run watches them from now on)
        rewritten = transform.rewritten_function(f, args, kwargs, self.ids, True) is not None
        self.activity.append((rewritten, *transform.callee_activity(f, args, kwargs, self.ids)) if rewritten
                             else (False, frozenset(), frozenset()))
        for v in (*args, *(kwargs or {}).values()):
            if type(v) in _RUN_ITERATORS:
                bad = _iterated(v, self.ids)
                if bad is not None:
                    self.unseen.append(f"it passes an iterator over {bad} to {f.__qualname__} (line "
                                       f"{site.lineno if site is not None else '?'}): its state is not guarded")
        super().append(entry)


class ObjectCaptureTape(CaptureTape):
    """The tape of a gradient's capture run: object arguments are taken apart in place."""

    __slots__ = ()

    takes_objects = True


def _copied(value: Any) -> Any:
    return type(value)(_copied(v) for v in value) if type(value) in (list, tuple) else value


from bytegrad.compiled.objects import Unobservable as Unobservable  # noqa: E402  (an argument it cannot take)


def track_in_place(value: Any, tape: Tape) -> tuple[Any, Any]:
    """`pytree.prepare` for an argument the capture tracks but the call does not differentiate: its
    float arrays are tracked as they are, in the caller's own containers (no copy, so that what the
    function writes into a list, dict or array of the caller's is written there, as on the general
    path, and the effect check sees it). A float held by a list or dict is refused (`Unobservable`):
    tracking it needs a copy of its container."""
    t = type(value)
    if t is _ndarray:
        if value.dtype.kind not in "fc":
            return value, reach_labels.leaf(value, tape)
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
    if isinstance(tape, CaptureTape) and tape.takes_objects:  # (a gradient's capture: objects taken apart in place)
        if isinstance(value, type):  # (a classmethod's class)
            return value, objects.Node("ident", t)
        if objects.takes_apart(value) and pytrees.node_for(value) is None:
            return value, objects.track(value, tape, tape.objects)
    if isinstance(value, tuple) and not _copy_unseen(value):  # (holding a list, a dict, an object...)
        return value, (t, [track_in_place(v, tape)[1] for v in value])
    fresh, spec = pytree.prepare(value, tape)
    if fresh is not value and not _copy_unseen(value):
        raise Unobservable(f"a {t.__name__} argument that is not differentiated (the capture would track a copy "
                           "of it, and writes into it would go unseen)")
    return fresh, spec


_CONTAINERS = (list, tuple, dict)


def _untracked_params(code: types.CodeType, args: tuple, kwargs: Optional[dict]) -> frozenset[str]:
    """The parameters of a callee given integer or boolean arrays (the capture does not track them):
    what its code computes from them is checked as the differentiated function's is. An array
    passed through `*args` or `**kwargs` is looked for in them too (their names then stand for it)."""
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    found = set()
    for k, a in enumerate(args):
        if type(a) is _ndarray and a.dtype.kind not in "fc":
            found.add(names[k] if k < code.co_argcount else code.co_varnames[len(names)])  # (*args' own name)
    for key, a in (kwargs or {}).items():
        if type(a) is _ndarray and a.dtype.kind not in "fc":
            found.add(key if key in names else code.co_varnames[len(names) + bool(code.co_flags & 4)])
    return frozenset(found)


def _holds_integer_array(value: Any, depth: int = 0) -> bool:
    """Whether a list, tuple or dict argument holds an integer or boolean array (to depth 8): the capture
    does not track one, and eligibility.check's `untracked` sees parameters only."""
    for v in (value.values() if type(value) is dict else value):
        if type(v) is _ndarray and v.dtype.kind not in "fc":
            return True
        if type(v) in _CONTAINERS and (depth >= 8 or _holds_integer_array(v, depth + 1)):
            return True
    return False


def _copy_unseen(value: Any) -> bool:
    """Whether a copy of `value` behaves as `value` for every write the function can make: numbers,
    strings, arrays (a copy of one is a view of the same memory) and tuples of them."""
    t = type(value)
    if t in ATOMS or t is _ndarray or isinstance(value, (np.generic, np.ndarray)):
        return True
    return isinstance(value, tuple) and all(_copy_unseen(v) for v in value)


def _complete(spec: Any, top: bool = True) -> bool:
    """Whether a differentiated argument's spec is a tree (dicts, lists, tuples, namedtuples,
    dataclasses) of differentiable leaves and, below the top, values the program guards (an int,
    a string: no spec)."""
    if spec is None:
        return not top
    if type(spec) is pytree.Leaf:
        return True
    if spec[0] == "dataclass":
        return all(_complete(s, False) for s in spec[2].values())
    if spec[0] == "pytree":
        return all(_complete(s, False) for s in spec[3])
    subs = spec[1]
    return all(_complete(s, False) for s in (subs.values() if isinstance(subs, dict) else subs))


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
    run = capture_run(d, args, positions, ObjectCaptureTape)
    if isinstance(run, str):  # (not run, or stopped by a bytegrad error of the capture's own)
        return d._grad_now(args, {}), run
    out, aux, tape, specs, guards = run
    program_aux = (aux,) if d._has_aux else None
    d._check_scalar(out)
    shared = _shared_object_array(tape, specs)
    spec_at = dict(zip(positions, specs))
    wrt_specs = [spec_at[p] for p in norm_wrt]
    callee_why, callee_guards = _callee_guards(tape, d._code, guards + _default_entries(d._target), wrt_specs)
    # the gradient of this run, as the general path sweeps it (the call's result: never run again)
    idx = tape.ids.get(id(out))
    seed = np.ones_like(out) if type(out) is _ndarray and out.ndim else 1.0
    cts = plainly.sweep(tape, {idx: seed}) if idx is not None else [None] * len(tape.nodes)
    grads = pytree.not_callers(tuple(pytree.project(cts[s.idx], s.primal) if type(s) is pytree.Leaf
                                     else pytree.gradient(s, cts) for s in wrt_specs), args)
    if len(grads) > 1:
        grads = pytree.unalias(grads)
    result = ((out, aux) if d._has_aux else out, grads if d._wrt_tuple else grads[0])
    if type(out) is _ndarray and out.ndim:
        return result, "the output is a one-element array, not a scalar"
    if not all(_complete(s) for s in wrt_specs):
        return result, "a differentiated argument holds a value with no derivative"
    if shared is not None:
        return result, shared
    if tape.refusals:
        why, site = tape.refusals[0]
        return result, _users_words(str(Ineligible(why, site)))
    if callee_why is not None:
        return result, callee_why
    guards = guards + callee_guards
    why = declined = "no back end"
    for backend in backends:  # the first that builds and agrees with the capture's gradient
        t0 = time.perf_counter()
        try:
            prog = build_program(tape, args, [spec_at.get(p) for p in range(len(args))], norm_wrt, out,
                                 d._wrt_tuple, guards, d._code, backend, aux=program_aux)
        except Ineligible as exc:
            why = declined = _users_words(str(exc))
            policy.log().debug("no %s program for %s: %s (%.3f s)", backend, d._code.co_qualname, why,
                             time.perf_counter() - t0)
            continue
        policy.log().debug("compiled a %s program of %d operations for %s in %.3f s", backend, prog.records,
                         d._code.co_qualname, time.perf_counter() - t0)
        why = d._tiers.agree(prog, args, result) if d._tiers is not None else None
        if why is None:
            if backend != backends[0] and backends[0] == "numba":  # (tier numba: why the NumPy back end serves it)
                prog = prog.replace(declined=f"the Numba back end declined: {declined}")
            return result, prog
        declined = why
    return result, why

def _shared_object_array(tape: CaptureTape, specs: list) -> Optional[str]:
    """Why an array an object argument holds is not an input of its own (another argument, tracked
    after it, is the same array), or None."""
    for spec in specs:
        for leaf in objects.leaves(spec) if type(spec) is objects.Node else ():
            if tape.ids.get(id(leaf.primal)) != leaf.idx:
                return "an object argument holds an array that another argument holds too"
    return None


def capture_run(d: Any, args: tuple, positions: tuple[int, ...], tape_class: type = CaptureTape,
                every: bool = False) -> Union[str, tuple]:
    """The capture's forward pass: (output, aux or None, tape, leaf specs, guards), or why the function cannot
    be captured for arguments like `args` (the caller runs the general path); `every`: a pullback's."""
    reasons, guards = eligibility(d, args)
    if reasons:
        return reasons[0] + (f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else "")
    for name, a in zip(d._params[d._offset:], args):
        if type(a) in _CONTAINERS and _holds_integer_array(a):
            return (f"the argument {name} holds an integer or boolean array in a list, tuple or dict (what Python "
                    "code computes from it, `p['idx'][0]`, is not recorded: pass the array as an argument of its own)")
    from bytegrad.compiled import source as program_source
    from bytegrad.compiled.effects import Snapshot
    from bytegrad.errors import DifferentiationError

    wrt, _ = d._plan(len(args), tuple(range(len(args))) if every else d._wrt)  # (a pullback's: every argument)
    names = d._params[d._offset:]
    tracked = program_source.read_arrays(guards)
    # what the run may write besides its result (differentiated arrays are protected: never written)
    others = tuple(None if p in wrt else a for p, a in enumerate(args))
    snapshot = Snapshot(others, tuple(names), tuple(tracked))
    try:
        with reach_objects.BuildWatch(has_handlers(d._code), guards) as watch:  # (compiled/constructs.py, reach_objects.py)
            out, tape, specs, _ = plainly.forward(d, args, positions, tape_class, tracked, wrt, track_in_place, every)
    except Unobservable as exc:  # (raised before the function ran)
        return str(exc)
    except DifferentiationError as exc:  # (raised where the general path raises it too: the call's error)
        if plainly.raised(exc):
            raise
        return abandon.settle(exc, d, watch, snapshot.changed, (others, tuple(names), tuple(tracked)),  # (the body
                              lambda t: _callee_guards(t, d._code, guards + _default_entries(d._target))[0])  # once)
    # any other exception is the user's code raising, as on the general path: the call's only run's
    why = snapshot.changed() or input_writes.input_write(tape, others, tuple(names), tuple(tracked))
    if why is not None:
        tape.refuse(why, None)
    handled = watch.handled([d._code, *(c[0].__code__ for c in tape.callees)]) \
        or watch.unseen([d._target, *(c[0] for c in tape.callees)])
    if handled is not None:
        tape.refuse(handled, None)
    inside = errstate.refused_callees(d._code, d._target.__globals__, tape.callees)
    if inside is not None:
        tape.refuse(inside, None)
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
    immutable = reach_config.constant_params(d._target, names, args, d._offset)  # (and omitted ones' defaults)
    # integer and boolean arrays are inputs the capture does not track (`track_in_place`): what Python
    # code computes from them is not recorded, so the check refuses it (`x[idx]` is recorded)
    untracked = reach_labels.untracked_params(d._code, names, args)  # (`2.0 * labels` tracks them: reach_labels.py)
    active = frozenset(active) - untracked
    key = (active, immutable, untracked, _registry.settled_version())
    found = d._eligible.get(key)
    if found is None:
        target = d._target
        defaults = (target.__defaults__ or ()) + tuple((target.__kwdefaults__ or {}).values())
        found = d._eligible[key] = eligibility.check(d._code, active, target.__globals__, immutable,
                                                        defaults, target.__closure__ or (), untracked=untracked)
    return found

def capture_pullback(d: Any, args: tuple, general_back: Callable[..., Any],
                     backends: Sequence[str] = ()) -> tuple[Any, Union[policy.Pending, str]]:
    """One pullback by a capture run: ((output, back), the pullback program made from it, or why
    none could be). Pullback programs have the NumPy back end only."""
    from bytegrad.compiled.build import Ineligible, build as build_program
    compiled = policy
    positions = compiled.capture_positions(args)
    run = capture_run(d, args, positions, every=True)  # (a pullback differentiates every argument)
    if isinstance(run, str):
        return d._pullback_now(args, {}), run
    out, aux, tape, specs, guards = run
    program_aux = (aux,) if d._has_aux else None
    spec_at = dict(zip(positions, specs))
    all_specs = [spec_at.get(p) for p in range(len(args))]
    result = (out, general_back(out, tape, all_specs, None), *(program_aux or ()))
    if tape.refusals:
        why, site = tape.refusals[0]
        return result, _users_words(str(Ineligible(why, site)))
    callee_why, callee_guards = _callee_guards(tape, d._code, guards + _default_entries(d._target))
    if callee_why is not None:
        return result, callee_why
    try:
        prog = build_program(tape, args, all_specs, positions, out, True, guards + callee_guards, d._code,
                             pullback=True, aux=program_aux)
    except Ineligible as exc:
        return result, _users_words(str(exc))
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


#: iterators over what the run computed (a generator, a list's iterator...) and dict views: made in
#: the run, as no argument, global, cell or default can hold one (their guards refuse it)
_RUN_ITERATORS: tuple[type, ...] = (types.GeneratorType, enumerate, zip, reversed, type(iter([])), type(iter(())),
                  type(iter(range(1))), type(iter(range(1 << 70))), type(iter({})), type(iter({}.values())),
                  type(iter({}.items())), type(reversed([])), type(iter("")),
                  type({}.keys()), type({}.values()), type({}.items()))  # (views of a dict of the run or an argument)


def _unreplayable(value: Any, ids: dict[int, int], guarded: frozenset[int] | set[int] = frozenset()) -> Optional[str]:
    """None when a value handed to a Python callee is one a program reproduces (a tracked value, a
    constant, an array, a function, an iterator made in the run, an object argument the program
    guards (`guarded`: their ids), a tuple, list or dict of them); else what it is."""
    if id(value) in ids or isinstance(value, _REPLAYABLE) or id(value) in guarded:
        return None
    if type(value) in _RUN_ITERATORS:
        return None  # (looked into when handed over: Callees.append)
    t = type(value)
    if t is tuple or t is list or t is dict or t is collections.deque:  # (a deque as a list is)
        for v in (value.values() if t is dict else value):
            bad = _unreplayable(v, ids, guarded)
            if bad is not None:
                return bad
        return None
    return f"a {t.__qualname__} object"


def _users_words(why: str) -> str:
    """A reason that cites a line of bytegrad's implementations of builtins ("(line 141 of py_map)",
    from a record or decision made there) names the function instead: a refusal cites the user's
    lines only."""
    import re

    from bytegrad.rules import _impls

    def named(m: re.Match) -> str:
        return f"(inside bytegrad's {m.group(1)})" if m.group(1).split(".")[0] in vars(_impls) else m.group(0)

    return re.sub(r"\(line \d+ of ([\w.<>]+)\)", named, why)


def _default_entries(target: Any) -> list[tuple]:
    """The differentiated function's default values, as guard-like entries: a function among them
    was made before the call (its cells are guarded, never a frame's of this run)."""
    values = (getattr(target, "__defaults__", None) or ()) + tuple((getattr(target, "__kwdefaults__", None)
                                                                     or {}).values())
    return [("default", None, "", v) for v in values]


def _iterated(it: Any, ids: dict[int, int]) -> Optional[str]:
    """`_unreplayable` of what an iterator or dict view made in the run goes over, read without
    advancing it (`__reduce__`: a list iterator's list, an enumerate's iterator...). A generator
    is a callee's, whose arguments were checked when it was called."""
    t = type(it)
    if t is types.GeneratorType:
        return None
    mapping = getattr(it, "mapping", None)  # (a dict view)
    if mapping is not None:
        return _unreplayable(list(mapping.items()), ids)
    try:
        parts = it.__reduce__()[1]
    except Exception:  # noqa: BLE001 - what cannot be looked into is not replayed
        return f"a {t.__qualname__} object"
    return _unreplayable(list(parts), ids)


def _callee_guards(tape: CaptureTape, root: Optional[types.CodeType] = None, outer: Sequence[tuple] = (),
                   wrt_specs: Sequence[Any] = ()) -> tuple[Optional[str], list[tuple]]:
    """(why a Python function the capture run called cannot be part of a program, or None; the guards
    on what those functions read: their globals, module attributes, code, defaults and the closure
    cells made before the call). Each is checked as the differentiated function is
    (compiled/eligibility.py), with the activity its rewrite had: the parameters that held tracked
    values in the capture, and its cells (compiled/nested.py: those of a frame of this run are that
    frame's variables; the others are guarded). `root`: the differentiated function's code; `outer`:
    its guards (a function they read was made before the call)."""
    from bytegrad.compiled import eligibility, nested

    guards: list[tuple] = []
    seen: set[tuple] = set()
    ran = {f.__code__ for f, _, _, _ in tape.callees} | ({root} if root is not None else set())
    parent_of = nested.parents(ran)
    older = {id(v) for _, _, _, v in outer}  # functions reached through a global or cell: made before
    have = {(kind, id(owner), name) for kind, owner, name, _ in outer}  # (each read guarded once)
    unseen = getattr(tape.callees, "unseen", None)
    if unseen:
        return unseen[0], []
    built = reach_objects.local_ids(tape)  # objects the run built (compiled/objects.py, reach_objects.py)
    guarded = tape.objects | built
    if wrt_specs:  # (a differentiated dataclass's copy, handed to its methods)
        guarded = guarded | objects.copies((v for _, args, _, _ in tape.callees for v in args), list(wrt_specs), tape)
    for cls in {type(o) for o in tape.local}:  # (their methods and class attributes are read at capture)
        guards.append(("class", cls, cls.__qualname__, objects.class_state(cls)))
    where = None
    activity = getattr(tape.callees, "activity", None)
    for k, (f, args, kwargs, site) in enumerate(tape.callees):
        if nested.user_site(site):
            where = site
        at = f"line {(where or site).lineno}" + ("" if where is site else ", through a builtin")
        for v in (*args, *(kwargs or {}).values()):
            bad = _unreplayable(v, tape.ids, guarded)
            if bad is not None:
                return f"it passes {bad} to {f.__qualname__} ({at}): its state is not guarded", []
        if nested.trusted(f):
            continue  # (bytegrad's own sum, zip, max...: pure; what they call is a callee of its own)
        local = frozenset() if id(f) in older or root is None else \
            nested.run_local_cells(f.__code__, ran, parent_of, root)
        if activity is not None:
            rewritten, active, immutable = activity[k]
        else:
            rewritten = transform.rewritten_function(f, args, kwargs, tape.ids, True) is not None
            active, immutable = transform.callee_activity(f, args, kwargs, tape.ids) if rewritten else \
                (frozenset(), frozenset())
        untracked = _untracked_params(f.__code__, args, kwargs)
        key = (f, active, immutable, local, rewritten, bool(args) and id(args[0]) in built, untracked)
        if key in seen:
            continue
        seen.add(key)
        made_here = f.__code__ in parent_of and id(f) not in older  # (its defaults are values of the run)
        defaults = () if made_here else (f.__defaults__ or ()) + tuple((f.__kwdefaults__ or {}).values())
        reasons, more = eligibility.check(f.__code__, active, f.__globals__, immutable, defaults,
                                          f.__closure__ or (), local, cells_active=rewritten, callee=True,
                                          untracked=untracked)
        if reasons and args and id(args[0]) in built:  # a method of an object the call built: it may set its attributes
            reasons = objects.without_self_writes(f.__code__, reasons, f, tape)
        if reasons:
            return f"it calls {f.__qualname__} ({at}), which {reasons[0]}", []
        for entry in more:
            if (entry[0], id(entry[1]), entry[2]) not in have:
                have.add((entry[0], id(entry[1]), entry[2]))
                guards.append(entry)
        if not made_here:
            guards.append(("code", f, f.__code__, (f.__defaults__, f.__kwdefaults__)))
        older.update(id(v) for _, _, _, v in more)
        older.update(map(id, defaults))
    return None, guards
