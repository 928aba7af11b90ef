"""A gradient function's compiled-tier record (`compiled.policy.Tiers`), made on its second gradient.

Importing bytegrad/compiled/ costs a fresh process ~1.5 ms, and under the default tier (`auto`) the
first gradient of a signature never uses it: no program can exist yet (none is made before the
policy module is imported), a stored one is loaded on the second call (`Tiers._load_due`) and a
capture waits for `AUTO_AFTER` general-path calls. So `Differentiated` (_differentiated.py) leaves its
`Tiers` unmade until a second gradient, or anything else that reads `_tiers` (stats, explain,
precompile, export), needs it; the first gradient is then counted as `Tiers.call` would have counted
it (`Tiers.note_general`), so the policy sees the same calls as with a record made up front.
A function differentiated once the policy module is loaded (another function made its record) gets
its record at once, as do pinned tiers (`numpy`, `numba`: the first call captures) and bound methods.
"""
from __future__ import annotations

import sys
from typing import Any, Optional

from bytegrad._config import config as _config

POLICY = "bytegrad.compiled.policy"
#: the types that stand for a `Differentiated` not made yet (bytegrad/_front.py's `DeferredDifferentiated`):
#: `resolved` gives the one they stand for
DEFERRED: set[type] = set()


def resolved(fn: Any) -> Any:
    """The `Differentiated` that `fn` stands for, when it is a deferred one; else `fn`."""
    return fn.differentiated if type(fn) in DEFERRED else fn


def compiled() -> Any:
    """bytegrad.compiled's policy module (it loads bytegrad/compiled/)."""
    from bytegrad.compiled import policy

    return policy


def keywords() -> Any:
    """bytegrad/compiled/keywords.py (calls with keyword-only arguments), loaded with the policy."""
    from bytegrad.compiled import keywords as module

    return module


class TiersSlot:
    """The `_tiers` attribute of a `Differentiated`: reading it makes a record left for later."""

    def __get__(self, d: Any, owner: Any = None) -> Any:
        if d is None:
            return self
        if d._tiers_due:
            make(d)
        return d._tiers_obj

    def __set__(self, d: Any, value: Any) -> None:
        d._tiers_obj, d._tiers_due = value, False


def init(d: Any, wrt_key: Any, tier: Optional[str], bound: bool) -> None:
    """Set `d._tiers` (None for a bound method or partial: `_inner` holds its record), or leave it due."""
    d._early = None
    if bound:
        d._tiers = None
        return
    d._tiers_key = (wrt_key, tier)
    if POLICY not in sys.modules and (tier if tier is not None else _config.tier) == "auto":
        d._tiers_obj, d._tiers_due = None, True  # (made by `first_or_made` on the second gradient)
        d._tiers_key = (wrt_key, "auto")  # (the tier at construction, as `tiers_for` would have read it)
        return
    make(d)


def make(d: Any) -> None:
    policy = compiled()
    wrt_key, tier = d._tiers_key
    tiers = policy.tiers_for(d._target, (policy.AUX, wrt_key) if d._has_aux else wrt_key, tier)
    early, d._early = d._early, None
    if early is not None and tiers is not None:
        tiers.note_general(*early)
    d._tiers = tiers


def first_or_made(d: Any, call_args: tuple) -> Any:
    """`d`'s record, made now; or None for the first gradient of a record left due (the caller runs the
    general path), which is noted for the record made later."""
    if d._early is None and POLICY not in sys.modules:
        fn = d._target
        d._early = (fn.__code__, fn.__defaults__, fn.__kwdefaults__, tuple(map(type, call_args)))
        return None
    return d._tiers


def served(d: Any, signature: tuple) -> None:
    """A `grad` function's first call ran the stored standalone program of `signature` (bytegrad/_front.py,
    bytegrad/_quick.py) before `d` was made: its record counts that as a compiled call (`Tiers.note_general`),
    and the signature's next call loads its stored programs."""
    fn = d._target
    early = (fn.__code__, fn.__defaults__, fn.__kwdefaults__, signature, True)
    if d._tiers_due:
        d._early = early
    elif d._tiers_obj is not None:
        d._tiers_obj.note_general(*early)
