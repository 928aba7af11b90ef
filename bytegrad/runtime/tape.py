"""The tape: what a forward pass recorded, and the reverse sweep that turns it into cotangents.

One tape per gradient request, per thread. Differentiated values are found by identity (`ids`)
while the tape keeps them alive. A node is a tuple `(backward, parents, site, *payload)`;
`backward(out_bar, node, out)` returns one cotangent per parent.
"""
from __future__ import annotations

import _thread
import types
from typing import Any, Optional

import numpy as np

from bytegrad.errors import DifferentiationError, MutationError, PullbackError, SourceLoc, qualname
from bytegrad.rules._shape import materialize
from bytegrad.runtime import fpwarn
from bytegrad.rules.registry import NO_TANGENT, ZERO, NoTangent, Zero

_tls = _thread._local()  # threading.local, without importing threading (2-3 ms)
_FunctionType = types.FunctionType
_ndarray = np.ndarray


def current_tape() -> Optional["Tape"]:
    """The innermost tape of this thread, or None outside a gradient."""
    try:
        return _tls.tape
    except AttributeError:
        return None


def call_site() -> Any:
    """The hooked call site (an `abi.Site`) through which user code entered a bytegrad API function
    while a tape was active (a nested derivative), or None."""
    return getattr(_tls, "site", None)


def set_tape(tape: Optional["Tape"]) -> Optional["Tape"]:
    """Make `tape` this thread's current tape; returns the previous one."""
    old = getattr(_tls, "tape", None)
    _tls.tape = tape
    return old


class Tape:
    """A record of one forward pass."""

    #: a tape that checks for NaNs (runtime/nancheck.py, `CheckingTape`) sweeps through its own method
    nan_check = False

    __slots__ = ("values", "nodes", "ids", "protected", "stale", "owners", "_index", "_indexed", "lean",
                 "trials", "trial_clock", "guarded", "__weakref__")

    def __init__(self) -> None:
        self.values: list[Any] = []       # node outputs, kept alive so their ids stay unique
        self.nodes: list[Any] = []        # node i produced values[i]; None for a leaf
        self.ids: dict[int, int] = {}     # id(value) -> node index of its latest version
        self.protected: set[int] = set()  # ids of the caller's arrays (and their owners): never written
        self.stale: dict[int, SourceLoc] = {}  # node index -> where its memory was overwritten
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

    def push(self, node: Any, out: Any) -> Any:
        ids = self.ids
        values = self.values
        ids[id(out)] = len(values)
        values.append(out)
        self.nodes.append(node)
        return out

    def leaf(self, value: Any) -> int:
        idx = len(self.values)
        self.push(None, value)
        return idx

    # ---- mutation bookkeeping ------------------------------------------------------------

    def check_protected(self, target: np.ndarray, site: Any) -> None:
        """Refuse a write into the caller's data (a differentiated input or its base)."""
        owner = target.base if target.base is not None else target
        if id(owner) in self.protected or id(target) in self.protected:
            raise MutationError(
                "this in-place write would modify an array being differentiated (the caller's data).",
                site.loc() if site is not None else None,
                "compute a new array instead (for example `x = x + v`, or `y = x.copy()` and write into y).")

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
                overlap = np.shares_memory(arr, region, max_work=10_000)
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
        from bytegrad.runtime import writes  # both import this module
        from bytegrad.runtime.backward import _bw_identity

        node = self.nodes[node_idx]
        copy = arr.copy()
        i = writes.current(self, site, arr)
        if i is not None:
            self.push((_bw_identity, (i,), site), copy)
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
                reads_out = getattr(node[0], "reads_out", None) if node is not None else None
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


class CaptureTape(Tape):
    """The tape of a capture run (bytegrad/compiled.py): every float argument is tracked, and the
    hooks report here what would make the recorded graph differ from the computation on other
    values of the same signature (a Python callee, a value computed from data that Python code then
    uses). The first such reason makes the capture fail; the gradient itself is unaffected."""

    __slots__ = ("refusals", "checks", "callees")

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

    def refuse(self, why: str, site: Any) -> None:
        self.refusals.append((why, site))

    def check(self, fn: Any, args: tuple, kwargs: Optional[dict], result: Any, site: Any) -> None:
        """`fn(*args, **kwargs)` gave `result` on tracked values: Python code may decide on it."""
        self.checks.append((len(self.nodes), fn, args, kwargs, result, site))


def saved_arrays(node: tuple) -> list[np.ndarray]:
    """The arrays a node's backward pass will read (for mutation checks)."""
    saver = getattr(node[0], "saved", None)
    if saver is not None:
        return saver(node)
    found: list[np.ndarray] = []
    for item in node[3:]:
        _collect(item, found, 2)
    return found


def _collect(item: Any, found: list[np.ndarray], depth: int) -> None:
    t = type(item)
    if t is _ndarray:
        found.append(item)
    elif depth and (t is tuple or t is list):
        for x in item:
            _collect(x, found, depth - 1)
    elif depth and t is _FunctionType and item.__closure__:
        for cell in item.__closure__:
            try:
                _collect(cell.cell_contents, found, depth - 1)
            except ValueError:  # empty cell
                pass
    elif depth and getattr(t, "__slots__", None) and t.__module__.startswith("bytegrad."):
        # a rule's record of its arguments (rules/numpy/reductions.py, `_Reduction`): its arrays
        for name in t.__slots__:
            _collect(getattr(item, name, None), found, depth - 1)


def _replaced(item: Any, arr: np.ndarray, copy: np.ndarray, depth: int) -> Any:
    """`item` with every reference to `arr` that `_collect` (at this depth, or less) would find
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


@fpwarn.sweeps  # a floating-point warning in a pullback names the line that recorded the operation
def sweep(tape: Tape, seeds: dict[int, Any], stop: int = -1) -> list[Any]:
    """Propagate output cotangents `seeds` (node index -> cotangent) back; returns one per node.

    Cotangents of intermediate nodes are dropped once used; leaves keep theirs. On a lean tape
    (swept once) each node and its value are released once its backward has run, so memory falls
    during the sweep as it does in a hand-written backward pass. Nodes at index
    `stop` and below are not visited: a nested derivative shares its outer tape, and the nodes
    before its own leaves belong to the outer computation (constants for the inner one).
    """
    if tape.nan_check:  # BYTEGRAD_DEBUG_NANS: each reverse step checked (runtime/nancheck.py)
        return tape.checked_sweep(seeds, stop)
    nodes = tape.nodes
    values = tape.values
    cts: list[Any] = [None] * len(nodes)
    if not seeds:
        return cts
    for idx, seed in seeds.items():
        cts[idx] = seed if cts[idx] is None else accumulate(cts[idx], seed)
    thunk = _FunctionType
    no_tangent, zero = NO_TANGENT, ZERO
    release = tape.lean
    if release:
        _slim(tape)
    for i in range(max(seeds), stop, -1):
        ct = cts[i]
        if ct is None:
            continue
        node = nodes[i]
        if node is None:
            continue
        cts[i] = None
        try:
            bars = node[0](ct, node, values[i])
        except DifferentiationError:
            raise
        except Exception as exc:
            site = node[2]
            raise PullbackError(
                f"the reverse pass of this operation failed: {type(exc).__name__}: {exc}",
                site.loc() if site is not None else None,
                "if this operation uses a custom rule, check its pullback with "
                "bytegrad.rules.testing.check_rule.") from exc
        if release:
            nodes[i] = values[i] = None
        p = node[1]
        if p.__class__ is int:  # one parent, one cotangent (unary nodes)
            bar = bars
            if bar is None or bar is no_tangent or bar is zero:
                continue
            if bar.__class__ is thunk:
                bar = bar()
            old = cts[p]
            cts[p] = bar if old is None else accumulate(old, bar)
            continue
        k = 0
        for p in node[1]:
            bar = bars[k]
            k += 1
            if p is None or bar is None:
                continue
            if p.__class__ is int:
                if bar.__class__ is thunk:  # computed only because p needs it
                    bar = bar()
                    if bar is None:
                        continue
                if bar is no_tangent or bar is zero:
                    continue
                old = cts[p]
                cts[p] = bar if old is None else accumulate(old, bar)
            else:
                _route(cts, p, bar, node)
    return cts


#: values smaller than this (elements) are not worth slimming
SLIM_MIN_SIZE = 4096


def _slim(tape: Tape) -> None:
    """Before the one sweep of a lean tape: let each large record drop what its reverse step reads
    only the shape of (its output, arguments its partials do not read), so that those arrays are
    freed now rather than when the sweep reaches them (the `slim` protocol of runtime/backward.py)."""
    nodes = tape.nodes
    values = tape.values
    for i, v in enumerate(values):
        if v.__class__ is not _ndarray or v.size < SLIM_MIN_SIZE:
            continue
        node = nodes[i]
        if node is None:
            continue
        slim = getattr(node[0], "slim", None)
        if slim is not None:
            nodes[i], values[i] = slim(node, v)


def _route(cts: list[Any], p: Any, bar: Any, node: tuple) -> None:
    """Distribute a structured cotangent (for a list/tuple/dict argument) to its tracked leaves."""
    if type(bar) is _FunctionType:  # a thunk: the rule computes this argument's cotangent on demand
        bar = bar()
    if isinstance(bar, (NoTangent, Zero)) or bar is None:
        return
    if type(p) is dict:
        for k, sub in p.items():
            _route(cts, sub, bar[k], node)
        return
    if type(p) in (tuple, list):
        if len(bar) != len(p):
            site = node[2]
            raise PullbackError(
                f"a pullback returned a cotangent with {len(bar)} entries for an argument with {len(p)}.",
                site.loc() if site is not None else None)
        for sub, b in zip(p, bar):
            if sub is None or b is None:
                continue
            if type(b) is _FunctionType:
                b = b()
            _route(cts, sub, b, node)
        return
    if bar is NO_TANGENT or bar is ZERO:
        return
    old = cts[p]
    cts[p] = bar if old is None else accumulate(old, bar)


def expand(ct: Any, like: Any) -> Any:
    """A cotangent as a full value of `like`'s shape (uniform scalars become arrays)."""
    return materialize(ct, like)


def describe(fn: Any) -> str:
    return qualname(fn)
