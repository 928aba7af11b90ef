"""A compiled gradient program: the artefact a back end generates (compiled/build.py,
compiled/pullback.py) or the store loads (compiled/store.py), immutable once built. What the tier
policy counts of a program (calls, time, its Numba twin's verdict, the signature it serves) is the
policy's (compiled/policy.py `Run`), never the program's.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from bytegrad.compiled.guards import Guard

__all__ = ["Program"]


class Program:
    """A compiled gradient program: `fn(args)` is `(value, gradient)` or `MISS`. An artefact: what a
    back end generated, frozen once built (`replace` makes a changed copy); what the policy counts
    of it (calls, time, its Numba twin's verdict, the signature it serves) is in
    compiled/policy.py's record of it (`Tiers.runs`)."""

    __slots__ = ("fn", "source", "guards", "records", "backend", "parts", "pullback", "twin", "share", "ir", "passes", "declined",
                 "rolled", "statements", "_frozen")

    def __init__(self, fn: Callable[..., Any], source: str, guards: list[Guard] | tuple[Guard, ...], records: int, *,
                 backend: str = "numpy", parts: Optional[tuple[dict[str, Any], str, tuple[int, ...], str]] = None,
                 pullback: bool = False, twin: Optional[tuple[str, ...]] = None, share: float = 1.0,
                 ir: Optional[str] = None, passes: Optional[str] = None, declined: str = "",
                 rolled: Optional[int] = None, statements: int = 0) -> None:
        self.fn = fn
        self.source = source
        self.guards = tuple(guards)  # its guards (compiled/guards.py), in the order it checks them
        self.records = records    # forward operations in the program
        self.backend = backend    # "numpy" or "numba"
        #: (constants, source, user lines, filename) of a NumPy program: what compiled/store.py
        #: writes to disk; None for a Numba program
        self.parts = parts
        self.pullback = pullback  # a pullback program (fn(args) -> (output, back))
        #: the Numba kernels' modules in the cache directory (runtime/kernels.py `jit_program`): of a
        #: Numba program, its own; of a NumPy program, its twin's, where a precompile made them
        self.twin = twin
        #: the share of its time a Numba twin could save (compiled/parts.py `savable_share`)
        self.share = share
        #: the listing of the IR it was lowered from (compiled/ir.py `dump`); None when loaded from disk
        self.ir = ir
        #: the listing of the IR passes' results (compiled/passes.py `dump`); None when loaded from disk
        self.passes = passes
        #: why a back end tried before this one declined the capture (tier numba: the Numba back
        #: end's reason, when the NumPy one serves the signature); "" when none was
        self.declined = declined
        #: of a NumPy program with a repeated step, the records of its Numba twin, which writes the step once in
        #: a loop (compiled/roll.py): what compiling the twin is priced by; None where it is `records`
        self.rolled = rolled
        #: the array statements its Numba twin's kernel would have, estimated (0 where the twin would be
        #: an element loop): what its compile costs beyond its records' (runtime/costs.py `build_price`)
        self.statements = statements
        self._frozen = True

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_frozen", False):
            raise AttributeError(f"a compiled program is immutable once built (set {name!r}): counters "
                                 "live in compiled/policy.py's record of it; `replace` makes a changed copy")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a compiled program is immutable once built (del {name!r})")

    def replace(self, **changes: Any) -> "Program":
        """A copy of this program with `changes` (keyword arguments of `Program`)."""
        fields = {k: getattr(self, k) for k in ("backend", "parts", "pullback", "twin", "share", "ir", "passes", "declined",
                                                "rolled", "statements")}
        fields.update(changes)
        fn, source, guards, records = (fields.pop(k, getattr(self, k)) for k in ("fn", "source", "guards", "records"))
        return Program(fn, source, guards, records, **fields)

    def __repr__(self) -> str:
        return f"<bytegrad program ({self.backend}, {self.records} operations, {len(self.guards)} guards)>"
