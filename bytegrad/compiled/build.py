"""A program from a capture's tape: the guards, then one back end's code (compiled/lower_numpy.py or
compiled/lower_numba.py), or a pullback program (compiled/pullback.py).

The back ends and the pullback builder import `lower_numpy.Builder`; this module sits above all of
them, so none imports another back end (the lowering of Numba kernels is imported here only when
a Numba program is built: it loads `runtime.kernels`' sources, not Numba itself).
"""
from __future__ import annotations

import types
from typing import Any, Optional

from bytegrad.compiled import errstate, lower_numpy, made, passes, roll
from bytegrad.compiled.ir import dump
from bytegrad.compiled.lower_numpy import Builder, compile_source
from bytegrad.compiled.parts import paused_and_sized, savable_share, value_only
from bytegrad.compiled.numba_price import twin_statements
from bytegrad.compiled.pullback import build_pullback, named_outputs, output_code, output_leaves
from bytegrad.compiled.source import Ineligible, Inputs, Program, Source, gradient_code, static_guards
from bytegrad.rules import registry
from bytegrad.runtime import pytree
from bytegrad.runtime.tape import Tape

__all__ = ["Ineligible", "Program", "build"]


@paused_and_sized
def build(tape: Tape, call_args: tuple, specs: list, wrt: tuple[int, ...], out: Any, wrt_tuple: bool,
          static_guards_: list[tuple], code: types.CodeType, backend: str = "numpy",
          pullback: bool = False, aux: Optional[tuple] = None) -> Program:
    """The program for the computation recorded on `tape` (a capture run of `call_args`, every
    positional argument `p` with a spec in `specs[p]`), differentiated with respect to positions
    `wrt`. `static_guards_`: ("global", globals dict, name, value) and ("attr", module, name, value)
    entries the code's reads were resolved against; `code`: the user's function, whose file and
    lines the program's operations carry (an error raised in one shows the user's line).
    `backend`: "numpy" (this module) or "numba" (compiled/lower_numba.py). `pullback`: the program
    is `fn(args) -> (output, back)`, `back(out_bar)` the cotangents of every positional argument
    (a tuple, None where an argument has no derivative) or MISS where `out_bar` is not shaped as
    at capture; `out` may then be a tree of values. `aux`: `(aux,)` for a function with
    `has_aux=True` (the program returns `((value, aux), gradient)`, or `(output, back, aux)` as a
    pullback program). Raises `Ineligible`."""
    made.fold_integer_records(tape)  # (`np.arange(n) + 1`: made again, not a record)
    src = Source()
    inputs = Inputs(src)
    src.guard("type", f"len(args) == {len(call_args)}", f"{len(call_args)} positional arguments")
    names = code.co_varnames[:code.co_argcount]
    for p, value in enumerate(call_args):
        var = inputs.temp()
        inputs.labels[var] = names[p] if p < len(names) else f"args[{p}]"
        src.emit(f"{var} = args[{p}]")
        inputs.walk(var, value, specs[p], fresh=p in wrt)
    static_guards(src, static_guards_, inputs, tape.ids, getattr(tape, "taken", None))
    # (_VERSION: the registry's version when the program is compiled, here or loaded from disk)
    src.guard("version", "_version() == _VERSION", f"rule registry version {registry.program_version()}")
    fn_globals: dict = next((owner for kind, owner, *_ in static_guards_ if kind == "global"), {})
    if (pullback or backend != "numpy") and errstate.blocks(code, fn_globals):
        raise Ineligible("`with np.errstate(...)`: NumPy gradient programs only (compiled/errstate.py)")
    if pullback:
        if backend != "numpy":
            raise Ineligible("pullbacks have the NumPy back end only")
        return build_pullback(tape, src, inputs, specs, wrt, out, code, aux)
    out_idx = tape.ids.get(id(out))
    if out_idx is None or tape.values[out_idx] is not out:
        raise Ineligible("the output does not depend on the arguments")
    wrt_leaves = {leaf.idx for p in wrt for leaf in pytree.leaves(specs[p])}
    b = Builder(tape, src, inputs, wrt_leaves)
    b.code = code  # (compiled/writes.py reads how the code uses a mask)
    aux_leaves: dict[int, Any] = {}
    if aux is not None:
        if backend != "numpy":
            raise Ineligible("has_aux programs have the NumPy back end only")
        output_leaves(aux[0], tape, aux_leaves)
    order, depends = b.read([out_idx, *aux_leaves])
    if backend == "numba":
        result_var, state, forward_records = _numba_emit(b, order, depends, out_idx, code)
    else:
        result_var, state, forward_records = lower_numpy.emit(b, order, depends, out_idx)
        errstate.wrap(b, code, fn_globals)  # (the steps inside `with np.errstate(...)` run under it)
    skipped = value_only(b.src, b.stmt_of, out_idx, b.raising, b.plan.value_only) \
        if backend == "numpy" and aux is None else []  # (the IR pass's value-only records: compiled/passes.py)
    lines: list[str] = []
    grads = [gradient_code(src, specs[p], state, lines, inputs.fresh) for p in wrt]
    if len(grads) > 1:
        lines.append(f"grads = _unalias(({', '.join(grads)},))")
        result = "grads" if wrt_tuple else "grads[0]"
    else:
        result = f"({grads[0]},)" if wrt_tuple else grads[0]
    if aux is not None:  # the aux output, rebuilt from the values it holds
        result_var = f"({result_var}, {output_code(aux[0], tape, named_outputs(aux_leaves, b), b, src)})"
    src.emit(lines + [f"return {result_var}, {result}"])
    fn, source = compile_source(src, code)
    if src.kernel_source is not None:
        source += "\n# the Numba kernel it calls\n" + src.kernel_source
    numpy = backend == "numpy"
    rolled = roll.of(b)  # (a repeated step: its Numba twin writes it once, in a loop; compiled/roll.py)
    repeated = {i for rep in rolled.reps[:-1] for i in rep} if rolled else set()  # (the twin writes the last one)
    return Program(fn, source, src.guards, forward_records, backend=backend, twin=src.kernel_stems, ir=dump(b.ir),
                   passes=passes.dump(b.plan) + "\n" + passes.dump_lowering(skipped, src.reused, b.stmt_of)
                   + ("\n" + roll.dump(rolled) if rolled else ""),
                   rolled=len(b.ir.ops) - rolled.saved if rolled else None,
                   parts=(src.ns, *src.parts) if numpy else None,
                   share=savable_share([b.records[i] for i in order if i in b.records]) if numpy else 1.0,
                   statements=twin_statements([b.records[i] for i in order if i in b.records and i not in repeated])
                   if numpy else 0)


def _numba_emit(b: Builder, order: list[int], depends: set[int], out_idx: int, code: types.CodeType) -> Any:
    """lower_numba.emit; an unexpected error in it (a fault of the Numba lowering) is the Numba back end
    declining, with the error in the reason and a warning on the `bytegrad` logger: the NumPy program stays."""
    from bytegrad.compiled import lower_numba

    try:
        return lower_numba.emit(b, order, depends, out_idx)
    except (Ineligible, RecursionError, MemoryError):
        raise
    except Exception as exc:
        from bytegrad.compiled.policy import log

        log().warning("the Numba back end failed on %s: %r", code.co_name, exc)
        raise Ineligible(f"the Numba back end failed ({type(exc).__name__}: {exc}); its NumPy program runs "
                         "(please report it)") from exc
