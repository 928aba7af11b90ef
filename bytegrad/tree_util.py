"""Trees of arrays for the user's own code: `tree_flatten`, `tree_unflatten`, `tree_leaves`, `tree_map`.

They take apart the same trees bytegrad differentiates (dicts, lists, tuples, namedtuples,
dataclasses and classes registered with `bytegrad.register_pytree`), so that an optimiser can be
written over a parameter tree and the gradient that mirrors it:

    params = tree_map(lambda p, g: p - lr * g, params, grads)

As in `jax.tree_util`, None is an empty subtree (no leaves), and anything that is not a tree
(an array, a float, a string) is a leaf. Unlike JAX, a dict's leaves come in its insertion order
(the order of the gradient bytegrad returns for it); `tree_map` matches the other trees' dicts
to the first's by key.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

from bytegrad.rules import pytrees

__all__ = ["TreeDef", "tree_flatten", "tree_unflatten", "tree_leaves", "tree_map"]

IsLeaf = Optional[Callable[[Any], bool]]


class TreeDef:
    """The structure of a tree without its leaves: `tree_unflatten(treedef, leaves)` builds the tree
    back. Two structures compare equal when their nodes have the same types, keys and fields."""

    __slots__ = ("kind", "meta", "children", "num_leaves")
    num_leaves: int

    def __init__(self, kind: str, meta: Any, children: tuple["TreeDef", ...]) -> None:
        self.kind = kind            # "leaf", "none", "dict", "list", "tuple", "dataclass" or "pytree"
        self.meta = meta            # dict: (type, keys); tuple: its type; dataclass: (instance, fields); pytree: (node, aux)
        self.children = children
        self.num_leaves = 1 if kind == "leaf" else sum(c.num_leaves for c in children)

    def unflatten(self, leaves: Iterable[Any]) -> Any:
        """The tree with this structure and these leaves (in `tree_flatten`'s order)."""
        leaves = list(leaves)
        if len(leaves) != self.num_leaves:
            raise ValueError(f"tree_unflatten: this structure has {self.num_leaves} "
                             f"lea{'f' if self.num_leaves == 1 else 'ves'}, but {len(leaves)} were given")
        it = iter(leaves)
        return self._build(it)

    def _build(self, it: Any) -> Any:
        kind = self.kind
        if kind == "leaf":
            return next(it)
        if kind == "none":
            return None
        values = [c._build(it) for c in self.children]
        if kind == "list":
            return values
        if kind == "tuple":
            t = self.meta
            if t is tuple:
                return tuple(values)
            return t(*values) if hasattr(t, "_fields") else t(values)
        if kind == "dict":
            t, keys = self.meta
            if t is dict:
                return dict(zip(keys, values))
            factory = getattr(self.meta, "default_factory", None)
            return _rebuild_dict(t, keys, values, factory)
        if kind == "dataclass":
            original, fields = self.meta
            out = pytrees.shallow_copy(original)
            for name, v in zip(fields, values):
                object.__setattr__(out, name, v)
            return out
        node, aux = self.meta
        return pytrees.unflatten(node, aux, values)

    def _key(self) -> Any:
        meta = self.meta
        if self.kind == "dict":
            meta = (meta[0], tuple(meta[1]))
        elif self.kind == "dataclass":
            meta = (type(meta[0]), tuple(meta[1]))
        elif self.kind == "pytree":
            meta = (meta[0], _Aux(meta[1]))
        return self.kind, meta, tuple(c._key() for c in self.children)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, TreeDef) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((self.kind, self.num_leaves))

    def __repr__(self) -> str:
        return f"TreeDef({self._show()})"

    def _show(self) -> str:
        kind = self.kind
        if kind == "leaf":
            return "*"
        if kind == "none":
            return "None"
        parts = [c._show() for c in self.children]
        if kind == "list":
            return f"[{', '.join(parts)}]"
        if kind == "dict":
            return "{" + ", ".join(f"{k!r}: {p}" for k, p in zip(self.meta[1], parts)) + "}"
        if kind == "tuple" and self.meta is tuple:
            return f"({', '.join(parts)}{',' if len(parts) == 1 else ''})"
        if kind == "dataclass":
            name = type(self.meta[0]).__qualname__
            return f"{name}({', '.join(f'{f}={p}' for f, p in zip(self.meta[1], parts))})"
        name = (self.meta if kind == "tuple" else self.meta[0].cls).__qualname__
        return f"{name}({', '.join(parts)})"


class _Aux:
    """A registered pytree's aux data, compared with == where it can be (arrays: by identity)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: Any) -> bool:
        if self.value is other.value:
            return True
        try:
            return bool(self.value == other.value)
        except Exception:  # noqa: BLE001 - (an array's == is elementwise: its truth is ambiguous)
            return False

    def __hash__(self) -> int:
        return 0


def _rebuild_dict(t: type[Any], keys: list, values: list, factory: Any) -> Any:
    import collections

    if issubclass(t, collections.defaultdict):
        return t(factory, zip(keys, values))
    return t(zip(keys, values))


def _node(value: Any) -> Optional[tuple[str, Any, list]]:
    """(kind, meta, children) of a tree node, or None for a leaf."""
    if value is None:
        return "none", None, []
    node = pytrees.node_for(value)
    if node is not None:
        children, aux = pytrees.flatten(node, value)
        return "pytree", (node, aux), children
    t = type(value)
    if t is dict or isinstance(value, dict):
        meta: Any = (t, list(value))
        if t is not dict and hasattr(value, "default_factory"):
            meta = _DictMeta(t, list(value), value.default_factory)
        return "dict", meta, list(value.values())
    if t is list:
        return "list", None, value
    if isinstance(value, tuple):
        return "tuple", t, list(value)
    if pytrees.dataclass_instance(value):
        fields = pytrees.dataclass_fields(value)
        return "dataclass", (value, fields), [getattr(value, name) for name in fields]
    return None


class _DictMeta(tuple):
    """A defaultdict's (type, keys), with its default factory for rebuilding it."""

    default_factory: Any

    def __new__(cls, t: type, keys: list, factory: Any) -> "_DictMeta":
        self = super().__new__(cls, (t, keys))
        self.default_factory = factory
        return self


def _flatten(value: Any, is_leaf: IsLeaf, leaves: list, depth: int) -> TreeDef:
    if is_leaf is not None and value is not None and is_leaf(value):
        leaves.append(value)
        return _LEAF
    found = _node(value)
    if found is None:
        leaves.append(value)
        return _LEAF
    if depth > 1000:
        raise RecursionError("tree_flatten: the tree is more than 1000 levels deep (does it contain itself?)")
    kind, meta, children = found
    return TreeDef(kind, meta, tuple(_flatten(c, is_leaf, leaves, depth + 1) for c in children))


_LEAF = TreeDef("leaf", None, ())


def tree_flatten(tree: Any, is_leaf: IsLeaf = None) -> tuple[list[Any], TreeDef]:
    """The leaves of `tree`, in order, and its structure.

    Parameters
    ----------
    tree : Any
        A dict, list, tuple, namedtuple, dataclass instance or registered pytree (nested as you
        like), or a single leaf. None is an empty subtree.
    is_leaf : callable, optional
        `is_leaf(subtree) -> bool`: a subtree for which it returns True is taken as one leaf.

    Returns
    -------
    leaves : list
        The leaves, depth first: a dict's in insertion order, a dataclass's in field order, a
        registered class's in the order its `flatten` gives.
    treedef : TreeDef
        The structure, for `tree_unflatten`.

    Examples
    --------
    >>> import numpy as np
    >>> leaves, treedef = tree_flatten({"W": np.ones((2, 2)), "b": (np.zeros(2), None, 3.0)})
    >>> [np.shape(leaf) for leaf in leaves]
    [(2, 2), (2,), ()]
    >>> treedef
    TreeDef({'W': *, 'b': (*, None, *)})
    """
    leaves: list[Any] = []
    treedef = _flatten(tree, is_leaf, leaves, 0)
    return leaves, treedef


def tree_unflatten(treedef: TreeDef, leaves: Iterable[Any]) -> Any:
    """The tree of structure `treedef` (from `tree_flatten`) holding `leaves`.

    Examples
    --------
    >>> leaves, treedef = tree_flatten({"a": 1.0, "b": [2.0, 3.0]})
    >>> tree_unflatten(treedef, [10 * v for v in leaves])
    {'a': 10.0, 'b': [20.0, 30.0]}
    """
    if not isinstance(treedef, TreeDef):
        raise TypeError(f"tree_unflatten takes the TreeDef that tree_flatten returns, got {type(treedef).__name__}")
    return treedef.unflatten(leaves)


def tree_leaves(tree: Any, is_leaf: IsLeaf = None) -> list[Any]:
    """The leaves of `tree`, in `tree_flatten`'s order.

    Examples
    --------
    >>> tree_leaves({"a": 1.0, "b": [2.0, None, (3.0,)]})
    [1.0, 2.0, 3.0]
    """
    return tree_flatten(tree, is_leaf)[0]


def tree_map(f: Callable[..., Any], tree: Any, *rest: Any, is_leaf: IsLeaf = None) -> Any:
    """A tree of `tree`'s structure whose leaves are `f(leaf, *matching leaves of rest)`.

    Parameters
    ----------
    f : callable
        Called once per leaf of `tree`, with that leaf and the matching parts of the trees in `rest`.
    tree : Any
        The tree whose structure the result has.
    *rest : Any
        Other trees with the structure of `tree` (dicts matched by key), such as a gradient and
        optimiser state. Where `tree` has a leaf, `f` gets the matching subtree as it is (a
        gradient's entry for an int or string parameter is None).
    is_leaf : callable, optional
        As in `tree_flatten`.

    Returns
    -------
    Any
        The new tree; the trees passed in are not modified.

    Examples
    --------
    >>> import numpy as np, bytegrad
    >>> params = {"w": np.array([1.0, 2.0]), "b": 0.5}
    >>> grads = bytegrad.grad(lambda p: np.sum(p["w"] ** 2) + p["b"])(params)
    >>> new = tree_map(lambda p, g: p - 0.1 * g, params, grads)
    >>> new["w"].tolist(), new["b"]
    ([0.8, 1.6], 0.4)
    """
    leaves, treedef = tree_flatten(tree, is_leaf)
    if not rest:
        return treedef.unflatten([f(x) for x in leaves])
    others = []
    for k, other in enumerate(rest, start=1):
        found: list[Any] = []
        _up_to(treedef, other, found, "", k)
        others.append(found)
    return treedef.unflatten([f(*xs) for xs in zip(leaves, *others)])


def _describe(value: Any) -> str:
    found = _node(value)
    if found is None:
        return f"a leaf ({type(value).__name__})"
    kind, meta, children = found
    if kind == "dict":
        return f"a {type(value).__name__} with keys {list(value)}"
    if kind in ("list", "tuple"):
        return f"a {type(value).__name__} of {len(children)}"
    return "None" if kind == "none" else f"a {type(value).__qualname__}"


def _up_to(td: TreeDef, value: Any, out: list, path: str, k: int) -> None:
    """The subtrees of `value` at the leaves of `td`, in order (ValueError where the structures differ)."""
    kind = td.kind
    if kind == "leaf":
        out.append(value)
        return
    found: Any = _node(value)  # (kind, meta, children) or None
    same = found is not None and found[0] == kind
    if same and kind == "dict":
        same = set(found[1][1]) == set(td.meta[1])
    elif same and kind == "tuple":
        same = found[1] is td.meta and len(found[2]) == len(td.children)
    elif same and kind == "list":
        same = len(found[2]) == len(td.children)
    elif same and kind == "dataclass":
        same = type(value) is type(td.meta[0])
    elif same and kind == "pytree":
        same = found[1][0] is td.meta[0] and len(found[2]) == len(td.children)
    if not same:
        raise ValueError(f"tree_map: tree {k} differs from the first tree at {path or 'its top'}: the first tree has "
                         f"{td._show()} there, tree {k} has {_describe(value)}")
    if kind == "none":
        return
    if kind == "dict":
        for key, sub in zip(td.meta[1], td.children):
            _up_to(sub, value[key], out, f"{path}[{key!r}]", k)
        return
    if kind == "dataclass":
        for name, sub in zip(td.meta[1], td.children):
            _up_to(sub, getattr(value, name), out, f"{path}.{name}", k)
        return
    for i, (sub, child) in enumerate(zip(td.children, found[2])):
        _up_to(sub, child, out, f"{path}[{i}]", k)
