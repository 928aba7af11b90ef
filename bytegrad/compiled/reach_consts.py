"""Values fixed by the code itself: a literal's method, a view of an array made from constants.

The static check (compiled/eligibility.py) refuses an attribute read off a value that is neither an
argument nor statically known ("reads the attribute .format of an object that is not an argument"),
and the call of what it gives. Two such reads are fixed by the code, and taken:

- `constant_attribute`: an attribute of a literal (`"{:.2f}".format(v)`, `", ".join(names)`): a
  number's, a string's or bytes' attributes are their type's methods and constants. What the method
  is then called with is checked as any call (on a differentiated value it is a decision the
  program computes again: `str.format` of a value gives the text the program compares);
- `made_view_site`: a view method of an array made from constants, with constant arguments, in one
  expression (`np.arange(9.0).reshape(3, 3)`, `np.eye(3).T`): the made array is recorded by the
  capture and made again by the program on every call (`CaptureTape.make`), and the view of it is
  a function of constants. `made_view` gives the program's expression for such a view where a
  recorded operation reads it: the method applied to the made array's variable, once the view the
  capture saw is checked to be exactly that method of a freshly made array (a write into the made
  array in between would show there, and keeps the refusal).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

__all__ = ["constant_attribute", "made_view", "made_view_site"]

_LITERALS = (str, bytes, int, float, complex, bool)
#: ndarray methods that return a view and read nothing but the array and their arguments
_VIEW_METHODS = frozenset({"reshape", "ravel", "transpose", "squeeze", "swapaxes"})
_VIEW_ATTRS = frozenset({"T"})


def constant_attribute(before: Any, ins: Any, kind: Any) -> bool:
    """Whether `ins` (of OpKind `kind`) reads an attribute off the literal that `before` loads."""
    from bytegrad.transform.opcodes import OpKind

    if kind is not OpKind.LOAD_ATTR and kind is not OpKind.LOAD_METHOD:
        return False
    if getattr(before, "name", None) != "LOAD_CONST":
        return False
    return type(before.arg) in _LITERALS


def made_view_site(instrs: list, stacks: list, k: int) -> bool:
    """Whether instruction k is the attribute read, or the call, of `MAKER(constants).view(constants)`
    (`view` a view method or `.T`), the maker's call on values none of which is active."""
    from bytegrad.transform import opcodes

    ins = instrs[k]
    name = getattr(ins, "name", "")
    if name in ("LOAD_ATTR", "LOAD_METHOD"):
        return _view_read(instrs, stacks, k, opcodes) is not None
    if name != "CALL":
        return False
    n = int(ins.arg)
    j = k - 1
    while j >= 0 and getattr(instrs[j], "name", "") == "PRECALL":
        j -= 1
    for _ in range(n):  # the method's arguments: constants only
        if getattr(instrs[j], "name", "") != "LOAD_CONST" or type(instrs[j].arg) not in (int, tuple):
            return False
        j -= 1
    attr = _view_read(instrs, stacks, j, opcodes) if j >= 0 else None
    return attr is not None and attr in _VIEW_METHODS


def _view_read(instrs: list, stacks: list, k: int, opcodes: Any) -> Optional[str]:
    """The attribute name if instruction k reads a view attribute off the result of the maker call
    just before it, else None."""
    ins = instrs[k]
    if getattr(ins, "name", "") not in ("LOAD_ATTR", "LOAD_METHOD") or k == 0:
        return None
    attr, _ = opcodes.attr_parts(ins)
    if attr not in _VIEW_METHODS and attr not in _VIEW_ATTRS:
        return None
    call = instrs[k - 1]
    if getattr(call, "name", "") not in ("CALL", "CALL_KW") or stacks[k - 1] is None:
        return None
    from bytegrad.runtime.dispatch import MAKERS

    nargs = int(call.arg)
    own = stacks[k - 1][:-1] if call.name == "CALL_KW" else stacks[k - 1]
    fn_slot = opcodes.callable_slot(nargs, own)
    if fn_slot is None or fn_slot.known not in MAKERS:
        return None
    if any(s.active for s in own[len(own) - nargs - 2:] if not s.null):
        return None
    return str(attr)


def made_view(b: Any, a: Any, rec: Any) -> Optional[str]:
    """The program's variable for `a`, an array no recorded operation gave, when it is a view method of
    a made array (module docstring) as the code at the record's line writes it; else None."""
    base = a.base
    made: Any = getattr(b.tape, "made", None)
    i = b.tape.ids.get(id(base)) if made and base is not None else None
    if i is None or b.tape.values[i] is not base or i not in made or rec.site is None:
        return None
    fn, args, kwargs = made[i]
    fresh = fn(*args, **kwargs) if kwargs else fn(*args)
    for attr, consts in _views_on_line(b, rec.site):
        try:
            again = getattr(fresh, attr)(*consts) if attr in _VIEW_METHODS else getattr(fresh, attr)
        except Exception:  # noqa: BLE001 - another pattern of the line (the call raises as the code would)
            continue
        if type(again) is np.ndarray and again.shape == a.shape and again.dtype == a.dtype \
                and again.strides == a.strides and np.array_equal(again, a, equal_nan=True):
            var = b._made_var(base)
            if var is None:
                return None
            out = b.inputs.temp()
            call = f"({', '.join(b.src.const(c) for c in consts)})" if attr in _VIEW_METHODS else ""
            b.src.emit(f"{out} = {var}.{attr}{call}", rec.site.lineno)
            b.inputs.untracked[id(a)] = out
            return out
    return None


def _views_on_line(b: Any, site: Any) -> list[tuple[str, tuple]]:
    """(attribute, constant arguments) of each `MAKER(...).view(...)` at the site's line, in the
    differentiated function's code or a callee's of the same name in the same file."""
    import dis

    codes = [getattr(b, "code", None)] + [getattr(f, "__code__", None) for f, *_ in getattr(b.tape, "callees", ())]
    found = []
    for code in codes:
        if code is None or code.co_filename != site.filename or \
                site.function not in (code.co_name, getattr(code, "co_qualname", None)):
            continue
        instrs = [i for i in dis.get_instructions(code) if i.opname not in ("CACHE", "PRECALL", "EXTENDED_ARG")]
        for k, ins in enumerate(instrs):
            if ins.opname not in ("LOAD_ATTR", "LOAD_METHOD") or ins.positions is None or \
                    ins.positions.lineno != site.lineno:
                continue
            attr = str(ins.argval)
            if attr in _VIEW_ATTRS:
                found.append((attr, ()))
            elif attr in _VIEW_METHODS:
                consts = []
                for nxt in instrs[k + 1:]:
                    if nxt.opname != "LOAD_CONST":
                        break
                    consts.append(nxt.argval)
                found.append((attr, tuple(consts)))
    return found
