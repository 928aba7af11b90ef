"""User classes registered as pytrees (`bytegrad.register_pytree`): how bytegrad takes an instance
apart into its children and builds one back, with JAX's convention.

Like the rule registry, it is written under a lock and read without one (a dict lookup by exact type).
"""
from __future__ import annotations

import _thread
import enum
import types
from typing import Any, Callable, Optional, Sequence

import numpy as np

from bytegrad.errors import SourceLoc

__all__ = ["PytreeNode", "register_pytree", "node_for", "flatten", "unflatten", "holds_floats", "user_object",
           "float_attributes", "dataclass_instance", "dataclass_fields", "shallow_copy",
           "registered"]

_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class written in Python
#: types bytegrad already takes apart (or treats as leaves) itself: registering them would change
#: what every gradient looks like
_BUILTIN = (dict, list, tuple, np.ndarray, np.generic, float, complex, int, bool, str, bytes, type(None))


class PytreeNode:
    """How to take one registered class apart (`flatten(obj) -> (children, aux)`) and put it back
    together (`unflatten(aux, children) -> obj`)."""

    __slots__ = ("cls", "flatten", "unflatten", "defined_at")

    def __init__(self, cls: type, flatten: Callable[[Any], tuple[Sequence[Any], Any]],
                 unflatten: Callable[[Any, Sequence[Any]], Any], defined_at: Optional[SourceLoc]) -> None:
        self.cls = cls
        self.flatten = flatten
        self.unflatten = unflatten
        self.defined_at = defined_at

    def __repr__(self) -> str:
        return f"<pytree node {self.cls.__qualname__}>"


_NODES: dict[type, PytreeNode] = {}
_LOCK = _thread.RLock()


def register_pytree(cls: type, flatten: Optional[Callable[[Any], tuple[Sequence[Any], Any]]] = None,
                    unflatten: Optional[Callable[[Any, Sequence[Any]], Any]] = None, *,
                    fields: Optional[Sequence[str]] = None, static: Sequence[str] = (),
                    override: bool = False) -> type:
    """Make instances of `cls` pytrees: differentiable arguments whose gradient is a `cls` too.

    Give either `flatten` and `unflatten` (JAX's convention), or `fields` (the shortcut for a class
    whose `__init__` takes its fields as keyword arguments).

    Parameters
    ----------
    cls : type
        The class. Instances of subclasses are not covered: register each class.
    flatten : callable, optional
        `flatten(obj) -> (children, aux)`: `children` is a list or tuple of the values to
        differentiate (arrays, floats, containers, other pytrees); `aux` is everything else, kept
        as it is (hashable data such as sizes, names, flags).
    unflatten : callable, optional
        `unflatten(aux, children) -> obj`: a new instance from `aux` and children in the order
        `flatten` gave them. It must store the children as given (no copies or conversions), so
        that bytegrad can follow them; bytegrad checks this.
    fields : sequence of str, optional
        The shortcut: the attributes that are children. The instance is rebuilt as
        `cls(**{name: child, ...}, **{name: value for the static fields})`.
    static : sequence of str, default ()
        With `fields`: attributes passed back to `__init__` unchanged and not differentiated.
    override : bool, default False
        Replace an earlier registration of `cls` (otherwise a second one is a ValueError).

    Returns
    -------
    type
        `cls`, so the call can follow the class definition or wrap it.

    Notes
    -----
    Registered instances are taken apart wherever bytegrad meets a tree: differentiated arguments
    (`grad`, `value_and_grad`, `vjp`, `jvp`, `hvp`), outputs and their cotangents, tangents, and
    `stop_gradient`. The gradient is built with `unflatten`; a child that is not differentiated
    (an int, a string) is None in it, so keep such values in `aux` (or in `static`).

    Examples
    --------
    >>> import numpy as np, bytegrad
    >>> class Linear:
    ...     def __init__(self, w, b, name="layer"):
    ...         self.w, self.b, self.name = w, b, name
    >>> _ = register_pytree(Linear, fields=("w", "b"), static=("name",))
    >>> layer = Linear(np.array([1.0, 2.0]), 0.5)
    >>> g = bytegrad.grad(lambda m, x: np.sum(m.w * x) + m.b)(layer, np.array([3.0, 4.0]))
    >>> type(g).__name__, g.w.tolist(), g.b, g.name
    ('Linear', [3.0, 4.0], 1.0, 'layer')
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_pytree takes a class, got {cls!r}")
    if issubclass(cls, _BUILTIN) and not cls.__flags__ & _HEAPTYPE or cls in _BUILTIN:
        raise TypeError(f"register_pytree({cls.__qualname__}): bytegrad already knows how to differentiate "
                        f"{cls.__qualname__} values")
    if fields is not None:
        if flatten is not None or unflatten is not None:
            raise TypeError("register_pytree takes either flatten and unflatten, or fields=..., not both")
        flatten, unflatten = _by_fields(cls, _names(fields, "fields"), _names(static, "static"))
    elif flatten is None or unflatten is None or not callable(flatten) or not callable(unflatten):
        raise TypeError(f"register_pytree({cls.__qualname__}) needs flatten and unflatten functions "
                        "(flatten(obj) -> (children, aux), unflatten(aux, children) -> obj), or fields=(...)")
    elif static:
        raise TypeError("register_pytree: static=... goes with fields=...; with flatten, put those values in aux")
    import sys

    frame = sys._getframe(1)
    loc = SourceLoc(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
    with _LOCK:
        old = _NODES.get(cls)
        if old is not None and not override:
            where = f" at {old.defined_at}" if old.defined_at is not None else ""
            raise ValueError(f"{cls.__qualname__} is already registered as a pytree{where}; pass override=True "
                             "to replace that registration")
        _NODES[cls] = PytreeNode(cls, flatten, unflatten, loc)
    return cls


def _names(names: Any, what: str) -> tuple[str, ...]:
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"register_pytree: {what} must be a tuple of attribute names, got {names!r}")
    return tuple(names)


def _by_fields(cls: type, fields: tuple[str, ...], static: tuple[str, ...]) -> tuple[Callable, Callable]:
    """flatten / unflatten for a class whose `__init__` takes `fields` and `static` by keyword."""

    def flatten_fields(obj: Any) -> tuple[list[Any], tuple[Any, ...]]:
        return [getattr(obj, name) for name in fields], tuple(getattr(obj, name) for name in static)

    def unflatten_fields(aux: tuple[Any, ...], children: Sequence[Any]) -> Any:
        return cls(**dict(zip(fields, children)), **dict(zip(static, aux)))

    flatten_fields.__qualname__ = f"{cls.__qualname__}.<flatten {', '.join(fields)}>"
    unflatten_fields.__qualname__ = f"{cls.__qualname__}.<unflatten {', '.join(fields)}>"
    return flatten_fields, unflatten_fields


def registered() -> list[PytreeNode]:
    """Every class registration made so far."""
    with _LOCK:
        return list(_NODES.values())


def node_for(value: Any) -> Optional[PytreeNode]:
    """The registration of `value`'s class (exactly its class), or None."""
    return _NODES.get(type(value)) if _NODES else None


def flatten(node: PytreeNode, value: Any) -> tuple[list[Any], Any]:
    """`node.flatten(value)` as `(list of children, aux)`, checked."""
    result = node.flatten(value)
    if type(result) is not tuple or len(result) != 2 or not isinstance(result[0], (list, tuple)):
        raise TypeError(f"the flatten function registered for {node.cls.__qualname__} must return (children, aux) "
                        f"with children a list or tuple, but it returned {type(result).__name__} "
                        f"{_short(result)}")
    return list(result[0]), result[1]


def unflatten(node: PytreeNode, aux: Any, children: Sequence[Any]) -> Any:
    """`node.unflatten(aux, children)`; a failure says that non-differentiated children are None."""
    try:
        return node.unflatten(aux, list(children))
    except Exception as exc:
        if any(c is None for c in children):
            exc.add_note(f"bytegrad rebuilt a {node.cls.__qualname__} with the unflatten function registered for "
                         "it; children that carry no derivative (ints, strings, None) are None in a gradient. "
                         "Keep such values in aux (register_pytree(..., static=(...)) with fields=...).")
        raise


def dataclass_instance(value: Any) -> bool:
    """`dataclasses.is_dataclass(value) and not isinstance(value, type)`, without importing dataclasses
    at bytegrad's import (2-3 ms with copy): a dataclass instance exists only once it is imported."""
    return hasattr(type(value), "__dataclass_fields__") and not isinstance(value, type)


def dataclass_fields(value: Any) -> list[str]:
    """The field names of a dataclass instance, in order."""
    import dataclasses  # imported already: `value` is an instance of a dataclass

    return [f.name for f in dataclasses.fields(value)]


def shallow_copy(value: Any) -> Any:
    """`copy.copy(value)`, importing copy on first use."""
    import copy

    return copy.copy(value)


def user_object(value: Any) -> bool:
    """An instance of a class written in Python that bytegrad has no way to take apart."""
    t = type(value)
    return bool(t.__flags__ & _HEAPTYPE) and not isinstance(value, (type, types.ModuleType, enum.Enum))


def holds_floats(value: Any, depth: int = 0) -> bool:
    """Whether an object's attributes hold float data (arrays, floats, or containers and objects
    holding them, a few levels down): what a gradient of it would silently miss."""
    if depth > 3:
        return False
    t = type(value)
    if t is np.ndarray:
        return value.dtype.kind in "fc"
    if t is float or t is complex or isinstance(value, (np.inexact, float, complex)):
        return True
    if isinstance(value, (list, tuple)):
        return any(holds_floats(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(holds_floats(v, depth + 1) for v in value.values())
    if not user_object(value):
        return False
    return any(holds_floats(v, depth + 1) for v in _attributes(value).values())


def float_attributes(value: Any) -> list[str]:
    """The names of an object's attributes that hold float data (for an error's suggested fix)."""
    return [name for name, v in _attributes(value).items() if holds_floats(v, 1)]


def _attributes(value: Any) -> dict[str, Any]:
    attrs = dict(getattr(value, "__dict__", {}))
    for klass in type(value).__mro__:
        slots = getattr(klass, "__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if isinstance(name, str) and name not in ("__dict__", "__weakref__") and hasattr(value, name):
                attrs[name] = getattr(value, name)
    return attrs


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
