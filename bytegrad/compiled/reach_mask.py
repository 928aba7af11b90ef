"""`x[~mask]` where `mask = x > 0`: an inverted comparison used as an index.

The rewrite hooks the comparison (a decision the capture records, `CaptureTape.check`) but not the
`~` on its result: the array `~mask` reaches the recorded subscript with no record of how it was
made, and the program could not compute it again (compiled/writes.py `known_index` refuses it).
`inverted_mask` finds it from the bytecode of the differentiated function instead, and only in
this form:

- the subscript's line holds exactly one `<local> ~ [subscript]` (LOAD_FAST m, UNARY_INVERT,
  BINARY_SUBSCR), and no other inverted subscript;
- `m` is a plain local (not a parameter, not a cell) stored exactly once in the code, by
  `m = <a comparison>`: the one comparison of its kind on that line;
- the code has no loop (each instruction runs at most once: the comparison's decision is the one
  the local holds, and a run where its operands were not tracked leaves no decision to mistake for
  it) and runs once in the call (no callee of the capture has the same code: a recursive call
  would have a mask of its own).

Then `m` holds, at the subscript, the result of the last run of that comparison before it: the
last decision of the capture at that line and function (its variable in the program), and the
index is `~` of that variable, computed on every call. The capture's own index is checked to be
exactly that (anything else keeps the refusal). The number of elements it selects is checked by
the subscript's count guard, as any mask's.
"""
from __future__ import annotations

import dis
import operator
import types
from typing import Any, Optional

import numpy as np

__all__ = ["inverted_mask", "inverted_sources"]

_COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
            "!=": operator.ne}
_LOADS = ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST")
#: code -> {line of the subscript: (line of the comparison, its function)}
_SOURCES: dict[types.CodeType, dict[int, tuple[int, Any]]] = {}


def inverted_sources(code: types.CodeType) -> dict[int, tuple[int, Any]]:
    """{line of an `x[~m]`: (line, operator function) of the one comparison `m` is assigned from},
    for each line of `code` with exactly one inverted subscript whose local is that simple."""
    found = _SOURCES.get(code)
    if found is None:
        found = _SOURCES[code] = _analyse(code)
    return found


def _analyse(code: types.CodeType) -> dict[int, tuple[int, Any]]:
    instrs = [i for i in dis.get_instructions(code) if i.opname not in ("CACHE", "EXTENDED_ARG", "NOP")]
    if any(i.opname.startswith("JUMP_BACKWARD") or i.opname in ("FOR_ITER", "JUMP_ABSOLUTE") for i in instrs):
        return {}  # (a loop: which run of the comparison the local holds is not the last decision's for sure)
    lines = _lines(instrs)
    foreign = set(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]) | set(code.co_cellvars) \
        | set(code.co_freevars)
    stores: dict[str, list[int]] = {}
    for k, ins in enumerate(instrs):
        if ins.opname.startswith(("STORE_FAST", "DELETE_FAST")):
            for name in _names(ins):
                stores.setdefault(name, []).append(k)
    sources: dict[str, tuple[int, Any]] = {}
    for name, at in stores.items():
        k = at[0]
        if len(at) != 1 or name in foreign or instrs[k].opname != "STORE_FAST" or k == 0 \
                or instrs[k - 1].opname != "COMPARE_OP":
            continue
        fn = _COMPARE.get(str(instrs[k - 1].argval).removeprefix("bool(").removesuffix(")"))
        line = lines[k - 1]
        same = [j for j, i in enumerate(instrs) if i.opname == "COMPARE_OP" and lines[j] == line
                and _COMPARE.get(str(i.argval).removeprefix("bool(").removesuffix(")")) is fn]
        if fn is not None and len(same) == 1:
            sources[name] = (line, fn)
    per_line: dict[int, list[Optional[tuple[int, Any]]]] = {}
    for k, ins in enumerate(instrs):
        if ins.opname == "UNARY_INVERT" and k + 1 < len(instrs) and instrs[k + 1].opname == "BINARY_SUBSCR":
            prev = instrs[k - 1]
            local = _names(prev)[-1] if prev.opname in _LOADS else None
            per_line.setdefault(lines[k], []).append(sources.get(local) if local is not None else None)
    return {line: found[0] for line, found in per_line.items() if len(found) == 1 and found[0] is not None}


def inverted_mask(b: Any, rec: Any, k: Any) -> Optional[str]:
    """The program's variable for the index `k` of the subscript `rec` (an unrecorded bool array),
    when it is `~m` of a comparison's result as the module's docstring says; None otherwise."""
    code, site = getattr(b, "code", None), rec.site
    if code is None or site is None or site.filename != code.co_filename or \
            site.function not in (code.co_name, getattr(code, "co_qualname", None)):
        return None
    if any(getattr(f, "__code__", None) is code for f, *_ in getattr(b.tape, "callees", ())):
        return None  # (a recursive call: its own mask)
    source = inverted_sources(code).get(site.lineno)
    if source is None:
        return None
    line, fn = source
    last = None
    for check in b.tape.checks:
        s = check[5]
        if check[0] <= rec.idx and s is not None and s.lineno == line and check[1] is fn \
                and s.filename == site.filename and s.function == site.function:
            last = check
    if last is None or type(last[4]) is not np.ndarray or last[4].dtype != np.bool_:
        return None
    var = b.inputs.untracked.get(id(last[4]))
    if var is None or last[4].shape != k.shape or not np.array_equal(~last[4], k):
        return None
    out = b.inputs.temp()
    b.src.emit(f"{out} = ~{var}", site.lineno)
    b.inputs.untracked[id(k)] = out
    return out


def _lines(instrs: list) -> list[int]:
    out, line = [], -1
    for ins in instrs:
        if ins.positions is not None and ins.positions.lineno is not None:
            line = ins.positions.lineno
        out.append(line)
    return out


def _names(ins: Any) -> list[str]:
    v = ins.argval
    return [str(x) for x in v] if isinstance(v, tuple) else [str(v)]
