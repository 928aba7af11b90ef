"""Differentiated arguments as trees: fresh leaves on the way in, mirrored gradients on the way out.

Every differentiated leaf enters the function as a fresh object (a view of an array, a copy of a
float) so a closure or global that holds the caller's array is never mistaken for the input.
Trees are dicts, lists, tuples, namedtuples, dataclasses and classes registered with
`bytegrad.register_pytree` (whose spec is `("pytree", node, aux, child specs)`).
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Union

import numpy as np

from bytegrad.rules import pytrees
from bytegrad.rules._shape import filled
from bytegrad.runtime.tape import Tape

_ndarray = np.ndarray
_empty = np.empty


class Leaf:
    """Where one differentiated leaf sits on the tape, and what its gradient must look like."""

    __slots__ = ("idx", "primal")

    def __init__(self, idx: int, primal: Any) -> None:
        self.idx = idx
        self.primal = primal


class NotDifferentiable(TypeError):
    """An argument to differentiate holds something that has no derivative (`fix`: what to do, if
    not the usual advice)."""

    def __init__(self, message: str, fix: Optional[str] = None) -> None:
        super().__init__(message)
        self.fix = fix


def prepare(value: Any, tape: Tape, strict: bool = False) -> tuple[Any, Any]:
    """(fresh value, spec): a copy of the tree with fresh leaves registered on `tape`."""
    t = type(value)
    if (t is tuple or t is list or t is dict) and _all_float_arrays(value.values() if t is dict else value):
        return _prepare_arrays(value, t, tape)
    if t is _ndarray:
        kind = value.dtype.kind
        if kind in "fc":
            fresh = value.view()
            tape.protected.add(id(value))
            if value.base is not None:
                tape.protected.add(id(value.base))
            return fresh, Leaf(tape.leaf(fresh), value)
        if kind == "O":
            raise NotDifferentiable("an object array (dtype=object) cannot be differentiated")
        if strict:
            raise NotDifferentiable(f"an array of dtype {value.dtype} cannot be differentiated")
        return value, None
    if t is float:
        fresh = value * 1.0
        return fresh, Leaf(tape.leaf(fresh), value)
    if t is complex:
        fresh = value * 1.0
        return fresh, Leaf(tape.leaf(fresh), value)
    if isinstance(value, (np.floating, np.complexfloating)):
        fresh = value * 1
        return fresh, Leaf(tape.leaf(fresh), value)
    node = pytrees.node_for(value)
    if node is not None:
        return _prepare_registered(node, value, tape)
    if t is dict or isinstance(value, dict):
        by_key = {k: prepare(v, tape) for k, v in value.items()}
        fresh = type(value)((k, v[0]) for k, v in by_key.items()) if t is not dict else {k: v[0] for k, v in by_key.items()}
        return fresh, (type(value), {k: v[1] for k, v in by_key.items()})
    if t is list:
        items = [prepare(v, tape) for v in value]
        return [v[0] for v in items], (list, [v[1] for v in items])
    if isinstance(value, tuple):
        items = [prepare(v, tape) for v in value]
        if hasattr(value, "_fields"):
            fresh = t(*[v[0] for v in items])
        else:
            fresh = t(v[0] for v in items) if t is not tuple else tuple(v[0] for v in items)
        return fresh, (t, [v[1] for v in items])
    if pytrees.dataclass_instance(value):
        by_name = {name: prepare(getattr(value, name), tape) for name in pytrees.dataclass_fields(value)}
        fresh = pytrees.shallow_copy(value)
        for name, (v, _) in by_name.items():
            object.__setattr__(fresh, name, v)
        return fresh, ("dataclass", value, {k: v[1] for k, v in by_name.items()})
    if strict and (t is int or t is bool or t is str or value is None):
        raise NotDifferentiable(f"a {t.__name__} cannot be differentiated")
    if pytrees.user_object(value) and (strict or pytrees.holds_floats(value)):
        name = t.__qualname__
        fields = tuple(pytrees.float_attributes(value)) or ("...",)
        raise NotDifferentiable(
            f"it is (or holds) an instance of {name}, a class bytegrad does not know how to take apart, so "
            f"its gradient would be lost",
            f"register the class: bytegrad.register_pytree({name}, fields={fields!r}) (the attributes "
            f"to differentiate, when its __init__ takes them by keyword), else bytegrad.register_pytree({name}, "
            f"flatten, unflatten); or make it a dataclass.")
    return value, None


def _prepare_registered(node: pytrees.PytreeNode, value: Any, tape: Tape) -> tuple[Any, Any]:
    """`prepare` of an instance of a class registered with `bytegrad.register_pytree`."""
    children, aux = pytrees.flatten(node, value)
    items = [prepare(c, tape) for c in children]
    fresh_children = [v[0] for v in items]
    fresh = pytrees.unflatten(node, aux, fresh_children)
    stored, _ = pytrees.flatten(node, fresh)
    if len(stored) != len(items) or any(sub is not None and a is not b
                                        for a, b, (_, sub) in zip(stored, fresh_children, items)):
        name = node.cls.__qualname__
        raise NotDifferentiable(
            f"the unflatten registered for {name} did not keep the children it was given (flattening what "
            f"it built gives other objects): bytegrad could not follow them to their gradient",
            f"make unflatten store its children as they are, without copies or conversions (for a class "
            f"whose __init__ converts its arguments, build the instance with {name}.__new__({name}) and "
            f"set the attributes).")
    return fresh, ("pytree", node, aux, [v[1] for v in items])


def _all_float_arrays(items: Any) -> bool:
    for v in items:
        if type(v) is not _ndarray or v.dtype.kind not in "fc":
            return False
    return True


def _prepare_arrays(value: Any, t: type, tape: Tape) -> tuple[Any, Any]:
    """`prepare` of a tuple, list or dict of float arrays (model parameters), in one loop: what the
    general case does for each of them, without its recursion."""
    protected = tape.protected
    fresh_items = []
    specs = []
    for v in (value.values() if t is dict else value):
        fresh = v.view()
        protected.add(id(v))
        if v.base is not None:
            protected.add(id(v.base))
        fresh_items.append(fresh)
        specs.append(Leaf(tape.leaf(fresh), v))
    if t is dict:
        keys = list(value)
        return dict(zip(keys, fresh_items)), (dict, dict(zip(keys, specs)))
    return (fresh_items if t is list else tuple(fresh_items)), (t, specs)


def project(ct: Any, primal: Any) -> Any:
    """A cotangent as a gradient shaped and typed like its primal (float32 stays float32)."""
    if type(primal) is _ndarray:
        if ct is None:
            return np.zeros(primal.shape, primal.dtype)
        if ct.__class__ is float and primal.dtype.kind == "f":  # uniform (the seed of `np.sum(x)`)
            out = _empty(primal.shape, primal.dtype)
            out.fill(ct)  # `filled` for a float into a float array, in ~2.8k fewer instructions
            return out
        arr = ct if type(ct) is _ndarray else np.asarray(ct)
        if primal.dtype.kind == "f" and arr.dtype.kind == "c":
            arr = arr.real
        if arr.shape != primal.shape:
            if arr.ndim == 0:  # a uniform cotangent: that value everywhere
                return filled(primal.shape, primal.dtype, arr)
            arr = np.broadcast_to(arr, primal.shape)
        if arr.dtype != primal.dtype or arr.base is not None or not arr.flags.writeable:
            return np.array(arr, dtype=primal.dtype, copy=True)
        return arr  # a fresh array the reverse pass made: hand it over without a copy
    if type(primal) is float:
        if ct is None:
            return 0.0
        v = np.asarray(ct)
        if v.dtype.kind == "c":
            v = v.real
        return float(v.sum()) if v.ndim else float(v)
    if type(primal) is complex:
        return 0j if ct is None else complex(np.asarray(ct).sum())
    if isinstance(primal, np.generic):
        if ct is None:
            return primal.dtype.type(0)
        v = np.asarray(ct)
        if primal.dtype.kind == "f" and v.dtype.kind == "c":
            v = v.real
        return primal.dtype.type(v.sum() if v.ndim else v)
    return ct


def gradient(spec: Any, cts: Union[list[Any], dict[int, Any]], project: Callable[[Any, Any], Any] = project) -> Any:
    """Build the gradient tree that mirrors `spec` from per-node cotangents, each leaf's by `project`."""
    if spec is None:
        return None
    if type(spec) is Leaf:
        return project(cts[spec.idx], spec.primal)
    kind = spec[0]
    if kind == "dataclass":
        original, fields = spec[1], spec[2]
        out = pytrees.shallow_copy(original)
        for name, sub in fields.items():
            object.__setattr__(out, name, gradient(sub, cts, project))
        return out
    if kind == "pytree":
        return pytrees.unflatten(spec[1], spec[2], [gradient(sub, cts, project) for sub in spec[3]])
    t, subs = spec
    if isinstance(subs, dict):
        by_key = {k: project(cts[v.idx], v.primal) if type(v) is Leaf else gradient(v, cts, project)
                  for k, v in subs.items()}
        return by_key if t is dict else t(by_key.items())
    values = [project(cts[v.idx], v.primal) if type(v) is Leaf else gradient(v, cts, project) for v in subs]
    if t is list:
        return values
    if hasattr(t, "_fields"):
        return t(*values)
    return t(values) if t is not tuple else tuple(values)


def not_callers(grads: tuple[Any, ...], args: tuple) -> tuple[Any, ...]:
    """Gradients handed to the user are never an array argument of the call (nor a view of one): a
    rule's pullback may pass a partial through unchanged (`x` for the gradient of `sum(x * w)` in
    `w`), and the caller's `x` must not come back as a gradient the user then writes into."""
    out = None
    for k, g in enumerate(grads):
        if type(g) is _ndarray:
            base = g.base
            for a in args:
                if a is g or (base is not None and a is base):
                    out = list(grads) if out is None else out
                    out[k] = g.copy()
                    break
    return grads if out is None else tuple(out)


def unalias(grads: tuple[Any, ...], copy: Optional[Callable[[Any], Any]] = None) -> tuple[Any, ...]:
    """Gradients handed to the user never share memory with each other."""
    ids = [id(g) for g in grads if type(g) is _ndarray]
    if len(set(ids)) == len(ids):
        return grads
    seen: set[int] = set()
    out = []
    for g in grads:
        if type(g) is _ndarray:
            if id(g) in seen:
                g = g.copy() if copy is None else copy(g)
            seen.add(id(g))
        out.append(g)
    return tuple(out)


def leaves(spec: Any) -> list[Leaf]:
    if spec is None:
        return []
    if type(spec) is Leaf:
        return [spec]
    if spec[0] == "dataclass":
        return [leaf for sub in spec[2].values() for leaf in leaves(sub)]
    if spec[0] == "pytree":
        return [leaf for sub in spec[3] for leaf in leaves(sub)]
    subs = spec[1]
    items = subs.values() if isinstance(subs, dict) else subs
    return [leaf for sub in items for leaf in leaves(sub)]


def output_nodes(value: Any, ids: dict[int, int], path: Optional[list] = None) -> list[tuple[Any, int]]:
    """(output leaf, node index) for every tracked leaf of a function's output tree."""
    found: list[tuple[Any, int]] = []
    _walk_out(value, ids, found, 0)
    return found


def _walk_out(value: Any, ids: dict[int, int], found: list, depth: int) -> None:
    i = ids.get(id(value))
    if i is not None and (type(value) is _ndarray or type(value) is float or isinstance(value, np.generic)
                          or type(value) is complex):
        found.append((value, i))
        return
    if depth > 32:
        return
    node = pytrees.node_for(value)
    if node is not None:
        for v in pytrees.flatten(node, value)[0]:
            _walk_out(v, ids, found, depth + 1)
    elif isinstance(value, dict):
        for v in value.values():
            _walk_out(v, ids, found, depth + 1)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _walk_out(v, ids, found, depth + 1)
    elif pytrees.dataclass_instance(value):
        for name in pytrees.dataclass_fields(value):
            _walk_out(getattr(value, name), ids, found, depth + 1)


def cotangent_leaves(value: Any, cotangent: Any, ids: dict[int, int], out: list) -> None:
    """Pair each tracked leaf of `value` with the matching part of `cotangent`."""
    i = ids.get(id(value))
    if i is not None and (type(value) is _ndarray or type(value) is float or isinstance(value, np.generic)
                          or type(value) is complex):
        out.append((i, cotangent))
        return
    if cotangent is None:
        return
    node = pytrees.node_for(value)
    if node is not None:
        if type(cotangent) is not node.cls:
            raise TypeError(f"the cotangent of a {node.cls.__qualname__} output must be a "
                            f"{node.cls.__qualname__} too (a registered pytree), not a {type(cotangent).__name__}")
        for v, c in zip(pytrees.flatten(node, value)[0], pytrees.flatten(node, cotangent)[0]):
            cotangent_leaves(v, c, ids, out)
    elif isinstance(value, dict):
        for k, v in value.items():
            cotangent_leaves(v, cotangent[k], ids, out)
    elif isinstance(value, (list, tuple)):
        for v, c in zip(value, cotangent):
            cotangent_leaves(v, c, ids, out)
    elif pytrees.dataclass_instance(value):
        for name in pytrees.dataclass_fields(value):
            cotangent_leaves(getattr(value, name), getattr(cotangent, name), ids, out)
