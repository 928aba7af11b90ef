"""Bytecode in, bytecode out: `rewrite_code` runs the passes on one code object.

The passes, in order (`pipeline.PIPELINE`): `activity` (which values may depend on the
differentiated inputs), `fusion` (elementwise trees that become one fused site) and `rewrite` (active
sites call `runtime.abi`). `rewritten_function` is what the runtime calls for a callee.
"""
from __future__ import annotations

import functools
import types
from typing import Any, Optional

from bytegrad._config import config as _config
from bytegrad.errors import SourceLoc
from bytegrad.rules import registry
from bytegrad.transform import cache
from bytegrad.transform.cache import param_names as param_names  # (re-exported)

__all__ = ["rewrite_code", "rewritten_function", "param_names"]

_DUMP = _config.bind("dump", __name__, "_DUMP")




def rewrite_code(code: types.CodeType, active: frozenset[str], fn_globals: dict[str, Any],
                 immutable: frozenset[str] = frozenset(), made: bool = False) -> types.CodeType:
    """Rewrite `code` so that operations on the `active` parameters call the differentiation hooks.

    `immutable` names parameters bound to ints, strings, None...: nothing can make them active.
    A rewrite stored on disk by an earlier process is loaded instead when everything it assumed
    (the globals and rules it resolved) still holds: see `cache.rewrite_cached`. `made`: the rewrite
    a capture run asks for, where what is computed from an array made from constants is hooked too
    (`activity.analyze`'s `made_active`), so that the capture records it.
    """
    registry.load_lazy_rules()  # scipy imported since the last rewrite: its rules decide what to rewrite
    new_code = cache.rewrite_cached(
        code, active, immutable, fn_globals,
        lambda assumed: _rewrite_fresh(code, active, fn_globals, immutable, assumed, made), made)
    if _DUMP and (_DUMP == "1" or code.co_name in _DUMP.split(",")):
        import dis
        print(f"---- bytegrad: {code.co_qualname if hasattr(code, 'co_qualname') else code.co_name} "
              f"active={sorted(active)}")
        dis.dis(new_code)
    return new_code


def _rewrite_fresh(code: types.CodeType, active: frozenset[str], fn_globals: dict[str, Any],
                   immutable: frozenset[str], assumed: Any, made: bool = False) -> types.CodeType:
    # Imported here: a process whose rewrites all come from the disk cache never imports the disassembler.
    from bytegrad.transform.code import Bytecode

    from bytegrad.transform import assemble, pipeline
    from bytegrad.transform.rewrite import fusion_disabled

    loc = SourceLoc(code.co_filename, code.co_firstlineno, code.co_qualname if hasattr(code, "co_qualname")
                    else code.co_name)
    bc = Bytecode.from_code(code, conserve_exception_block_stackdepth=True)
    unit = pipeline.run(pipeline.Unit(bc, active, fn_globals, loc, immutable, assumed, fuse=not fusion_disabled(),
                                      made=made))
    assert unit.out is not None
    return assemble.to_code(unit.out)


_INERT = (int, bool, str, bytes, type(None), range, slice, type(Ellipsis), float, complex)
#: types whose values are never differentiated (api.py passes them as constants)
INERT_TYPES = _INERT

# activity of an argument: inert and immutable / may be (or hold) a differentiated value / neither
INERT, ACTIVE, MUTABLE = 0, 1, 2


def _value_activity(v: Any, ids: dict[int, int]) -> int:
    t = type(v)
    if id(v) in ids:
        return ACTIVE
    if t is slice:  # `obj[x0:x1]` hands a user `__getitem__` a slice of differentiated bounds
        return ACTIVE if (id(v.start) in ids or id(v.stop) in ids or id(v.step) in ids) else INERT
    if t in _INERT:
        return INERT
    if t.__module__ == "numpy":  # untracked arrays, scalars, dtypes
        return MUTABLE
    return ACTIVE  # containers and objects may hold differentiated values


def _pooled_activity(bits: list[int]) -> int:
    """The activity of a `*args` tuple or `**kwargs` dict: active if any value in it is (an untracked
    array beside a differentiated one must not make the whole tuple look inactive), else the
    strongest of the rest."""
    if ACTIVE in bits:
        return ACTIVE
    return max(bits, default=MUTABLE)


def _activity(f: types.FunctionType, args: tuple, kwargs: Optional[dict], ids: dict[int, int]) -> tuple[int, ...]:
    code = f.__code__
    argc = code.co_argcount
    names = code.co_varnames
    nkw = code.co_kwonlyargcount
    bits: list[int] = []
    nargs = len(args)
    defaults = f.__defaults__ or ()
    first_default = argc - len(defaults)
    for i in range(argc):
        if i < nargs:
            v = args[i]
        elif kwargs and names[i] in kwargs:
            v = kwargs[names[i]]
        elif i >= first_default:
            v = defaults[i - first_default]
        else:
            v = None
        bits.append(_value_activity(v, ids))
    kwdefaults = f.__kwdefaults__ or {}
    for name in names[argc:argc + nkw]:
        v = kwargs[name] if kwargs and name in kwargs else kwdefaults.get(name)
        bits.append(_value_activity(v, ids))
    flags = code.co_flags
    if flags & 0x04:  # *args
        bits.append(_pooled_activity([_value_activity(v, ids) for v in args[argc:]]))
    if flags & 0x08:  # **kwargs
        bits.append(_pooled_activity([_value_activity(v, ids) for k, v in (kwargs or {}).items()
                                      if k not in names[:argc + nkw]]))
    if f.__closure__:
        for cell in f.__closure__:
            try:
                bits.append(_value_activity(cell.cell_contents, ids))
            except ValueError:
                bits.append(INERT)
    return tuple(bits)


_GENERATOR = 0x20  # inspect.CO_GENERATOR


@functools.lru_cache(maxsize=512)
def _uses_sent_values(code: types.CodeType) -> bool:
    from bytegrad.transform import opcodes

    return opcodes.uses_sent_values(code)


def _reads_tracked_global(f: types.FunctionType, ids: dict[int, int]) -> bool:
    """Whether `f` (called with no differentiated argument) reads a global that holds a differentiated
    value, or a module-level container or object one may have been written into (`STATE["v"] = x * x`
    in the differentiated function, then `helper()` reads it): then it runs rewritten, where the
    activity analysis takes such globals as active. A global rebound to a differentiated float or
    array is an error: the analysis cannot tell it from a constant."""
    if f.__module__ is not None and f.__module__.startswith(("numpy", "bytegrad")):
        return False
    g = f.__globals__
    found = False
    for name in f.__code__.co_names:
        v = g.get(name, _ABSENT)
        if v is _ABSENT:
            continue
        if id(v) in ids:
            from bytegrad.errors import DifferentiationError
            code = f.__code__
            raise DifferentiationError(
                f"{f.__qualname__} reads the global {name}, which holds a value differentiated in this "
                "gradient (assigned by the differentiated code, or passed to it as well): a function called "
                "without differentiated arguments cannot be followed through such a global.",
                SourceLoc(code.co_filename, code.co_firstlineno, f.__qualname__),
                f"pass {name} to {f.__name__} as an argument, or keep it in a module-level container "
                f"(`STATE[{name!r}] = ...`).")
        if type(v) in _GLOBAL_CONTAINERS or (type(v).__module__ not in ("builtins", "numpy") and
                                             hasattr(v, "__dict__") and not isinstance(v, _GLOBAL_INERT)):
            found = True
    return found


_ABSENT = object()
_GLOBAL_CONTAINERS = (dict, list, set, types.SimpleNamespace)
_GLOBAL_INERT = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)

#: id(callee) -> (weak reference to it, the code its entries were rewritten from, key -> rewritten)
_FN_CACHE: dict[int, tuple[Any, types.CodeType, dict[Any, types.FunctionType]]] = {}

# a switch that changes what the rewrite emits changed: code rewritten before is rewritten again
_config.on_change(cache.DISK_KEY_SWITCHES, registry.outdate)


def rewritten_function(f: types.FunctionType, args: tuple, kwargs: Optional[dict],
                       ids: dict[int, int], made: bool = False) -> Optional[types.FunctionType]:
    """The rewritten version of callee `f` for these arguments, or None when nothing in it is active.
    `made`: for a capture run (`rewrite_code`'s `made`), a rewrite of its own."""
    bits = _activity(f, args, kwargs, ids)
    if ACTIVE not in bits and not (f.__code__.co_flags & _GENERATOR and _uses_sent_values(f.__code__)) \
            and not _reads_tracked_global(f, ids):
        # (a generator that uses sent values is rewritten: `send` may pass in a tracked value; so is a
        # helper that reads a global the function wrote a tracked value into)
        return None
    key = (bits, registry.settled_version(), True) if made else (bits, registry.settled_version())
    entry = _FN_CACHE.get(id(f))
    if entry is not None and entry[0]() is f and entry[1] is f.__code__:
        fn = entry[2].get(key)
        # (the rewritten function copied `f`'s defaults: a replaced tuple makes it anew; the keyword
        # defaults are the same dict, so writes into it are seen)
        if fn is not None and fn.__defaults__ is f.__defaults__ and fn.__kwdefaults__ is f.__kwdefaults__:
            return fn
    return _make_function(f, bits, key, made)


def callee_activity(f: types.FunctionType, args: tuple, kwargs: Optional[dict],
                    ids: dict[int, int]) -> tuple[frozenset[str], frozenset[str]]:
    """(the parameters of callee `f` that hold tracked values in this call, those that hold
    immutable constants): the sets `rewritten_function` rewrites it for."""
    bits = _activity(f, args, kwargs, ids)
    pnames = param_names(f.__code__)
    return (frozenset(n for n, b in zip(pnames, bits) if b == ACTIVE),
            frozenset(n for n, b in zip(pnames, bits) if b == INERT))


def _make_function(f: types.FunctionType, bits: tuple[int, ...], key: Any, made: bool = False) -> types.FunctionType:
    import weakref

    code = f.__code__
    pnames = param_names(code)
    active = frozenset(n for n, b in zip(pnames, bits) if b == ACTIVE)
    immutable = frozenset(n for n, b in zip(pnames, bits) if b == INERT)
    new_code = cache.lookup(code, key, lambda: rewrite_code(code, active, f.__globals__, immutable, made), pnames)
    fn = function_from(f, new_code)
    entry = _FN_CACHE.get(id(f))
    if entry is None or entry[0]() is not f or entry[1] is not code:  # new, or its body was replaced
        fid = id(f)

        def forget(_r: Any, fid: int = fid) -> None:
            _FN_CACHE.pop(fid, None)
        ref = weakref.ref(f, forget)
        entry = _FN_CACHE[fid] = (ref, code, {})
    if len(entry[2]) > 4 * cache.CACHE_SIZE_LIMIT:
        entry[2].clear()
    entry[2][key] = fn
    return fn


def function_from(f: types.FunctionType, code: types.CodeType) -> types.FunctionType:
    """A function like `f` (globals, defaults, closure, metadata) running `code`."""
    fn = types.FunctionType(code, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    fn.__kwdefaults__ = f.__kwdefaults__
    fn.__qualname__ = f.__qualname__
    fn.__module__ = f.__module__
    fn.__doc__ = f.__doc__
    return fn
