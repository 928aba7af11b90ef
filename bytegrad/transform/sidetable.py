"""The side table of a stored rewrite (transform/cache.py) in marshal's terms, read without pickle.

A rewrite's constants that marshal cannot write are, nearly always, bytegrad's hook functions, the
`Site`s of the rewritten operations and the fused sites (`FusedSite`, its `Node`s): `dumps` writes
such a table as a marshal-able tuple, and transform/cache.py's `table_loads` (kept there: no module
to import on a load) rebuilds it with no unpickler, so a warm-cache
first gradient imports neither runtime/safepickle.py nor pickle's machinery (0.3 ms). A table
holding anything else is not written here: `dumps` returns None and the caller pickles the table
(runtime/safepickle.py), as before.

What `table_loads` makes is as restricted as what `safepickle.safe_loads` finds: bytegrad's module-level
objects by (module, attribute, key) (`ref`), NumPy ufuncs and the NumPy functions that have a
rule, `operator` and `math` functions, `Site`, `Node` and `FusedSite` from their fields, and
marshal's plain values. Each Site, Node and FusedSite is written once and referred to by its
index, so objects the rewrite shared are shared again (as pickle's memo did).

Encoded values (tuples): ("v", plain value), ("r", module, attribute, key), ("u", ufunc name),
("g", module, name), ("o", index of an object); objects: ("site", filename, lineno, function,
what, callee), ("node", kind, fn, hook, args, site) with args ((tag, value), ...), ("fused", site,
operands, nodes, leaf_names).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

__all__ = ["dumps", "Unwritable"]

_PLAIN = (type(None), bool, int, float, complex, str, bytes)


class Unwritable(Exception):
    """A value this format does not write (the table is pickled instead)."""


def dumps(table: list[Any], fmt: str, find_global: Callable[[str, str], Any],
          find_ufunc: Callable[[str], Any]) -> Optional[tuple]:
    """`table` as (fmt, objects, items), or None where it holds a value this format does not write.
    `find_global`, `find_ufunc`: how the reader finds a function by its names (transform/cache.py's
    `table_global` and `table_ufunc`, passed in: a load does not import this module); a function they
    do not find again is not written."""
    from bytegrad.runtime import fused, records, safepickle

    enc = _Encoder(safepickle.ref_index(), safepickle.lookup_ref, find_global, find_ufunc)
    enc.types = (records.Site, fused.Node, fused.FusedSite)
    try:
        items = tuple(enc.value(c) for c in table)
    except Unwritable:
        return None
    return (fmt, tuple(enc.objects), items)


class _Encoder:
    def __init__(self, index: dict[int, tuple], lookup_ref: Callable[[tuple], Any],
                 find_global: Callable[[str, str], Any], find_ufunc: Callable[[str], Any]) -> None:
        self.index, self.lookup_ref = index, lookup_ref
        self.find_global, self.find_ufunc = find_global, find_ufunc
        self.types: tuple[Any, ...] = ()  # Site, Node, FusedSite
        self.objects: list[tuple] = []
        self.memo: dict[int, int] = {}
        self.keep: list[Any] = []  # (the memo's ids stay those of live objects)

    def value(self, x: Any) -> tuple:
        ref = self.index.get(id(x))
        if ref is not None and self.lookup_ref(ref) is x:
            return ("r", *ref)
        t = type(x)
        if t in _PLAIN:
            return ("v", x)
        if t in self.types:
            return self.obj(x)
        return self.global_(x)

    def global_(self, x: Any) -> tuple:
        """("u", name) for a NumPy ufunc, else ("g", module, name) where the reader finds `x` by them."""
        import numpy as np

        if type(x) is np.ufunc and self.find_ufunc(x.__name__) is x:
            return ("u", x.__name__)
        module, name = getattr(x, "__module__", None), getattr(x, "__qualname__", None)
        if type(module) is str and type(name) is str and self.find_global(module, name) is x:
            return ("g", module, name)
        raise Unwritable(repr(x))

    def obj(self, x: Any) -> tuple:
        k = self.memo.get(id(x))
        if k is not None:
            return ("o", k)
        site_t, node_t, _fused_t = self.types
        rec: tuple
        if type(x) is site_t:
            rec = ("site", _str(x.filename), _line(x.lineno), _str(x.function), _str(x.what), self.value(x.callee))
        elif type(x) is node_t:
            args = tuple((_str(tag), self.value(v)) for tag, v in x.args)
            rec = ("node", _str(x.kind), self.value(x.fn), self.value(x.hook), args, self.value(x.site))
        else:
            rec = ("fused", self.value(x.site), _ints(x.operands), tuple(self.value(n) for n in x.nodes),
                   tuple(_str(s) for s in x.leaf_names))
        self.memo[id(x)] = len(self.objects)
        self.keep.append(x)
        self.objects.append(rec)
        return ("o", len(self.objects) - 1)


def _str(x: Any) -> str:
    if type(x) is not str:
        raise Unwritable(repr(x))
    return x


def _line(x: Any) -> Optional[int]:
    if x is not None and type(x) is not int:
        raise Unwritable(repr(x))
    return x


def _ints(xs: Any) -> tuple[int, ...]:
    if type(xs) is not tuple or any(type(i) is not int for i in xs):
        raise Unwritable(repr(xs))
    return xs
