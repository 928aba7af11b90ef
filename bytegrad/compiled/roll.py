"""An IR pass: a repeated step of a program (a loop's body, run `count` times) found as one region.

A capture records a Python loop unrolled: an RK4 loop of 40 steps is 40 copies of the same 29
operations. `find` looks, in the live records of an IR (compiled/passes.py `dead_code`), for
`count` consecutive repetitions of a `period`-record body where each repetition is exactly the
previous one again:

- each record has the same kind, function, rule, keywords, output type, and constants (Python
  numbers by their bits, an array read as a constant by its identity) as the record `period`
  places before it;
- each operand is a value of the same repetition at the same relative position (`local`), the
  value at a given position of the previous repetition (`carried`: the loop's state), or a value
  defined before the region (`invariant`: the same tape index in every repetition). The first
  repetition reads, in place of each carried value, one value defined before the region (its
  `init`, the same wherever that slot is read).

Anything else (a value two repetitions back, a made array or a decision inside the region, a
different constant or shape) ends the region where it is, and a region of fewer than two
repetitions is none. What follows the region may read only the last repetition's values.

The Numba back end (compiled/numba_roll.py) writes the body once, inside a loop, so its size cap
applies to the rolled program (`rolled_size`); the NumPy back end keeps the unrolled records.
`dump` lists a region (tests/test_compiled_roll.py).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from bytegrad.compiled.ir import IR

__all__ = ["ROLL_FROM", "Rolled", "dump", "find", "of", "rolled_size"]

_ndarray = np.ndarray
#: a program of more records than this is rolled where it can be: the Numba back end's cap (numba_kernel.MAX_RECORDS;
#: fewer compile fast enough unrolled)
ROLL_FROM = 600
#: the candidate periods tried (the most frequent distances between two records of the same key)
_CANDIDATES = 8
_MULTIPLES = 4


@dataclass(frozen=True)
class Rolled:
    """A repeated region: `reps[r][q]` the tape index of repetition r's record at position q."""

    reps: tuple[tuple[int, ...], ...]
    #: (position q read as the previous repetition's value, the value the first repetition reads there)
    carried: tuple[tuple[int, int], ...]
    #: the tape indices defined before the region that the body reads
    invariants: tuple[int, ...]

    @property
    def period(self) -> int:
        return len(self.reps[0])

    @property
    def count(self) -> int:
        return len(self.reps)

    @property
    def body(self) -> tuple[int, ...]:
        """The last repetition's records: the body the lowering writes (its values are what follows reads)."""
        return self.reps[-1]

    @property
    def saved(self) -> int:
        return (self.count - 1) * self.period

    def previous(self, q: int) -> int:
        """The tape index the body's records name for the carried value of position q."""
        return self.reps[-2][q]


def of(b: Any) -> Optional[Rolled]:
    """The region the Numba back end rolls in the live IR of the builder `b` (lower_numpy.Builder, after
    `read`), found once per builder; None in a program of ROLL_FROM records or fewer."""
    if "rolled" not in vars(b):
        b.rolled = find(b.ir) if len(b.ir.ops) > ROLL_FROM else None
    return b.rolled


def rolled_size(ir: IR) -> int:
    """How many records the IR's program has once its repeated region (if any) is rolled."""
    n = len(ir.ops)
    found = find(ir)
    return n - found.saved if found is not None else n


def find(ir: IR) -> Optional[Rolled]:
    """The repeated region of `ir` that saves the most records, or None (see the module)."""
    records = [i for i in ir.order if i in ir.ops]
    if len(records) < 4 or any(ir.ops[i].nested or ir.ops[i].kind in ("write", "item") for i in records):
        return None
    interned: dict = {}
    keys = [interned.setdefault(_key(ir, ir.ops[i]), len(interned)) for i in records]  # (small ints compare fast)
    best: Optional[tuple[int, int, int]] = None  # (start position, period, count)
    for period in _periods(keys):
        for s0, length in _runs(keys, period):
            if best is not None and (length // period - 1) * period <= (best[2] - 1) * best[1]:
                continue  # (it cannot save more)
            found = _best_phase(ir, records, keys, s0, length, period)
            if found is not None and (best is None or (found[1] - 1) * period > (best[2] - 1) * best[1]):
                best = (found[0], period, found[1])
    if best is None:
        return None
    s, period, count = best
    return _region(ir, records, s, period, count)


def _periods(keys: list) -> list[int]:
    """The most frequent distances from a record to the next of the same key, and their multiples up to
    _MULTIPLES times (a step whose records repeat within it, or that reads two steps back, is one of
    those: a leapfrog's two steps)."""
    last: dict = {}
    distances: Counter = Counter()
    for n, key in enumerate(keys):
        if key in last:
            distances[n - last[key]] += 1
        last[key] = n
    found = [d * m for d, _ in distances.most_common(_CANDIDATES) for m in range(1, _MULTIPLES + 1)]
    return [d for d in dict.fromkeys(found) if 2 * d <= len(keys)]


def _runs(keys: list, period: int) -> list[tuple[int, int]]:
    """(start, length) of each run of positions n where keys[n] == keys[n + period], at least a period long."""
    runs = []
    n, end = 0, len(keys) - period
    while n < end:
        if keys[n] != keys[n + period]:
            n += 1
            continue
        m = n
        while m < end and keys[m] == keys[m + period]:
            m += 1
        if m - n >= period:
            runs.append((n, m - n + period))
        n = m
    return runs


def _best_phase(ir: IR, records: list[int], keys: list, s0: int, length: int, period: int) -> Optional[tuple[int, int]]:
    """(start position, count) of the longest region inside the run (s0, length), over its phases."""
    best: Optional[tuple[int, int]] = None
    for o in range(min(period, length - 2 * period + 1)):
        most = (length - o) // period
        if best is not None and most <= best[1]:
            break
        count = 1
        while count < most and _matches(ir, records, keys, s0 + o, period, count):
            count += 1
        if count >= 2 and (best is None or count > best[1]):
            best = (s0 + o, count)
    return best


def _matches(ir: IR, records: list[int], keys: list, s: int, period: int, r: int) -> bool:
    """Whether repetition r (r >= 1) of the region starting at position s repeats repetition r - 1."""
    start = records[s]
    inits: dict[int, int] = {}
    for q in range(period):
        n = s + r * period + q
        rec, prev = ir.ops[records[n]], ir.ops[records[n - period]]
        if keys[n] != keys[n - period] or len(rec.parents) != len(prev.parents):
            return False
        for p, pp in zip(rec.parents, prev.parents):
            if (p is None) != (pp is None):
                return False
            if p is None:
                continue
            cls, pcls = _class(records, s, period, r, start, p), _class(records, s, period, r - 1, start, pp)
            if cls is None or pcls is None:
                return False
            if r == 1 and cls[0] == "carried":  # the first repetition reads its init there
                if pcls[0] != "before" or inits.setdefault(cls[1], pp) != pp:
                    return False
            elif r == 1 and cls[0] == "before":
                if pcls != cls:
                    return False
            elif cls != pcls:
                return False
    return True


def _class(records: list[int], s: int, period: int, r: int, start: int, p: int) -> Optional[tuple[str, int]]:
    """An operand p of repetition r: ("local", position), ("carried", position), ("before", tape index), or
    None (a value two repetitions back, or one defined inside the region that is not one of its records)."""
    if p < start:
        return ("before", p)
    for rep, kind in ((r, "local"), (r - 1, "carried")):
        if rep < 0:
            continue
        lo = s + rep * period
        if records[lo] <= p <= records[lo + period - 1]:
            try:
                return (kind, records.index(p, lo, lo + period) - lo)
            except ValueError:
                return None
    return None


def _region(ir: IR, records: list[int], s: int, period: int, count: int) -> Optional[Rolled]:
    """The region (s, period, count) cut to the repetitions whose values what follows may read (the last
    one only), with its carried values and invariants; None when fewer than two repetitions are left."""
    while count >= 2:
        reps = tuple(tuple(records[s + r * period:s + (r + 1) * period]) for r in range(count))
        first, last = reps[0][0], reps[-1][-1]
        if any(first < d.at <= last for d in ir.decisions) or \
                any(first < i < last and i not in ir.ops for i in ir.order):
            return None  # (a decision, made array or input inside the region)
        inside = {i: r for r, rep in enumerate(reps) for i in rep}
        reads = [p for i in records if i > last for p in ir.ops[i].inputs()] + list(ir.outputs)
        reads += [p for rd in ir.decision_reads for p in rd]
        early = [inside[p] for p in reads if p in inside and inside[p] < count - 1]
        if not early:
            return _parts(ir, reps)
        count = min(early) + 1
    return None


def _parts(ir: IR, reps: tuple[tuple[int, ...], ...]) -> Rolled:
    first = reps[0]
    start = first[0]
    at = {i: q for q, i in enumerate(first)}
    carried: dict[int, int] = {}
    invariants: set[int] = set()
    second = {i: q for q, i in enumerate(reps[1])}
    for q, i in enumerate(reps[1]):
        for p, p0 in zip(ir.ops[i].parents, ir.ops[first[q]].parents):
            if p is None or p in second:
                continue
            if p in at:
                carried[at[p]] = p0
            else:
                invariants.add(p)
    assert all(p < start for p in invariants)
    return Rolled(reps, tuple(sorted(carried.items())), tuple(sorted(invariants)))


def _key(ir: IR, rec: Any) -> tuple:
    """What two repetitions of a record must have in common, operands' positions apart."""
    args = tuple(ir.types[p] if p is not None else _const(a) for a, p in zip(rec.args, rec.parents))
    args += tuple(_const(a) for a in rec.args[len(rec.parents):])
    kwargs = tuple((k, _const(v)) for k, v in (rec.kwargs or {}).items())
    return (rec.kind, id(rec.fn), id(rec.rule), ir.types[rec.idx], args, kwargs)


def _const(a: Any) -> Any:
    """A constant's key: numbers by type and bits (-0.0 and 0.0, NaNs differ), containers item by item,
    arrays and other objects by identity (the same object in each repetition)."""
    t = type(a)
    if t is float:
        return (t, a.hex() if math.isfinite(a) else repr(a), math.copysign(1.0, a))
    if isinstance(a, np.generic):
        return (t, a.tobytes())
    if t in (int, bool, str, type(None)) or a is Ellipsis:
        return (t, a)
    if t in (tuple, list):
        return (t, tuple(_const(v) for v in a))
    if t is slice:
        return (t, _const(a.start), _const(a.stop), _const(a.step))
    return ("object", id(a))


def dump(found: Optional[Rolled]) -> str:
    """`rolled: 40 repetitions of 29 records, %3..%1133; body %1105..%1133` then, a line each,
    `carried: %1133 (first %2)` (the body reads the previous repetition's value of the record at
    that place of the body; the first repetition reads %2 there) and `invariant: %0 %1`."""
    if found is None:
        return "rolled:\n  none"
    body = found.body
    lines = ["rolled:", f"  {found.count} repetitions of {found.period} records, %{found.reps[0][0]}..%{body[-1]}; "
             f"body %{body[0]}..%{body[-1]}"]
    lines += [f"  carried: %{body[q]} (first %{init})" for q, init in found.carried]
    lines.append("  invariant: " + (" ".join(f"%{p}" for p in found.invariants) or "none"))
    return "\n".join(lines)
