"""In-place writes and data-dependent indexing in compiled programs (the NumPy back end).

The general path records a write into an array as a new version of the array that owns the
memory (runtime/writes.py: `SETITEM`, `OWNER_WRITE`, `ADD_AT`, a `VIEW` re-derived from the owner
after a write, an `IDENTITY` copy of a value about to be overwritten). A program replays them as
values that are never overwritten: each write makes its version as a copy of the previous one with
the write applied (`_setitem`, `_owner_write`, `_add_at`), a view after a write is gathered from
its owner's version, and the reverse steps are the general path's own backward functions
(`runtime.writes`), so results are the general path's.

What keeps this sound:
- the static check (`own_writes`) takes a write `a[k] = v` only where `a` is a local the function
  made itself (an array maker, `.copy()`, an operator's result, a list or dict display, a view of
  one of its own arrays): never an argument, a global, a closure variable or something reached from
  them, whose writes a replay would not redo;
- at build time, a write whose owner is an input of the program (an argument's or a global's array,
  reached through a view) or an array the capture did not track is refused (`forward_write`);
- an index holding an array (a mask `x[x > 0]`, `x[idx]`, `X[rows, cols]`, `buf[mask] = v`) is read
  from its variable on every call, never baked in; a mask's count, the shape it gives, is checked
  where it is used (`count_guard`): a call whose count differs goes to the general path;
- the float arrays decisions give (`np.zeros_like(x)`, `np.empty_like(x)`) are tracked by the capture
  (CaptureTape.check), so what the function computes from them and writes into them is recorded; a
  mask (`x > 0`) that the code uses only as an index (`_index_only`, read from the bytecode) has its
  decision check its type and shape only (`decided_array`), its values reaching recorded operations
  alone; any other use of a mask (`mask[0]`, `~mask`, a branch) keeps its values checked.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from bytegrad.compiled.source import DECISION_GUARD, Ineligible
from bytegrad.compiled.reach_mask import inverted_mask
from bytegrad.runtime import writes as rw
from bytegrad.runtime.records import IDENTITY

__all__ = ["count_guard", "data_indexed", "decided_array", "forward_write", "known_index", "own_writes",
           "reverse_write"]

_ndarray = np.ndarray
#: decisions whose array's values are garbage: only their type and shape are checked
_UNINITIALISED: frozenset[Any] = frozenset({np.empty, np.empty_like})


# ---- the program's helpers (generated code calls them) ---------------------------------------------


def _setitem(old: np.ndarray, key: Any, value: Any) -> np.ndarray:
    new = old.copy(order="K")
    new[key] = value
    return new


def _owner_write(old: np.ndarray, pos: np.ndarray, value: Any, order: Any) -> np.ndarray:
    new = np.array(old, order=order)  # (laid out as the owner was: `pos` are its memory positions)
    new.reshape(-1, order=order)[pos] = value
    return new


def _add_at(old: np.ndarray, pos: np.ndarray, value: Any, sign: int, order: Any) -> np.ndarray:
    new = np.array(old, order=order)
    flat = new.reshape(-1, order=order)
    (np.add if sign > 0 else np.subtract).at(flat, pos, np.broadcast_to(value, pos.shape))
    return new


def _last_of(written: np.ndarray) -> Optional[np.ndarray]:
    """Which of repeated positions wrote last (runtime/writes.py's `write`), or None without repeats."""
    flat = written.ravel()
    uniq, first_rev = np.unique(flat[::-1], return_index=True)
    return flat.size - 1 - first_rev if uniq.size != flat.size else None


def _backward(kind: Any, ct: Any, node: tuple, like: np.ndarray) -> tuple:
    return kind.backward(ct, node, like)


_HELPERS = {"_w_setitem": _setitem, "_w_owner": _owner_write, "_w_add_at": _add_at, "_w_last": _last_of,
            "_w_backward": _backward}


def _helper(b: Any, name: str) -> str:
    b.src.ns.setdefault(name, _HELPERS[name])
    return name


# ---- forward ---------------------------------------------------------------------------------------------


def _origin(b: Any, io: int) -> int:
    """The value the versions of an owner start from (a write's previous version, back to the first)."""
    nodes = b.tape.nodes
    while nodes[io] is not None and nodes[io][0] in rw.WRITE_KINDS and nodes[io][0] is not rw.VIEW:
        prev = nodes[io][1][0]
        if prev is None:
            break
        io = prev
    return io


def _parts(b: Any) -> dict:
    parts = getattr(b, "write_parts", None)
    if parts is None:
        parts = b.write_parts = {}
    return parts


def _value(b: Any, rec: Any, iv: Optional[int], value: Any) -> str:
    if iv is not None:
        return b.var[iv]
    if type(value) is _ndarray:
        var = b.inputs.untracked.get(id(value)) or b._made_var(value)
        if var is None:
            raise Ineligible("a write of an array computed without the arguments", rec.site)
        return var
    b._check_const(value, _Named(rec))
    return b.src.const(value)


class _Named:
    """A record as the builder's error messages read it (`fn`, `site`)."""

    def __init__(self, rec: Any) -> None:
        self.fn = np.ndarray.__setitem__
        self.site = rec.site


def _key(b: Any, key: Any, rec: Any) -> tuple[str, bool]:
    """(the key's expression, whether it reads an array of the program's: its positions are then computed
    on every call). An array the program does not know is taken as a constant only where it is made from
    the written array's shape (`np.fill_diagonal`'s indices)."""
    if getattr(rec.site, "callee", None) is np.fill_diagonal:  # (runtime/dispatch.py: from a.shape alone)
        return b.src.const(key, "ix"), False
    items = key if type(key) is tuple else (key,)
    exprs, dynamic = [], False
    for k in items:
        if type(k) is _ndarray:
            p = b.tape.ids.get(id(k))
            var = b.inputs.untracked.get(id(k)) or b._made_var(k) or (b.var.get(p) if p is not None else None)
            if var is None:  # (computed where the capture does not see it: from an argument, maybe)
                raise Ineligible("a write at an index array computed where the capture does not record it "
                                 "(from a mask or an integer array argument)", rec.site)
            dynamic = True
            exprs.append(var)
        elif type(k) is list:
            if not all(type(x) is int for x in k):
                raise Ineligible("a write at a list index holding other than ints", rec.site)
            exprs.append(b.src.const(k))
        else:
            b._check_const(k, _Named(rec))
            exprs.append(b.src.const(k))
    if type(key) is tuple:
        return "(" + "".join(e + ", " for e in exprs) + ")", dynamic
    return exprs[0], dynamic


def forward_write(b: Any, rec: Any) -> None:
    """The forward step of a write record (parts.Record of kind "write"): its version as a new array."""
    i = rec.idx
    node = b.tape.nodes[i]
    kind = node[0]
    v = b.var[i] = f"v{i}"
    line = rec.site.lineno if rec.site is not None else None
    if kind is IDENTITY:  # a copy: the program's versions are never overwritten
        b.src.emit(f"{v} = {b.var[node[1][0]]}", line)
        return
    if kind is rw.VIEW:
        pos, order = node[3], node[5]
        b.src.emit(f"{v} = {b.var[node[1][0]]}.reshape(-1, order={order!r})[{b.src.const(pos, 'pos')}]", line)
        return
    io, iv = node[1]
    if io is None:
        raise Ineligible("a write into an array the capture does not track (made by a call it does not record, "
                         "as `np.empty`)", rec.site)
    if _origin(b, io) in b.ir.inputs:
        raise Ineligible("a write into an argument's or a global's array (through a view of it): a compiled "
                         "program replays writes only into arrays the function made", rec.site)
    obj, owner, key, value = b.tape.writes[i]
    old, val = b.var[io], _value(b, rec, iv, value)
    if kind is rw.SETITEM:
        b.src.emit(f"{v} = {_helper(b, '_w_setitem')}({old}, {b.src.const(key, 'key')}, {val})", line)
        return
    order = rw.memory_order(owner)
    pos, last = b.src.const(node[3], "pos"), b.src.const(node[5], "last") if kind is rw.OWNER_WRITE else None
    expr, dynamic = _key(b, key, rec)
    if dynamic:  # the positions it writes, from this call's index
        at = rw.memory_positions(obj, owner)
        pos = b.inputs.temp()
        b.src.emit(f"{pos} = {b.src.const(at, 'at')}[{expr}]", line)
        count_guard(b, pos, node[3].shape, line)
        if kind is rw.OWNER_WRITE:
            last = b.inputs.temp()
            b.src.emit(f"{last} = {_helper(b, '_w_last')}({pos})", line)
    _parts(b)[i] = (pos, last)
    if kind is rw.OWNER_WRITE:
        b.src.emit(f"{v} = {_helper(b, '_w_owner')}({old}, {pos}, {val}, {order!r})", line)
    else:
        b.src.emit(f"{v} = {_helper(b, '_w_add_at')}({old}, {pos}, {val}, {node[5]!r}, {order!r})", line)


def count_guard(b: Any, var: str, shape: tuple, line: Optional[int]) -> None:
    """The shape an index array gave (a mask's count) checked against the capture's: a call where it
    differs goes to the general path (the program's shapes are the capture's)."""
    b.src.guard(DECISION_GUARD, f"{var}.shape == {shape!r}", f"line {line}: an index selects {shape} elements")


def data_indexed(rec: Any) -> bool:
    """Whether `rec` is a getitem whose index holds an array or a list (a mask's count, an index array's
    values: the program reads them on every call, and checks the shape they give)."""
    import operator
    if rec.fn is not operator.getitem or len(rec.args) < 2 or type(rec.args[0]) is not _ndarray:
        return False
    key = rec.args[1]
    return any(type(k) is _ndarray or type(k) is list for k in (key if type(key) is tuple else (key,)))


def known_index(b: Any, rec: Any) -> None:
    """Refuse, naming the construct, an index array the program cannot read on every call: a mask
    computed from a mask (`x[~mask]`, `x[m1 & m2]`) by an operation the rewrite leaves unhooked."""
    key = rec.args[1]
    for k in (key if type(key) is tuple else (key,)):
        if type(k) is _ndarray and b.tape.ids.get(id(k)) is None and id(k) not in b.inputs.untracked \
                and b._made_var(k) is None:
            if k.dtype.kind == "b" and inverted_mask(b, rec, k) is not None:  # `x[~mask]` (compiled/reach_mask.py)
                continue
            if k.dtype.kind == "b":
                raise Ineligible("indexes with a mask computed where the capture does not record it (`x[~mask]`, "
                                 "`x[m1 & m2]`: an operation on a comparison's result is not hooked; index with "
                                 "the comparison itself, `x[x <= 0]`)", rec.site)
            raise Ineligible("indexes with an index array computed where the capture does not record it (from "
                             "an integer argument or a decision's result, as `np.argsort(x)[-2:]`)", rec.site)


def decided_array(b: Any, check: tuple, var: str) -> bool:
    """A decision that gave an array the capture tracks from there (CaptureTape.check): its variable is
    the array's. True when only its type and shape need checking (a mask, an index array, an
    uninitialised buffer: what is computed from their values is recorded, so replayed); False when
    its values are checked as any decision's."""
    result = check[4]
    checks = b.tape.checks
    k = next((k for k, c in enumerate(checks) if c is check), None)
    live = getattr(b.tape, "live", {}).get(k)
    if live is None:
        return False
    b.inputs.untracked[id(live)] = var  # (the array itself: the check holds a copy)
    if id(live) in getattr(b.tape, "escaped", ()):  # it indexed where nothing was recorded
        return False
    p = next((leaf for leaf, kk in b.tape.decided.items() if kk == k), None)
    if p is not None:
        b.var[p] = var
    fn, site = check[1], check[5]
    uninitialised = fn in _UNINITIALISED and p is not None  # (a float buffer, tracked: every use recorded)
    if not uninitialised and not (result.dtype.kind == "b" and _index_only(b, fn, site)):
        return False
    b.src.guard(DECISION_GUARD, f"{var}.__class__ is ndarray and {var}.shape == {result.shape!r} and "
                f"{var}.dtype == {b.src.const(result.dtype, 'dt')}",
                f"line {check[5].lineno}: an array of {result.dtype}{list(result.shape)}")
    return True


def _index_only(b: Any, fn: Any, site: Any) -> bool:
    """Whether every comparison `fn` at the site's line gives a value that the code uses only as an index
    (`x[x > 0]`, `mask = x > 0; y[mask] = v`): its elements then reach nothing but recorded operations,
    and its count is checked where it indexes (`count_guard`). Anything else (`mask[0]`, `~mask`,
    `mask.sum()`, a branch): the mask's values stay checked, as any decision's."""
    code = getattr(b, "code", None)
    if code is None or site is None:
        return False
    codes = [code] + [f.__code__ for f, *_ in getattr(b.tape, "callees", ()) if hasattr(f, "__code__")]
    for c in codes:
        if c.co_filename == site.filename and site.function in (c.co_name, getattr(c, "co_qualname", None)):
            return (site.lineno, fn) in _INDEX_ONLY.get(c, ())
    return False


#: code -> what `_index_only_compares` found (a small set per code analysed; never forgotten, so that an
#: analysis with another activity always narrows it)
_INDEX_ONLY: dict[Any, frozenset] = {}


def _index_only_compares(code: Any, bc: Any, stacks: list) -> frozenset:
    """(line, comparison function) of the comparisons of `code` whose every instance there gives a value
    used only as an index of a value the rewrite hooks (active in `stacks`, the analysis the capture's
    rewrite makes), directly or through a local assigned once. Kept per code as the intersection over
    every analysis of it (an activity seen once cannot widen what another allows)."""
    from bytegrad.transform.code import Instr

    from bytegrad.transform import opcodes

    instrs = list(bc)
    popped, escaped = _flow(instrs, stacks, opcodes)
    consumers: dict[Any, list] = {}
    for k, took in popped.items():
        for j, e in enumerate(took):
            if e is not None:
                consumers.setdefault(e, []).append((k, j))
    loads: dict[str, list] = {}
    stores: dict[str, int] = {}
    for k, ins in enumerate(instrs):
        name = getattr(ins, "name", "")
        if not isinstance(ins, Instr):
            continue
        if name in _LOADS or name.startswith("STORE_FAST") or name == "DELETE_FAST":
            for n, local in enumerate(opcodes.local_names(ins)):
                if name in _LOADS:
                    loads.setdefault(local, []).append((k, n))
                else:
                    stores[local] = stores.get(local, 0) + (1 if name == "STORE_FAST" else 2)
    cells = set(code.co_cellvars) | set(code.co_freevars) | set(code.co_varnames[:code.co_argcount])

    def index_only(e: Any, depth: int = 0) -> bool:
        uses = consumers.get(e)
        if not uses or e in escaped or depth > 2:
            return False
        for k, j in uses:
            ins = instrs[k]
            st = stacks[k]
            if ((ins.name == "BINARY_SUBSCR" and j == 1) or (ins.name == "STORE_SUBSCR" and j == 2)) \
                    and st is not None and len(st) >= 2 and st[-2].active:  # (the container's: hooked)
                continue
            if ins.name == "UNARY_INVERT" and index_only((k, 0), depth + 1):
                continue  # `x[~mask]`: the program computes `~mask` (compiled/reach_mask.py) or refuses
            if ins.name == "STORE_FAST":
                local = opcodes.local_names(ins)[0]
                if stores.get(local) == 1 and local not in cells and loads.get(local) \
                        and all(index_only(le, depth + 1) for le in loads[local]):
                    continue
            return False
        return True

    verdict: dict[tuple, bool] = {}
    for k, ins in enumerate(instrs):
        if isinstance(ins, Instr) and ins.name == "COMPARE_OP":
            key = (ins.lineno, opcodes.predicate_fn(ins))
            verdict[key] = verdict.get(key, True) and index_only((k, 0))
    found = frozenset(key for key, ok in verdict.items() if ok)
    before = _INDEX_ONLY.get(code)
    found = _INDEX_ONLY[code] = found if before is None else found & before
    return found


# ---- reverse ---------------------------------------------------------------------------------------------


def reverse_write(b: Any, rec: Any, g: str, targets: list, body: list[str], pre: list[str], cond: bool) -> None:
    """The reverse step of a write record: the general path's backward function of its kind."""
    if not targets:
        return
    i = rec.idx
    node = b.tape.nodes[i]
    kind = node[0]
    if kind is IDENTITY:
        b._contribute(targets[0][1], g, False, body, pre, cond)
        return
    out = rec.out if kind is not rw.VIEW else b.tape.values[i]
    order = rw.memory_order(out) if kind is not rw.VIEW else "C"
    like = b.src.const(np.zeros(out.shape, out.dtype, order=order), "like")  # (its shape, dtype and order)
    wanted = {p for _, p in targets}
    parents = "(" + "".join(f"{p!r}, " if p in wanted else "None, " for p in node[1]) + ")"
    if kind is rw.VIEW or kind is rw.SETITEM:
        fields = ", ".join(b.src.const(f, "f") for f in node[3:])
    else:
        pos, last = _parts(b)[i]
        fields = f"{pos}, {b.src.const(node[4])}, " + (last if kind is rw.OWNER_WRITE else repr(node[5]))
    bars = b.tmp()
    body.append(f"{bars} = {_helper(b, '_w_backward')}({b.src.const(kind, 'kind')}, {g}, "
                f"(None, {parents}, None, {fields}), {like})")
    for k, p in targets:
        t = b.tmp()
        body.append(f"{t} = {bars}[{k}]")
        b._contribute(p, t, False, body, pre, cond)


# ---- the static check: writes into the function's own arrays and containers ----------------------------

_FRESH_ARRAYS: frozenset[Any] = frozenset({np.zeros, np.ones, np.empty, np.full, np.zeros_like, np.ones_like, np.empty_like,
                           np.full_like, np.eye, np.identity, np.arange, np.linspace, np.stack, np.vstack, np.hstack,
                           np.concatenate, np.outer, np.copy, np.tile})
_FRESH_BOXES = frozenset({list, dict})
_VIEW_METHODS = frozenset({"reshape", "view", "ravel", "transpose", "swapaxes", "squeeze", "T"})
_BUILDS = frozenset({"BUILD_LIST", "BUILD_MAP", "BUILD_CONST_KEY_MAP", "BUILD_SET"})
_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "LOAD_FAST_LOAD_FAST"})
_SUBSCRIPTS = frozenset({"BINARY_SUBSCR", "BINARY_SLICE"})
#: how sure the check is of what a value is: an array of the function's own (its subscripts are views of
#: it), an object of its own (a list, a dict, an operator's result: its items may be anyone's)
_ARRAY, _OWN = 2, 1


def own_writes(bc: Any, stacks: list, code: Any) -> set[int]:
    """The ids of the STORE_SUBSCR / STORE_SLICE instructions of `bc` (with the activity analysis's
    `stacks`) whose container is an array or container the function made itself. (Also notes the
    comparisons the code uses only as indices: `_index_only_compares`.)"""
    from bytegrad.transform import opcodes

    instrs = list(bc)
    _index_only_compares(code, bc, stacks)  # (the masks it uses as indices alone, for `decided_array`)
    popped = _producers(instrs, stacks, opcodes)
    nargs = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 4) + bool(code.co_flags & 8)
    foreign = set(code.co_varnames[:nargs]) | set(code.co_cellvars) | set(code.co_freevars)
    stores: dict[str, list] = {}
    for k, ins in enumerate(instrs):
        name = getattr(ins, "name", None)
        if name is not None and name.startswith("STORE_FAST") or name == "DELETE_FAST":
            names = opcodes.local_names(ins)
            took = popped.get(k)
            if name == "STORE_FAST" and took:
                stores.setdefault(names[0], []).append(took[-1])
            else:
                foreign.update(names)
    level = {n: _ARRAY for n in stores if n not in foreign}
    while True:
        new = {n: min((_level(e, instrs, popped, stacks, level, opcodes) for e in stores[n]), default=0)
               for n in level}
        new = {n: lv for n, lv in new.items() if lv}
        if new == level:
            break
        level = new
    found = set()
    for k, ins in enumerate(instrs):
        name = getattr(ins, "name", None)
        if name in ("STORE_SUBSCR", "STORE_SLICE") and popped.get(k) and len(popped[k]) >= 2:
            if _level(popped[k][1], instrs, popped, stacks, level, opcodes):
                found.add(id(ins))
    return found


def _producers(instrs: list, stacks: list, opcodes: Any) -> dict[int, list]:
    """For each instruction (by position), the values it pops, each named by the (position, slot) of the
    instruction that pushed it, or None where that is not known (after a jump target)."""
    return _flow(instrs, stacks, opcodes)[0]


def _flow(instrs: list, stacks: list, opcodes: Any) -> tuple[dict[int, list], set]:
    """`_producers`, and the values still on the stack where the simulation lost track (a jump target,
    an instruction it does not model): who reads them is not known."""
    sim: Optional[list] = None
    popped: dict[int, list] = {}
    escaped: set = set()
    for k, ins in enumerate(instrs):
        st = stacks[k] if k < len(stacks) else None
        if not hasattr(ins, "name") or st is None:
            if sim:
                escaped.update(sim)
            sim = None
            continue
        if sim is None or len(sim) != len(st):
            if sim:
                escaped.update(sim)
            sim = [None] * len(st)
        if ins.name == "COPY":
            sim.append(sim[-int(ins.arg)])
            continue
        if ins.name == "SWAP":
            n = int(ins.arg)
            sim[-1], sim[-n] = sim[-n], sim[-1]
            continue
        if ins.name in ("PRECALL", "KW_NAMES"):  # (3.11, 3.12: the CALL consumes the call's values)
            continue
        try:
            if ins.name == "CALL" or ins.name == "CALL_KW":
                consumed, produced = int(ins.arg) + 2 + (ins.name == "CALL_KW"), 1
            else:
                consumed, produced = opcodes.stack_effect(ins, False)
        except Exception:  # noqa: BLE001 - an instruction the model does not know: nothing known after it
            escaped.update(sim)
            sim = None
            continue
        if consumed > len(sim):
            escaped.update(sim)
            sim = None
            continue
        popped[k] = sim[len(sim) - consumed:]
        if ins.has_jump():  # (what is on the stack where it jumps is read there too)
            escaped.update(sim)
        del sim[len(sim) - consumed:]
        sim += [(k, j) for j in range(produced)]
    return popped, escaped


def _level(e: Any, instrs: list, popped: dict, stacks: list, level: dict, opcodes: Any) -> int:
    """How sure the check is that value `e` (a producer from `_producers`) is the function's own."""
    if e is None:
        return 0
    k, slot = e
    ins = instrs[k]
    name = ins.name
    took = popped.get(k) or []
    if name in _LOADS:
        names = opcodes.local_names(ins)
        return level.get(names[slot] if slot < len(names) else names[-1], 0)
    if name in _BUILDS:
        return _OWN
    if name == "BINARY_OP":
        if opcodes.binary_operator(ins).inplace:
            return _level(took[0], instrs, popped, stacks, level, opcodes) if took else 0
        return _OWN
    if name.startswith("UNARY_"):
        return _OWN
    if name in _SUBSCRIPTS:  # a view of an own array, or an item of an own container (anyone's)
        return _ARRAY if took and _level(took[0], instrs, popped, stacks, level, opcodes) == _ARRAY else 0
    if name == "LOAD_ATTR" and opcodes.attr_parts(ins)[0] == "T" and not opcodes.attr_parts(ins)[1]:
        return _ARRAY if took and _level(took[0], instrs, popped, stacks, level, opcodes) == _ARRAY else 0
    if name == "CALL" or name == "CALL_KW":
        return _call_level(k, ins, instrs, popped, stacks, level, opcodes)
    return 0


def _call_level(k: int, ins: Any, instrs: list, popped: dict, stacks: list, level: dict, opcodes: Any) -> int:
    nargs = int(ins.arg)
    st = stacks[k]
    if st is not None and ins.name == "CALL_KW":
        st = st[:-1]  # (the names tuple on top)
    fn_slot = opcodes.callable_slot(nargs, st) if st is not None and len(st) >= nargs + 2 else None
    known = fn_slot.known if fn_slot is not None else None
    try:
        if known in _FRESH_ARRAYS:
            return _ARRAY
        if known in _FRESH_BOXES:
            return _OWN
    except TypeError:
        return 0
    took = popped.get(k) or []
    for n, e in enumerate(took[:2]):  # the method's load and its receiver, in either order
        if e is None:
            continue
        load = instrs[e[0]]
        if load.name in ("LOAD_METHOD", "LOAD_ATTR"):
            attr, _ = opcodes.attr_parts(load)
            receiver = (popped.get(e[0]) or [took[1 - n] if len(took) > 1 else None])[0]
            own = _level(receiver, instrs, popped, stacks, level, opcodes)
            if attr == "copy":  # (of an own array: an array; of anything else: a new object of its own)
                return _ARRAY if own == _ARRAY else _OWN
            if attr in _VIEW_METHODS:  # a view of an own array (of anything else: who knows)
                return _ARRAY if own == _ARRAY else 0
    return 0
