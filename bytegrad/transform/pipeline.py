"""The transform as an ordered pipeline of named passes, and a listing of the code after each one.

`PIPELINE` runs `activity` (which values may depend on the differentiated inputs), `fusion`
(elementwise trees that become one fused site) and `rewrite` (active sites call `runtime.abi`) over
one `Unit`. `run(unit, dump=...)` hands the listing after each pass to `dump`; `listings` returns
them for a function, for debugging and for the golden tests (tests/transform/test_passes.py).
`BYTEGRAD_DUMP_AFTER=activity,fusion,rewrite` (or `all`) prints them for every code object rewritten.
"""
from __future__ import annotations

import collections
import sys
import types
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional

from bytegrad.transform.code import Bytecode, Instr, Label, TryBegin, TryEnd

from bytegrad._config import config as _config
from bytegrad.errors import SourceLoc

__all__ = ["Unit", "Pass", "PIPELINE", "run", "listings", "listing"]


class Unit:
    """One code object going through the passes, and what each pass adds to it."""

    __slots__ = ("bc", "active", "fn_globals", "loc", "immutable", "assumed", "fuse", "activity", "plans", "out",
                 "hooked", "made")  # (a plain class: a dataclass costs its import and its generated methods)

    def __init__(self, bc: Bytecode, active: frozenset[str], fn_globals: dict[str, Any], loc: SourceLoc,
                 immutable: frozenset[str] = frozenset(), assumed: Any = None, fuse: bool = True,
                 made: bool = False) -> None:
        self.bc = bc
        self.active = active
        self.fn_globals = fn_globals
        self.loc = loc
        self.immutable = immutable
        self.assumed = assumed            # a `cache.Assumptions`, or None
        self.fuse = fuse                  # run the fusion pass (off with BYTEGRAD_DISABLE_FUSION=1)
        self.activity: Any = None         # activity: an `activity.Activity`
        self.plans: dict[int, Any] = {}   # fusion: root index -> `fusion.FusedPlan`
        self.out: Optional[Bytecode] = None  # rewrite: the rewritten bytecode
        self.hooked = 0                   # rewrite: the number of hooked sites
        self.made = made                  # a capture's rewrite: made arrays are active (activity.analyze)


if TYPE_CHECKING:
    class Pass(NamedTuple):
        name: str
        run: Callable[[Unit], None]
else:  # (collections.namedtuple: the same tuple class, without typing.NamedTuple's cost at import)
    Pass = collections.namedtuple("Pass", ("name", "run"))


def _activity(unit: Unit) -> None:
    from bytegrad.transform.activity import analyze
    unit.activity = analyze(unit.bc, set(unit.active), unit.fn_globals, unit.loc,
                            immutable_params=unit.immutable, assumed=unit.assumed, made_active=unit.made)


def _fusion(unit: Unit) -> None:
    from bytegrad.transform import fusion
    unit.plans = fusion.find(list(unit.bc), unit.activity, unit.loc) if unit.fuse else {}


def _rewrite(unit: Unit) -> None:
    from bytegrad.transform.rewrite import rewrite
    unit.out, unit.hooked = rewrite(unit.bc, unit.activity, unit.loc, unit.plans, unit.made)


PIPELINE: tuple[Pass, ...] = (Pass("activity", _activity), Pass("fusion", _fusion), Pass("rewrite", _rewrite))
PASS_NAMES = tuple(p.name for p in PIPELINE)


def run(unit: Unit, dump: Optional[Callable[[str, str], None]] = None) -> Unit:
    """Run every pass over `unit`; `dump(pass name, listing)` after each one when given. The
    passes BYTEGRAD_DUMP_AFTER names (comma-separated, or `all`) print their listing to stderr."""
    wanted = _dump_after()
    for p in PIPELINE:
        p.run(unit)
        if dump is None and p.name not in wanted:
            continue
        text = listing(unit, p.name)
        if dump is not None:
            dump(p.name, text)
        if p.name in wanted:
            print(f"---- bytegrad: {unit.loc.function} after {p.name}\n{text}", file=sys.stderr)
    return unit


def _dump_after() -> frozenset[str]:
    return _config.dump_after  # (BYTEGRAD_DUMP_AFTER, checked against the pass names when set)


def listings(fn: types.FunctionType, active: Any = None, *, fuse: bool = True) -> dict[str, str]:
    """The listing of `fn`'s code after each pass, by pass name, with the parameters `active`
    (names; by default the first) differentiated. For debugging and tests: nothing is cached."""
    from bytegrad.transform.cache import param_names
    code = fn.__code__
    if active is None:
        active = param_names(code)[:1]
    loc = SourceLoc(code.co_filename, code.co_firstlineno, code.co_qualname if hasattr(code, "co_qualname")
                    else code.co_name)
    unit = Unit(Bytecode.from_code(code, conserve_exception_block_stackdepth=True), frozenset(active),
                fn.__globals__, loc, fuse=fuse)
    out: dict[str, str] = {}
    run(unit, dump=lambda name, text: out.__setitem__(name, text))
    return out


# ---- listings ----------------------------------------------------------------------------------


def listing(unit: Unit, after: str) -> str:
    """The code of `unit` as text after the pass `after`: the abstract stacks after `activity`, the
    fused trees after `fusion`, the rewritten bytecode after `rewrite`. Lines are relative to the
    function's first line, and objects are named, not addressed, so listings compare across runs."""
    first = unit.loc.lineno
    assert first is not None  # a unit's loc is its code's first line
    if after == "rewrite":
        assert unit.out is not None
        return _format(list(unit.out), first)
    instrs = list(unit.bc)
    if after == "activity":
        stacks = unit.activity.stacks
        notes = {i: _stack_text(stacks[i]) for i in range(len(instrs))}
        return _ACTIVITY_LEGEND + _format(instrs, first, notes)
    return _format(instrs, first, _fusion_notes(unit.plans))


_ACTIVITY_LEGEND = "# the stack before each instruction: A may be active, . inactive, N a NULL; {variables it may alias}\n"


def _stack_text(stack: Any) -> str:
    if stack is None:
        return "unreachable"
    return "[" + " ".join(_slot_text(s) for s in stack) + "]"


def _slot_text(slot: Any) -> str:
    active, null, aliases = slot[0], slot[1], slot[2]
    text = "N" if null else ("A" if active else ".")
    if aliases:
        text += "{" + ",".join(sorted(aliases)) + "}"
    return text


def _fusion_notes(plans: dict[int, Any]) -> dict[int, str]:
    notes: dict[int, str] = {}
    for root, plan in plans.items():
        for j in plan.drop:
            notes[j] = f"dropped by tree {root}"
        for j in plan.plain_loads:
            notes[j] = f"loaded without NULL for tree {root}"
        notes[root] = f"root of tree {root}: fused `{plan.site.expr}`, {plan.n_operands} operands"
    return notes


def _format(instrs: list[Any], first: int, notes: Optional[dict[int, str]] = None) -> str:
    labels: dict[int, str] = {}
    for ins in instrs:
        if isinstance(ins, Label):
            labels[id(ins)] = f"L{len(labels)}"
    lines = []
    for i, ins in enumerate(instrs):
        if isinstance(ins, Label):
            text = f"{labels[id(ins)]}:"
        elif isinstance(ins, TryBegin):
            text = f"  TryBegin -> {labels.get(id(ins.target), '?')} depth={ins.stack_depth} lasti={ins.push_lasti}"
        elif isinstance(ins, TryEnd):
            text = "  TryEnd"
        elif isinstance(ins, Instr):
            line = f"{ins.lineno - first:+d}" if isinstance(ins.lineno, int) else "  "
            text = f"  {line:>4} {ins.name} {_arg_text(ins.arg, labels, first)}".rstrip()
        else:
            text = f"  {type(ins).__name__}"
        note = notes.get(i) if notes else None
        lines.append(f"{text:<60} # {note}" if note else text)
    return "\n".join(lines) + "\n"


def _arg_text(arg: Any, labels: dict[int, str], first: int) -> str:
    if isinstance(arg, Label):
        return labels.get(id(arg), "?")
    if isinstance(arg, types.CodeType):
        return f"<code {arg.co_name}>"
    if isinstance(arg, tuple):
        return "(" + ", ".join(_arg_text(a, labels, first) for a in arg) + ")"
    what = getattr(arg, "what", None)
    if isinstance(what, str) and hasattr(arg, "function"):  # a runtime.abi.Site
        line = f"{arg.lineno - first:+d}" if isinstance(arg.lineno, int) else "?"
        return f"<site {what!r} {line}>"
    site = getattr(arg, "site", None)
    if site is not None and hasattr(arg, "expr"):  # a runtime.fused.FusedSite
        return f"<fused {arg.expr!r}>"
    if callable(arg) and hasattr(arg, "__name__") and not isinstance(arg, type):
        return f"<{getattr(arg, '__module__', None) or '?'}.{arg.__name__}>"
    if hasattr(arg, "name") and not isinstance(arg, (str, bytes)):  # CellVar / FreeVar
        return str(arg.name)
    return repr(arg)
