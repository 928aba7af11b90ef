"""Compiled programs whose output is a tree: pullback programs, and the aux of `has_aux`.

`build_pullback` writes a pullback program (compiled/lower_numpy.py's `build` with `pullback=True`): the
forward pass, the output rebuilt from its values, and `def back(ob)` nested in the program, which
reads the saved values from the enclosing call and is seeded from any cotangent shaped like the
output (paired with the output's leaves by `pytree.cotangent_leaves`, as the general path pairs
them). `output_leaves` and `output_code` rebuild an output (or an aux) from the program's variables.
"""
from __future__ import annotations

import types
from typing import Any, Optional

import numpy as np

from bytegrad.runtime import pytree
from bytegrad.compiled.lower_numpy import Builder, Program, compile_source
from bytegrad.compiled.source import FLOAT_TYPES, MAYBE, Ineligible, Inputs, Source, gradient_code
from bytegrad.runtime.tape import Tape

__all__ = ["build_pullback", "named_outputs", "output_code", "output_leaves"]

_ndarray = np.ndarray


def build_pullback(tape: Tape, src: Source, inputs: Inputs, specs: list, wrt: tuple[int, ...], out: Any,
                   code: types.CodeType, aux: Optional[tuple] = None) -> Program:
    """A pullback program (see `build`): the forward pass, then `back` as a nested function that
    reads the saved values from the enclosing call. Its seeds are paired with the output's leaves by
    `pytree.cotangent_leaves`, as the general path pairs them. `aux`: `(aux,)` for a function with
    `has_aux=True`: the program returns `(output, back, aux)`, the aux rebuilt from its values."""
    leaves: dict[int, Any] = {}
    aux_leaves: dict[int, Any] = {}
    wrt_leaves = {leaf.idx for p in wrt for leaf in pytree.leaves(specs[p])}
    b = Builder(tape, src, inputs, wrt_leaves)
    output_leaves(out, tape, leaves)
    if not leaves:
        raise Ineligible("the output does not depend on the arguments")
    if aux is not None:
        output_leaves(aux[0], tape, aux_leaves)
    order, depends = b.read(sorted(leaves.keys() | aux_leaves.keys()))
    n = b.forward_all(order, depends)
    named = named_outputs(leaves, b)
    src.emit(f"out_ = {output_code(out, tape, named, b, src)}")
    if aux is not None:
        src.emit(f"aux_ = {output_code(aux[0], tape, named_outputs(aux_leaves, b), b, src)}")
        src.returns = "out_, back, aux_"
    src.back_from = len(src.stmts)
    ids = ", ".join(f"id({named[i]}): {i}" for i in sorted(leaves))
    src.emit(["pairs_ = []", f"_cotangent_leaves(out_, ob, {{{ids}}}, pairs_)", "seeds_ = {}",
              "for i_, c_ in pairs_:",
              "    if c_ is not None: seeds_[i_] = c_ if i_ not in seeds_ else seeds_[i_] + c_"])
    for i, value in sorted(leaves.items()):
        g = f"g{i}"
        if type(value) is _ndarray:
            ok = f"{g}.__class__ is ndarray and {g}.shape == {value.shape!r}"
        else:
            ok = f"{g}.__class__ is float or {g}.__class__ is int or {g}.__class__ is {src.const(np.float64, 'T')}"
        src.emit(f"{g} = seeds_.get({i})")
        src.guard("cotangent", f"{g} is None or {ok}", f"the cotangent of output value {i}: "
                  + (f"ndarray of shape {value.shape!r}" if type(value) is _ndarray else "a float or an int"))
        b.state[i] = MAYBE
    for i in b.plan.schedule.sweep():  # the reverse schedule (compiled/passes.py), in the sweep's order
        b.reverse(i, depends)
    lines: list[str] = []
    grads = [gradient_code(src, specs[p], b.state, lines, inputs.fresh) for p in range(len(specs))]
    src.emit(lines + [f"return _unalias(({''.join(g + ', ' for g in grads)}))"])
    fn, source = compile_source(src, code)
    # (no Numba twin: pullbacks have the NumPy back end only; the policy never tries one)
    return Program(fn, source, src.guards, n, pullback=True, parts=(src.ns, *src.parts))


def named_outputs(leaves: dict[int, Any], b: Builder) -> dict[int, str]:
    """The variable of each output leaf; a differentiated argument returned as it is comes back as a
    view of it, as the general path returns it (an array read from a global comes back itself)."""
    named: dict[int, str] = {}
    for i in sorted(leaves):
        if i in b.inputs.fresh and type(leaves[i]) is _ndarray:
            named[i] = b.inputs.temp()
            b.src.emit(f"{named[i]} = {b.var[i]}.view()")
        else:
            named[i] = b.var[i]
    return named


def output_leaves(value: Any, tape: Tape, found: dict[int, Any]) -> None:
    """The tape indices of `value`'s tracked leaves (as `pytree.cotangent_leaves` finds them)."""
    i = tape.ids.get(id(value))
    t = type(value)
    if i is not None and tape.values[i] is value and (t is _ndarray or t in FLOAT_TYPES):
        found[i] = value
    elif t is tuple or t is list:
        for v in value:
            output_leaves(v, tape, found)
    elif t is dict:
        for v in value.values():
            output_leaves(v, tape, found)


def output_code(value: Any, tape: Tape, named: dict[int, str], b: Builder, src: Source) -> str:
    """The expression that rebuilds the output `value` from the program's variables."""
    i = tape.ids.get(id(value))
    t = type(value)
    if i is not None and tape.values[i] is value and (t is _ndarray or t in FLOAT_TYPES):
        return named[i]
    if t is tuple or t is list:
        items = "".join(output_code(v, tape, named, b, src) + ", " for v in value)
        return f"({items})" if t is tuple else f"[{items}]"
    if t is dict:
        if not all(type(k) is str or type(k) is int for k in value):
            raise Ineligible("an output dict with keys other than strings and ints")
        return "{" + ", ".join(f"{k!r}: {output_code(v, tape, named, b, src)}" for k, v in value.items()) + "}"
    if t is _ndarray:
        var = b.inputs.untracked.get(id(value))
        if var is None:
            raise Ineligible("an output array that is not computed from the arguments nor one of them")
        return var
    if t in (int, float, bool, str, type(None)):
        return src.const(value)
    raise Ineligible(f"an output of type {t.__name__} (pullback programs return arrays, floats and tuples, "
                     "lists and dicts of them)")
