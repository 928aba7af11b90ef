"""Python implementations of builtins (sum, min, zip, sorted, list...) with the builtins' signatures.

bytegrad runs them through its own rewriting (`differentiate_through`), so each addition and
comparison is recorded and iterating a differentiated array yields recorded rows. They never call
the builtin they stand for: that call would be routed back here.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Iterator

__all__ = [
    "py_sum", "py_fsum", "fsum_list", "py_prod", "py_min", "py_max", "py_iter", "py_zip", "py_enumerate", "py_map", "py_reversed",
    "py_sorted", "py_list_sort", "py_reduce", "py_list", "py_tuple", "py_list_extend",
]

#: "no value": a slice no one else holds, tested by identity. (A slice, not an `object()`: the rewrite
#: takes it as a constant, so `x is _MISSING` on it is a test a compiled program can make again.)
_MISSING: Any = slice(None, None, "bytegrad: no value")


def py_sum(iterable: Iterable[Any], /, start: Any = 0) -> Any:
    total = start
    for item in iterable:
        total = total + item
    return total


def fsum_list(items: list[Any], /) -> float:
    """`math.fsum` of a list: the exact sum, with a reverse rule of its own (in `builtins.py`)."""
    return math.fsum(items)


def py_fsum(iterable: Iterable[Any], /) -> float:
    # Collected by rewritten code, so items made by a generator are recorded; then summed exactly.
    return fsum_list([item for item in iterable])


def py_prod(iterable: Iterable[Any], /, *, start: Any = 1) -> Any:
    total = start
    for item in iterable:
        total = total * item
    return total


def _select(name: str, args: tuple[Any, ...], key: Any, default: Any, largest: bool) -> Any:
    # (lengths and flags, not truth tests of the arguments: what a compiled program decides again is
    # the comparison of the items alone)
    if len(args) == 0:
        raise TypeError(f"{name} expected at least 1 argument, got 0")
    if len(args) == 1:
        items = args[0]
    else:
        if default is not _MISSING:
            raise TypeError(f"Cannot specify a default for {name}() with multiple positional arguments")
        items = args
    empty = True
    best = best_key = None
    for item in items:
        k = item if key is None else key(item)
        # Like the builtins: the first of equal items wins.
        if empty or (k > best_key if largest else k < best_key):
            best = item
            best_key = k
            empty = False
    if empty:
        if default is _MISSING:
            raise ValueError(f"{name}() iterable argument is empty")
        return default
    return best


def py_min(*args: Any, key: Any = None, default: Any = _MISSING) -> Any:
    return _select("min", args, key, default, largest=False)


def py_max(*args: Any, key: Any = None, default: Any = _MISSING) -> Any:
    return _select("max", args, key, default, largest=True)


def _items(iterable: Any) -> Iterator[Any]:
    for item in iterable:
        yield item


def _call_until(function: Callable[[], Any], sentinel: Any) -> Iterator[Any]:
    while True:
        item = function()
        if item == sentinel:
            return
        yield item


def py_iter(obj: Any, *sentinel: Any) -> Iterator[Any]:
    if sentinel:
        if not callable(obj):
            raise TypeError("iter(v, w): v must be callable")
        return _call_until(obj, sentinel[0])
    if hasattr(type(obj), "__next__") and hasattr(type(obj), "__iter__"):
        return obj  # an iterator is its own iterator
    if not (hasattr(type(obj), "__iter__") or hasattr(type(obj), "__getitem__")):
        raise TypeError(f"'{type(obj).__name__}' object is not iterable")
    return _items(obj)


def _zip_items(iterators: list[Iterator[Any]], strict: bool) -> Iterator[tuple[Any, ...]]:
    if len(iterators) == 0:
        return
    while True:
        items: list[Any] = []
        for it in iterators:
            for item in it:  # (the next item, or none: no test on the item itself, which a compiled
                items.append(item)  # program would have to make again on a container it does not hold)
                break
            else:
                if strict:
                    if items:
                        raise ValueError(f"zip() argument {len(items) + 1} is shorter than {_before(len(items) + 1)}")
                    for i, rest in enumerate(iterators[1:]):
                        for _ in rest:
                            raise ValueError(f"zip() argument {i + 2} is longer than {_before(i + 2)}")
                return
        yield (*items,)


def _before(k: int) -> str:
    return "argument 1" if k == 2 else f"arguments 1-{k - 1}"


def py_zip(*iterables: Any, strict: bool = False) -> Iterator[tuple[Any, ...]]:
    return _zip_items([iter(x) for x in iterables], strict)


def _enumerate_items(iterable: Any, start: int) -> Iterator[tuple[int, Any]]:
    i = start
    for item in iterable:
        yield i, item
        i += 1


def py_enumerate(iterable: Any, start: int = 0) -> Iterator[tuple[int, Any]]:
    return _enumerate_items(iter(iterable), start)


def _map_items(function: Callable[..., Any], iterables: tuple[Any, ...]) -> Iterator[Any]:
    for args in zip(*iterables):
        yield function(*args)


def py_map(function: Callable[..., Any], *iterables: Any) -> Iterator[Any]:
    if len(iterables) == 0:
        raise TypeError("map() must have at least two arguments.")
    return _map_items(function, iterables)


def _reversed_by_index(seq: Any) -> Iterator[Any]:
    for i in range(len(seq) - 1, -1, -1):
        yield seq[i]


def py_reversed(seq: Any, /) -> Iterator[Any]:
    method = getattr(type(seq), "__reversed__", None)
    if method is not None:
        return method(seq)  # lists, dicts, ranges: their own reverse iterator keeps the items' identity
    if not (hasattr(type(seq), "__len__") and hasattr(type(seq), "__getitem__")):
        raise TypeError(f"'{type(seq).__name__}' object is not reversible")
    return _reversed_by_index(seq)


def py_sorted(iterable: Any, /, *, key: Any = None, reverse: bool = False) -> list[Any]:
    items = [item for item in iterable]
    keys = items if key is None else [key(item) for item in items]
    return [items[i] for i in _merge_order(keys, reverse)]


def py_list_sort(self: list[Any], /, *, key: Any = None, reverse: bool = False) -> None:
    """`list.sort`: the order `py_sorted` finds (each comparison recorded), then the list refilled in
    place with the same items (moved by list's own `pop` and `append`, which do not look at them; a
    subclass's overrides are not called, as `list.sort` calls none)."""
    items = [item for item in self]
    keys = items if key is None else [key(item) for item in items]
    order = _merge_order(keys, reverse)
    for _ in range(len(items)):
        list.pop(self)
    for i in order:
        list.append(self, items[i])


def _merge_order(keys: list[Any], reverse: bool) -> list[int]:
    """The positions of `keys` in sorted order, stable as sorted() is (also with `reverse`), by a
    merge sort written in Python: each comparison is the code's own `<`, so the run records it (a
    compiled program decides the order again on every call; `list.sort` would compare in C, unseen)."""
    n = len(keys)
    order = list(range(n))
    width = 1
    while width < n:
        merged: list[int] = []
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i, j = lo, mid
            while i < mid and j < hi:
                a, b = order[i], order[j]
                # the right one first only when it sorts strictly before the left one: stable
                if (keys[a] < keys[b]) if reverse else (keys[b] < keys[a]):
                    merged.append(b)
                    j += 1
                else:
                    merged.append(a)
                    i += 1
            merged.extend(order[i:mid])
            merged.extend(order[j:hi])
        order = merged
        width *= 2
    return order


def py_reduce(function: Callable[[Any, Any], Any], iterable: Any, *initial: Any) -> Any:
    if len(initial) > 1:
        raise TypeError(f"reduce expected at most 3 arguments, got {2 + len(initial)}")
    it = iter(iterable)
    if initial:
        value = initial[0]
    else:
        value = next(it, _MISSING)
        if value is _MISSING:
            raise TypeError("reduce() of empty iterable with no initial value")
    for item in it:
        value = function(value, item)
    return value


def py_list(iterable: Any = (), /) -> list[Any]:
    return [item for item in iterable]


def py_tuple(iterable: Any = (), /) -> tuple[Any, ...]:
    items = [item for item in iterable]
    return (*items,)


def py_list_extend(self: list[Any], iterable: Any, /) -> None:
    # (CPython extends from a snapshot of a list, itself included; the type test first, so that a list
    # holding differentiated values is never compared by identity: a decision no program could check)
    if type(iterable) is list or iterable is self:
        iterable = [item for item in iterable]
    for item in iterable:
        self.append(item)


def _filter_items(function: Any, iterable: Any) -> Iterator[Any]:
    for item in iterable:
        if (bool(item) if function is None else function(item)):
            yield item


def py_filter(function: Any, iterable: Any, /) -> Iterator[Any]:
    """`filter`: the kept items are the same objects, so they keep their derivatives."""
    return _filter_items(function, iterable)


# ---- itertools and collections: Python versions, so the items keep their identity -------------------


def _pairwise_items(iterable: Any) -> Iterator[Any]:
    it = iter(iterable)
    for prev in it:
        for item in it:
            yield prev, item
            prev = item
        return


def py_pairwise(iterable: Any, /) -> Iterator[Any]:
    return _pairwise_items(iterable)


def _chain_items(iterables: tuple[Any, ...]) -> Iterator[Any]:
    for iterable in iterables:
        for item in iterable:
            yield item


def py_chain(*iterables: Any) -> Iterator[Any]:
    return _chain_items(iterables)


def py_chain_from_iterable(iterables: Any, /) -> Iterator[Any]:
    return _chain_items(iterables)


def _islice_items(iterable: Any, start: int, stop: Any, step: int) -> Iterator[Any]:
    nxt = start
    for i, item in enumerate(iterable):
        if stop is not None and i >= stop:
            return
        if i == nxt:
            yield item
            nxt += step


def py_islice(iterable: Any, *args: Any) -> Iterator[Any]:
    bounds = slice(*args)
    start = bounds.start or 0
    step = bounds.step or 1
    return _islice_items(iterable, start, bounds.stop, step)


def _accumulate_items(iterable: Any, func: Any, initial: Any) -> Iterator[Any]:
    it = iter(iterable)
    total = initial
    if total is _MISSING:
        for total in it:
            break
        else:
            return
    yield total
    for item in it:
        total = total + item if func is None else func(total, item)
        yield total


def py_accumulate(iterable: Any, func: Any = None, *, initial: Any = _MISSING) -> Iterator[Any]:
    return _accumulate_items(iterable, func, _MISSING if initial is None else initial)


def _starmap_items(function: Any, iterable: Any) -> Iterator[Any]:
    for args in iterable:
        yield function(*args)


def py_starmap(function: Any, iterable: Any, /) -> Iterator[Any]:
    return _starmap_items(function, iterable)


def py_deque(iterable: Any = (), maxlen: Any = None) -> Any:
    import collections

    d: collections.deque[Any] = collections.deque(maxlen=maxlen)  # built empty, then filled item by item: no recursion
    for item in iterable:
        d.append(item)
    return d
