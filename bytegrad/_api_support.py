"""What `Differentiated` and the functional API share: a derivative taken inside another one
(`Nested`: its work recorded on the enclosing tape), keyword slots of positional parameters, the
checking tape of `debug_nans`, and the checks of what a function returns."""
from __future__ import annotations

import functools
import inspect
import types
from typing import Any, Callable, Optional

import numpy as np

from bytegrad.errors import AuxOutputError, SourceLoc, UnsupportedOpcodeError
from bytegrad.runtime import abi, nested as _nested_sweep, pytree
from bytegrad.runtime.dispatch import dispatch
from bytegrad.runtime.tape import Tape, sweep, tls

__all__ = ["KeywordSlots", "Nested", "aux_pair", "checking_tape", "def_loc", "general_back", "fn_code", "fn_name", "fn_return_loc", "is_complex",
           "return_loc", "split_aux", "suspending_error"]

_ndarray = np.ndarray
_float64 = np.float64


class Nested:
    """A derivative taken while another tape was active: it shares that tape, and its own leaves are
    the nodes `start..stop`. Its reverse sweep visits only later nodes (earlier ones are the outer
    computation: constants here), and is recorded on the tape while that tape is current, so the
    outer derivative differentiates through it (reverse-over-reverse, forward-over-reverse)."""

    __slots__ = ("tape", "site", "start", "stop")

    def __init__(self, tape: Tape, site: abi.Site, start: int) -> None:
        self.tape = tape
        self.site = site
        self.start = start
        self.stop = start - 1

    def recording(self) -> bool:
        return getattr(tls, "tape", None) is self.tape

    def call(self, fn: Callable[..., Any], args: tuple) -> Any:
        """`fn(*args)`, recorded on the tape while it is current."""
        if self.recording():
            return _nested_sweep.recorded_call(self.tape, self.site, fn, args)
        return fn(*args)

    def recorder(self) -> Optional[_nested_sweep.Recording]:
        """What runs the forward pass's steps recorded while the tape is current (else None)."""
        return _nested_sweep.Recording(self.tape) if self.recording() else None

    def sweep(self, seeds: dict[int, Any]) -> list[Any]:
        seeds = {i: c for i, c in seeds.items() if i >= self.start}  # earlier outputs: constants here
        if not seeds:
            return [None] * len(self.tape.nodes)
        if self.recording():
            tls.nesting = getattr(tls, "nesting", 0) + 1
            try:
                return sweep(self.tape, seeds, self.stop, self.recorder())
            finally:
                tls.nesting -= 1
        return sweep(self.tape, seeds, self.stop)

    def project(self, ct: Any, primal: Any) -> Any:
        if ct is None or not self.recording():
            return pytree.project(ct, primal)
        return self.call(_nested_sweep.project_traced, (ct, primal))

    def gradients(self, specs: list, cts: list[Any], force_tuple: bool = False) -> tuple[Any, ...]:
        grads = tuple(self.gradient(s, cts) for s in specs)
        if len(grads) > 1 or force_tuple:
            grads = pytree.unalias(grads, lambda g: self.op(np.copy, g))  # (np.copy has a rule: no rewrite)
        return grads

    def gradient(self, spec: Any, cts: list[Any]) -> Any:
        """`pytree.gradient`, with each leaf projected by `self.project`."""
        return pytree.gradient(spec, cts, self.project)

    def op(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A NumPy call on (possibly) tracked values, recorded while the tape is current."""
        if self.recording():
            return dispatch(self.tape, self.site, fn, args, kwargs or None)
        return fn(*args, **kwargs)


class KeywordSlots(list):
    """Positional arguments (by index) and keyword-only ones named by `wrt` (by name), while the
    differentiated ones are swapped for their tracked copies."""

    def __init__(self, args: list) -> None:
        super().__init__(args)
        self.named: dict[str, Any] = {}

    def __getitem__(self, p: Any) -> Any:
        return self.named[p] if type(p) is str else list.__getitem__(self, p)

    def __setitem__(self, p: Any, value: Any) -> None:
        if type(p) is str:
            self.named[p] = value
        else:
            list.__setitem__(self, p, value)

    def split(self) -> tuple[list, dict]:
        return list(self), self.named


def is_complex(out: Any) -> bool:
    """A complex scalar output of `grad` (a Python complex, a NumPy complex scalar or 0-d array; a
    complex array of more elements is refused as non-scalar)."""
    if type(out) is complex:
        return True
    return getattr(getattr(out, "dtype", None), "kind", "") == "c" and getattr(out, "ndim", 0) == 0


def checking_tape() -> Tape:
    from bytegrad.runtime.nancheck import CheckingTape  # only in debug mode
    return CheckingTape()


def return_loc(code: types.CodeType) -> SourceLoc:
    """Where `code` returns: its one return line, else its first line (for errors about the output)."""
    from bytegrad.transform.code import Bytecode, Instr

    from bytegrad.transform import opcodes
    lines = {i.lineno for i in Bytecode.from_code(code) if isinstance(i, Instr)
             and opcodes.returns_value(i) and isinstance(i.lineno, int)}
    line = lines.pop() if len(lines) == 1 else code.co_firstlineno
    return SourceLoc(code.co_filename, line, code.co_name)


def suspending_error(code: types.CodeType, loc: SourceLoc) -> UnsupportedOpcodeError:
    """The error for differentiating a generator or coroutine function (its call returns no value)."""
    if code.co_flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        construct = "an async function (`async def`): calling it returns a coroutine"
        fix = "differentiate a plain `def` that computes the value without awaiting."
    else:
        construct = "a generator function (it contains `yield`): calling it returns a generator"
        fix = ("differentiate a plain function that consumes the generator, for example "
               "`lambda x: sum(gen(x))`: generators called from differentiated code are supported.")
    return UnsupportedOpcodeError(f"{code.co_name} is {construct}, not a value to differentiate.", loc, fix)


def aux_pair(out: Any, name: str, loc: Callable[[], SourceLoc]) -> tuple[Any, Any]:
    """`(value, aux)` from the output of a function `name` declared `has_aux=True` (`loc()`: where it returns)."""
    if type(out) is tuple and len(out) == 2:
        return out
    found = f"a tuple of {len(out)}" if isinstance(out, tuple) else f"a {type(out).__name__}"
    raise AuxOutputError(
        f"{name} was declared has_aux=True, so it must return a pair (value, aux), but it returned {found}.", loc(),
        "return `value, aux` (a tuple of two: the value to differentiate and anything else), or drop has_aux=True.")


def split_aux(fn: Callable[..., Any]) -> tuple[Callable[..., Any], list]:
    """(`fn` returning its value only, the list its calls append their aux to): `has_aux` for the functions
    that differentiate a function as it is (`jvp`, `jacobian`), which run it once per call."""
    box: list = []
    name = fn_name(fn)

    def value_only(*args: Any, **kwargs: Any) -> Any:
        value, aux = aux_pair(fn(*args, **kwargs), name, lambda: fn_return_loc(fn))
        box.append(aux)
        return value

    functools.update_wrapper(value_only, fn, updated=())
    return value_only, box


def fn_name(fn: Any) -> str:
    """A callable's name for messages: its qualified name, else its type's."""
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def fn_code(fn: Any) -> Optional[types.CodeType]:
    """The code object of a function, a bound method, a `functools.partial` or an object's `__call__`, or None."""
    target = getattr(fn, "func", fn)  # (a functools.partial)
    target = getattr(target, "__func__", target)  # (a bound method)
    return getattr(target, "__code__", None) or getattr(getattr(type(target), "__call__", None), "__code__", None)


def def_loc(fn: Any) -> SourceLoc:
    """Where `fn` is defined (its first line), for errors about the function itself."""
    code = fn_code(fn)
    if code is None:
        return SourceLoc("<unknown>", 0, fn_name(fn))
    return SourceLoc(code.co_filename, code.co_firstlineno, code.co_name)


def fn_return_loc(fn: Any) -> SourceLoc:
    """Where `fn` returns (`return_loc`), for errors about its output; where it is defined without its code."""
    code = fn_code(fn)
    return return_loc(code) if code is not None else def_loc(fn)


def general_back(out: Any, tape: Tape, specs: list, nested: Optional[Nested]) -> Callable[[Any], tuple]:
    """The general path's `back` of a pullback: the tape swept from `out_bar`."""
    def back(out_bar: Any) -> tuple[Any, ...]:
        pairs: list[tuple[int, Any]] = []
        pytree.cotangent_leaves(out, out_bar, tape.ids, pairs)
        seeds: dict[int, Any] = {}
        for i, c in pairs:
            if c is not None:
                seeds[i] = c if i not in seeds else seeds[i] + c
        if nested is not None:
            return nested.gradients(specs, nested.sweep(seeds), force_tuple=True)
        cts = sweep(tape, seeds)
        return pytree.unalias(tuple(pytree.gradient(s, cts) for s in specs))

    return back
