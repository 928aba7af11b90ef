"""Binary operators with a differentiated operand, off the hooks' fast path (runtime/abi.py):
operators without an elementwise rule or on out-of-date values (`binary_tracked`), operators a
user class implements in Python (`user_binary`, run rewritten), NumPy arithmetic on lists that hold
differentiated values, and in-place operators on arrays (`inplace_array`: recorded as a write).
"""
from __future__ import annotations

import operator
import types
from typing import Any

import numpy as np

from bytegrad import _operators
from bytegrad.errors import NoRuleError, RuleCaseError, qualname
from bytegrad.rules import registry
from bytegrad.rules.registry import RuleKind
from bytegrad.runtime import writes
from bytegrad.runtime.backward import (  # the record kinds (runtime/records.py)
    ELEMENTWISE as EW_RECORD, RULE as RULE_RECORD, RULE_TRUSTED as TRUSTED_RECORD,
)
from bytegrad.runtime.dispatch import call_python, dispatch, other_case
from bytegrad.runtime.records import Site
from bytegrad.runtime.recording import (
    as_array, parent_of, push_output, refresh_parents, snapshot, trackable, untracked_views,
)
from bytegrad.runtime.tape import Tape

__all__ = ["binary_tracked", "user_binary", "python_operator", "list_as_array", "inplace_array"]

_ndarray = np.ndarray
_float64 = np.float64
_FunctionType = types.FunctionType
_rules_get = registry.get_rule
ELEMENTWISE, RRULE, NONDIFF, TRANSPARENT = (
    RuleKind.ELEMENTWISE, RuleKind.RRULE, RuleKind.NONDIFF, RuleKind.TRANSPARENT)


def binary_tracked(tape: Tape, site: Site, op: Any, a: Any, b: Any, ia: Any, ib: Any) -> Any:
    rule = _rules_get(op)
    if rule is None:
        if tape.plain(op, (a, b), None, site):  # (a capture's float argument not differentiated: compiled/plainly.py)
            return op(a, b)
        raise NoRuleError(op, site.loc())
    kind = rule.kind
    if kind is ELEMENTWISE:
        if tape.stale:
            ia, ib = refresh_parents(tape, (ia, ib), site)
        out = op(a, b)
        to = type(out)
        if to is not _ndarray and to is not float and to is not _float64 and not trackable(out):
            return out  # e.g. `"%s" % x`: nothing to differentiate
        values = tape.values
        tape.ids[id(out)] = len(values)
        values.append(out)
        tape.nodes.append((EW_RECORD, (ia, ib), site, rule, (as_array(a), as_array(b)), op))
        return out
    if kind is RRULE and rule.rrule is not None:
        try:
            out, pullback = rule.rrule(a, b)
        except RuleCaseError as exc:
            if exc.loc is not None:
                raise
            return other_case(tape, site, op, (a, b), None, exc)
        node = (TRUSTED_RECORD if rule.trusted else RULE_RECORD, (ia, ib), site, pullback, (a, b), op)
        return push_output(tape, node, out)
    if kind is NONDIFF or kind is TRANSPARENT:
        if tape.capturing:
            out = op(a, b)
            if op in _FLAT and trackable(out):
                return _record_flat(tape, site, op, a, b, ia, ib, out)
            tape.refuse(f"computes {qualname(op)} of a differentiated value (no derivative)", site)
            return out
        return op(a, b)
    return dispatch(tape, site, op, (a, b), None)


#: operators without a derivative whose float result a capture records (a zero derivative), so that a
#: compiled program computes them again from the call's values: `x // 1.0`
_FLAT = {op: registry.Rule(op, RuleKind.ELEMENTWISE, partials=(None, None), constant_partials=True)
         for op in (operator.floordiv, operator.ifloordiv)}


def _record_flat(tape: Tape, site: Site, op: Any, a: Any, b: Any, ia: Any, ib: Any, out: Any) -> Any:
    """`a op b` on a capture tape: an elementwise record whose partials are None (the general
    sweep gives its operands nothing from it, as the general path, which does not record it);
    what reads the result is recorded, or decided on, as for any tracked value."""
    if tape.stale:
        ia, ib = refresh_parents(tape, (ia, ib), site)
    values = tape.values
    tape.ids[id(out)] = len(values)
    values.append(out)
    tape.nodes.append((EW_RECORD, (ia, ib), site, _FLAT[op], (as_array(a), as_array(b)), op))
    return out


_REFLECTED = _operators.REFLECTED


def python_operator(op: Any, ta: type, tb: type) -> bool:
    """Whether `a op b` would run an operator method written in Python (a's, or b's reflected one)."""
    if type(getattr(ta, f"__{op.__name__.strip('_')}__", None)) is _FunctionType:
        return True
    reflected = _REFLECTED.get(op)
    return reflected is not None and type(getattr(tb, reflected, None)) is _FunctionType


def user_binary(tape: Tape, site: Site, op: Any, a: Any, b: Any) -> Any:
    """`a op b` where an operand's class implements the operator in Python: run that code rewritten."""
    name = f"__{op.__name__.strip('_')}__"
    ta, tb = type(a), type(b)
    reflected = _REFLECTED.get(op)
    # Python tries b's reflected method first when b's class is a subclass of a's
    # (and a NumPy scalar's operator hands an unknown operand to that operand's reflected method)
    b_first = (tb is not ta and issubclass(tb, ta)) or (
        issubclass(ta, np.generic) and reflected is not None and type(getattr(tb, reflected, None)) is _FunctionType)
    order = [(tb, reflected, b, a), (ta, name, a, b)] if b_first else [(ta, name, a, b), (tb, reflected, b, a)]
    for cls, meth_name, x, y in order:
        if meth_name is None or (cls is tb and ta is tb and meth_name == reflected):
            continue
        meth = getattr(cls, meth_name, None)
        if meth is None:
            continue
        if type(meth) is _FunctionType:
            out = call_python(tape, site, meth, (x, y), None)
        else:
            out = meth(x, y)  # a C implementation (float.__mul__...): it may decline
        if out is not NotImplemented:
            return out
    return op(a, b)  # nobody took it: the plain operator raises the usual TypeError


def list_as_array(ids: dict[int, int], op: Any, a: Any, b: Any) -> bool:
    """Whether `a op b` is NumPy arithmetic on a list or tuple that holds differentiated values
    (`x[:2] * [x[2], 1.0]`): the other operand is an array, or a NumPy scalar in an operator other
    than `*` (which is sequence repetition there, as two lists would concatenate)."""
    ta = type(a)
    if ta is list or ta is tuple:
        seq, other = a, b
    else:
        seq, other = b, a
    if type(other) is not _ndarray and (op is operator.mul or not isinstance(other, np.generic)):
        return False
    return parent_of(ids, seq) is not None


def inplace_array(tape: Tape, site: Site, iop: Any, op: Any, a: np.ndarray, b: Any, ia: Any, ib: Any) -> Any:
    if ia is None and ib is None and tape.owners:
        ia, ib = untracked_views(tape, site, (a, b), (None, None))
    if ia is None and ib is None:
        tape.check_write(a, a, site)
        return iop(a, b)
    if tape.stale:
        ia, ib = refresh_parents(tape, (ia, ib), site)
    tape.check_protected(a, site)  # refuse writing into the caller's data before computing anything
    # The new value is computed out of place, from copies of the old value (and of an operand that
    # shares its memory: `y *= y`, `a += a.T`), then written back into `a` as a recorded assignment,
    # which first gives any operation that saved the old value a copy of it (tape.check_write).
    # (Recorded copies, `snapshot`: a nested derivative differentiates the rule's use of them too.)
    old = snapshot(tape, site, a)
    ids = tape.ids
    if ia is not None:
        ia = ids[id(old)]
    if b is a:
        b, ib = old, ia
    elif type(b) is _ndarray and np.may_share_memory(a, b):
        b = snapshot(tape, site, b)
        if ib is not None:
            ib = ids[id(b)]
    res = binary_tracked(tape, site, op, old, b, ia, ib)
    writes.write(tape, site, a, Ellipsis, res, tape.ids.get(id(res)))
    return a
