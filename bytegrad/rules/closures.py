"""The values a callable reads besides its arguments: closure cells, defaults, a bound `self`, a
partial's arguments and the globals its code names, followed through the functions they hold.

A solver's rule (rules/scipy/solvers.py) differentiates the user's residual with respect to these
hidden inputs (`hidden` finds the differentiated ones, `rebuild` makes a copy of the callable that
reads other values in their places); the runtime's check of C functions handed a Python callable
(runtime/dispatch.py) refuses a callable that hides a differentiated value.
"""
from __future__ import annotations

import functools
import types
from typing import Any, Callable

__all__ = ["hidden", "rebuild", "Path", "set_tracked_probe", "tracked"]

#: a step from a holder to what it holds: ("cell", i), ("default", i), ("kwdefault", name),
#: ("global", name), ("self",), ("func",), ("arg", i), ("keyword", name), ("item", i), ("key", k),
#: ("attr", name)
Step = tuple
Path = tuple  # of steps

_FunctionType = types.FunctionType
_MethodType = types.MethodType
_partial = functools.partial
_SKIP = (types.ModuleType, type, types.BuiltinFunctionType, types.CodeType, str, bytes, int, bool, type(None))
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class written in Python


def _global_names(code: types.CodeType) -> set[str]:
    """The names `code` (and the code nested in it: lambdas, comprehensions) may read as globals."""
    names = set(code.co_names)
    for c in code.co_consts:
        if type(c) is types.CodeType:
            names |= _global_names(c)
    return names


def _children(obj: Any, depth: int) -> list[tuple[Step, Any]]:
    """What `obj` holds that may hide a value, one step down."""
    t = type(obj)
    if t is _FunctionType:
        out: list[tuple[Step, Any]] = []
        for i, cell in enumerate(obj.__closure__ or ()):
            try:
                out.append((("cell", i), cell.cell_contents))
            except ValueError:  # an empty cell (a name assigned later)
                pass
        out.extend((("default", i), v) for i, v in enumerate(obj.__defaults__ or ()))
        out.extend((("kwdefault", k), v) for k, v in (obj.__kwdefaults__ or {}).items())
        g = obj.__globals__
        builtins_ = g.get("__builtins__")
        for name in sorted(_global_names(obj.__code__)):
            if name in g:
                v = g[name]
                if v is not builtins_:
                    out.append((("global", name), v))
        return out
    if t is _MethodType:
        return [(("func",), obj.__func__), (("self",), obj.__self__)]
    if t is _partial:
        return ([(("func",), obj.func)] + [(("arg", i), v) for i, v in enumerate(obj.args)]
                + [(("keyword", k), v) for k, v in obj.keywords.items()])
    if t is list or t is tuple:
        return [(("item", i), v) for i, v in enumerate(obj)] if depth else []
    if t is dict:
        return [(("key", k), v) for k, v in obj.items()] if depth else []
    if depth and t.__flags__ & _HEAPTYPE and not isinstance(obj, _SKIP):
        d = getattr(obj, "__dict__", None)
        out = [(("attr", k), v) for k, v in d.items()] if type(d) is dict else []
        for klass in t.__mro__:  # and its slots (a dataclass(slots=True))
            for name in klass.__dict__.get("__slots__", ()):
                if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                    out.append((("attr", name), getattr(obj, name)))
        return out
    return []


def hidden(fn: Any, tracked: Callable[[Any], bool], *, depth: int = 6,
           limit: int = 10000) -> list[tuple[list[Path], Any]]:
    """The differentiated values `fn` can read without receiving them as arguments, each once, with
    every path that reaches it.

    Followed: closure cells, defaults, globals its code names, a bound method's `self`, a partial's
    function and arguments, and the functions these hold (at any depth); containers (list, tuple,
    dict) and the attributes (and slots) of objects of Python classes, `depth` levels down; at most
    `limit` values in all. Modules, classes and C functions are not entered.
    """
    found: dict[int, tuple[list[Path], Any]] = {}
    seen: set[int] = set()
    todo: list[tuple[Path, Any, int]] = [((), fn, depth)]
    steps = 0
    while todo and steps < limit:
        path, obj, d = todo.pop()
        steps += 1
        if path and tracked(obj):
            found.setdefault(id(obj), ([], obj))[0].append(path)
            continue
        if id(obj) in seen or isinstance(obj, _SKIP):
            continue
        seen.add(id(obj))
        t = type(obj)
        child_depth = d if (t is _FunctionType or t is _MethodType or t is _partial) else d - 1
        for step, v in reversed(_children(obj, d)):
            todo.append((path + (step,), v, child_depth))
    return sorted(found.values(), key=lambda pv: pv[0][0])


def _rebuilt(obj: Any, step: Step, new_child: Any) -> Any:
    """A copy of `obj` holding `new_child` where `step` leads (a function: a new function object)."""
    kind = step[0]
    t = type(obj)
    if t is _FunctionType:
        closure, defaults, kwdefaults, g = obj.__closure__, obj.__defaults__, obj.__kwdefaults__, obj.__globals__
        if kind == "cell":
            closure = tuple(types.CellType(new_child) if i == step[1] else c for i, c in enumerate(closure))
        elif kind == "default":
            defaults = tuple(new_child if i == step[1] else v for i, v in enumerate(defaults))
        elif kind == "kwdefault":
            kwdefaults = {**kwdefaults, step[1]: new_child}
        else:  # "global": the copy reads a copy of its module's globals
            g = {**g, step[1]: new_child}
        out = _FunctionType(obj.__code__, g, obj.__name__, defaults, closure)
        out.__kwdefaults__ = kwdefaults
        out.__dict__.update(obj.__dict__)
        out.__qualname__ = obj.__qualname__
        return out
    if t is _MethodType:
        return _MethodType(new_child, obj.__self__) if kind == "func" else _MethodType(obj.__func__, new_child)
    if t is _partial:
        if kind == "func":
            return _partial(new_child, *obj.args, **obj.keywords)
        if kind == "arg":
            return _partial(obj.func, *(new_child if i == step[1] else v for i, v in enumerate(obj.args)),
                            **obj.keywords)
        return _partial(obj.func, *obj.args, **{**obj.keywords, step[1]: new_child})
    if t is list or t is tuple:
        return t(new_child if i == step[1] else v for i, v in enumerate(obj))
    if t is dict:
        return {**obj, step[1]: new_child}
    import copy  # (only here: `import bytegrad` does not import copy)

    out = copy.copy(obj)  # an object of a Python class: a shallow copy with the attribute replaced
    object.__setattr__(out, step[1], new_child)  # (a frozen dataclass too)
    return out


def _child(obj: Any, step: Step) -> Any:
    kind = step[0]
    if kind == "cell":
        return obj.__closure__[step[1]].cell_contents
    if kind == "default":
        return obj.__defaults__[step[1]]
    if kind == "kwdefault":
        return obj.__kwdefaults__[step[1]]
    if kind == "global":
        return obj.__globals__[step[1]]
    if kind == "func":
        return obj.__func__ if type(obj) is _MethodType else obj.func
    if kind == "self":
        return obj.__self__
    if kind == "arg":
        return obj.args[step[1]]
    if kind == "keyword":
        return obj.keywords[step[1]]
    if kind in ("item", "key"):
        return obj[step[1]]
    return getattr(obj, step[1])


def rebuild(fn: Any, paths: list[Path], values: list[Any]) -> Any:
    """A copy of `fn` that reads `values[i]` where `paths[i]` leads (`hidden`'s paths, one entry per
    path); `fn` and what it holds are not changed (the copies are shallow, along the paths only)."""
    if not paths:
        return fn
    groups: dict[Step, list[tuple[Path, Any]]] = {}
    for path, value in zip(paths, values):
        groups.setdefault(path[0], []).append((path[1:], value))
    out = fn
    for step, rest in groups.items():
        if rest[0][0] == ():
            new_child = rest[0][1]
        else:
            new_child = rebuild(_child(fn, step), [p for p, _ in rest], [v for _, v in rest])
        out = _rebuilt(out, step, new_child)
    return out


# ---- which values are differentiated: bytegrad.api installs the question (rules never see a tape) ----

_tracked_probe: Callable[[Any], bool] = lambda value: False  # noqa: E731


def set_tracked_probe(probe: Callable[[Any], bool]) -> None:
    """Install what `tracked` asks: whether the tape recording this thread's operations tracks `value`."""
    global _tracked_probe
    _tracked_probe = probe


def tracked(value: Any) -> bool:
    """Whether `value` is a differentiated value of the computation recorded now (False when none is)."""
    return _tracked_probe(value)
