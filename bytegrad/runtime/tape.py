"""The tape: what a forward pass recorded, and the reverse sweep that turns it into cotangents.

One tape per gradient request, per thread. Differentiated values are found by identity (`ids`)
while the tape keeps them alive. A node is a record `(kind, parents, site, *fields)`
(runtime/records.py); `kind.backward(out_bar, node, out)` returns one cotangent per parent.
"""
from __future__ import annotations

import _thread
import types
from typing import TYPE_CHECKING, Any, Callable, Optional, cast

import numpy as np

from bytegrad.errors import (
    RULE_CASE_FIX, DifferentiationError, MutationError, NaNError, PullbackError, PushforwardError, RuleCaseError,
    SourceLoc,
)
from bytegrad.rules.registry import NO_TANGENT, ZERO, NoTangent, Zero
from bytegrad.runtime import fpwarn
from bytegrad.runtime.records import IDENTITY

if TYPE_CHECKING:  # (nancheck.py imports this module)
    from bytegrad.runtime.nancheck import CheckingTape

class _ThreadState(_thread._local):  # threading.local, without importing threading (2-3 ms)
    """This thread's state: `tape` (the current tape), `site` (the call site through which user code
    entered an API function under a tape), `nesting` (depth of nested derivatives). The class
    attributes are every thread's defaults, so reading one that a thread never set costs a lookup,
    not an AttributeError caught inside `getattr` (0.47 us, once per compiled gradient)."""

    tape: Optional["Tape"] = None
    site: Any = None
    nesting = 0


tls = _ThreadState()
_FunctionType = types.FunctionType
_ndarray = np.ndarray


def current_tape() -> Optional["Tape"]:
    """The innermost tape of this thread, or None outside a gradient."""
    try:
        return tls.tape
    except AttributeError:
        return None


def call_site() -> Any:
    """The hooked call site (an `abi.Site`) through which user code entered a bytegrad API function
    while a tape was active (a nested derivative), or None."""
    return getattr(tls, "site", None)


def set_tape(tape: Optional["Tape"]) -> Optional["Tape"]:
    """Make `tape` this thread's current tape; returns the previous one."""
    old = getattr(tls, "tape", None)
    tls.tape = tape
    return old


class Tape:
    """A record of one forward pass.

    A tape may also observe the run for a caller above the runtime (the compiled tier's capture,
    compiled/capture.py): such a tape sets `capturing`, and the hooks then report to it what a
    replay of the recorded operations could not reproduce, through four members it defines:
    `refuse(why, site)` (the run did something a replay cannot), `check(fn, args, kwargs, result,
    site)` (Python code may decide on `result`, computed from tracked values), `make(fn, args,
    kwargs)` (an array made from constants, to be tracked) and `callees` (a list: the Python
    functions called with tracked values, as `(fn, args, kwargs, site)`). The runtime knows only
    this protocol, not who implements it."""

    #: a tape that checks for NaNs (runtime/nancheck.py, `CheckingTape`) sweeps through its own method
    nan_check = False
    #: a tape that observes the run through the protocol above
    capturing = False

    __slots__ = ("values", "nodes", "ids", "protected", "stale", "owners", "_index", "_indexed", "lean",
                 "trials", "trial_clock", "guarded", "__weakref__")

    #: set with `trials` (runtime/fused.py): a slot without a value until then
    trial_clock: int
    #: the capture protocol's list (see above): a slot of the capturing tape only; a plain tape has none
    callees: list[tuple[Any, tuple, Optional[dict], Any]]

    def __init__(self) -> None:
        self.values: list[Any] = []       # node outputs, kept alive so their ids stay unique
        self.nodes: list[Any] = []        # node i produced values[i]; None for a leaf
        self.ids: dict[int, int] = {}     # id(value) -> node index of its latest version
        self.protected: set[int] = set()  # ids of the caller's arrays (and their owners): never written
        self.stale: dict[int, Optional[SourceLoc]] = {}  # node index -> where its memory was overwritten
        self.owners: dict[int, Any] = {}       # id -> array whose memory was written with tracked values
        self._index: dict[int, list[tuple[Any, int, bool]]] = {}  # owner id -> (array, node, saved?)
        self._indexed = 0
        # swept once and then dropped (a plain `grad`): values no backward reads may be released
        # early, and the sweep releases each node once it has run (see `sweep`, runtime/fused.py)
        self.lean = False
        # fused sites comparing their tiers in this gradient (runtime/fused.py, `Trial`), or None;
        # `trial_clock`, set with it, is this gradient's tick of the trials' clock
        self.trials: Optional[list] = None
        # records before this index were made zero-safe when a mask was recorded (runtime/zerosafe.py)
        self.guarded = 0

    # ---- the capture protocol (see above): the runtime calls these only on a tape that sets
    # `capturing`, which overrides them (compiled/capture.py); a plain tape observes nothing

    def refuse(self, why: str, site: Any) -> None:
        """The run did something a replay of the recorded operations cannot reproduce."""

    def check(self, fn: Any, args: tuple, kwargs: Optional[dict], result: Any, site: Any) -> None:
        """`fn(*args, **kwargs)` gave `result` on tracked values: Python code may decide on it."""

    def built(self, obj: Any, site: Any, constants: bool = False) -> None:
        """`obj`, of a class written in Python, was just made from tracked values (`constants`: from
        untracked ones; its `__init__` not run yet): a capturing tape decides whether a replay can do
        without it."""

    def track_read(self, value: Any) -> None:
        """`value`, read by the code from a global or a closure (not an argument), tracked for the
        run: an array as a leaf; a capturing tape also takes an object of a plain class apart."""
        self.leaf(value)

    def holds_built(self, args: tuple, kwargs: Optional[dict]) -> bool:
        """Whether the arguments of a class's call hold an object `built` reported (a model made of
        layers the run made): that object is built from them as from tracked values."""
        return False

    def make(self, fn: Any, args: tuple, kwargs: Optional[dict]) -> Any:
        """`fn(*args, **kwargs)`, an array made from constants (a capturing tape tracks it)."""
        return fn(*args, **kwargs) if kwargs else fn(*args)

    def note_write(self, obj: Any, owner: Any, key: Any, value: Any) -> None:
        """The write record just pushed wrote `value` at `key` of `obj` (`owner` owns its memory)."""

    def note_index(self, key: Any) -> None:
        """`key` indexed an array where nothing was recorded (an array the run does not track)."""

    def plain(self, fn: Any, args: tuple, kwargs: Optional[dict], site: Any) -> bool:
        """`fn(*args, **kwargs)` has no derivative rule and meets tracked values: True when a capturing tape
        takes it as the general path does, which tracks none of them (the caller then runs it as it is);
        False: the caller raises."""
        return False

    def plain_write(self, parents: Any, site: Any, marked: list[int], why: Optional[str] = None) -> bool:
        """A write through a view whose memory layout cannot be mapped back to its owner, of records
        `parents` (the owner's version, the value's; `marked`: the records it made stale): True when a
        capturing tape takes it as the general path does, which tracks none of them (the caller writes as
        it is); False: the caller raises."""
        return False

    def push(self, node: Any, out: Any) -> Any:
        ids = self.ids
        values = self.values
        ids[id(out)] = len(values)
        values.append(out)
        self.nodes.append(node)
        return out

    def leaf(self, value: Any) -> int:
        """Push a differentiated input (a record of its own: None); returns its index."""
        values = self.values
        idx = len(values)
        self.ids[id(value)] = idx
        values.append(value)
        self.nodes.append(None)
        return idx

    def link(self, idx: int, parent: int, site: Any) -> None:
        """Make leaf `idx` an identity of node `parent`: a nested derivative's input that is a value
        of the enclosing computation, which differentiates through it."""
        self.nodes[idx] = (IDENTITY, (parent,), site)

    def replace(self, idx: int, node: Any, value: Any) -> None:
        """Put a slimmed record and what it keeps of its value (`Kind.slim`) in place of record `idx`;
        the old value's id no longer names it (a new array reusing that id is not taken for it)."""
        old = self.values[idx]
        self.nodes[idx] = node
        self.values[idx] = value
        if value is not old and self.ids.get(id(old)) == idx:
            del self.ids[id(old)]

    # ---- mutation bookkeeping ------------------------------------------------------------

    def check_protected(self, target: np.ndarray, site: Any) -> None:
        """Refuse a write into the caller's data (a differentiated input or its base)."""
        owner = target.base if target.base is not None else target
        if id(owner) in self.protected or id(target) in self.protected:
            exc = MutationError(
                "this in-place write would modify an array being differentiated (the caller's data).",
                site.loc() if site is not None else None,
                "compute a new array instead (for example `x = x + v`, or `y = x.copy()` and write into y).")
            if self.capturing:  # (a capture protects what the general path does: its error, raised once there)
                exc.__dict__["_bytegrad_general"] = True  # (compiled/plainly.py `raised`)
            raise exc

    def check_write(self, target: np.ndarray, region: np.ndarray, site: Any) -> None:
        """Before writing `region` (a view of `target`): refuse if it would change saved values, and
        mark the other records whose memory it changes as stale (re-derived when next read)."""
        self.check_protected(target, site)
        owner = target.base if target.base is not None else target
        self._update_index()
        entries = self._index.get(id(owner))
        if not entries:
            return
        hit = []
        for arr, node_idx, saved in list(entries):  # `_keep_saved` edits the index
            if arr is target and not saved:
                continue
            if not np.may_share_memory(arr, region):
                continue
            try:
                # (NumPy's stub takes only -1 and 0; the function takes any bound on the work)
                overlap = np.shares_memory(arr, region, max_work=10_000)  # type: ignore[arg-type]
            except np.exceptions.TooHardError:
                overlap = True
            if overlap:
                hit.append((arr, node_idx, saved))
        # saved values are copied first: a copy is re-derived from views the write then marks stale
        for arr, node_idx, saved in hit:
            if saved:
                self._keep_saved(arr, node_idx, site)
        for arr, node_idx, saved in hit:
            if not saved:
                self.stale[node_idx] = site.loc() if site is not None else None

    def _keep_saved(self, arr: np.ndarray, node_idx: int, site: Any) -> None:
        """Copy-on-write: node `node_idx` saved `arr` for its reverse step, and `arr`'s memory is
        about to be overwritten. The node is given a copy of `arr` as it is now (a recorded copy,
        so that a nested derivative still sees where it came from) in every place it holds it."""
        from bytegrad.runtime import writes  # (loaded when a write first needs it)

        node = self.nodes[node_idx]
        copy = arr.copy()
        i = writes.current(self, site, arr)
        if i is not None:
            self.push((IDENTITY, (i,), site), copy)
        if self.values[node_idx] is arr:  # an output its own reverse step reads (exp's)
            self.values[node_idx] = copy
        if node is not None:
            self.nodes[node_idx] = node[:3] + tuple(_replaced(item, arr, copy, 3) for item in node[3:])
        index = self._index
        owner = arr.base if arr.base is not None else arr
        entries = index.get(id(owner))
        if entries:  # the node's entries now name the copy, which nothing else holds or writes
            entries[:] = [e for e in entries if not (e[0] is arr and e[1] == node_idx)]
        index.setdefault(id(copy), []).append((copy, node_idx, True))

    def _update_index(self) -> None:
        nodes = self.nodes
        values = self.values
        index = self._index
        for i in range(self._indexed, len(nodes)):
            v = values[i]
            node = nodes[i]
            if type(v) is _ndarray:
                owner = v.base if v.base is not None else v
                # an output its own reverse step reads (exp's partial is `out`) is saved like an input
                reads_out = node[0].reads_out if node is not None else None
                index.setdefault(id(owner), []).append((v, i, reads_out is not None and reads_out(node)))
            if node is None:
                continue
            for arr in saved_arrays(node):
                owner = arr.base if arr.base is not None else arr
                index.setdefault(id(owner), []).append((arr, i, True))
        self._indexed = len(nodes)

    def stale_error(self, node_idx: int, site: Any) -> MutationError:
        where = self.stale[node_idx]
        return MutationError(
            f"this operation reads a value whose memory was overwritten in place at {where} after "
            "it was computed; its derivative would be wrong.",
            site.loc() if site is not None else None,
            "take a copy before overwriting (`v = x[i].copy()`), or avoid writing into the array.")


def constant_tree(a: Any) -> bool:
    """A number, string, dtype or type, or a tuple or list of them: what an array made from constants
    (`make` of a capturing tape) may be made from. (An object's `__array__`, a tracked value, an array: no.)"""
    t = type(a)
    if t is tuple or t is list:
        return all(constant_tree(x) for x in a)
    return t in _CONSTANT_TYPES or isinstance(a, (np.dtype, type)) \
        or (isinstance(a, np.generic) and t.__module__ == "numpy")


_CONSTANT_TYPES = frozenset({int, float, bool, complex, str, bytes, type(None)})


def saved_arrays(node: tuple) -> list[np.ndarray]:
    """The arrays a node's backward pass will read (for mutation checks)."""
    return node[0].saved(node)


def collect(item: Any, found: list[np.ndarray], depth: int) -> None:
    """Append to `found` the arrays `item` holds, `depth` levels down through tuples, lists, closure
    cells and bytegrad's slotted records: what a rule's pullback captured (runtime/backward.py).

    Rules do not declare what they save. Copy-on-write (`Tape._keep_saved`) must not only find a
    saved array but make the pullback read the copy, and a closure's captures are reachable only
    through its cells (`_replaced`): a declared list beside the closure would be a second record of
    what it holds, which nothing could check, where an omission is a wrong gradient. A rule that
    keeps its state in a slotted record (rules/numpy/reductions.py's `_Reduction`) has in effect
    declared it: its slots are read and replaced by name."""
    t = type(item)
    if t is _ndarray:
        found.append(item)
    elif depth and (t is tuple or t is list):
        for x in item:
            collect(x, found, depth - 1)
    elif depth and t is _FunctionType and item.__closure__:
        for cell in item.__closure__:
            try:
                collect(cell.cell_contents, found, depth - 1)
            except ValueError:  # empty cell
                pass
    elif depth and getattr(t, "__slots__", None) and t.__module__.startswith("bytegrad."):
        # a rule's record of its arguments (rules/numpy/reductions.py, `_Reduction`): its arrays
        for name in t.__slots__:
            collect(getattr(item, name, None), found, depth - 1)


def _replaced(item: Any, arr: np.ndarray, copy: np.ndarray, depth: int) -> Any:
    """`item` with every reference to `arr` that `collect` (at this depth, or less) would find
    replaced by `copy`: tuples are rebuilt, lists, closure cells and bytegrad's slotted records are
    updated in place."""
    if item is arr:
        return copy
    if not depth:
        return item
    t = type(item)
    if t is tuple:
        new = tuple(_replaced(x, arr, copy, depth - 1) for x in item)
        return new if any(a is not b for a, b in zip(new, item)) else item
    if t is list:
        for k, x in enumerate(item):
            item[k] = _replaced(x, arr, copy, depth - 1)
    elif t is _FunctionType and item.__closure__:
        for cell in item.__closure__:
            try:
                v = cell.cell_contents
            except ValueError:  # empty cell
                continue
            nv = _replaced(v, arr, copy, depth - 1)
            if nv is not v:
                cell.cell_contents = nv
    elif getattr(t, "__slots__", None) and t.__module__.startswith("bytegrad."):
        for name in t.__slots__:
            v = getattr(item, name, None)
            nv = _replaced(v, arr, copy, depth - 1)
            if nv is not v:
                setattr(item, name, nv)
    return item


# ---- reverse sweep ------------------------------------------------------------------------


def accumulate(old: Any, new: Any) -> Any:
    """Add two cotangents (ZERO and None are identities; tuples add elementwise)."""
    if old is None or old is ZERO:
        return new
    if new is None or new is ZERO:
        return old
    if type(old) is tuple and type(new) is tuple:
        return tuple(accumulate(a, b) for a, b in zip(old, new))
    return old + new


class Recorder:
    """How a nested derivative's sweep runs its steps (runtime/nested.py), in either direction:
    `call(node, fn, args)` runs a step of `node` (a reverse step, a cotangent thunk, a pushforward)
    rewritten, recorded on the tape, and `add(node, old, new)` adds two cotangents with the
    addition recorded. `sweep` and `forward.push_forward` take one; without it they run the
    steps as themselves."""

    def call(self, node: Optional[tuple], fn: Callable[..., Any], args: tuple) -> Any:
        raise NotImplementedError

    def add(self, node: Optional[tuple], old: Any, new: Any) -> Any:
        raise NotImplementedError


@fpwarn.sweeps  # a floating-point warning in a pullback names the line that recorded the operation
def sweep(tape: Tape, seeds: dict[int, Any], stop: int = -1, recorder: Optional[Recorder] = None) -> list[Any]:
    """Propagate output cotangents `seeds` (node index -> cotangent) back; returns one per node.

    Cotangents of intermediate nodes are dropped once used; leaves keep theirs. On a lean tape
    (swept once) each node and its value are released once its backward has run, so memory falls
    during the sweep as it does in a hand-written backward pass. Nodes at index
    `stop` and below are not visited: a nested derivative shares its outer tape, and the nodes
    before its own leaves belong to the outer computation (constants for the inner one).

    The plain sweep runs each reverse step and adds cotangents directly; a nested derivative's
    sweep passes a `Recorder`, through which the steps and additions run recorded (the nodes that
    record appends are not visited). Either way a failing step raises what `step_error` says.
    """
    if tape.nan_check and recorder is None:  # BYTEGRAD_DEBUG_NANS: each step checked (runtime/nancheck.py)
        return cast("CheckingTape", tape).checked_sweep(seeds, stop)
    nodes = tape.nodes
    values = tape.values
    cts: list[Any] = [None] * len(nodes)
    if not seeds:
        return cts
    for idx, seed in seeds.items():
        old = cts[idx]
        cts[idx] = seed if old is None else (accumulate(old, seed) if recorder is None else
                                             recorder.add(None, old, seed))
    release = tape.lean and recorder is None
    if release:
        _slim(tape)
    thunk = _FunctionType
    no_tangent, zero = NO_TANGENT, ZERO
    for i in range(max(seeds), stop, -1):
        ct = cts[i]
        if ct is None:
            continue
        node = nodes[i]
        if node is None:
            continue
        cts[i] = None
        try:
            step = node[0].backward  # an attribute load (specialized by CPython; a method call on a slot is not)
            bars = step(ct, node, values[i]) if recorder is None else recorder.call(node, step, (ct, node, values[i]))
            if release:
                nodes[i] = values[i] = None
            parents = node[1]
            if parents.__class__ is int:  # one parent, one cotangent (unary nodes)
                if recorder is None and bars.__class__ is not thunk:  # the common case, inline
                    if bars is not None and bars is not no_tangent and bars is not zero:
                        old = cts[parents]
                        cts[parents] = bars if old is None else accumulate(old, bars)
                    continue
                parents, bars = (parents,), (bars,)
            k = 0
            for p in parents:
                bar = bars[k]
                k += 1
                if p is None or bar is None:
                    continue
                if p.__class__ is not int:
                    _route(cts, p, bar, node, recorder)
                    continue
                if bar.__class__ is thunk:  # computed only because p needs it
                    bar = bar() if recorder is None else recorder.call(node, bar, ())
                if bar is None or bar is no_tangent or bar is zero:
                    continue
                old = cts[p]
                cts[p] = bar if old is None else (accumulate(old, bar) if recorder is None else
                                                  recorder.add(node, old, bar))
        except Exception as exc:
            error = step_error(node, exc, recorded=recorder is not None)
            if error is None:
                raise
            raise error from exc
    return cts


def step_error(node: tuple, exc: Exception, recorded: bool = False, forward: bool = False) -> Optional[Exception]:
    """The error a failing step of a sweep raises in place of `exc` (None: `exc` itself).

    The one place that says how a step fails, in either direction: a reverse step (`sweep`) or a
    forward one (`forward.push_forward`), run as itself or recorded (a nested derivative runs it
    rewritten, to differentiate it). A DifferentiationError passes through as it is (a rule's
    RuleCaseError without a location gets the line that recorded the operation); any other
    exception becomes a PullbackError, or a PushforwardError in forward mode, naming that line. A
    recorded step's DifferentiationError (an operation of a pullback that has no rule) is named as
    the nested derivative's failure.
    """
    site = node[2]
    loc = site.loc() if site is not None else None
    cls, what, fn = (PushforwardError, "forward pass (tangents)", "frule") if forward else \
        (PullbackError, "reverse pass", "pullback")
    if not recorded:
        if isinstance(exc, RuleCaseError) and exc.loc is None:  # a rule's pullback met a case it does not
            # cover (scipy.stats' cdf in a shape parameter): the same error, at the line that recorded it
            return RuleCaseError(exc.problem, loc, exc.fix or RULE_CASE_FIX)
        if isinstance(exc, DifferentiationError):
            return None
        return cls(f"the {what} of this operation failed: {type(exc).__name__}: {exc}", loc,
                   f"if this operation uses a custom rule, check its {fn} with bytegrad.rules.testing.check_rule.")
    if isinstance(exc, (PullbackError, PushforwardError)):
        return None
    if isinstance(exc, NaNError):  # debug mode: named at the line that recorded this operation
        return NaNError(f"while a nested derivative ran the {what} of {node[0].describe(node)} (recorded at "
                        f"this line), {exc.problem}", loc if site is not None else exc.loc, exc.fix)
    detail = " / ".join(line.strip() for line in str(exc).strip().splitlines() if line.strip())
    return cls(
        f"a nested derivative differentiates the {what} of this operation, and that failed: "
        f"{type(exc).__name__}: {detail}", loc,
        f"give the function a rule whose {fn} uses only differentiable operations, or take the "
        "inner derivative outside the differentiated function.")


#: values smaller than this (elements) are not worth slimming
SLIM_MIN_SIZE = 4096


def _slim(tape: Tape) -> None:
    """Before the one sweep of a lean tape: let each large record drop what its reverse step reads
    only the shape of (its output, arguments its partials do not read), so that those arrays are
    freed now rather than when the sweep reaches them (a record kind's `slim`, runtime/records.py)."""
    nodes = tape.nodes
    values = tape.values
    for i, v in enumerate(values):
        if v.__class__ is not _ndarray or v.size < SLIM_MIN_SIZE:
            continue
        node = nodes[i]
        if node is None:
            continue
        slim = node[0].slim
        if slim is not None:
            nodes[i], values[i] = slim(node, v)


def _route(cts: list[Any], p: Any, bar: Any, node: tuple, recorder: Optional[Recorder]) -> None:
    """Distribute a structured cotangent (for a list/tuple/dict argument) to its tracked leaves."""
    if type(bar) is _FunctionType:  # a thunk: the rule computes this argument's cotangent on demand
        bar = bar() if recorder is None else recorder.call(node, bar, ())
    if isinstance(bar, (NoTangent, Zero)) or bar is None:
        return
    if type(p) is dict:
        for k, sub in p.items():
            _route(cts, sub, bar[k], node, recorder)
        return
    if type(p) in (tuple, list):
        if len(bar) != len(p):
            site = node[2]
            raise PullbackError(
                f"a pullback returned a cotangent with {len(bar)} entries for an argument with {len(p)}.",
                site.loc() if site is not None else None)
        for sub, b in zip(p, bar):
            if sub is not None and b is not None:
                _route(cts, sub, b, node, recorder)
        return
    if bar is NO_TANGENT or bar is ZERO:
        return
    old = cts[p]
    cts[p] = bar if old is None else (accumulate(old, bar) if recorder is None else recorder.add(node, old, bar))
