"""Objects of a plain user class built on constants in the call: `acc = Acc(np.zeros(n))`.

The rewrite hooks a call only where an operand may be differentiated (or where it makes an array,
`np.zeros(n)`), so `Acc(np.zeros(len(x)))` runs as it is: its `__init__` runs unhooked on
constants. When the call later hands the object to a method with differentiated values
(`acc += x * y`, `acc.add(v)`), the capture saw an object it neither guards nor built
("its state is not guarded"). Such an object is a local of the call like one built from
differentiated values (`CaptureTape.local`), provided that:

- the static check (`constant_class`, compiled/eligibility.py) finds the class a module global
  (its identity guarded), plain (`object.__new__`, a Python `__init__`, none of the attribute hooks
  `objects.local_refusal` refuses), and its `__init__` eligible with nothing differentiated, writing
  only its own attributes: what it stores is a function of constants and guarded values; the class
  (every entry of its MRO's `__dict__`) and the `__init__` code are guarded;
- the capture saw the object's `__init__` run during this call (`BuildWatch`, a profile function
  installed for the capture run only where the static check allowed such a class): an object of
  the class that exists before the call (a default argument's, a global's) is never taken for one.

Then `local_ids` adds the objects to the capture's locals, so that their methods are checked as a
built object's are (their `self.x = ...` allowed) and their class guarded.
"""
from __future__ import annotations

import _thread
import sys
import types
from typing import Any, Callable, Optional

from bytegrad.compiled import objects
from bytegrad.compiled.constructs import RaiseWatch

__all__ = ["BuildWatch", "constant_class", "local_ids"]

_HEAPTYPE = 1 << 9
#: thread -> the objects whose __init__ the capture run of that thread saw run (until `local_ids` reads them)
_SEEN: dict[int, list] = {}


def constant_class(ins: Any, stack: tuple, kind: Any, fn_globals: dict[str, Any], guards: list[tuple],
                   why: str, check: Callable[..., tuple[list[str], list[tuple]]]) -> Optional[str]:
    """None when the call at `ins` builds an object of a plain module-level class on constants (its
    guards added to `guards`); else `why`, or the reason its `__init__` is refused (`check`:
    eligibility.check, which runs this)."""
    cls = called_class(ins, stack, kind, fn_globals)
    init = getattr(cls, "__init__", None)
    if not isinstance(cls, type) or type(cls) is not type or not cls.__flags__ & _HEAPTYPE \
            or cls.__new__ is not object.__new__ or type(init) is not types.FunctionType \
            or objects.local_refusal(cls) is not None:
        return why
    defaults = (init.__defaults__ or ()) + tuple((init.__kwdefaults__ or {}).values())
    sub, more = check(init.__code__, frozenset(), init.__globals__, frozenset(), defaults,
                                  init.__closure__ or (), cells_active=False)
    sub = objects.without_self_writes(init.__code__, sub)
    if sub:
        return f"builds a {cls.__qualname__} on constants, whose __init__ {sub[0]}"
    guards += more
    guards.append(("code", init, init.__code__, (init.__defaults__, init.__kwdefaults__)))
    guards.append(("class", cls, cls.__qualname__, objects.class_state(cls)))
    return None


def called_class(ins: Any, stack: tuple, kind: Any, fn_globals: dict[str, Any]) -> Any:
    """What the call at `ins` calls, when the code names it by a module global (a class, or anything
    else: `constant_class` checks it), else None."""
    from bytegrad.transform import opcodes
    from bytegrad.transform.opcodes import OpKind

    own = stack[:-1] if kind is OpKind.CALL_KW else stack
    fn_slot = opcodes.callable_slot(int(ins.arg), own)
    names = [a[2:] for a in (fn_slot.aliases if fn_slot is not None else ()) if a.startswith("G:")]
    return fn_globals.get(names[0]) if len(names) == 1 else None


class BuildWatch(RaiseWatch):
    """The capture run's `RaiseWatch`, which also notes the objects whose `__init__` runs, of the
    classes the static check allowed (its "class" guards), in this thread, during the run."""

    def __init__(self, on: bool, guards: list[tuple]) -> None:
        super().__init__(on)
        self._inits = {g[1].__init__.__code__: g[1] for g in guards if g[0] == "class"
                       and type(getattr(g[1], "__init__", None)) is types.FunctionType}
        self._profiling = False
        self._built: list = []

    def __enter__(self) -> "BuildWatch":
        self._built = _SEEN[_thread.get_ident()] = []
        if self._inits and sys.getprofile() is None:  # (a profiler already set: nothing seen, refused)
            sys.setprofile(self._profile)
            self._profiling = True
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        if self._profiling:
            sys.setprofile(None)
            self._profiling = False

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            cls = self._inits.get(frame.f_code)
            if cls is not None and frame.f_code.co_argcount:
                obj = frame.f_locals.get(frame.f_code.co_varnames[0])
                if type(obj) is cls:
                    self._built.append(obj)


def local_ids(tape: Any) -> set[int]:
    """The ids of the capture's local objects (`tape.local`), with those `BuildWatch` saw built on
    constants added to it."""
    seen = _SEEN.pop(_thread.get_ident(), None) or []
    have = {id(o) for o in tape.local}
    for obj in seen:
        if id(obj) not in have and id(obj) not in tape.ids:
            tape.local.append(obj)
            have.add(id(obj))
    return have

