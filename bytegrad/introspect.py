"""Introspection for users who measure: `Differentiated.stats()` details and `bytegrad.explain`.

`explain(fn, *args, wrt=0)` rewrites `fn` for those arguments (as a gradient would) and returns the
rewritten bytecode, grouped under the user's source lines, with each hooked site named: the rule
that an operator or a statically known callable (`np.tanh`, `math.exp`, recorded on the site by
the rewrite) has, or the fused expression with its tier and kernel. Calls whose callee is only known
at run time show no rule. The operations the rewrite left as they are are listed with the reason.
"""
from __future__ import annotations

import dis
import io
import linecache
import types
from typing import Any, Optional, TextIO

from bytegrad import _lazy_tiers
from bytegrad._stats import codes as _codes, function_stats as function_stats, fused_sites as fused_sites
from bytegrad.rules import registry
from bytegrad.runtime import abi, fused
from bytegrad.transform import opcodes

__all__ = ["explain", "Explanation", "function_stats", "fused_sites"]


def _rule_text(obj: Any) -> str:
    try:
        rule = registry.lookup(obj)
    except TypeError:
        rule = None
    if rule is None:
        if isinstance(obj, types.FunctionType):
            return f"Python function {obj.__qualname__}: differentiated through its code"
        return f"{getattr(obj, '__name__', obj)!s}: no rule (resolved at run time)"
    where = f" ({rule.defined_at})" if getattr(rule, "defined_at", None) else ""
    return f"{rule.kind.name.lower()} rule of {getattr(obj, '__qualname__', getattr(obj, '__name__', obj))}{where}"


class Explanation(str):
    """The listing `explain` returns: a `str` whose repr is the listing itself, so that a REPL or a
    notebook shows it once, laid out, and `print()` prints it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


def explain(fn: Any, *args: Any, wrt: Any = 0, file: Optional[TextIO] = None, **kwargs: Any) -> Optional[Explanation]:
    """The rewritten code of `fn` for these arguments, annotated per site.

    `fn` is rewritten as a gradient with respect to `wrt` would rewrite it (nothing runs), and
    its bytecode is listed under the user's source lines, each hooked site with the rule it calls
    or the fused expression with its tier and kernel. Calls whose callee is only known at run
    time show no rule.

    Parameters
    ----------
    fn : callable or Differentiated
        The function, plain or decorated with `differentiate` (its `wrt` is then used).
    *args : Any
        Example positional arguments: their types decide what the rewrite differentiates.
    wrt : int, str or tuple of them, default 0
        The argument(s) a gradient would differentiate, when `fn` is a plain function.
    file : file-like, optional
        Write the listing there and return None, instead of returning it.
    **kwargs : Any
        Unused; accepted so that a call can mirror the function's.

    Returns
    -------
    Explanation or None
        The listing: a `str` whose `repr` is the text itself, so that typing
        `bytegrad.explain(f, x)` in a REPL or a notebook shows it once, laid out. In a script,
        `print(bytegrad.explain(f, x))`. None when `file` is given.

    Examples
    --------
    >>> import numpy as np
    >>> text = explain(lambda x: np.sum(np.sin(x)), np.ones(3))
    >>> "rule of sum" in text
    True
    """
    from bytegrad.api import Differentiated, differentiate

    fn = _lazy_tiers.resolved(fn)  # (a `differentiate` made before the general path loaded: its Differentiated)
    d = fn if isinstance(fn, Differentiated) else differentiate(fn, wrt=wrt)
    positions, active = d._plan(len(args), d._wrt)
    rewritten = d._rewritten(active, args)
    out = io.StringIO()
    target = d._target
    out.write(f"bytegrad.explain: {target.__qualname__} ({target.__code__.co_filename}:"
              f"{target.__code__.co_firstlineno}), differentiating {', '.join(sorted(active))}\n")
    for co in _codes(rewritten.__code__):
        _explain_code(co, out)
    _explain_left_as_is(target, active, args, d, out)
    _explain_tier(d, args, out)
    text = Explanation(out.getvalue())
    if file is not None:
        file.write(text)
        return None
    return text


#: operand count of the operations the rewrite hooks when one of their operands may be differentiated
_OPERANDS = {opcodes.OpKind.BINARY: 2, opcodes.OpKind.SUBSCR: 2, opcodes.OpKind.SLICE: 3, opcodes.OpKind.UNARY_NEG: 1,
             opcodes.OpKind.UNARY_POS: 1, opcodes.OpKind.GET_ITER: 1, opcodes.OpKind.UNPACK: 1, opcodes.OpKind.UNPACK_EX: 1}


def _left_as_is(ins: Any, kind: Any, st: Any) -> Optional[str]:
    """Why the rewrite left this operation of the function's own code as it is, or None if it hooked it."""
    from bytegrad.transform.activity import nondiff_callable
    from bytegrad.transform.opcodes import OpKind, attr_parts, callable_slot
    from bytegrad.transform.rewrite import NONDIFF_ATTRS, call_active

    if kind is OpKind.CALL:
        if call_active(ins, st):
            return None
        slot = callable_slot(int(ins.arg), st)
        if nondiff_callable(slot):
            return f"call of {getattr(slot.known, '__name__', slot.known)}: its result has no derivative"
        return "call: neither the callable nor an argument can hold a differentiated value"
    if kind is OpKind.LOAD_ATTR:
        name, method = attr_parts(ins)
        if not method and st[-1].active and name in NONDIFF_ATTRS:
            return f"attribute .{name}: it describes the array, not its values"
        return None  # (attributes of inactive objects, modules' functions: not worth a line)
    n = _OPERANDS.get(kind)
    if n is None or any(slot.active for slot in st[-n:]):
        return None
    return f"{ins.name}: no operand can hold a differentiated value"


def _explain_left_as_is(target: Any, active: frozenset[str], args: tuple, d: Any, out: io.StringIO) -> None:
    """The operations of the function's own code that the rewrite left as they are, and why (its
    nested functions are rewritten when called, for the values they get then)."""
    from bytegrad.transform.code import Bytecode, Instr

    from bytegrad.errors import SourceLoc
    from bytegrad.transform import INERT_TYPES
    from bytegrad.transform.activity import analyze
    from bytegrad.transform.opcodes import OpKind, kind_of

    code = target.__code__
    immutable = frozenset(n for n, a in zip(d._params, args) if type(a) in INERT_TYPES and n not in active)
    bc = Bytecode.from_code(code, conserve_exception_block_stackdepth=True)
    act = analyze(bc, set(active), target.__globals__, SourceLoc(code.co_filename, code.co_firstlineno, code.co_name),
                  immutable_params=immutable)
    lines = []
    for ins, st in zip(bc, act.stacks):
        if not isinstance(ins, Instr):
            continue
        try:
            kind = kind_of(ins)
        except KeyError:
            continue
        why = "unreachable" if st is None else _left_as_is(ins, kind, st)
        if why is not None and (st is not None or kind in _OPERANDS or kind is OpKind.CALL):
            line = ins.lineno
            lines.append(f"{line if line is not None else '?':>5} | "
                         f"{linecache.getline(code.co_filename, line).strip() if line else '':<40.40} {why}")
    out.write("\nleft as is in " + (code.co_qualname if hasattr(code, "co_qualname") else code.co_name) +
              ", and why (the activity analysis over its code):\n")
    out.write("\n".join(lines) + "\n" if lines else "  none\n")


def _explain_tier(d: Any, args: tuple, out: io.StringIO) -> None:
    """Whether gradients of these arguments can run as a compiled program, and the programs made."""
    if d._inner is not None:  # a bound method's programs are its function's, the bound arguments in front
        d, args = d._inner, (*d._bound, *args)
    tiers = d._tiers
    if tiers is None:
        out.write("\ncompiled program: none (tier: general)\n")
        return
    reasons, _ = d.eligibility(args)
    if reasons:
        out.write(f"\ncompiled program: not eligible (tier: {tiers.tier}); the general path runs, because it\n")
        for why in reasons:
            out.write(f"  - {why}\n")
    else:
        out.write(f"\ncompiled program: eligible (tier: {tiers.tier}); the capture run may still find a reason not "
                  "to compile (see stats()['compiled'])\n")
    from bytegrad.compiled.policy import numba_note, twin_note
    for k, run in enumerate(tiers.runs):
        p = run.program
        out.write(f"  program {k}: {p.backend} back end, {p.records} operations; guards: {'; '.join(g.describe() for g in p.guards)}\n")
        note = numba_note(run, tiers.tier)
        if note:
            out.write(f"    Numba twin: {note}\n")
        if p.twin:
            out.write(f"    Numba kernels: {twin_note(p)}\n")
    for sig, why in tiers.describe()["not_compiled"].items():
        out.write(f"  not compiled for ({sig}): {why}\n")
    from bytegrad.compiled import keywords  # (calls with keyword-only arguments: compiled/keywords.py)
    out.writelines(f"{line}\n" for line in keywords.explained(d))


def _explain_code(co: types.CodeType, out: io.StringIO) -> None:
    out.write(f"\n== code {co.co_qualname if hasattr(co, 'co_qualname') else co.co_name}\n")
    last_line = None
    for ins in dis.get_instructions(co):
        line = ins.positions.lineno if ins.positions is not None else None
        if line is not None and line != last_line:
            src = linecache.getline(co.co_filename, line).strip()
            out.write(f"{line:5d} | {src}\n")
            last_line = line
        note = ""
        v = ins.argval
        if opcodes.is_const_load(ins):
            if isinstance(v, fused.FusedSite):
                ks = [k for k in v.kernels.values() if k is not None]
                kern = f", kernel bgk_{ks[0].plan.key}" if ks else ""
                note = f"<-- fused site: {v.expr} [tier: {v.state}{kern}]"
            elif isinstance(v, abi.Site):
                note = f"<-- site `{v.what}`"
                if v.callee is not None:
                    note += f": {_rule_text(v.callee)}"
            elif callable(v) and getattr(v, "__module__", "") == abi.__name__:
                op = getattr(v, "__name__", "")
                if op.startswith("binary_") or op.startswith("inplace_"):
                    import operator
                    opfn = getattr(operator, op.split("_", 1)[1], None)
                    note = f"<-- hook {op}: {_rule_text(opfn) if opfn is not None else ''}"
                else:
                    note = f"<-- hook {op}"
        out.write(f"      {ins.opname:<22} {_shown_arg(ins, v)[:40]:<40} {note}\n")


def _shown_arg(ins: Any, v: Any) -> str:
    """The instruction's argument as a reader wants it: a constant's value (a hook or a site by
    name: its note says what it is), an argument count or index where `dis` shows nothing."""
    if opcodes.is_const_load(ins):
        if isinstance(v, abi.Site):
            return f"<site {v.what}>"
        if isinstance(v, fused.FusedSite):
            return "<fused site>"
        if callable(v):
            return f"<{getattr(v, '__name__', None) or type(v).__name__}>"
        text = repr(v)
        return text if len(text) <= 40 else text[:37] + "..."
    if ins.argrepr:
        return ins.argrepr
    return str(ins.arg) if ins.arg is not None else ""
