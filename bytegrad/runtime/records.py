"""Tape records and their kinds: what one recorded operation holds, and what the tape needs of it.

A record is a tuple `(kind, parents, site, *fields)`: `kind` is a `Kind` (below), `parents` says
where each input's cotangent goes (a node index, None for an untracked input, or a nested tuple,
list or dict of them for a container argument; a bare index for the one-argument kinds), `site`
is the hooked call site (`Site`, below: for error messages), and the fields are the kind's own,
named in `Kind.fields`. Records stay tuples, not objects, because building one is the hot path's
one allocation per operation: a slotted instance with an `__init__` takes about four times as
long to build as a tuple in CPython 3.11 (150 ns more, measured with timeit), several percent of
a gradient made of small operations.

A `Kind` is the typed half: one instance per kind of record (`ELEMENTWISE`, `RULE`, `SETITEM`,
`FUSED`, ...), defined next to its reverse step, that carries:

- `backward(out_bar, record, out)`: one cotangent per parent (a bare cotangent for a bare index);
- `pushforward(record, out, parent_dots)`: the output's tangent (forward mode), or None when the
  kind has no exact pushforward and forward mode transposes its backward (runtime/tangents.py);
- `saved(record)`: the arrays its reverse step reads (the mutation checks refuse or copy on
  writes into them; for a rule's record, what its pullback's closure holds, found by
  `tape.collect`: rules do not declare what they save), `reads_out(record)`: whether it reads its own output, and `slim(record, out)`:
  the record and output with what the reverse step reads only the shape of replaced by stand-ins
  (a tape swept once frees those early);
- `moves`: the record only moves or overwrites memory (setitem, views, identities);
- `fn_at`, `args_at`: the field indices of the recorded callable and its positional arguments,
  when it has them (rules, elementwise functions), read through `op(record)` and `args(record)`;
- `safe`: its zero-safe twin (runtime/zerosafe.py), once one is made.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from bytegrad.errors import SourceLoc, qualname

__all__ = ["Kind", "Site", "TupleOut", "no_arrays", "IDENTITY"]


class Site:
    """One rewritten operation in the user's code (a constant of the rewritten code object)."""

    __slots__ = ("filename", "lineno", "function", "what", "callee")

    def __init__(self, filename: str, lineno: Optional[int], function: str, what: str, callee: Any = None) -> None:
        self.filename = filename
        self.lineno = lineno
        self.function = function
        self.what = what
        self.callee = callee  # the callable the rewrite saw statically (np.sum), for explain; or None

    def loc(self) -> SourceLoc:
        return SourceLoc(self.filename, self.lineno, self.function)

    def __repr__(self) -> str:
        return f"<site {self.what} at {self.filename}:{self.lineno}>"


def no_arrays(record: tuple) -> list:
    """`saved` of a kind whose reverse step reads no array of the forward pass."""
    return []


class Kind:
    """One kind of tape record (see the module docstring)."""

    __slots__ = ("name", "fields", "backward", "pushforward", "saved", "reads_out", "slim", "moves", "fn_at",
                 "args_at", "safe")

    def __init__(self, name: str, fields: tuple[str, ...], backward: Callable[..., Any], *,
                 pushforward: Optional[Callable[..., Any]] = None, saved: Callable[[tuple], list] = no_arrays,
                 reads_out: Optional[Callable[[tuple], bool]] = None,
                 slim: Optional[Callable[[tuple, Any], tuple]] = None, moves: bool = False,
                 fn_at: Optional[int] = None, args_at: Optional[int] = None) -> None:
        self.name = name
        self.fields = fields
        self.backward = backward
        self.pushforward = pushforward
        self.saved = saved
        self.reads_out = reads_out
        self.slim = slim
        self.moves = moves
        self.fn_at = fn_at
        self.args_at = args_at
        self.safe: Optional[Kind] = None

    def twin(self, name: str, backward: Callable[..., Any]) -> "Kind":
        """The same kind with another reverse step (a zero-safe or NaN-checking one)."""
        other = Kind(name, self.fields, backward, pushforward=self.pushforward, saved=self.saved,
                     reads_out=self.reads_out, slim=self.slim, moves=self.moves, fn_at=self.fn_at,
                     args_at=self.args_at)
        return other

    def op(self, record: tuple) -> Any:
        """The recorded callable (np.sin, a rule's function), or None for bytegrad's own kinds."""
        return record[self.fn_at] if self.fn_at is not None else None

    def args(self, record: tuple) -> tuple:
        """The recorded positional arguments (elementwise and rule kinds), else ()."""
        return record[self.args_at] if self.args_at is not None else ()

    def describe(self, record: tuple) -> str:
        """The operation's name for messages: the recorded callable's, else the reverse step's."""
        op = self.op(record)
        return qualname(op if callable(op) else self.backward)

    def field(self, record: tuple, name: str) -> Any:
        return record[3 + self.fields.index(name)]

    def __repr__(self) -> str:
        return f"<record kind {self.name}>"


class TupleOut:
    """Stands on the tape for a rule's tuple output; its elements are recorded one by one."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _bw_identity(ct: Any, record: tuple, out: Any) -> tuple[Any, ...]:
    return (ct,)


def _pf_identity(record: tuple, out: Any, parent_dots: Any) -> Any:
    return parent_dots[0]


#: `(IDENTITY, (parent,), site)`: the value is its parent's (a copy, a nested derivative's leaf)
IDENTITY = Kind("identity", (), _bw_identity, pushforward=_pf_identity, moves=True)
