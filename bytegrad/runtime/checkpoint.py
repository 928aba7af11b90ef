"""Checkpointing: `bytegrad.checkpoint(fn)`, whose intermediates the reverse pass recomputes.

A call of a checkpointed function on a tape runs `fn` recorded as usual, then collapses what it
recorded (the segment) into one record: its parents are the values from outside the segment
that the segment's records read (arguments, but also closures, globals and attributes: whatever
the rewritten code found tracked), its outputs are the tracked leaves of the returned tree. Its
reverse step runs `fn` again on a fresh tape on which those outside values are the leaves, and
sweeps it; its forward step (jvp) pushes tangents through such a rerun. So the tape keeps the
inputs and outputs of each call and nothing in between.

Writes into arrays `fn` made (allocate-then-fill, in-place operators) collapse with it: their
bookkeeping (owners, stale marks, the index of saved arrays) is dropped with the segment. What is
recorded as usual instead (correct, no memory saved): a call inside a nested derivative (grad of
grad, hvp; the rerun would have to be recorded too), on a compiled program's capture tape, and a
call whose `fn` writes into an array written before the call (with a `PerformanceWarning`).
`fn` must be deterministic and return what it computes: a value it computed and left elsewhere
(a global list, an attribute, an outside array it wrote into) is an error, found by reference
counts once the segment's records are gone.

Rewritten code hands a call of a `Checkpointed` over to its `__bytegrad_call__` (runtime/dispatch.py
asks the callable's type for one), so the dispatcher needs no import of, or registration from, this
module, which sits above it.
"""
from __future__ import annotations

import functools
import sys
import types
import warnings
from typing import Any, Callable, Optional

import numpy as np

from bytegrad.errors import DifferentiationError, SourceLoc, library_file, qualname
from bytegrad.rules._shape import is_stand_in
from bytegrad.rules.registry import ZERO
from bytegrad.runtime import forward, pytree, zerosafe
from bytegrad.runtime.backward import TUPLE_ITEM
from bytegrad.runtime.dispatch import dispatch
from bytegrad.runtime.records import Kind, Site, TupleOut
from bytegrad.runtime.tangents import PerformanceWarning
from bytegrad.runtime.tape import Tape, saved_arrays, sweep, tls
from bytegrad.runtime.writes import WRITE_KINDS

__all__ = ["checkpoint", "Checkpointed"]

_ndarray = np.ndarray
_getrefcount = sys.getrefcount


class Checkpointed:
    """What `checkpoint(fn)` returns: call it as `fn`; on a tape, its intermediates are recomputed."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        """A checkpointed method: bound like the function it wraps."""
        if obj is None:
            return self
        return Checkpointed(types.MethodType(self.fn, obj))

    def __reduce__(self) -> Any:
        """By reference when the module holds this object under its name (a decorated function)."""
        module = sys.modules.get(getattr(self, "__module__", None) or "")
        name = getattr(self, "__qualname__", "")
        found: Any = module
        for part in name.split("."):
            found = getattr(found, part, None)
        if found is self:
            return name
        return Checkpointed, (self.fn,)

    def __repr__(self) -> str:
        return f"<bytegrad.checkpoint of {qualname(self.fn)}>"

    def __bytegrad_call__(self, tape: Tape, site: Site, args: tuple, kwargs: Optional[dict]) -> Any:
        """This call from rewritten code (dispatch hands it over): see `call`."""
        return call(tape, site, self, args, kwargs)


def checkpoint(fn: Callable[..., Any]) -> Checkpointed:
    """Differentiate `fn` without keeping its intermediates: the reverse pass recomputes them.

    Use it as a decorator on a helper or a loop body. When a gradient is taken, each call keeps
    its inputs and outputs on the tape and nothing in between; the reverse pass runs `fn` again
    to get them back. Memory falls from all the intermediates to those of one call at a time, for
    about one more forward pass. Gradients are the same as without it. Outside a gradient it just
    calls `fn`.

    Parameters
    ----------
    fn : callable
        A function whose result depends only on its arguments and on values that do not change
        until the gradient is computed (closures, globals and attributes are followed, arguments
        may be arrays, floats, containers of them, ints and flags). It must be deterministic (the
        rerun must compute the same thing) and return what it computes: a value it stores
        elsewhere (an outer list, an attribute, an outside array) is refused with an error.
        Writing into arrays it made itself is fine.

    Returns
    -------
    Checkpointed
        A callable with `fn`'s name and docstring; `.fn` is `fn`.

    Notes
    -----
    Recorded as usual instead (same gradients, no memory saved): calls inside a nested
    derivative (grad of grad, `hvp`, `hessian`), calls in the capture of a compiled program, and
    calls whose `fn` writes into an array written before the call (with a `PerformanceWarning`).
    Forward mode
    (`jvp`, `jacobian(mode="fwd")`) reruns `fn` to push tangents through.

    Examples
    --------
    >>> import numpy as np
    >>> import bytegrad
    >>> @bytegrad.checkpoint
    ... def step(x, w):
    ...     return x + 0.1 * np.sin(x) * w
    >>> def loss(w, x):
    ...     for _ in range(100):
    ...         x = step(x, w)
    ...     return np.sum(x ** 2)
    >>> g = bytegrad.grad(loss)(np.ones(3), np.linspace(0.0, 1.0, 3))
    >>> g.shape
    (3,)
    """
    if isinstance(fn, Checkpointed):
        return fn
    if not callable(fn):
        raise TypeError(f"checkpoint needs a callable, got {type(fn).__name__}")
    return Checkpointed(fn)


checkpoint.__module__ = "bytegrad"  # its public name, in error messages


# ---- on a tape ------------------------------------------------------------------------------------


def call(tape: Tape, site: Site, cp: Checkpointed, args: tuple, kwargs: Optional[dict]) -> Any:
    """`cp(*args, **kwargs)` from rewritten code: recorded, then collapsed into one record."""
    fn = cp.fn
    if tape.capturing:
        tape.refuse("calls a checkpointed function (a compiled program keeps every value)", site)
        return dispatch(tape, site, fn, args, kwargs)
    if getattr(tls, "nesting", 0):  # a nested derivative differentiates its own sweep: see module doc
        return dispatch(tape, site, fn, args, kwargs)
    i0 = len(tape.nodes)
    before = (set(tape.stale), set(tape.owners)) if tape.stale or tape.owners else ((), ())
    out = dispatch(tape, site, fn, args, kwargs)
    if len(tape.nodes) == i0:
        return out
    if any(hasattr(type(a), "__next__") for a in (*args, *(kwargs or {}).values())):
        why: Optional[str] = "takes an iterator, which a rerun could not read again"
    else:
        why = _why_kept(tape, i0, before[0])
    if why is None:
        why = _collapse(tape, site, fn, args, kwargs, out, i0, before[1])
    if why is not None:
        warnings.warn_explicit(
            f"bytegrad.checkpoint: the call of {qualname(fn)} is kept on the tape (no memory saved): it "
            f"{why}. Checkpoint a function that computes its own arrays from its inputs instead.",
            PerformanceWarning, site.filename, site.lineno or 0, registry=_WARNED)
    return out


_WARNED: dict[Any, Any] = {}  # the warnings registry of these warnings: once per call site


def _why_kept(tape: Tape, i0: int, stale_before: Any) -> Optional[str]:
    """Why the segment from `i0` cannot be collapsed, or None. Writes into arrays the function
    made are collapsed with it; a write that reaches a value from before the call is not."""
    for k in tape.stale:
        if k < i0 and k not in stale_before:
            return "overwrites in place a value computed before the call"
    nodes = tape.nodes
    for k in range(i0, len(nodes)):
        node = nodes[k]
        # a write (or a view of written memory) whose target is from before the call: kept as recorded
        if node is not None and node[0] in WRITE_KINDS:
            target = node[1][0]  # the written memory's previous version (the value written is node[1][1])
            if target is not None and target < i0:
                return "writes in place into (or reads a view of) an array written before the call"
    return None


def _externals(parents: Any, i0: int, found: dict[int, None]) -> None:
    """Collect the node indices below `i0` in a record's parents (ints, None, nested containers)."""
    if parents is None:
        return
    if parents.__class__ is int:
        if parents < i0:
            found[parents] = None
        return
    for p in (parents.values() if type(parents) is dict else parents):
        _externals(p, i0, found)


class _Segment:
    """What a collapsed segment's record keeps: how to rerun it and match the rerun to the tape."""

    __slots__ = ("fn", "args", "kwargs", "inputs", "positions", "n_leaves", "tape_cls", "site", "watched",
                 "identities")

    def __init__(self, fn: Any, args: tuple, kwargs: Optional[dict], inputs: list, positions: tuple,
                 n_leaves: int, tape_cls: type, site: Site, watched: tuple) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.inputs = inputs          # the outside values the segment read, one per parent
        self.positions = positions    # for each output: its place among the output tree's tracked leaves
        self.n_leaves = n_leaves      # how many tracked leaves the output tree has
        self.tape_cls = tape_cls
        self.site = site
        # the untracked outside arrays the segment's records read (constants, buffers): with the
        # inputs, what the tape copies for this record before an in-place write overwrites it
        self.watched = watched
        self.identities = tuple(map(id, inputs)) + tuple(map(id, watched))  # (before any copy replaces one)


def _collapse(tape: Tape, site: Site, fn: Any, args: tuple, kwargs: Optional[dict], out: Any,
              i0: int, owners_before: Any) -> Optional[str]:
    """Replace the records from `i0` on by one (and one per output beyond the first); or say why
    not, having changed nothing."""
    nodes, values, ids = tape.nodes, tape.values, tape.ids
    found: dict[int, None] = {}
    for k in range(i0, len(nodes)):
        if nodes[k] is not None:  # (no local name for the record: it would keep its values alive)
            _externals(nodes[k][1], i0, found)
    parents = tuple(found)
    inputs = [values[e] for e in parents]
    outer = {id(v): e for v, e in zip(inputs, parents)}
    if len(outer) != len(parents):  # (the rerun finds its inputs by identity)
        return "reads two versions of an array that was written in place"
    for k in range(i0, len(values)):  # an outside value handed back as it is (np.asarray(x)): still itself
        e = outer.get(id(values[k]))
        if e is not None:
            ids[id(values[k])] = e
    leaves = pytree.output_nodes(out, ids)
    positions, produced, seen = [], [], set()
    for pos, (leaf, idx) in enumerate(leaves):
        if idx >= i0 and id(leaf) not in seen:
            seen.add(id(leaf))
            positions.append(pos)
            produced.append(leaf)
    segment_values = values[i0:]
    sites = [node[2] if node is not None else None for node in nodes[i0:]]
    read = _read_from_outside(nodes, values, ids, i0)
    del values[i0:], nodes[i0:]
    tracked = set()  # (not the stand-ins a released value leaves behind: shared, and untracked)
    for v in segment_values:
        j = ids.get(id(v))
        if j is not None and j >= i0:
            del ids[id(v)]
            tracked.add(id(v))
    _forget_writes(tape, i0, owners_before)
    tape.guarded = min(tape.guarded, i0)
    _check_kept(segment_values, sites, out, fn, tracked - {id(leaf) for leaf, _ in leaves})
    if not produced:
        return None
    watched = _held_outside(read, segment_values, out)
    record = _Segment(fn, args, kwargs, inputs, tuple(positions), len(leaves), type(tape), site, watched)
    node = (CHECKPOINT, parents, site, record)
    if len(produced) == 1:
        tape.push(node, produced[0])
        return None
    holder = len(values)
    tape.push(node, TupleOut(tuple(produced)))
    n = len(produced)
    for k, leaf in enumerate(produced):
        tape.push((TUPLE_ITEM, (holder,), site, k, n), leaf)
    return None


def _read_from_outside(nodes: list, values: list, ids: dict[int, int], i0: int) -> dict[int, np.ndarray]:
    """The memory owners of the arrays the records from `i0` on read in their reverse steps, except
    values they produced: outside constants and buffers, and arrays the function made untracked."""
    read: dict[int, np.ndarray] = {}
    for k in range(i0, len(nodes)):
        if nodes[k] is None:
            continue
        for arr in saved_arrays(nodes[k]):
            owner = arr.base if type(arr.base) is _ndarray else arr
            # (tracked outside values are the record's inputs; a stand-in holds no data)
            if id(owner) not in read and id(owner) not in ids and not is_stand_in(arr):
                read[id(owner)] = owner
    return read


def _held_outside(read: dict[int, np.ndarray], segment_values: list, out: Any) -> tuple:
    """Of the arrays `read` (the segment's records are gone), those something outside still holds:
    the tape must copy them for the rerun before an in-place write. (The function's own untracked
    arrays, held by nothing else, are let go.)"""
    bases: dict[int, int] = {}
    _count_holders(out, bases, set())
    for v in segment_values:
        if type(v) is _ndarray and type(v.base) is _ndarray:
            bases[id(v.base)] = bases.get(id(v.base), 0) + 1
    held = []
    for key in list(read):
        owner = read.pop(key)
        # references: `owner` here, getrefcount's argument, and the views and containers counted
        if _getrefcount(owner) - 2 > bases.get(key, 0):
            held.append(owner)
        del owner
    return tuple(held)


def _forget_writes(tape: Tape, i0: int, owners_before: Any) -> None:
    """Drop the write bookkeeping of the segment's records (arrays the function made and wrote):
    the owners it added, its stale marks and its entries in the index of saved arrays."""
    owners = tape.owners
    if len(owners) != len(owners_before):
        for key in [key for key in owners if key not in owners_before]:
            del owners[key]
    stale = tape.stale
    if stale:
        for k in [k for k in stale if k >= i0]:
            del stale[k]
    if tape._indexed > i0:
        # the segment's entries are the last of each list they are in (only its own arrays were
        # written, so no entry from before it was edited): lists ending in one are filtered
        index = tape._index
        for key in [key for key, entries in index.items() if entries and entries[-1][1] >= i0]:
            kept = [e for e in index[key] if e[1] < i0]
            if kept:
                index[key] = kept
            else:
                del index[key]
        tape._indexed = i0


def _check_kept(segment_values: list, sites: list, out: Any, fn: Any, intermediates: set[int]) -> None:
    """Refuse an intermediate of the segment (`intermediates`: ids of values it tracked that are not
    outputs) that something besides the output still holds: once the segment is collapsed it is no
    longer tracked, so using it later would lose its derivative."""
    expected: dict[int, int] = {}
    _count_holders(out, expected, set())
    for v in segment_values:
        t = type(v)
        if t is TupleOut:
            _count_holders(v.value, expected, set())
        elif t is _ndarray and v.base is not None:
            expected[id(v.base)] = expected.get(id(v.base), 0) + 1
        expected[id(v)] = expected.get(id(v), 0) + 1
    for k in range(len(segment_values)):  # (not enumerate: its reused pair would hold a reference)
        v = segment_values[k]
        if type(v) is not _ndarray or id(v) not in intermediates:
            continue
        # references: the list, `v` here, getrefcount's argument, and the holders counted above
        if _getrefcount(v) - 2 > expected.get(id(v), 0):
            site = sites[k]
            raise DifferentiationError(
                f"the checkpointed function {qualname(fn)} computed this value and left it somewhere besides "
                "its return value (an outer list, an attribute, a global, an array from outside written in "
                "place): its derivative would be lost, since checkpointing keeps only what the function returns.",
                site.loc() if site is not None else None,
                "return the value from the function (and take it from the result), or do not checkpoint it.")


def _count_holders(value: Any, expected: dict[int, int], seen: set[int]) -> None:
    """Count the references a tree's containers (and array bases) hold to each object, once per container."""
    t = type(value)
    if t is _ndarray:
        if value.base is not None and id(value) not in seen:
            seen.add(id(value))
            expected[id(value.base)] = expected.get(id(value.base), 0) + 1
        return
    if t is tuple or t is list or t is dict or isinstance(value, (tuple, list, dict)):
        if id(value) in seen:
            return
        seen.add(id(value))
        for v in (value.values() if isinstance(value, dict) else value):
            expected[id(v)] = expected.get(id(v), 0) + 1
            _count_holders(v, expected, seen)


# ---- the rerun ------------------------------------------------------------------------------------


def _rerun(record: _Segment) -> tuple[Tape, list[int], list[int]]:
    """Run the segment again on a fresh tape whose leaves are its outside inputs: (tape, the leaves'
    indices, the outputs' indices)."""
    now = tuple(map(id, record.inputs)) + tuple(map(id, record.watched))
    if now != record.identities and not _copies_reach_rerun(record, now):
        raise DifferentiationError(
            f"an array that the checkpointed function {qualname(record.fn)} read (not as an argument) was "
            "overwritten in place after this call, before the reverse pass: running the function again "
            "would read the new values.", record.site.loc(),
            "pass the array as an argument (the tape then keeps a copy of it), copy it before overwriting "
            "it, or do not checkpoint this call.")
    tape = record.tape_cls()
    tape.lean = True
    leaf_idx = [tape.leaf(v) for v in record.inputs]
    old = getattr(tls, "tape", None)
    tls.tape = tape
    try:
        out = dispatch(tape, record.site, record.fn, record.args, record.kwargs)
    except DifferentiationError:
        raise
    except Exception as exc:  # it ran without error the first time: name the line that raised now
        raise DifferentiationError(
            f"the checkpointed function {qualname(record.fn)} raised {type(exc).__name__}: {exc} when the "
            "reverse pass ran it again (the first run did not).", _raising_line(exc) or record.site.loc(),
            "make the function deterministic (no state it changes between calls), or do not checkpoint "
            "it.") from exc
    finally:
        tls.tape = old
    leaves = pytree.output_nodes(out, tape.ids)
    if len(leaves) != record.n_leaves:
        raise _nondeterministic(record)
    return tape, leaf_idx, [leaves[p][1] for p in record.positions]


def _copies_reach_rerun(record: _Segment, now: tuple) -> bool:
    """Whether every array the tape replaced by a copy (it was overwritten after the call) was an
    argument of the call: the copy replaced it in the saved arguments too, so the rerun reads it."""
    top = {id(a) for a in (*record.args, *(record.kwargs or {}).values()) if type(a) is _ndarray}
    return all(a == b or b in top for a, b in zip(record.identities, now))


def _raising_line(exc: BaseException) -> Optional[SourceLoc]:
    """The innermost line of the user's code in `exc`'s traceback (not NumPy's, Python's or bytegrad's)."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if not library_file(code.co_filename):
            found = SourceLoc(code.co_filename, tb.tb_lineno, code.co_name)
        tb = tb.tb_next
    return found


def _nondeterministic(record: _Segment) -> DifferentiationError:
    return DifferentiationError(
        f"the checkpointed function {qualname(record.fn)} returned differently shaped results when the "
        "reverse pass ran it again: checkpointing needs a function that computes the same thing each time.",
        record.site.loc(), "make the function deterministic (no random numbers, no state it changes), or do "
        "not checkpoint it.")


def _bw_checkpoint(ct: Any, node: tuple, out: Any) -> tuple[Any, ...]:
    """The reverse step of a collapsed segment: rerun it and sweep the rerun."""
    return _pull(ct, node, out, False)


def _bw_checkpoint_safe(ct: Any, node: tuple, out: Any) -> tuple[Any, ...]:
    """Its zero-safe twin (a mask was recorded after it: runtime/zerosafe.py), for the rerun's records too."""
    return _pull(ct, node, out, True)


def _pull(ct: Any, node: tuple, out: Any, safe: bool) -> tuple[Any, ...]:
    record = node[3]
    tape, leaf_idx, out_idx = _rerun(record)
    if safe:
        zerosafe.guard(tape)
    seeds: dict[int, Any] = {}
    for j, c in zip(out_idx, ct if type(out) is TupleOut else (ct,)):
        if c is None or c is ZERO:
            continue
        seeds[j] = c if j not in seeds else seeds[j] + c
    if not seeds:
        return (None,) * len(leaf_idx)
    bars = sweep(tape, seeds)
    return tuple(bars[i] for i in leaf_idx)


def _saved_checkpoint(node: tuple) -> list[np.ndarray]:
    """The arrays the rerun reads: the outside inputs and the watched arrays (copied by the tape before
    an in-place write overwrites them; `_rerun` tells whether the copy reaches the rerun)."""
    record = node[3]
    return [v for v in record.inputs if type(v) is _ndarray] + list(record.watched)


def pf_checkpoint(node: tuple, out: Any, parent_dots: Any) -> Any:
    """Forward mode through a collapsed segment: push the inputs' tangents through a rerun."""
    record = node[3]
    tape, leaf_idx, out_idx = _rerun(record)
    seeds = {i: d for i, d in zip(leaf_idx, parent_dots) if d is not None}
    dots = forward.push_forward(tape, seeds)
    result = tuple(forward.fit_tangent(dots[j], tape.values[j]) for j in out_idx)
    return result if type(out) is TupleOut else result[0]


#: `(CHECKPOINT, parents, site, segment)`: a collapsed segment, rerun in its reverse step
CHECKPOINT = Kind("checkpoint", ("segment",), _bw_checkpoint, pushforward=pf_checkpoint, saved=_saved_checkpoint)
CHECKPOINT.safe = CHECKPOINT.twin("zero-safe checkpoint", _bw_checkpoint_safe)
