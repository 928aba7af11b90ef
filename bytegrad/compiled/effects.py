"""Effects a capture run had besides its result, found by comparing state before and after it.

A program replays the operations a capture recorded on the differentiated values and nothing else,
so a signature whose capture run wrote anywhere the caller can see stays on the general path:
an item appended to a list argument, a key set in a dict, an in-place write into an array argument
that is not differentiated (`counts += 1`, `np.add.at(counts, ...)`, `idx.sort()`), an attribute
set on an object argument, a draw from an RNG (NumPy's global one, Python's `random`, a
`Generator` or `RandomState` passed in). The capture run itself is the call, so its effects
happened once, as on the general path; the reason goes to `stats()["compiled"]`.

What is compared is what a replay would fail to redo: the containers reachable from the
arguments (their type, length, keys in order and the identity of every item), the bytes of every
array argument and of the arrays read from globals, the `__dict__` of plain objects, and the
state of the RNGs. An effect that leaves all of that as it was (sorting an already sorted array)
is not seen here; the static check (compiled/eligibility.py) refuses the calls that could make
one on values the capture does not track.
"""
from __future__ import annotations

import random
import types
from typing import Any, Optional

import numpy as np

__all__ = ["ATOMS", "Snapshot"]

#: how deep the snapshot walks containers and objects, and how many of them it records at most
#: (past that it gives up and refuses, rather than miss a write)
MAX_DEPTH = 4
MAX_ITEMS = 20_000
#: array bytes kept at most (past that the signature stays on the general path)
MAX_BYTES = 64 << 20

#: values no write can change and that hold nothing a write can reach: the snapshot does not walk
#: them, and a capture's copy of one behaves as the value itself (compiled/capture.py)
ATOMS = frozenset({int, float, complex, bool, str, bytes, type(None), type(Ellipsis), slice, range})


class _TooBig(Exception):
    pass


class Snapshot:
    """The state a replay could not reproduce, read before a capture run; `changed()` after it
    says what the run wrote, or None."""

    __slots__ = ("_entries", "_rng", "_py_rng", "_bytes", "_count", "_seen", "_why")

    def __init__(self, args: tuple, names: tuple[str, ...] = (), arrays: tuple = ()) -> None:
        self._entries: list[tuple[str, Any, Any]] = []
        self._bytes = 0
        self._count = 0
        self._seen: set[int] = set()
        self._why: Optional[str] = None
        try:
            for k, a in enumerate(args):
                self._walk(names[k] if k < len(names) else f"argument {k}", a, MAX_DEPTH)
            for a in arrays:  # (and objects: a model at module level)
                self._walk("an array read from a global" if type(a) is np.ndarray else "an object read from a global",
                           a, 0 if type(a) is np.ndarray else MAX_DEPTH)
        except _TooBig as exc:
            self._why = str(exc)
        self._rng = _global_rng_state()
        self._py_rng = random.getstate()

    def _walk(self, label: str, value: Any, depth: int) -> None:
        t = type(value)
        if t in ATOMS or id(value) in self._seen:
            return
        self._seen.add(id(value))
        self._count += 1
        if self._count > MAX_ITEMS:
            raise _TooBig("its arguments hold too many objects for the capture to check what it writes")
        if t is np.ndarray or isinstance(value, np.ndarray):
            self._bytes += value.nbytes
            if self._bytes > MAX_BYTES:
                raise _TooBig("its arguments hold too many array bytes for the capture to check what it writes")
            self._entries.append((label, value, value.tobytes() if value.dtype.kind != "O" else _ids(value.tolist())))
            return
        if isinstance(value, np.random.Generator):
            self._entries.append((label, value, _state(value.bit_generator.state)))
            return
        if isinstance(value, np.random.RandomState):
            self._entries.append((label, value, _state(value.get_state(legacy=False))))
            return
        if isinstance(value, (list, tuple)):
            if t is not tuple:
                self._entries.append((label, value, (t, _ids(value))))
            if depth:
                for k, item in enumerate(value):
                    self._walk(f"{label}[{k}]", item, depth - 1)
            return
        if isinstance(value, dict):
            self._entries.append((label, value, (t, tuple(value), _ids(value.values()))))
            if depth:
                for k, item in value.items():
                    self._walk(f"{label}[{k!r}]", item, depth - 1)
            return
        if isinstance(value, (set, bytearray)):
            self._entries.append((label, value, (t, value.copy())))
            return
        attrs = getattr(value, "__dict__", None)
        # (a callable object of a class written in Python too: a model's `__call__` may write `self`)
        if type(attrs) is dict and (not callable(value) or type(type(value).__dict__.get("__call__")) is
                                    types.FunctionType) and not isinstance(value, type):
            self._entries.append((label, attrs, (dict, tuple(attrs), _ids(attrs.values()))))
            if depth:
                for k, item in attrs.items():
                    self._walk(f"{label}.{k}", item, depth - 1)

    def changed(self) -> Optional[str]:
        """What the run wrote that a program would not write again, as a reason for `stats()`; None
        when it wrote nothing of the kinds compared."""
        if self._why is not None:
            return self._why
        for label, obj, before in self._entries:
            if _fingerprint(obj) != before:
                return (f"it writes into {label} (a {type(obj).__name__}): a compiled program replays the "
                        "computation of the gradient, not writes into the caller's objects")
        if not _same_rng(self._rng, _global_rng_state()):
            return "it draws from NumPy's global random generator (a compiled program would not draw again)"
        if random.getstate() != self._py_rng:
            return "it draws from Python's random module (a compiled program would not draw again)"
        return None


def _fingerprint(obj: Any) -> Any:
    t = type(obj)
    if t is np.ndarray or isinstance(obj, np.ndarray):
        return obj.tobytes() if obj.dtype.kind != "O" else _ids(obj.tolist())
    if isinstance(obj, np.random.Generator):
        return _state(obj.bit_generator.state)
    if isinstance(obj, np.random.RandomState):
        return _state(obj.get_state(legacy=False))
    if isinstance(obj, list):
        return (t, _ids(obj))
    if isinstance(obj, dict):
        return (t, tuple(obj), _ids(obj.values()))
    return (t, obj.copy())


def _ids(items: Any) -> tuple[int, ...]:
    return tuple(map(id, items))


def _state(state: Any) -> Any:
    """An RNG state as a comparable value (its arrays as bytes)."""
    if isinstance(state, dict):
        return tuple((k, _state(v)) for k, v in state.items())
    if isinstance(state, np.ndarray):
        return state.tobytes()
    return state


def _global_rng_state() -> Any:
    return _state(np.random.get_state(legacy=False))


def _same_rng(a: Any, b: Any) -> bool:
    return a == b
