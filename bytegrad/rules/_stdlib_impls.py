"""Python implementations of C functions of the standard library (itertools, operator's callable
objects, functools.lru_cache wrappers) with their signatures.

bytegrad runs them through its own rewriting (`differentiate_through`), so the items they hand on
keep their identity and every arithmetic step on them is recorded. Like `_impls`, they never call
the function they stand for.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

__all__ = [
    "py_product", "py_combinations", "py_takewhile", "py_dropwhile", "py_groupby", "py_itemgetter_call",
    "py_methodcaller_call", "py_lru_cache_call",
]

_MISSING: Any = object()


def _product_items(pools: list[list[Any]]) -> Iterator[tuple[Any, ...]]:
    if any(not pool for pool in pools):
        return
    counters = [0 for _ in pools]
    while True:
        yield tuple([pool[i] for pool, i in zip(pools, counters)])
        k = len(pools) - 1
        while k >= 0:
            counters[k] += 1
            if counters[k] < len(pools[k]):
                break
            counters[k] = 0
            k -= 1
        if k < 0:
            return


def py_product(*iterables: Any, repeat: int = 1) -> Iterator[tuple[Any, ...]]:
    if repeat < 0:
        raise ValueError("repeat argument cannot be negative")
    pools = [[item for item in iterable] for iterable in iterables] * repeat
    return _product_items(pools)


def _combination_items(pool: list[Any], r: int) -> Iterator[tuple[Any, ...]]:
    n = len(pool)
    if r > n:
        return
    indices = [i for i in range(r)]
    yield tuple([pool[i] for i in indices])
    while True:
        i = r - 1
        while i >= 0 and indices[i] == i + n - r:
            i -= 1
        if i < 0:
            return
        indices[i] += 1
        for j in range(i + 1, r):
            indices[j] = indices[j - 1] + 1
        yield tuple([pool[i] for i in indices])


def py_combinations(iterable: Any, r: int) -> Iterator[tuple[Any, ...]]:
    if r < 0:
        raise ValueError("r must be non-negative")
    return _combination_items([item for item in iterable], r)


def _takewhile_items(predicate: Callable[[Any], Any], iterable: Any) -> Iterator[Any]:
    for item in iterable:
        if not predicate(item):
            return
        yield item


def py_takewhile(predicate: Callable[[Any], Any], iterable: Any, /) -> Iterator[Any]:
    return _takewhile_items(predicate, iterable)


def _dropwhile_items(predicate: Callable[[Any], Any], iterable: Any) -> Iterator[Any]:
    it = iter(iterable)
    for item in it:
        if not predicate(item):
            yield item
            break
    for item in it:
        yield item


def py_dropwhile(predicate: Callable[[Any], Any], iterable: Any, /) -> Iterator[Any]:
    return _dropwhile_items(predicate, iterable)


def _groupby_items(iterable: Any, key: Any) -> Iterator[tuple[Any, Iterator[Any]]]:
    # Each group is a list made eagerly, so groups stay valid after the next one starts (as a
    # superset of groupby's behaviour: a consumed-out-of-order group is empty there).
    group: list[Any] = []
    current: Any = _MISSING
    for item in iterable:
        k = item if key is None else key(item)
        if current is not _MISSING and not (k == current):
            yield current, iter(group)
            group = []
        if not group:
            current = k
        group.append(item)
    if group:
        yield current, iter(group)


def py_groupby(iterable: Any, key: Any = None) -> Iterator[tuple[Any, Iterator[Any]]]:
    return _groupby_items(iterable, key)


def py_itemgetter_call(getter: Any, obj: Any, /) -> Any:
    """`operator.itemgetter(*items)(obj)`: the items are read back from the getter's pickle form."""
    items = getter.__reduce__()[1]
    if len(items) == 1:
        return obj[items[0]]
    return tuple([obj[i] for i in items])


def py_methodcaller_call(caller: Any, obj: Any, /) -> Any:
    """`operator.methodcaller(name, *args, **kwargs)(obj)`: `getattr(obj, name)(*args, **kwargs)`."""
    maker, args = caller.__reduce__()
    kwargs = getattr(maker, "keywords", None)
    if kwargs is None:
        return getattr(obj, args[0])(*args[1:])
    # with keywords it pickles as (partial(methodcaller, name, **kwargs), args)
    return getattr(obj, maker.args[0])(*args, **kwargs)


def py_lru_cache_call(cached: Any, /, *args: Any, **kwargs: Any) -> Any:
    """A `functools.lru_cache` (or `functools.cache`) helper called from differentiated code runs its
    body, never its cache: a cached result holds no derivative of this call's inputs, and a result
    computed from them must not be stored for another call. With nothing differentiated among the
    arguments the body runs as plain Python, so its own recursive calls still use the cache."""
    return cached.__wrapped__(*args, **kwargs)
