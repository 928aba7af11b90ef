"""bytegrad's own rules modules that `import bytegrad` leaves out, and which functions each covers.

Importing a rules module costs its unmarshal and the registration of its rules (0.1-0.8 ms each),
and most programs call a few of NumPy's functions. The modules of `INDEX` are not imported with
bytegrad: `install` indexes the functions each registers a rule for (by name, resolved once), and
the first lookup of one of them (`registry.lookup`, `runtime.dispatch.resolve`, a rule registered
for it, `all_rules`) imports its module (`registry.load_deferred`). `INDEX` is generated from the
modules themselves (`_BG_INDEXING_RULES=1 python -m bytegrad.rules._deferred` rewrites
`_deferred_index.py`; tests/test_deferred_rules.py checks that it is complete and up to date). The
runtime's own lookups consult the index on a miss too (`runtime.abi.getattr_` for attribute
descriptors, `runtime.dispatch` for a callable type's `__call__` and a function bound as a method); a
module stays eager when it registers a rule on an `operator` function (the hooks of `runtime/abi.py`
and `operators.py` look those up with a plain `dict.get` and no fallback) or on a property.
"""
from __future__ import annotations

import importlib
import sys
import types
from typing import Any, Optional

from bytegrad.rules._deferred_index import INDEX as INDEX

#: the rules modules `import bytegrad` does not import
DEFERRED: tuple[str, ...] = tuple(INDEX)


def resolve(name: str) -> Any:
    """The object `module:attr.attr` names (the module is one NumPy's import has loaded)."""
    module, _, path = name.partition(":")
    obj: Any = sys.modules.get(module) or importlib.import_module(module)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def install() -> None:
    """Index the functions of the deferred modules not imported yet (`registry.load_deferred` imports them)."""
    from bytegrad.rules import registry

    with registry.LOCK:
        for module, names in INDEX.items():
            if module in sys.modules:
                continue
            registry.DEFERRED_PENDING.add(module)
            for name in names:
                fn = resolve(name)
                registry.DEFERRED[fn] = registry.DEFERRED.get(fn, ()) + (module,)


def load(fns: Optional[tuple[Any]]) -> bool:
    """Import the deferred modules covering the function in `fns` (every one for None); whether one was.
    The registry's version is left as it was: no lookup could have seen these rules missing."""
    from bytegrad.rules import registry

    pending = registry.DEFERRED_PENDING
    try:
        modules = list(pending) if fns is None else registry.DEFERRED.get(fns[0])
    except TypeError:  # unhashable
        return False
    if not modules or not pending:
        return False
    loaded = False
    with registry.LOCK:
        for module in [m for m in modules if m in pending]:
            pending.discard(module)
            before = registry.current_version
            try:
                importlib.import_module(module)
            except BaseException:
                pending.add(module)
                raise
            registry.current_version, loaded = before, True
        if not pending:
            registry.DEFERRED.clear()
    return loaded


def load_module(module: str) -> None:
    """Import one deferred module (for `bytegrad.stop_gradient`'s first use), as `load` does: the version is
    left as it was (its functions did not exist before, so no lookup could have seen their rules missing)."""
    from bytegrad.rules import registry

    with registry.LOCK:
        if module in registry.DEFERRED_PENDING:
            before = registry.current_version
            importlib.import_module(module)
            registry.DEFERRED_PENDING.discard(module)
            registry.current_version = before


# ------------------------------------------------------------------------------ generating INDEX
_NAMESPACES = ("numpy", "numpy.linalg", "numpy.lib.stride_tricks", "numpy.lib.array_utils", "math", "builtins")


def name_of(fn: Any) -> Optional[str]:
    """A `module:attr.attr` name that resolves to `fn` (or to an equal bound method), or None."""
    candidates = []
    owner = getattr(fn, "__objclass__", None)
    if isinstance(owner, type):  # np.ndarray.sum (a method descriptor)
        candidates.append(f"{owner.__module__}:{owner.__qualname__}.{fn.__name__}")
    self = getattr(fn, "__self__", None)
    if self is not None and not isinstance(self, types.ModuleType) and hasattr(self, "__name__"):
        for ns in _NAMESPACES:  # np.add.reduce (a bound method of a ufunc)
            candidates.append(f"{ns}:{self.__name__}.{fn.__name__}")
    module, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if isinstance(module, str) and isinstance(qual, str):
        candidates.append(f"{module}:{qual}")
    if isinstance(getattr(fn, "__name__", None), str):
        candidates += [f"{ns}:{fn.__name__}" for ns in _NAMESPACES]
    for name in candidates:
        try:
            found = resolve(name)
        except (ImportError, AttributeError):
            continue
        if found is fn or (type(found) is type(fn) and found == fn and hash(found) == hash(fn)):
            return name
    return None


def _hot_path_key(fn: Any) -> bool:
    """Keys the runtime looks up with a plain `dict.get` and no fallback (see the module's docstring):
    the `operator` functions (runtime/abi.py's and operators.py's hooks), and properties."""
    import operator

    if getattr(fn, "__name__", None) and getattr(operator, fn.__name__, None) is fn:
        return True
    return isinstance(fn, property)


def build(candidates: tuple[str, ...]) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """({rules module: names of the functions it registers rules for}, why modules stay eager), from
    importing each candidate after the eager ones. Run in a fresh process where nothing is deferred
    (`_BG_INDEXING_RULES=1`: the candidates are neither imported nor indexed)."""
    from bytegrad.rules import registry

    index: dict[str, tuple[str, ...]] = {}
    refused: list[str] = []
    for module in candidates:
        before = registry.all_rules()
        importlib.import_module(module)
        keys = [fn for fn, rule in registry.all_rules().items() if before.get(fn) is not rule]
        names, bad = [], []
        for fn in keys:
            name = name_of(fn)
            own = getattr(fn, "__globals__", {}).get("__name__") == module  # (stop_gradient's __module__ is "bytegrad")
            if own or (name is not None and name.startswith(module + ":")):
                continue  # the module's own function: nothing can look it up before the module is imported
            if name is None or _hot_path_key(fn):
                bad.append(repr(fn))
            else:
                names.append(name)
        if bad:
            refused.append(f"{module}: {', '.join(bad[:5])}")
        else:
            index[module] = tuple(sorted(names))
    return index, refused


#: (linalg_decomp stays eager: np.linalg.svd is the seed's own example, whose first gradient must stay
#: within 2 ms of autograd's; loading the module on that gradient costs it 0.4 ms)
CANDIDATES = ("bytegrad.rules.python_stdlib", "bytegrad.rules.control") + tuple(f"bytegrad.rules.numpy.{m}" for m in (
    "building", "cumulative", "functional", "manipulation", "nondiff", "products", "selection", "shape",
    "signal", "statistics", "ufunc_methods"))


def main() -> None:
    import os
    import pathlib
    import pprint

    if os.environ.get("_BG_INDEXING_RULES") != "1":
        raise SystemExit("run with _BG_INDEXING_RULES=1 (nothing deferred, the candidates not imported)")
    index, refused = build(CANDIDATES)
    path = pathlib.Path(__file__).with_name("_deferred_index.py")
    path.write_text('"""Generated by `python -m bytegrad.rules._deferred`: the functions each deferred rules module\n'
                    'registers a rule for, as `module:attribute` names (see rules/_deferred.py)."""\n'
                    "INDEX: dict[str, tuple[str, ...]] = " + pprint.pformat(index, width=110) + "\n")
    for line in refused:
        print("stays eager:", line)


if __name__ == "__main__":
    main()
