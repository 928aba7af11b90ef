"""The kinds of record the hooks make for functions with rules (runtime/records.py): their reverse
steps `backward(out_bar, record, out)`, which return one cotangent per parent, and their forward
steps `pushforward(record, out, parent_dots)`.

Layouts: `ELEMENTWISE` `(kind, parents, site, rule, args, fn)`; `UNARY` `(kind, parent, site,
rule, (x,), fn)` with a bare parent index, its cotangent returned bare; `RULE` and
`RULE_TRUSTED` `(kind, parents, site, pullback, args, fn, kwargs)` (the kwargs serve the frule in
forward mode); `TUPLE_ITEM` `(kind, (whole,), site, k, n)`; `IDENTITY` `(kind, (parent,), site)`.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

from bytegrad._bytecode import parameters_read
from bytegrad.errors import DifferentiationError, PullbackError, qualname
from bytegrad.rules import registry
from bytegrad.rules._apply import shape_of
from bytegrad.rules._shape import materialize, stand_in, unbroadcast
from bytegrad.rules.registry import ZERO
from bytegrad.runtime.records import Kind, TupleOut
from bytegrad.runtime.tangents import fit_tangent, pf_transpose
from bytegrad.runtime.tape import collect, tls

_ndarray = np.ndarray


def singular_partial(d: Any, args: tuple, out: Any) -> Any:
    """A partial that divided by a Python float zero (`1 / x` for np.log at 0.0): evaluated again on
    NumPy scalars, which give inf or NaN as NumPy's own arithmetic does instead of raising."""
    def f64(v: Any) -> Any:
        return np.float64(v) if type(v) is float or type(v) is int else v

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return d(*map(f64, args), f64(out))


def partial_term(ct: Any, node: tuple, out: Any, i: int = 0, seed: bool = True) -> Any:
    """`ct` times the partial of argument `i` of an elementwise record (a constant, or a function of
    `(*args, out)`): the evaluation of an elementwise partial, for `_bw_elementwise` per argument and
    for the pushforward (`ct` a tangent, `seed` False); `_bw_unary` is its one-argument case written
    out. With `seed`, the float 1.0 of an unrecorded step
    (the seed of a sum) is not multiplied by: the product is the partial."""
    d = node[3].partials[i]
    if d.__class__ is int or d.__class__ is float:
        return ct if d == 1 else (-ct if d == -1 else ct * d)
    args = node[4]
    try:
        v = d(args[0], out) if len(args) == 1 else (d(args[0], args[1], out) if len(args) == 2 else d(*args, out))
    except ZeroDivisionError:
        v = singular_partial(d, args, out)
    if seed and ct.__class__ is float and ct == 1.0 and (
            (type(v) is _ndarray and v.dtype.kind == "f") or type(v) is float) and unrecorded():
        return v
    if type(v) is _ndarray and v.size >= INPLACE_MIN_SIZE and _getrefcount(v) == 2 and unrecorded() \
            and scalable(ct, v):
        return _multiply(ct, v, out=v)  # a partial only this step holds: scaled in place
    return ct * v


def _bw_unary(ct: Any, node: tuple, out: Any) -> Any:
    """The reverse step of a `UNARY` record: `partial_term` for its one argument, written out (one
    call less per operation: measured under valgrind, 280 instructions, 1.4% of a chain of 100
    np.sin on a one-element array)."""
    d = node[3].partials[0]
    if d.__class__ is int or d.__class__ is float:
        return ct if d == 1 else (-ct if d == -1 else ct * d)
    a = node[4][0]
    try:
        v = d(a, out)
    except ZeroDivisionError:
        v = singular_partial(d, (a,), out)
    if ct.__class__ is float and ct == 1.0 and ((type(v) is _ndarray and v.dtype.kind == "f") or type(v) is float) \
            and unrecorded():
        return v
    if type(v) is _ndarray and v.size >= INPLACE_MIN_SIZE and unrecorded() and _getrefcount(v) == 2 \
            and scalable(ct, v):
        return _multiply(ct, v, out=v)
    return ct * v


def _bw_elementwise(ct: Any, node: tuple, out: Any) -> Any:
    parents = node[1]
    args = node[4]
    partials = node[3].partials
    if type(out) is _ndarray:
        out_shape = out.shape
        dt = out.dtype
        cplx = dt is not _F64 and dt is not _F32 and dt.kind == "c"  # (the common dtypes by identity)
    else:
        out_shape = ()
        cplx = out.__class__ in _COMPLEX_SCALARS
    res: list[Any] = []
    for i, p in enumerate(parents):
        d = partials[i] if p is not None else None
        if d is None:
            res.append(None)
            continue
        if d.__class__ is int or d.__class__ is float:  # (x + y, x - y: not worth a call)
            bar = ct if d == 1 else (-ct if d == -1 else ct * d)
        else:
            bar = partial_term(ct, node, out, i)
        a = args[i]
        a_shape = a.shape if type(a) is _ndarray else shape_of(a)
        if a_shape != out_shape:
            bar = unbroadcast(bar, a_shape, out_shape)
        if cplx and _real_valued(a):
            bar = bar.real  # a real argument of a complex result (x * 1j): Re(out_bar * partial)
        res.append(bar)
    return res


_COMPLEX_SCALARS = frozenset({complex, np.complex64, np.complex128, np.clongdouble})
_F64, _F32 = np.dtype(np.float64), np.dtype(np.float32)


def _real_valued(a: Any) -> bool:
    return a.dtype.kind != "c" if type(a) is _ndarray else a.__class__ not in _COMPLEX_SCALARS


#: A partial such as tanh's `1 - out**2` is a temporary of its reverse step: `sys.getrefcount(v) ==
#: 2` (the local name and the call's argument, CPython 3.11-3.13) and `v.base is None` say nothing
#: else holds it or a view of it. Scaling it by the cotangent in place saves one fresh array per
#: reverse step; fresh arrays of a few hundred KiB cost page faults on every call
#: (bench/results/hotpath.md, the MLP).
_getrefcount = sys.getrefcount
#: partials smaller than this (elements) are multiplied into a new array: NumPy's ufunc call with
#: an output argument costs about twice the instructions of one without (8 k against 4 k, counted
#: under valgrind), and with the checks before it more than a small allocation saves
INPLACE_MIN_SIZE = 4096
_multiply = np.multiply


def unrecorded() -> bool:
    """Whether this reverse step runs as itself, not recorded by a nested derivative (which runs it
    rewritten, on tracked values: those are never written in place)."""
    return getattr(tls, "tape", None) is None


def scalable(ct: Any, v: np.ndarray) -> bool:
    """Whether `ct * v` may be computed into v (whose references the caller counted): v owns its
    memory, and the product has v's shape and dtype."""
    if v.base is not None:
        return False
    if ct.__class__ is float:
        return v.dtype.kind == "f"
    return type(ct) is _ndarray and ct.dtype == v.dtype and ct.shape == v.shape


_USES: dict[Any, frozenset[int]] = {}


def partial_uses(d: Any, nargs: int) -> frozenset[int]:
    """Which of (*args, out) a partial reads: positions 0..nargs (out is nargs). A partial that is
    not a Python function, or takes `*args`, reads them all (`_bytecode.parameters_read`)."""
    uses = _USES.get(d)
    if uses is None:
        code: Any = getattr(d, "__code__", None)
        read = parameters_read(code) if code is not None else None
        if read is None:
            uses = frozenset(range(nargs + 1))
        else:
            names = code.co_varnames[: code.co_argcount]
            uses = frozenset(i for i, n in enumerate(names) if n in read)
            if len(names) == nargs + 1 and names[-1] in read:
                uses |= {nargs}
        _USES[d] = uses
    return uses


def _read_by_partials(node: tuple) -> set[int]:
    """Which of (*args, out) an elementwise record's reverse step reads: positions 0..len(args)-1
    for the arguments, len(args) for the output (the partials of its differentiated arguments)."""
    rule = node[3]
    used: set[int] = set()
    if rule.constant_partials:
        return used
    n = len(node[4])
    parents = node[1] if type(node[1]) is tuple else (node[1],)  # a unary record has a bare index
    for i, p in enumerate(parents):
        if p is not None and i < len(rule.partials) and callable(rule.partials[i]):
            used |= partial_uses(rule.partials[i], n)
    return used


def _saved_elementwise(node: tuple) -> list[np.ndarray]:
    used = _read_by_partials(node)
    return [a for i, a in enumerate(node[4]) if i in used and type(a) is _ndarray]


def _reads_out_elementwise(node: tuple) -> bool:
    return len(node[4]) in _read_by_partials(node)




# ---- slimming: what a tape swept once keeps of a record (see tape.sweep) -------------------------
# `slim(node, out) -> (node, out)` replaces the values a reverse step reads only for their shape by
# zero-memory stand-ins, so they are freed before the sweep instead of after it.


def _slim_elementwise(node: tuple, out: Any) -> tuple[tuple, Any]:
    args = node[4]
    used = _read_by_partials(node)
    slim_args = tuple(a if i in used or type(a) is not _ndarray else stand_in(a) for i, a in enumerate(args))
    return (node[:4] + (slim_args,) + node[5:]), (out if len(args) in used else stand_in(out))


def _slim_rrule_trusted(node: tuple, out: Any) -> tuple[tuple, Any]:
    return node, stand_in(out)  # the pullback keeps what it needs; `out` gives the shape




def _bw_rrule(ct: Any, node: tuple, out: Any) -> Any:
    to = type(out)
    if to is _ndarray:
        if type(ct) is not _ndarray or ct.shape != out.shape:
            ct = materialize(ct, out)
    elif to is TupleOut:
        items = out.value
        ct = tuple(ZERO if c is None or c is ZERO else materialize(c, v) for c, v in zip(ct, items))
        if type(items) is not tuple:
            ct = type(items)(*ct) if hasattr(items, "_fields") else type(items)(ct)
    bars = node[3](ct)
    parents = node[1]
    tb = type(bars)
    if (tb is not tuple and tb is not list) or len(bars) != len(parents):
        if tb is not tuple and tb is not list:
            raise _pullback_shape_error(node, f"returned {tb.__name__}, not a tuple of cotangents")
        raise _pullback_shape_error(
            node, f"returned {len(bars)} cotangents for {len(parents)} positional arguments")
    for p, bar, a in zip(parents, bars, node[4]):
        if p is not None and type(bar) is _ndarray and type(a) is _ndarray and bar.shape != a.shape and bar.ndim:
            raise _pullback_shape_error(
                node, f"returned a cotangent of shape {bar.shape} for an input of shape {a.shape}")
    return bars


def _bw_rrule_trusted(ct: Any, node: tuple, out: Any) -> Any:
    """`_bw_rrule` for bytegrad's own (table-tested) rules: no re-checking of the pullback's result."""
    to = type(out)
    if to is _ndarray:
        if type(ct) is not _ndarray or ct.shape != out.shape:
            ct = materialize(ct, out)
        return node[3](ct)
    if to is TupleOut:
        return _bw_rrule(ct, node, out)
    return node[3](ct)


def _pullback_shape_error(node: tuple, what: str) -> DifferentiationError:
    site = node[2]
    return PullbackError(f"the pullback of {qualname(node[5])} {what}.",
                         site.loc() if site is not None else None,
                         "fix the rule's pullback: it must return one cotangent per positional argument, "
                         "each shaped like its argument (check it with bytegrad.rules.testing.check_rule).")


def _bw_tuple_item(ct: Any, node: tuple, out: Any) -> tuple[Any, ...]:
    k, n = node[3], node[4]
    bars: list[Any] = [ZERO] * n
    bars[k] = ct
    return (tuple(bars),)


def _saved_rrule(node: tuple) -> list[np.ndarray]:
    """What a rule's pullback captured (its closure); the recorded args serve only shape checks."""
    found: list[np.ndarray] = []
    collect(node[3], found, 3)
    return found




# ---- pushforwards: (record, out, parent_dots) -> out_dot -----------------------------------------


def pf_elementwise(node: tuple, out: Any, parent_dots: Any) -> Any:
    """`sum_i partial_i * x_dot_i` for a `scalar_rule` node (binary, n-ary or unary layout)."""
    partials = node[3].partials
    out_dot = None
    for i, x_dot in enumerate(parent_dots):
        if x_dot is None or i >= len(partials):
            continue
        d = partials[i]
        if d is None:
            continue
        term = partial_term(x_dot, node, out, i, False)
        out_dot = term if out_dot is None else out_dot + term
    return fit_tangent(out_dot, out)


def _rule_of(fn: Any) -> Any:
    rule = registry.lookup(fn)
    if rule is None:
        owner = getattr(fn, "__self__", None)  # `x.T` is recorded with the descriptor's __get__
        if owner is not None and type(owner) is not np.ndarray:
            rule = registry.lookup(owner)
    return rule


def _args_dot(parent_dots: Any, args: tuple) -> tuple[Any, ...]:
    """One tangent per positional argument, ZERO where there is none (lists mirror list arguments)."""
    out: list[Any] = []
    for k, a in enumerate(args):
        d = parent_dots[k] if k < len(parent_dots) else None
        if d is None:
            out.append(ZERO)
        elif type(d) is list:
            out.append(_zero_filled(d, a))
        else:
            out.append(d)
    return tuple(out)


def _zero_filled(dots: list[Any], arg: Any) -> Any:
    items = [ZERO if d is None else (_zero_filled(d, a) if type(d) is list else d) for d, a in zip(dots, arg)]
    return items if isinstance(arg, list) else tuple(items)


def pf_rrule(node: tuple, out: Any, parent_dots: Any) -> Any:
    """A rule node: its frule when it has one, else linear transposition of its pullback."""
    rule = _rule_of(node[5])
    frule = rule.frule if rule is not None else None
    if frule is None:
        return pf_transpose(node, out, parent_dots)
    args = node[4]
    kwargs = node[6] if len(node) > 6 else None
    args_dot = _args_dot(parent_dots, args)
    _, out_dot = frule(args_dot, *args, **kwargs) if kwargs else frule(args_dot, *args)
    if type(out) is TupleOut:
        return tuple(fit_tangent(d, v) for d, v in zip(out_dot, out.value))
    return fit_tangent(out_dot, out)


def pf_tuple_item(node: tuple, out: Any, parent_dots: Any) -> Any:
    whole = parent_dots[0]
    return None if whole is None else whole[node[3]]


# ---- the kinds -------------------------------------------------------------------------------------

_EW_FIELDS = ("rule", "args", "fn")
ELEMENTWISE = Kind("elementwise", _EW_FIELDS, _bw_elementwise, pushforward=pf_elementwise, saved=_saved_elementwise,
                   reads_out=_reads_out_elementwise, slim=_slim_elementwise, fn_at=5, args_at=4)
UNARY = Kind("unary", _EW_FIELDS, _bw_unary, pushforward=pf_elementwise, saved=_saved_elementwise,
             reads_out=_reads_out_elementwise, slim=_slim_elementwise, fn_at=5, args_at=4)
_RULE_FIELDS = ("pullback", "args", "fn", "kwargs")
RULE = Kind("rule", _RULE_FIELDS, _bw_rrule, pushforward=pf_rrule, saved=_saved_rrule, fn_at=5, args_at=4)
#: bytegrad's own (table-tested) rules: the pullback's result is not re-checked
RULE_TRUSTED = Kind("rule", _RULE_FIELDS, _bw_rrule_trusted, pushforward=pf_rrule, saved=_saved_rrule,
                    slim=_slim_rrule_trusted, fn_at=5, args_at=4)
TUPLE_ITEM = Kind("tuple item", ("k", "n"), _bw_tuple_item, pushforward=pf_tuple_item)
