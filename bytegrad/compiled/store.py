"""Compiled programs on disk: `bytegrad.precompile` stores a function's NumPy programs, and so does a
process whose `auto` tier captured them, when it exits (`later`); a fresh process loads them on the
second gradient of a signature (compiled.Tiers._load_due), so that gradient already runs compiled. Each
signature's first program is stored with its standalone form too (`save`, compiled/quick.py), which the
first gradient runs without loading the general path (bytegrad/_quick.py).

A program is its generated source and its constants (compiled/lower_numpy.py). The source is text; a
constant is written as data (arrays, dtypes, numbers, tuples, `Site`s) or, where it is part of the
process rather than data, as a reference that a load resolves in the new process, without
importing anything:

- a module, or a module's `__dict__` (the globals the guards read): by the module's name;
- a function, class, ufunc or builtin reachable as `module.qualname`: by that path;
- a rule's reverse function or one of its partials: by the function the rule is for, with the
  rule's kind and the place it is defined (as the disk cache of rewritten code checks rules);
  the load takes the rule registered now, and refuses the program if that rule is another;
- a Python callee's code and defaults (the `code` guard): by the function, checked against the
  marshalled code and the defaults stored beside it.

A constant that is none of these makes the program unstorable (it is then made again by a
capture in the new process). Entries go through diskcache.py (namespace "programs"):
the same trust model as rewritten code, and its unpickler, which loads only bytegrad's, NumPy's
and plain builtin types. The registry version a program guards is the loading process's own
(`_VERSION` in program_parts.program_from_code). The compiled code is stored too (marshal), so a load
runs no compiler.

bytegrad's own rules are part of the key (its source fingerprint); what the processes registered
besides (a user's or a plugin's rules and opt-outs, `custom_vjp`s, pytree classes) is not, and a
program captured without a user's rule for a function it inlined would ignore that rule. So the
payload carries that state (`foreign_state`), and a load refuses a program whose process registered
otherwise than the loading one has so far; what is registered after the load changes the version
that every program guards.
"""
from __future__ import annotations

import io
import marshal
import pickle
import re
import sys
import types
from typing import Any, Optional, Union

import numpy as np

from bytegrad import _quick, diskcache
from bytegrad.errors import qualname
from bytegrad.rules import pytrees, registry
from bytegrad.rules._shape import is_stand_in, stand_in
from bytegrad.runtime import safepickle
from bytegrad.transform.cache import worker_process
from bytegrad.compiled.guards import Guard
from bytegrad.compiled.parts import program_code, program_from_code
from bytegrad.compiled.source import Program

__all__ = ["NAMESPACE", "dumps", "loads", "key", "save", "later", "flush", "PENDING"]

NAMESPACE = "programs"
#: 2: the compiled code beside the source, stand-ins by shape; 3: the Numba twin's kernels;
#: 4: program(args, value=True); 5: the share of its time a Numba twin could save; 6: typed guards
#: (kind, check, description); 7: `foreign_state`
_FORMAT = 7


def key(code: types.CodeType, kind: Any, signature: tuple[type, ...], defaults: Any = (None, None)) -> Optional[str]:
    """The disk key of the programs of `code` for one kind (the `wrt` key of bytegrad/compiled/policy.py)
    and argument signature, with the function's `(__defaults__, __kwdefaults__)`: a program captured with
    other defaults assumed their values (a call that leaves a parameter out reads its default), and a marshalled
    code object holds none; None for code marshal cannot write, or defaults that are not plain data."""
    try:
        raw = marshal.dumps(code, 2)
    except ValueError:
        return None
    if not _plain_data(defaults):
        return None
    h = diskcache.sha256(raw)
    h.update(repr((sys.implementation.cache_tag, diskcache.bytegrad_version(), _FORMAT, repr(kind),
                   tuple(f"{t.__module__}.{t.__qualname__}" for t in signature), defaults)).encode())
    return h.hexdigest()


def _plain_data(value: Any) -> bool:
    """Whether `value` is numbers, strings, flags and None, in tuples, lists and dicts: what `repr` writes exactly."""
    t = type(value)
    if t in (tuple, list):
        return all(_plain_data(v) for v in value)
    if t is dict:
        return all(_plain_data(k) and _plain_data(v) for k, v in value.items())
    return t in (int, float, complex, str, bytes, bool, type(None))


# ---- writing ------------------------------------------------------------------------------------


#: the signatures `auto` captured, whose programs this process writes when it exits (`later`): (record, signature,
#: function, cache directory at the capture)
PENDING: list[tuple[Any, tuple, Any, Optional[str]]] = []
#: signatures stored per process at most (the first captured): a process that captures thousands does not
#: spend its exit writing them
PENDING_LIMIT = 64
_queued = [0]


def later(tiers: Any, signature: tuple, fn: types.FunctionType) -> None:
    """Write the programs `tiers` (a compiled/policy.py record) holds for `signature` of `fn` when the process
    exits (a capture does not pay for the store: about 50 ms for the MLP's, the export's machinery loaded);
    at once in a process multiprocessing started, which its pool may end without running `atexit`."""
    if _queued[0] >= PENDING_LIMIT:
        return
    _queued[0] += 1
    PENDING.append((tiers, signature, fn, diskcache.cache_dir()))
    if worker_process():  # (the rewrite cache's test: transform/cache.py)
        flush()
    elif _queued[0] == 1:
        import atexit

        atexit.register(flush)


def flush() -> None:
    """Write the pending signatures' programs (`later`) into the disk cache they were captured for."""
    while PENDING:
        try:
            tiers, signature, fn, directory = PENDING.pop(0)
        except IndexError:  # another thread took the last one
            return
        if diskcache.cache_dir() != directory:
            continue  # the cache moved or was switched off since
        try:
            tiers.store([r.program for r in tiers.runs if r.signature == signature], signature, fn)
        except Exception:  # noqa: BLE001 - at exit, a program that cannot be written is not written
            continue


def save(code: types.CodeType, kind: Any, signature: tuple[type, ...], programs: list[Program],
         fn: Optional[types.FunctionType] = None, defaults: Any = (None, None)) -> int:
    """Store `programs` (NumPy programs of `code` for `kind` and `signature`) in the disk cache and,
    given the function `fn` and a `kind` of positions, the first one's standalone form for a fresh
    process's first call (compiled/quick.py, bytegrad/_quick.py); returns the programs stored."""
    k = key(code, kind, signature, defaults)  # (`defaults`: the function's, as `key` takes them)
    data = dumps(programs) if k is not None and programs else None
    if data is None or k is None or not diskcache.store(NAMESPACE, k, data, label=code.co_qualname):
        return 0
    positions = kind if type(kind) is tuple else (kind,)
    if fn is not None and all(type(p) is int for p in positions):
        from bytegrad.compiled import quick  # (the export's machinery: loaded by a store, not by a load)

        quick_key = _quick.key(code, kind, signature)
        try:
            form = quick.payload(programs[0], fn, foreign_state())
        except Exception as exc:  # noqa: BLE001 - no standalone form: the first call runs the general path
            import logging

            logging.getLogger("bytegrad").debug("no standalone form of %s: %s: %s", code.co_qualname,
                                                type(exc).__name__, exc)
            form = None
        if form is not None and quick_key is not None:
            diskcache.store(_quick.NAMESPACE, quick_key, form, label=code.co_qualname)
    return len(programs)


def dumps(programs: list[Program]) -> Optional[bytes]:
    """The payload of `programs` (NumPy programs of one signature), or None when one holds a
    constant that cannot be written as data or a reference."""
    parts = []
    module_dicts = {id(vars(m)) for m in list(sys.modules.values()) if m is not None}
    for prog in programs:
        if prog.parts is None:
            return None
        ns, source, lines, filename = prog.parts
        if any(_GLOBALS.fullmatch(name) and type(v) is dict and id(v) not in module_dicts for name, v in ns.items()):
            return None  # globals that are no module's (`FunctionType(code, {...})`): a copy would be guarded
        code = marshal.dumps(program_code(source, lines, filename))  # a load then runs no compiler
        parts.append((ns, source, lines, filename, code, tuple((g.kind, g.check, g.what) for g in prog.guards), prog.records, prog.pullback,
                      prog.twin, prog.share))
    buf = io.BytesIO()
    try:
        pickler = _Pickler(buf)
        for prog_parts in parts:
            pickler.note_functions(prog_parts[0].values())
        pickler.dump((foreign_state(), parts))
    except (pickle.PicklingError, TypeError, AttributeError, ValueError):
        return None
    return buf.getvalue()


class _Pickler(pickle.Pickler):
    def __init__(self, file: Any) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._bytegrad = safepickle.ref_index()
        self._dicts = {id(vars(m)): name for name, m in list(sys.modules.items()) if m is not None}
        self._rules = _rule_index()
        self._code_of: dict[int, Any] = {}

    def note_functions(self, values: Any) -> None:
        """Remember the functions among a program's constants: the `code` guard's code object and
        defaults are written as references to their function."""
        for fn in values:
            if type(fn) is types.FunctionType:
                for part in (fn.__code__, fn.__defaults__, fn.__kwdefaults__):
                    if part is not None:
                        self._code_of[id(part)] = fn

    def persistent_id(self, obj: Any) -> Any:
        t = type(obj)
        if t in _PLAIN:
            return None
        ref = self._bytegrad.get(id(obj))
        if ref is not None and safepickle.lookup_ref(ref) is obj:
            return ("bytegrad", ref)
        if t is types.ModuleType:
            return ("module", obj.__name__)
        if t is dict and id(obj) in self._dicts:
            return ("dict", self._dicts[id(obj)])
        rule_ref = self._rules.get(id(obj))
        if rule_ref is not None:
            return rule_ref
        if t is types.CodeType or (t is tuple or t is dict) and id(obj) in self._code_of:
            fn = self._code_of.get(id(obj))
            if fn is None:
                raise pickle.PicklingError("a code object of no known function")
            part = "code" if t is types.CodeType else ("defaults" if t is tuple else "kwdefaults")
            # copies of the defaults: the objects themselves are in `_code_of`, and the pickler would
            # ask for their persistent id again, without end
            return (part, _path(fn), marshal.dumps(fn.__code__, 2), _copy(fn.__defaults__), _copy(fn.__kwdefaults__))
        if t is np.ndarray and is_stand_in(obj):  # a shape and a dtype, not the array it stands for
            return ("stand_in", obj.shape, obj.dtype.str)
        if isinstance(obj, np.dtype):  # (guards test `x.dtype is dt`: the canonical instance)
            if np.dtype(obj.str) is not obj:
                raise pickle.PicklingError(f"a dtype that is not NumPy's own: {obj}")
            return ("dtype", obj.str)
        path = _path(obj)
        if path is not None and not isinstance(obj, (np.ndarray, np.generic)):
            return ("path", path)
        return None


def _copy(defaults: Optional[Union[tuple, dict]]) -> Optional[Union[list, dict]]:
    """A function's `__defaults__` (a list) or `__kwdefaults__` (a dict) as a new object."""
    if defaults is None:
        return None
    return list(defaults) if type(defaults) is tuple else dict(defaults)


_PLAIN = frozenset({type(None), bool, int, float, complex, str, bytes, slice, type(Ellipsis)})
#: the constants of a program that are a function's globals, a module's namespace or builtins (compiled/source.py)
_GLOBALS = re.compile(r"[GMB][0-9]+")


_path = _quick.path_of  # (module, qualname) that finds the object itself, or None
_find = _quick.find


def _rule_index() -> dict[int, tuple]:
    """id of a rule's reverse function or partial -> its reference."""
    index: dict[int, tuple] = {}
    for rule in registry.all_rules().values():
        fn_path = _path(rule.fn) if not isinstance(rule.fn, types.MethodWrapperType) else None
        if fn_path is None:
            continue
        stamp = _stamp(rule)
        if rule.rrule is not None:
            index.setdefault(id(rule.rrule), ("rrule", fn_path, stamp))
        for k, d in enumerate(rule.partials or ()):
            if callable(d):
                index.setdefault(id(d), ("partial", fn_path, k, stamp))
    return index


def _stamp(rule: Any) -> tuple:
    at = rule.defined_at
    return (rule.kind.value, (at.filename, at.lineno) if at is not None else None)


def foreign_state() -> tuple:
    """What this process registered beyond bytegrad's own rules, as data that compares equal between
    processes: each function given a rule or opted out outside bytegrad/rules/ (by name) with the
    rule in force (its kind and where its forms were defined) and whether it is opted out; each
    pytree class with where it was registered."""
    def at(loc: Any) -> Optional[tuple[str, int]]:
        return None if loc is None else (loc.filename, loc.lineno)

    rules = []
    for fn in list(registry.FOREIGN):
        rule = registry.get_rule(fn)
        rules.append((qualname(fn), registry.opted_out(fn),
                      None if rule is None else (rule.kind.value, at(rule.defined_at), at(rule.frule_defined_at))))
    nodes = [(f"{n.cls.__module__}.{n.cls.__qualname__}", at(n.defined_at)) for n in pytrees.registered()]
    return tuple(sorted(rules, key=repr)), tuple(sorted(nodes, key=repr))


# ---- reading ------------------------------------------------------------------------------------


def loads(payload: bytes) -> Optional[list[Program]]:
    """The programs of a payload, compiled in this process; None when a reference no longer
    resolves to what it was (a rule registered since, a callee's code replaced, a module gone)."""
    try:
        foreign, parts = _Unpickler(io.BytesIO(payload)).load()
    except (pickle.UnpicklingError, LookupError, AttributeError, TypeError, ValueError, EOFError):
        return None
    if foreign != foreign_state():
        return None
    programs = []
    for ns, source, lines, filename, code, guards, records, pullback, twin, share in parts:
        # its Numba twin's kernel modules (their names: what is on disk)
        twin_ok = twin and all(type(t) is str and t.startswith("bgp_") and t[4:].isalnum() for t in twin)
        programs.append(Program(program_from_code(marshal.loads(code), ns), source, [Guard(*g) for g in guards],
                                records, parts=(ns, source, lines, filename), pullback=pullback,
                                twin=tuple(twin) if twin_ok else None,
                                share=share if type(share) is float and 0.0 <= share <= 1.0 else 1.0))
    return programs


class _Unpickler(safepickle.SafeUnpickler):
    def persistent_load(self, pid: Any) -> Any:
        tag = pid[0] if isinstance(pid, tuple) and pid else None
        if tag == "bytegrad":
            return safepickle.resolve_ref(pid[1])
        if tag == "module":
            return _required(sys.modules.get(pid[1]), pid)
        if tag == "dict":
            return vars(_required(sys.modules.get(pid[1]), pid))
        if tag == "dtype":
            return np.dtype(pid[1])
        if tag == "stand_in":
            return stand_in(np.broadcast_to(np.zeros((), np.dtype(pid[2])), tuple(pid[1])))
        if tag == "path":  # (the object of that name now: one monkeypatched in its place has another name)
            obj = _required(_find(*pid[1]), pid)
            if _path(obj) != tuple(pid[1]):
                raise LookupError(f"{pid[1]} is another object now")
            return obj
        if tag == "rrule" or tag == "partial":
            rule = registry.lookup(_required(_find(*pid[1]), pid))
            if rule is None or _stamp(rule) != pid[-1]:
                raise LookupError(f"the rule of {pid[1]} is another now")
            return rule.rrule if tag == "rrule" else rule.partials[pid[2]]
        if tag in ("code", "defaults", "kwdefaults"):
            fn = _required(_find(*pid[1]), pid)
            if marshal.dumps(fn.__code__, 2) != pid[2] or _copy(fn.__defaults__) != pid[3] \
                    or _copy(fn.__kwdefaults__) != pid[4]:
                raise LookupError(f"{pid[1]} has other code or defaults now")
            return {"code": fn.__code__, "defaults": fn.__defaults__, "kwdefaults": fn.__kwdefaults__}[tag]
        raise pickle.UnpicklingError(f"bytegrad's program cache does not load the reference {pid!r}")


def _required(value: Any, pid: Any) -> Any:
    if value is None:
        raise LookupError(f"{pid!r} is not in this process")
    return value
