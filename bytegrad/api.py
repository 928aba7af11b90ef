"""The public API: `differentiate`, `grad`, `value_and_grad`, `vjp`, `jvp`, `jacobian`, `hessian`, `hvp`.

It wires the transform to the runtime: rewrites the user's function for the differentiated
arguments, runs it with a tape, sweeps the tape backwards and mirrors the gradient.
"""
from __future__ import annotations

import functools
import inspect
import time
import types
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

import numpy as np

from bytegrad import _ruled, transform
from bytegrad._config import config as _config
from bytegrad.errors import (
    AuxOutputError, ComplexOutputError, NonScalarOutputError, SourceLoc, UnsupportedOpcodeError, WrtError,
)
from bytegrad.rules import closures as _closures, pytrees, registry
from bytegrad.runtime import abi, fpwarn, monitor as _monitor, nested as _nested_sweep, pytree, writes
from bytegrad.runtime.dispatch import call_python, dispatch
from bytegrad.runtime.forward import push_forward
from bytegrad.runtime.sentinels import MISS
from bytegrad.runtime.tape import CaptureTape, Tape, call_site, sweep, tls
from bytegrad.transform import cache

__all__ = ["differentiate", "grad", "value_and_grad", "vjp", "jvp", "jacobian", "hessian", "hvp", "Differentiated",
           "GradFunction"]

Wrt = Union[int, str, Sequence[Union[int, str]]]

abi.set_rewriter(transform.rewritten_function)
_ndarray = np.ndarray
_float64 = np.float64


if TYPE_CHECKING:
    from bytegrad import compiled as _compiled_module
    from bytegrad.runtime.program import Program


def _compiled() -> Any:
    """bytegrad.compiled, imported when a function is first differentiated (it loads runtime/program*.py)."""
    from bytegrad import compiled
    return compiled


def _constant_arg(value: Any) -> bool:
    """An argument whose value a compiled program guards (an int, string, flag or None)."""
    return type(value) in _compiled().CONSTANT_TYPES


def _complete(spec: Any) -> bool:
    """Whether a differentiated argument's spec is a plain tree (dicts, lists, tuples) of
    differentiable leaves."""
    if spec is None:
        return False
    if type(spec) is pytree.Leaf:
        return True
    if isinstance(spec[0], str):  # a dataclass or registered pytree: compiled programs do not take them yet
        return False
    subs = spec[1]
    return all(_complete(s) for s in (subs.values() if isinstance(subs, dict) else subs))


_perf = time.perf_counter

#: code flags of functions whose call returns a generator or coroutine instead of running the body
_SUSPENDING = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE


class Differentiated:
    """A function with derivatives: call it as usual, or ask for `.grad`, `.value_and_grad`, `.pullback`.

    With `has_aux=True` the function returns `(value, aux)`: only `value` is differentiated, and
    `aux` comes back as it was returned (see `differentiate`).
    """

    def __init__(self, fn: Callable[..., Any], wrt: Wrt = 0, has_aux: bool = False,
                 tier: Optional[str] = None) -> None:
        if isinstance(fn, Differentiated):
            tier = fn._tier if tier is None else tier
            fn = fn.fn
        target = fn
        if not isinstance(fn, types.FunctionType):
            call = getattr(type(fn), "__call__", None)
            if not (isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType)
                    or isinstance(call, types.FunctionType)):
                target = _ruled.python_caller(fn)  # np.sum, np.add: its rule (TypeError without one)
        self.fn = fn
        functools.update_wrapper(self, fn)
        self._target, self._bound_self = self._python_target(target)
        self._offset = 1 if self._bound_self is not None else 0
        self._wrt_spec = wrt
        self._has_aux = bool(has_aux)
        self._tier = tier
        # compiled programs of this function (bytegrad/compiled.py): plain functions without aux
        wrt_key = tuple(wrt) if isinstance(wrt, list) else wrt
        compiled = _compiled()
        self._tiers = compiled.tiers_for(self._target, (compiled.AUX, wrt_key) if self._has_aux else wrt_key, tier) \
            if self._bound_self is None else None
        self._pb_tiers: Optional[_compiled_module.Tiers] = None  # pullback programs: made on the first pullback
        self._use_code(self._target.__code__)
        self._hits = 0
        self._first_s: Optional[float] = None   # wall time of the first gradient (for stats())
        self._rewrite_s = 0.0

    def _use_code(self, code: types.CodeType) -> None:
        """Take `code` as the function's body: everything derived from the previous body goes
        (a body replaced in place, `f.__code__ = ...` as IPython's autoreload does, is honoured)."""
        self._code = code
        # the rewritten functions copy the defaults: replacing them (`f.__defaults__ = ...`) starts again
        self._defaults = self._target.__defaults__
        self._kwdefaults = self._target.__kwdefaults__
        self._params = transform.param_names(code)
        self._positional = code.co_varnames[: code.co_argcount]
        self._kwonly = code.co_varnames[code.co_argcount: code.co_argcount + code.co_kwonlyargcount]
        self._wrt, self._wrt_tuple = self._resolve_wrt(self._wrt_spec)
        self._fns: dict[Any, types.FunctionType] = {}
        self._plans: dict[Any, Any] = {}
        self._eligible: dict[Any, tuple[list[str], list[tuple]]] = {}

    def _suspending_error(self) -> UnsupportedOpcodeError:
        flags = self._code.co_flags
        if flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
            construct = "an async function (`async def`): calling it returns a coroutine"
            fix = "differentiate a plain `def` that computes the value without awaiting."
        else:
            construct = "a generator function (it contains `yield`): calling it returns a generator"
            fix = ("differentiate a plain function that consumes the generator, for example "
                   "`lambda x: sum(gen(x))`: generators called from differentiated code are supported.")
        return UnsupportedOpcodeError(f"{self._code.co_name} is {construct}, not a value to differentiate.",
                                      self._loc(), fix)

    @staticmethod
    def _python_target(fn: Any) -> tuple[types.FunctionType, Any]:
        if isinstance(fn, types.FunctionType):
            return fn, None
        if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
            return fn.__func__, fn.__self__
        call = type(fn).__call__
        return call, fn

    def _loc(self) -> SourceLoc:
        c = self._code
        return SourceLoc(c.co_filename, c.co_firstlineno, c.co_name)

    def _resolve_wrt(self, wrt: Wrt) -> tuple[tuple[int, ...], bool]:
        items = wrt if isinstance(wrt, (tuple, list)) else (wrt,)
        positions = []
        visible = self._positional[self._offset:]
        for w in items:
            if isinstance(w, bool) or not isinstance(w, (int, str)):
                raise WrtError(f"wrt must be a position, a parameter name, or a tuple of them, got {w!r}.",
                               self._loc(), "pass for example wrt=0, wrt='params' or wrt=(0, 1).")
            if isinstance(w, str):
                if w in self._kwonly or (w not in visible and self._code.co_flags & 0x08):
                    # a keyword-only parameter, or a keyword that `**kwargs` takes: found in the call's keywords
                    positions.append(w)
                    continue
                if w not in visible:
                    raise WrtError(
                        f"wrt={w!r} names no parameter of {self._code.co_name}; its parameters "
                        f"are {', '.join(visible + self._kwonly) or '(none)'}.", self._loc(),
                        "use one of those names, or a position.")
                positions.append(visible.index(w))
            else:
                positions.append(w)
        return tuple(positions), isinstance(wrt, (tuple, list))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return Differentiated(types.MethodType(self.fn, obj), self._wrt_spec, self._has_aux, self._tier)

    def __reduce__(self) -> Any:
        """Pickles by reference, or by value through cloudpickle: see bytegrad/_pickle.py."""
        from bytegrad import _pickle
        return _pickle.reduce_differentiated(self, Differentiated)

    def __repr__(self) -> str:
        return f"<bytegrad.differentiate {getattr(self.fn, '__qualname__', self.fn)!r} wrt={self._wrt_spec!r}>"

    # ---- running with a tape -------------------------------------------------------------

    def _rewritten(self, active: frozenset[str], args: tuple) -> types.FunctionType:
        # The rewrite depends on which parameters are active and on the argument types (an int
        # can never become active), not on dtypes or shapes: those stay out of the key.
        key = (active, registry.settled_version(), tuple(map(type, args)))
        fn = self._fns.get(key)
        if fn is not None:
            self._hits += 1
            return fn
        target = self._target
        names = self._params
        immutable = frozenset(n for n, a in zip(names, args) if type(a) in transform.INERT_TYPES and n not in active)
        t0 = time.perf_counter()
        code = cache.lookup(target.__code__, key,
                            lambda: transform.rewrite_code(target.__code__, active, target.__globals__, immutable),
                            self._params[self._offset:])
        self._rewrite_s += time.perf_counter() - t0
        fn = transform.function_from(target, code)
        if len(self._fns) >= cache.CACHE_SIZE_LIMIT:
            self._fns.clear()
        self._fns[key] = fn
        return fn

    def _plan(self, nargs: int, positions: Sequence[int]) -> tuple[tuple[int, ...], frozenset[str]]:
        """Normalised wrt positions and the active parameter names, for calls with `nargs` arguments."""
        key = (nargs, positions)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        for p in positions:
            if type(p) is str:
                continue
            if not -nargs <= p < nargs:
                raise WrtError(
                    f"wrt={p} is out of range: {self._code.co_name} was called with {nargs} positional "
                    f"argument{'s' if nargs != 1 else ''}.", self._loc(),
                    "pass the differentiated argument positionally, or fix wrt.")
        norm = tuple(p if type(p) is str else p % nargs for p in positions)
        code = self._target.__code__
        names = self._params[self._offset:]
        argc = code.co_argcount - self._offset
        varkw = code.co_varnames[code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04)] \
            if code.co_flags & 0x08 else None
        active = {names[p] for p in norm if type(p) is not str and p < argc}
        active |= {p if p in self._kwonly else varkw for p in norm if type(p) is str}
        if any(type(p) is not str and p >= argc for p in norm) and code.co_flags & 0x04:
            active.add(code.co_varnames[code.co_argcount + code.co_kwonlyargcount])
        plan = (norm, frozenset(active))
        self._plans[key] = plan
        return plan

    def _normalize_call(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """Move keyword arguments of positional parameters into place, so wrt positions see them."""
        visible = self._positional[self._offset:]
        rest = visible[len(args):]
        if not kwargs or not any(n in kwargs for n in rest):
            return args, kwargs
        target = self._target
        defaults = target.__defaults__ or ()
        first_default = target.__code__.co_argcount - len(defaults)
        new_args = list(args)
        kwargs = dict(kwargs)
        for name in rest:
            if not kwargs or not any(n in kwargs for n in visible[len(new_args):]):
                break
            if name in kwargs:
                new_args.append(kwargs.pop(name))
            else:
                k = self._offset + len(new_args)
                if k < first_default:
                    break
                new_args.append(defaults[k - first_default])
        return tuple(new_args), kwargs

    def _forward(self, args: tuple, kwargs: dict, positions: Sequence[int], strict: bool,
                 lean: bool = False, capture: bool = False, tracked: Sequence[Any] = ()) \
            -> tuple[Any, Tape, list, Optional["_Nested"]]:
        """Run the function with a tape: (output, tape, leaf specs, the nested record or None).

        `lean`: the caller sweeps the tape once and drops it (see `Tape.lean`); `capture`: record
        on a `CaptureTape` (see `_capture`), with the arrays `tracked` (read from globals, closures
        and module attributes: inputs of the program) tracked as they are."""
        if self._target.__code__ is not self._code or self._target.__defaults__ is not self._defaults \
                or self._target.__kwdefaults__ is not self._kwdefaults:
            old_wrt = self._wrt
            self._use_code(self._target.__code__)
            if positions is old_wrt:  # `wrt` named a parameter of the old body: resolved anew
                positions = self._wrt
        if self._code.co_flags & _SUSPENDING:
            raise self._suspending_error()
        if kwargs:
            args, kwargs = self._normalize_call(args, kwargs)
        plan = self._plans.get((len(args), positions))
        norm, active = plan if plan is not None else self._plan(len(args), positions)
        outer = getattr(tls, "tape", None)
        if outer is not None:
            return self._forward_nested(outer, args, kwargs, norm, strict)
        tape = CaptureTape() if capture else (Tape() if not _config.debug_nans else _checking_tape())
        tape.lean = lean
        args = list(args)
        if any(type(p) is str for p in norm):
            args, kwargs = self._keyword_slots(args, kwargs, norm)
        specs = []
        for p in norm:
            v = args[p]
            if type(v) is _ndarray and v.dtype.kind == "f":  # the common case, inline
                fresh = v.view()
                tape.protected.add(id(v))
                if v.base is not None:
                    tape.protected.add(id(v.base))
                spec = pytree.Leaf(tape.leaf(fresh), v)
                args[p] = fresh
                specs.append(spec)
                continue
            try:
                fresh, spec = pytree.prepare(args[p], tape, strict=strict)
            except pytree.NotDifferentiable as exc:
                raise self._wrt_type_error(p, exc) from None
            args[p] = fresh
            specs.append(spec)
        for v in tracked:
            if id(v) not in tape.ids:
                tape.protected.add(id(v))
                tape.leaf(v)
        if type(args) is _KeywordSlots:
            args, named = args.split()
            kwargs = {**kwargs, **named}
        call_args = tuple(args) if self._bound_self is None else (self._bound_self, *args)
        # bytegrad's own functions (hessian = jacobian of grad) run as they are: they find the tape
        fn = self._rewritten(active, call_args) if self._target.__module__ != __name__ else self._target
        old = getattr(tls, "tape", None)
        tls.tape = tape
        watch = _monitor.start()  # Python code started blind from C is stopped (runtime/monitor.py)
        try:
            with fpwarn.at_user_lines():  # NumPy's floating-point warnings name the user's line, not a hook's
                out = fn(*call_args, **kwargs) if kwargs else fn(*call_args)
        finally:
            _monitor.stop(watch)
            tls.tape = old
        return out, tape, specs, None

    def _forward_nested(self, tape: Tape, args: tuple, kwargs: dict, norm: tuple[int, ...],
                        strict: bool) -> tuple[Any, Tape, list, "_Nested"]:
        """The forward pass of a derivative taken while `tape` is active: it is recorded on `tape`.

        Each differentiated leaf enters as a fresh value whose node is an identity linked to the
        outer value (so the outer derivative flows through it) and the function runs through the
        rewriter like any callee (closures over outer values are seen). The inner derivative
        sweeps only the nodes after its leaves: see runtime/nested.py.
        """
        site = self._call_site()
        nested = _Nested(tape, site, len(tape.nodes))
        protected = set(tape.protected)
        args = list(args)
        if any(type(p) is str for p in norm):
            args, kwargs = self._keyword_slots(args, kwargs, norm)
        specs = []
        for p in norm:
            try:
                fresh, spec = pytree.prepare(args[p], tape, strict=strict)
            except pytree.NotDifferentiable as exc:
                raise self._wrt_type_error(p, exc) from None
            for leaf in pytree.leaves(spec):
                primal = leaf.primal
                outer = writes.current(tape, site, primal) if type(primal) is _ndarray else tape.ids.get(id(primal))
                if outer is not None:
                    tape.link(leaf.idx, outer, site)
            args[p] = fresh
            specs.append(spec)
        if type(args) is _KeywordSlots:
            args, named = args.split()
            kwargs = {**kwargs, **named}
        nested.stop = len(tape.nodes) - 1
        added = tape.protected - protected  # the inner inputs are protected while the inner code runs
        call_args = tuple(args) if self._bound_self is None else (self._bound_self, *args)
        # while it runs, checkpointed calls record as usual and fused sites run their NumPy tier (their
        # kernels compute partials unrecorded): see runtime/checkpoint.py and runtime/fused.py
        tls.nesting = getattr(tls, "nesting", 0) + 1
        try:
            out = call_python(tape, site, self._target, call_args, kwargs or None)
        finally:
            tape.protected -= added
            tls.nesting -= 1
        return out, tape, specs, nested

    def _keyword_slots(self, args: list, kwargs: dict, norm: tuple) -> tuple["_KeywordSlots", dict]:
        """The positional arguments and the keyword-only ones `wrt` names, indexable by position or name."""
        kwargs = dict(kwargs or {})
        slots = _KeywordSlots(args)
        for p in norm:
            if type(p) is str:
                if p not in kwargs:
                    raise WrtError(f"wrt={p!r} names a keyword-only parameter of {self._code.co_name}, but the "
                                   "call did not pass it.", self._loc(), f"pass it: {p}=...")
                slots.named[p] = kwargs.pop(p)
        return slots, kwargs

    def _call_site(self) -> abi.Site:
        site = call_site()
        if site is None:
            c = self._code
            site = abi.Site(c.co_filename, c.co_firstlineno, c.co_name, "nested derivative")
        return site

    def _wrt_type_error(self, p: Union[int, str], exc: Exception) -> WrtError:
        if type(p) is str:
            name = p
        else:
            name = self._positional[self._offset + p] if self._offset + p < len(self._positional) else f"#{p}"
        return WrtError(f"argument {name!r} (wrt={p}) cannot be differentiated: {exc}.", self._loc(),
                        getattr(exc, "fix", None) or
                        "differentiate with respect to float arrays, floats, or containers of them; "
                        "leave ints, strings and flags out of wrt.")

    def _grad(self, args: tuple, kwargs: dict, value: bool = True) -> tuple[Any, Any]:
        if self._first_s is None:
            t0 = time.perf_counter()
            result = self._grad_tiered(args, kwargs, value)
            self._first_s = time.perf_counter() - t0
            return result
        return self._grad_tiered(args, kwargs, value)

    def _grad_tiered(self, args: tuple, kwargs: dict, value: bool = True) -> tuple[Any, Any]:
        """A compiled program's result when one applies (bytegrad/compiled.py), else the general path's.
        `value=False`: only the gradient is used (a program skips the output's value)."""
        tiers = self._tiers
        if tiers is not None and getattr(tls, "tape", None) is None and not _config.debug_nans:
            if kwargs:  # keywords of positional parameters move into place; others stay general
                args, kwargs = self._normalize_call(args, kwargs)
            if not kwargs:
                result = tiers.call(self._target, args, self._capture, value=value)
                if result is not MISS:
                    return result
        return self._grad_now(args, kwargs)

    def _capture(self, args: tuple, backends: Sequence[str] = ("numpy",)) -> tuple[tuple[Any, Any], Union[Program, str]]:
        """One gradient by a capture run: (its (value, gradient), the program made from it by the
        first of `backends` that can, or why none could). A function the capture cannot take runs
        on the general path instead."""
        from bytegrad.runtime.program import Ineligible, build as build_program
        norm_wrt, _ = self._plan(len(args), self._wrt)
        positions = _compiled().capture_positions(args)
        if any(p not in positions for p in norm_wrt):
            return self._grad_now(args, {}), "a differentiated argument is an int, a string or None"
        run = self._capture_run(args, positions)
        if type(run) is str:
            return self._grad_now(args, {}), run
        out, aux, tape, specs, guards = run
        program_aux = (aux,) if self._has_aux else None
        self._check_scalar(out)
        if type(out) is _ndarray and out.ndim:
            return self._grad_now(args, {}), "the output is a one-element array, not a scalar"
        spec_at = dict(zip(positions, specs))
        wrt_specs = [spec_at[p] for p in norm_wrt]
        callee_why, callee_guards = _callee_guards(tape)
        if not all(_complete(s) for s in wrt_specs):  # (the general path's strict check refuses some of these)
            return self._grad_now(args, {}), ("a differentiated argument holds values with no derivative, a "
                                              "dataclass or a registered pytree")
        idx = tape.ids.get(id(out))
        cts = sweep(tape, {idx: 1.0}) if idx is not None else [None] * len(tape.nodes)
        grads = tuple(pytree.gradient(s, cts) for s in wrt_specs)
        if len(grads) > 1:
            grads = pytree.unalias(grads)
        result = ((out, aux) if self._has_aux else out, grads if self._wrt_tuple else grads[0])
        if tape.refusals:
            why, site = tape.refusals[0]
            return result, str(Ineligible(why, site))
        if callee_why is not None:
            return result, callee_why
        guards = guards + callee_guards
        why = "no back end"
        for backend in backends:  # the first that builds and agrees with the capture's gradient
            try:
                prog = build_program(tape, args, [spec_at.get(p) for p in range(len(args))], norm_wrt, out,
                                     self._wrt_tuple, guards, self._code, backend, aux=program_aux)
            except Ineligible as exc:
                why = str(exc)
                continue
            why = self._tiers.agree(prog, args, result) if self._tiers is not None else None
            if why is None:
                return result, prog
        return result, why

    def _capture_run(self, args: tuple, positions: tuple[int, ...]) -> Union[str, tuple]:
        """The capture's forward pass: (output, aux or None, tape, leaf specs, guards), or why the
        function cannot be captured for arguments like `args` (the caller then runs the general path)."""
        reasons, guards = self.eligibility(args)
        if reasons:
            return reasons[0] + (f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else "")
        from bytegrad.runtime import program_source
        try:
            out, tape, specs, _ = self._forward(args, {}, positions, strict=False, capture=True,
                                                tracked=program_source.read_arrays(guards))
        except Exception as exc:  # noqa: BLE001 - tracking every argument can refuse what the general path takes
            return f"the capture run raised {type(exc).__name__}: {exc}"
        aux = None
        if self._has_aux:
            out, aux = self._split_aux(out)
        return out, aux, tape, specs, guards

    def eligibility(self, args: tuple) -> tuple[list[str], list[tuple]]:
        """(reasons this function cannot be a compiled program for arguments like `args`, guards on
        the globals it reads): see transform/eligibility.py."""
        from bytegrad.rules import registry as _registry
        from bytegrad.transform import eligibility

        positions = _compiled().capture_positions(args)
        _, active = self._plan(len(args), positions)
        names = self._params[self._offset:]
        immutable = frozenset(n for n, a in zip(names, args) if _constant_arg(a))
        key = (active, immutable, _registry.settled_version())
        found = self._eligible.get(key)
        if found is None:
            target = self._target
            defaults = (target.__defaults__ or ()) + tuple((target.__kwdefaults__ or {}).values())
            found = self._eligible[key] = eligibility.check(self._code, active, target.__globals__, immutable,
                                                            defaults, target.__closure__ or ())
        return found

    def _check_scalar(self, out: Any) -> None:
        t = type(out)
        if t is not _float64 and t is not float and _is_complex(out):
            raise self._complex_output_error(out)
        # a one-element array of any ndim counts as a scalar (HIPS autograd's rule: code ported from it
        # returns `np.sum(x, keepdims=True)`); the gradient is seeded with ones of its shape
        if not (t is _float64 or t is float or t is int or (t is _ndarray and out.size == 1)
                or isinstance(out, np.generic)):
            shape = getattr(out, "shape", None)
            found = f"an array of shape {shape}" if shape is not None else f"a {t.__name__}"
            raise NonScalarOutputError(
                f"grad needs a function that returns a scalar, but {self._code.co_name} returned {found}.",
                self._return_loc(),
                "reduce the output (for example `.sum()` or `np.mean(...)`), or use .pullback / "
                "bytegrad.vjp for vector-valued functions.")

    def _grad_now(self, args: tuple, kwargs: dict) -> tuple[Any, Any]:
        t0 = _perf()
        out, tape, specs, nested = self._forward(args, kwargs, self._wrt, True, True)  # strict, lean
        if self._has_aux:
            out, aux = self._split_aux(out)
        self._check_scalar(out)
        idx = tape.ids.get(id(out))
        seed = np.ones_like(out) if type(out) is _ndarray and out.ndim else 1.0
        if nested is None:
            cts = sweep(tape, {idx: seed}) if idx is not None else [None] * len(tape.nodes)
            grads = tuple([pytree.project(cts[s.idx], s.primal) if type(s) is pytree.Leaf else pytree.gradient(s, cts)
                           for s in specs])
            if len(grads) > 1:
                grads = pytree.unalias(grads)
            if tape.trials:  # fused sites comparing their tiers: the whole gradient's time
                from bytegrad.runtime import fused  # loaded: its sites put the trials there
                fused.report(tape.trials, _perf() - t0)
        else:
            grads = nested.gradients(specs, nested.sweep({idx: seed} if idx is not None else {}))
        return (out, aux) if self._has_aux else out, grads if self._wrt_tuple else grads[0]

    def _split_aux(self, out: Any) -> tuple[Any, Any]:
        """`(value, aux)` from the output of a function declared `has_aux=True`."""
        if type(out) is tuple and len(out) == 2:
            return out
        found = f"a tuple of {len(out)}" if isinstance(out, tuple) else f"a {type(out).__name__}"
        raise AuxOutputError(
            f"{self._code.co_name} was declared has_aux=True, so it must return a pair (value, aux), but it "
            f"returned {found}.", self._return_loc(),
            "return `value, aux` (a tuple of two: the value to differentiate and anything else), or drop "
            "has_aux=True.")

    def _complex_output_error(self, out: Any) -> ComplexOutputError:
        return ComplexOutputError(
            f"grad needs a function that returns a real scalar, but {self._code.co_name} returned the complex "
            f"value {out!r}: a complex value has no gradient, and bytegrad will not silently "
            "differentiate its real part.", self._return_loc(),
            "return the real quantity you mean (`np.real(...)`, `np.abs(...) ** 2`), or use bytegrad.vjp "
            "with the cotangent of your choice.")

    def _return_loc(self) -> SourceLoc:
        from bytecode import Bytecode, Instr

        from bytegrad.transform import opcodes
        lines = {i.lineno for i in Bytecode.from_code(self._code) if isinstance(i, Instr)
                 and opcodes.returns_value(i) and isinstance(i.lineno, int)}
        line = lines.pop() if len(lines) == 1 else self._code.co_firstlineno
        return SourceLoc(self._code.co_filename, line, self._code.co_name)

    def stats(self) -> dict[str, Any]:
        """What a user who measures wants to know about this function.

        Returns
        -------
        dict
            `hits` (gradients that reused rewritten code), `misses` (rewrites), `entries`;
            `first_gradient_s` (wall time of the first gradient), `rewrite_s` (time spent
            rewriting, disk-cache loads included), `compile_s` (kernel compile or load time of
            its fused sites), `fused_sites` (one dict per fused site: line, expression, tier,
            calls per tier, compile time, choices per size class) and `disk` (this process's
            disk-cache counters); `compiled` and `compiled_pullback`: the compiled programs of its
            gradients and of its pullbacks (tier, guards, calls, why a signature is not compiled).
        """
        s = cache.stats(self._code)
        result: dict[str, Any] = {"hits": self._hits + s["hits"], "misses": s["misses"], "entries": s["entries"]}
        from bytegrad import introspect
        result.update(introspect.function_stats(self))
        if self._tiers is not None:
            result["compiled"] = self._tiers.describe()
        if self._pb_tiers is not None:
            result["compiled_pullback"] = self._pb_tiers.describe()
        return result

    def grad(self, *args: Any, **kwargs: Any) -> Any:
        """The gradient of the scalar output with respect to the `wrt` argument(s);
        `(gradient, aux)` with `has_aux=True`."""
        if self._has_aux:
            (_, aux), grads = self._grad(args, kwargs)
            return grads, aux
        return self._grad(args, kwargs, value=False)[1]

    def value_and_grad(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """(output, gradient) from one forward and one reverse pass; `((output, aux), gradient)`
        with `has_aux=True`."""
        return self._grad(args, kwargs)

    def pullback(self, *args: Any, **kwargs: Any) -> Any:
        """(output, back): `back(out_bar)` returns one cotangent per positional argument;
        `(output, back, aux)` with `has_aux=True`."""
        if self._bound_self is None and not kwargs and getattr(tls, "tape", None) is None and not _config.debug_nans:
            tiers = self._pb_tiers
            if tiers is None:
                compiled = _compiled()
                key = (compiled.AUX, compiled.PULLBACK) if self._has_aux else compiled.PULLBACK
                tiers = self._pb_tiers = compiled.tiers_for(self._target, key, self._tier)
            if tiers is not None:
                result = tiers.call(self._target, args, self._capture_pullback)
                if result is not MISS:
                    return (result[0], self._back_or_general(result[1], args), *result[2:])
        return self._pullback_now(args, kwargs)

    def _back_or_general(self, back: Callable[[Any], Any], args: tuple) -> Callable[[Any], tuple[Any, ...]]:
        """A program's `back`, which answers MISS for a cotangent not shaped as at capture: such a
        cotangent goes to the general path's pullback, run again on the same arguments."""
        def checked(out_bar: Any) -> tuple[Any, ...]:
            grads = back(out_bar)
            if grads is MISS:
                return self._pullback_now(args, {})[1](out_bar)
            return grads

        return checked

    def _pullback_now(self, args: tuple, kwargs: dict) -> Any:
        positions = tuple(range(len(args)))
        out, tape, specs, nested = self._forward(args, kwargs, positions, strict=False)
        if self._has_aux:
            out, aux = self._split_aux(out)
        back = _general_back(out, tape, specs, nested)
        return (out, back, aux) if self._has_aux else (out, back)

    def _capture_pullback(self, args: tuple, backends: Sequence[str] = ()) -> tuple[Any, Union[Program, str]]:
        """One pullback by a capture run: ((output, back), the pullback program made from it, or why
        none could be). Pullback programs have the NumPy back end only."""
        from bytegrad.runtime.program import Ineligible, build as build_program
        compiled = _compiled()
        positions = compiled.capture_positions(args)
        run = self._capture_run(args, positions)
        if type(run) is str:
            return self._pullback_now(args, {}), run
        out, aux, tape, specs, guards = run
        program_aux = (aux,) if self._has_aux else None
        spec_at = dict(zip(positions, specs))
        all_specs = [spec_at.get(p) for p in range(len(args))]
        result = (out, _general_back(out, tape, all_specs, None), *(program_aux or ()))
        if tape.refusals:
            why, site = tape.refusals[0]
            return result, str(Ineligible(why, site))
        callee_why, callee_guards = _callee_guards(tape)
        if callee_why is not None:
            return result, callee_why
        try:
            prog = build_program(tape, args, all_specs, positions, out, True, guards + callee_guards, self._code,
                                 pullback=True, aux=program_aux)
        except Ineligible as exc:
            return result, str(exc)
        pending, tiers, general_back = compiled.Pending(prog, args), self._pb_tiers, result[1]
        checked_out = (out, aux) if self._has_aux else out

        def back(out_bar: Any) -> tuple[Any, ...]:
            grads = general_back(out_bar)
            if tiers is not None:
                tiers.settle(pending, checked_out, out_bar, grads)
            return grads

        return (out, back, *(program_aux or ())), pending


_REPLAYABLE = (int, float, bool, str, bytes, complex, type(None), slice, range, type(Ellipsis), np.ndarray,
               np.generic, np.dtype, type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType, np.ufunc)


def _unreplayable(value: Any, ids: dict[int, int]) -> Optional[str]:
    """None when a value handed to a Python callee is one a program reproduces (a tracked value, a
    constant, an array, a function, a tuple, list or dict of them); else what it is."""
    if id(value) in ids or isinstance(value, _REPLAYABLE):
        return None
    t = type(value)
    if t is tuple or t is list or t is dict:
        for v in (value.values() if t is dict else value):
            bad = _unreplayable(v, ids)
            if bad is not None:
                return bad
        return None
    return f"a {t.__qualname__} object"


def _callee_guards(tape: CaptureTape) -> tuple[Optional[str], list[tuple]]:
    """(why a Python function the capture run called cannot be part of a program, or None; the guards
    on what those functions read: their globals, module attributes, code and defaults). Each is
    checked as the differentiated function is (transform/eligibility.py), with the parameters that
    held tracked values in the capture active."""
    from bytegrad.transform import eligibility

    guards: list[tuple] = []
    seen: set[tuple] = set()
    for f, args, kwargs, site in tape.callees:
        for v in (*args, *(kwargs or {}).values()):
            bad = _unreplayable(v, tape.ids)
            if bad is not None:
                return f"it passes {bad} to {f.__qualname__} (line {site.lineno}): its state is not guarded", []
        active, immutable = transform.callee_activity(f, args, kwargs, tape.ids)
        key = (f, active, immutable)
        if key in seen:
            continue
        seen.add(key)
        defaults = (f.__defaults__ or ()) + tuple((f.__kwdefaults__ or {}).values())
        reasons, more = eligibility.check(f.__code__, active, f.__globals__, immutable, defaults)
        if reasons:
            return f"it calls {f.__qualname__} (line {site.lineno}), which {reasons[0]}", []
        guards += more
        guards.append(("code", f, f.__code__, (f.__defaults__, f.__kwdefaults__)))
    return None, guards


def _general_back(out: Any, tape: Tape, specs: list, nested: Optional["_Nested"]) -> Callable[[Any], tuple]:
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


class _Nested:
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
            grads = pytree.unalias(grads, lambda g: self.call(np.copy, (g,)))
        return grads

    def gradient(self, spec: Any, cts: list[Any]) -> Any:
        """`pytree.gradient`, with each leaf projected by `self.project`."""
        return pytree.gradient(spec, cts, self.project)

    def op(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A NumPy call on (possibly) tracked values, recorded while the tape is current."""
        if self.recording():
            return dispatch(self.tape, self.site, fn, args, kwargs or None)
        return fn(*args, **kwargs)


class _KeywordSlots(list):
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


def _is_complex(out: Any) -> bool:
    """A complex scalar output of `grad` (a Python complex, a NumPy complex scalar or 0-d array; a
    complex array of more elements is refused as non-scalar)."""
    if type(out) is complex:
        return True
    return getattr(getattr(out, "dtype", None), "kind", "") == "c" and getattr(out, "ndim", 0) == 0


def _checking_tape() -> Tape:
    from bytegrad.runtime.nancheck import CheckingTape  # only in debug mode
    return CheckingTape()


def differentiate(fn: Optional[Callable[..., Any]] = None, *, wrt: Wrt = 0, has_aux: bool = False,
                  tier: Optional[str] = None) -> Any:
    """Decorator: `fn` keeps working as before and gains `.grad`, `.value_and_grad` and `.pullback`.

    Parameters
    ----------
    fn : callable, optional
        The function. Without it, `differentiate(wrt=..., has_aux=...)` returns the decorator.
    wrt : int, str or tuple of them, default 0
        The argument(s) to differentiate with respect to, by position or parameter name; a tuple
        gives a tuple of gradients.
    has_aux : bool, default False
        `fn` returns a pair `(value, aux)`: `value` is differentiated, `aux` (anything) comes back
        as it was returned, undifferentiated. Then `.grad` returns `(gradient, aux)`,
        `.value_and_grad` returns `((value, aux), gradient)` and `.pullback` returns
        `(value, back, aux)`, as in JAX. A function that returns something else raises
        `bytegrad.AuxOutputError`.
    tier : {"general", "numpy", "auto"}, optional
        How gradients run: "general" (the rewritten code and a tape, every call), "numpy" (a
        compiled program from the first call that can be compiled) or "auto" (a compiled program
        once the function has run a few gradients). Default: the BYTEGRAD_TIER environment
        variable, else "auto". See bytegrad/compiled.py.

    Returns
    -------
    Differentiated
        Calling it runs `fn` unchanged.

    Examples
    --------
    >>> import numpy as np
    >>> @differentiate
    ... def f(x):
    ...     return np.sum(np.sin(x) ** 2)
    >>> x = np.array([0.1, 0.2])
    >>> bool(np.allclose(f.grad(x), 2 * np.sin(x) * np.cos(x)))
    True
    >>> @differentiate(has_aux=True)
    ... def loss(w):
    ...     err = w - 1.0
    ...     return np.sum(err ** 2), {"max_err": float(np.max(np.abs(err)))}
    >>> g, aux = loss.grad(np.array([0.0, 3.0]))
    >>> g.tolist(), aux
    ([-2.0, 4.0], {'max_err': 2.0})
    """
    if fn is None:
        return lambda f: Differentiated(f, wrt, has_aux, tier)
    return Differentiated(fn, wrt, has_aux, tier)


class GradFunction:
    """What `grad` and `value_and_grad` return: call it with `fn`'s arguments.

    `stats()` reports on the differentiated function, as `Differentiated.stats` does for a
    function decorated with `differentiate`; `differentiated` is that `Differentiated`.
    """

    def __init__(self, method: Callable[..., Any]) -> None:
        self._method = method                    # a bound method of a Differentiated
        self.differentiated: Differentiated = method.__self__  # type: ignore[attr-defined]
        # the name and docstring, not the __dict__ (another GradFunction's would replace ours)
        functools.update_wrapper(self, self.differentiated.fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._method(*args, **kwargs)

    def stats(self) -> dict[str, Any]:
        """The differentiated function's `Differentiated.stats()`."""
        return self.differentiated.stats()

    def __reduce__(self) -> tuple[Any, ...]:
        return _grad_function, (self.differentiated, self._method.__name__)

    def __repr__(self) -> str:
        name = getattr(self.differentiated.fn, "__qualname__", self.differentiated.fn)
        return f"<bytegrad.{self._method.__name__} of {name!r} wrt={self.differentiated._wrt_spec!r}>"


def _grad_function(d: Differentiated, name: str) -> GradFunction:
    return GradFunction(getattr(d, name))


def grad(fn: Callable[..., Any], wrt: Wrt = 0, has_aux: bool = False) -> Callable[..., Any]:
    """The gradient function of scalar-valued `fn` with respect to `wrt`.

    Parameters
    ----------
    fn : callable
        A Python function returning a scalar (or `(scalar, aux)` with `has_aux=True`).
    wrt : int, str or tuple of them, default 0
        The argument(s) to differentiate with respect to; a tuple gives a tuple of gradients.
    has_aux : bool, default False
        `fn` returns `(value, aux)`; the gradient function then returns `(gradient, aux)`.

    Returns
    -------
    callable
        Takes `fn`'s arguments; returns the gradient, shaped like the `wrt` argument (arrays,
        floats, and dicts, lists, tuples, dataclasses and registered pytrees of them).

    Examples
    --------
    >>> import numpy as np
    >>> grad(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0])).tolist()
    [3.0, 12.0]
    >>> grad(lambda x: (x ** 2, "aux"), has_aux=True)(3.0)
    (6.0, 'aux')
    """
    return GradFunction(Differentiated(fn, wrt, has_aux).grad)


def value_and_grad(fn: Callable[..., Any], wrt: Wrt = 0, has_aux: bool = False) -> Callable[..., tuple[Any, Any]]:
    """A function returning `(fn(...), gradient)`, from one forward and one reverse pass.

    Parameters
    ----------
    fn : callable
        A Python function returning a scalar (or `(scalar, aux)` with `has_aux=True`).
    wrt : int, str or tuple of them, default 0
        The argument(s) to differentiate with respect to.
    has_aux : bool, default False
        `fn` returns `(value, aux)`; the function then returns `((value, aux), gradient)`.

    Returns
    -------
    callable
        Takes `fn`'s arguments; returns `(value, gradient)` or `((value, aux), gradient)`.

    Examples
    --------
    >>> value_and_grad(lambda x: (x ** 2, x + 1.0), has_aux=True)(3.0)
    ((9.0, 4.0), 6.0)
    """
    return GradFunction(Differentiated(fn, wrt, has_aux).value_and_grad)


def vjp(fn: Callable[..., Any], *args: Any, has_aux: bool = False, **kwargs: Any) -> Any:
    """Reverse mode by hand: `(fn(*args), back)`, where `back(out_bar)` returns one cotangent per
    positional argument.

    Parameters
    ----------
    fn : callable
        A Python function; its output may be an array, a float or a tree of them.
    *args, **kwargs
        The arguments of `fn`; every positional argument is differentiated.
    has_aux : bool, default False
        `fn` returns `(value, aux)`: only `value` is differentiated, and the result is
        `(value, back, aux)`.

    Returns
    -------
    tuple
        `(value, back)`, or `(value, back, aux)` with `has_aux=True`. `back(out_bar)` takes a
        cotangent shaped like `value` and returns a tuple of cotangents shaped like `args`.

    Examples
    --------
    >>> import numpy as np
    >>> value, back, aux = vjp(lambda x: (x * 2.0, "note"), np.array([1.0, 2.0]), has_aux=True)
    >>> back(np.array([1.0, 1.0]))[0].tolist(), aux
    ([2.0, 2.0], 'note')
    """
    return Differentiated(fn, has_aux=has_aux).pullback(*args, **kwargs)



registry.set_ad_backend(vjp)  # rrule_via_ad: rules call back into bytegrad through this slot
registry.set_tape_probe(lambda: getattr(tls, "tape", None) is not None)  # registry.recording
# rules/closures.tracked: whether a value is differentiated now (the solver rules find the values a
# user's function closes over that are, rules/scipy/_implicit.py)
_closures.set_tracked_probe(lambda v: (t := getattr(tls, "tape", None)) is not None and id(v) in t.ids)


# ---- forward mode, Jacobians and Hessians ---------------------------------------------------------


def jvp(fn: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[Any, Any]:
    """Forward mode: `(fn(*primals), J @ tangents)`, through the same rewritten code as `grad`.

    Forward rules come from `frule`s and from `scalar_rule` partials; through a rule with only a
    reverse form, the tangent is formed from its pullback (one call per output element), with a
    `PerformanceWarning`.

    Parameters
    ----------
    fn : callable
        A Python function; its output may be an array, a float, or a dict / list / tuple of them.
    primals : tuple or list
        The positional arguments of `fn`.
    tangents : tuple or list
        One tangent per primal, shaped like it (containers mirrored); None, or the entry of a
        non-float argument, means "no tangent".

    Returns
    -------
    out : Any
        `fn(*primals)`.
    out_dot : Any
        The Jacobian-vector product, mirroring `out`: an array of the output's shape and dtype
        for each float leaf (zeros where the output does not depend on the inputs).

    Examples
    --------
    >>> import numpy as np
    >>> out, out_dot = jvp(lambda x: np.sin(x) * 2.0, (np.array([0.0, 1.0]),), (np.array([1.0, 0.5]),))
    >>> bool(np.allclose(out_dot, 2.0 * np.cos([0.0, 1.0]) * [1.0, 0.5]))
    True
    """
    primals, tangents = _as_args(primals, "primals"), _as_args(tangents, "tangents")
    d = Differentiated(fn)
    if len(tangents) != len(primals):
        raise WrtError(f"jvp got {len(primals)} primals but {len(tangents)} tangents.", d._loc(),
                       "pass one tangent per positional argument (None for arguments with no tangent).")
    out, tape, specs, nested = d._forward(tuple(primals), {}, tuple(range(len(primals))), strict=False)
    seeds: dict[int, Any] = {}
    for k, (spec, tangent) in enumerate(zip(specs, tangents)):
        _seed(spec, tangent, seeds, tape, d, k)
    start = nested.start if nested is not None else 0
    dots = push_forward(tape, seeds, start, nested.recorder() if nested is not None else None)
    return out, _tangent_out(out, dots, tape.ids, start, nested)


def _as_args(values: Any, what: str) -> tuple[Any, ...]:
    if isinstance(values, (tuple, list)):
        return tuple(values)
    raise TypeError(f"{what} must be a tuple of positional arguments, got {type(values).__name__} "
                    f"(write ({what[:-1]},) for one argument)")


def _seed(spec: Any, tangent: Any, seeds: dict[int, Any], tape: Tape, d: Differentiated, k: int) -> None:
    """Match the tangent tree to the prepared leaves of one primal."""
    if spec is None or tangent is None:
        return
    if type(spec) is pytree.Leaf:
        primal = spec.primal
        if id(tangent) in tape.ids:  # a tracked tangent (a nested derivative): used as it is
            seeds[spec.idx] = tangent
            return
        if type(primal) is _ndarray:
            t = np.asarray(tangent, dtype=primal.dtype)
            if t.shape != primal.shape:
                raise WrtError(f"the tangent of argument {k} has shape {t.shape}, but the argument has shape "
                               f"{primal.shape}.", d._loc(), "pass tangents shaped like their primals.")
            seeds[spec.idx] = t
        else:
            seeds[spec.idx] = np.asarray(tangent).dtype.type(tangent) if isinstance(primal, np.generic) else tangent
        return
    if spec[0] == "dataclass":
        for name, sub in spec[2].items():
            _seed(sub, getattr(tangent, name), seeds, tape, d, k)
        return
    if spec[0] == "pytree":
        node = spec[1]
        if type(tangent) is not node.cls:
            raise WrtError(f"the tangent of argument {k} is a {type(tangent).__name__}, but the argument is a "
                           f"{node.cls.__qualname__} (a registered pytree).", d._loc(),
                           f"pass a {node.cls.__qualname__} holding the tangents of its children.")
        for sub, item in zip(spec[3], pytrees.flatten(node, tangent)[0]):
            _seed(sub, item, seeds, tape, d, k)
        return
    t, subs = spec
    if isinstance(subs, dict):
        for key, sub in subs.items():
            _seed(sub, tangent[key], seeds, tape, d, k)
        return
    if len(tangent) != len(subs):
        raise WrtError(f"the tangent of argument {k} has {len(tangent)} entries, but the argument has "
                       f"{len(subs)}.", d._loc(), "pass tangents with the structure of their primals.")
    for sub, item in zip(subs, tangent):
        _seed(sub, item, seeds, tape, d, k)


def _tangent_out(value: Any, dots: list[Any], ids: dict[int, int], start: int, nested: Optional[_Nested]) -> Any:
    """The output tangent tree: each float leaf's tangent, zeros for leaves that do not depend on the inputs."""
    t = type(value)
    floating = (t is _ndarray and value.dtype.kind in "fc") or t is float or t is complex or \
        isinstance(value, (np.floating, np.complexfloating))
    if floating:
        i = ids.get(id(value))
        d = dots[i] if i is not None and i >= start and i < len(dots) else None
        if d is None:
            return np.zeros_like(value) if t is _ndarray else type(value)(0)
        if nested is None or id(d) not in ids:
            if t is float or t is complex:
                return t(np.asarray(d).sum()) if np.ndim(d) else t(d)
            if isinstance(value, np.generic):
                return value.dtype.type(d)
        return d
    node = pytrees.node_for(value)
    if node is not None:
        children, aux = pytrees.flatten(node, value)
        return pytrees.unflatten(node, aux, [_tangent_out(v, dots, ids, start, nested) for v in children])
    if isinstance(value, dict):
        return type(value)((k, _tangent_out(v, dots, ids, start, nested)) for k, v in value.items())
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return t(*[_tangent_out(v, dots, ids, start, nested) for v in value])
    if isinstance(value, (list, tuple)):
        return t(_tangent_out(v, dots, ids, start, nested) for v in value)
    return None


_MODES = ("auto", "rev", "fwd")


def jacobian(fn: Callable[..., Any], wrt: Wrt = 0, mode: str = "auto") -> Callable[..., Any]:
    """The Jacobian function of `fn` with respect to argument(s) `wrt` (float arrays or floats).

    The function runs once; the Jacobian is assembled from sweeps of its tape.

    Parameters
    ----------
    fn : callable
        A Python function returning a float array or a float.
    wrt : int, str or tuple of them, default 0
        The argument(s) to differentiate with respect to, by position or parameter name; a tuple
        gives a tuple of Jacobians.
    mode : {"auto", "rev", "fwd"}, default "auto"
        "rev": one reverse sweep per output element; "fwd": one tangent sweep per input element;
        "auto": "fwd" when the inputs have fewer elements than the output, else "rev".

    Returns
    -------
    callable
        Takes `fn`'s arguments and returns the Jacobian, of shape `out.shape + x.shape` for an
        output of shape `out.shape` and an argument of shape `x.shape` (as `jax.jacobian`).

    Examples
    --------
    >>> import numpy as np
    >>> J = jacobian(lambda x: np.sin(x) * x[0])(np.array([1.0, 2.0]))
    >>> J.shape
    (2, 2)
    """
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
    d = Differentiated(fn, wrt)

    def jacobian_fn(*args: Any, **kwargs: Any) -> Any:
        return _jacobian(d, args, kwargs, mode)

    functools.update_wrapper(jacobian_fn, d.fn)
    return jacobian_fn


def _jacobian(d: Differentiated, args: tuple, kwargs: dict, mode: str) -> Any:
    out, tape, specs, nested = d._forward(args, kwargs, d._wrt, strict=True)
    for k, spec in enumerate(specs):
        if type(spec) is not pytree.Leaf:
            raise WrtError(f"jacobian differentiates float arrays and floats, but argument {d._wrt[k]} is a "
                           "container.", d._loc(), "pass the arrays as separate arguments (wrt=(0, 1, ...)), "
                           "or use bytegrad.jvp / bytegrad.vjp for trees.")
    to = type(out)
    if not ((to is _ndarray and out.dtype.kind in "fc") or to is float or isinstance(out, np.floating)):
        found = f"an array of dtype {out.dtype}" if to is _ndarray else f"a {to.__name__}"
        raise NonScalarOutputError(f"jacobian needs a function that returns a float array or a float, but "
                                   f"{d._code.co_name} returned {found}.", d._return_loc(),
                                   "return one array (stack or concatenate several outputs).")
    start = nested.start if nested is not None else 0
    idx = tape.ids.get(id(out))
    out_shape = np.shape(out)
    out_size = int(np.prod(out_shape, dtype=np.int64))
    in_size = sum(int(np.size(s.primal)) for s in specs)
    if mode == "auto":
        mode = "fwd" if in_size < out_size else "rev"
    if idx is None or idx < start:  # the output does not depend on the arguments
        jacs = [np.zeros(out_shape + np.shape(s.primal), _float_dtype(out, s.primal)) for s in specs]
    elif mode == "rev":
        jacs = _jacobian_rev(tape, specs, out, idx, nested)
    else:
        jacs = _jacobian_fwd(tape, specs, out, idx, nested)
    return tuple(jacs) if d._wrt_tuple else jacs[0]


def _float_dtype(*values: Any) -> Any:
    return np.result_type(*[getattr(v, "dtype", np.float64) for v in values], np.float32)


def _basis(shape: tuple[int, ...], dtype: Any, k: int) -> Any:
    if not shape:
        return dtype.type(1) if hasattr(dtype, "type") else 1.0
    e = np.zeros(shape, dtype)
    e.reshape(-1)[k] = 1
    return e


def _jacobian_rev(tape: Tape, specs: list, out: Any, idx: int, nested: Optional[_Nested]) -> list[Any]:
    out_shape = np.shape(out)
    dtype = np.dtype(getattr(out, "dtype", np.float64))
    rows: list[list[Any]] = [[] for _ in specs]
    for k in range(int(np.prod(out_shape, dtype=np.int64))):
        seed = _basis(out_shape, dtype, k) if out_shape else 1.0
        if nested is None:
            cts = sweep(tape, {idx: seed})
            for j, s in enumerate(specs):
                rows[j].append(pytree.project(cts[s.idx], s.primal))
        else:
            cts = nested.sweep({idx: seed})
            for j, s in enumerate(specs):
                rows[j].append(nested.project(cts[s.idx], s.primal))
    return [_assemble(rows[j], out_shape, np.shape(s.primal), 0, nested) for j, s in enumerate(specs)]


def _jacobian_fwd(tape: Tape, specs: list, out: Any, idx: int, nested: Optional[_Nested]) -> list[Any]:
    out_shape = np.shape(out)
    start = nested.start if nested is not None else 0
    recorder = nested.recorder() if nested is not None else None
    jacs = []
    for s in specs:
        shape = np.shape(s.primal)
        dtype = np.dtype(getattr(s.primal, "dtype", np.float64))
        cols = []
        for k in range(int(np.prod(shape, dtype=np.int64))):
            seed = _basis(shape, dtype, k) if shape else 1.0
            dots = push_forward(tape, {s.idx: seed}, start, recorder)
            col = dots[idx]
            if col is None:
                col = np.zeros(out_shape, _float_dtype(out, s.primal))
            cols.append(col)
        jacs.append(_assemble(cols, out_shape, shape, len(out_shape), nested))
    return jacs


def _assemble(parts: list[Any], out_shape: tuple[int, ...], in_shape: tuple[int, ...], axis: int,
              nested: Optional[_Nested]) -> Any:
    """Stack rows (axis 0) or columns (axis -1) and shape them `out_shape + in_shape`."""
    op = nested.op if nested is not None else (lambda f, *a, **k: f(*a, **k))
    if not out_shape and not in_shape:
        return op(np.asarray, parts[0])
    stacked = op(np.stack, parts, axis=axis)
    return op(np.reshape, stacked, out_shape + in_shape)


def hessian(fn: Callable[..., Any], wrt: Union[int, str] = 0, mode: str = "fwd") -> Callable[..., Any]:
    """The Hessian function of scalar-valued `fn` with respect to one argument `wrt`.

    The gradient is computed by a nested reverse pass recorded on the outer tape, and
    differentiated again.

    Parameters
    ----------
    fn : callable
        A Python function returning a scalar.
    wrt : int or str, default 0
        The one argument to differentiate with respect to (for blocks of several, use
        `jacobian(grad(f, wrt=i), wrt=j)`).
    mode : {"fwd", "rev"}, default "fwd"
        "fwd" pushes one tangent per input element through the gradient (forward-over-reverse);
        "rev" sweeps it backwards once per element (reverse-over-reverse).

    Returns
    -------
    callable
        Takes `fn`'s arguments and returns the Hessian, of shape `x.shape + x.shape`.

    Examples
    --------
    >>> import numpy as np
    >>> A = np.array([[2.0, 1.0], [1.0, 3.0]])
    >>> H = hessian(lambda x: 0.5 * x @ A @ x)(np.array([1.0, -1.0]))
    >>> bool(np.allclose(H, A))
    True
    """
    if isinstance(wrt, (tuple, list)):
        raise WrtError("hessian takes one argument to differentiate with respect to, not a tuple.",
                       Differentiated(fn)._loc(), "compute blocks with jacobian(grad(f, wrt=i), wrt=j).")
    d = Differentiated(fn, wrt)
    return jacobian(d.grad, wrt=d._wrt[0], mode=mode)


def hvp(fn: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any], wrt: Optional[Wrt] = None) -> Any:
    """The Hessian-vector product `H @ v` of scalar-valued `fn` at `primals`, along `tangents`.

    Forward-over-reverse: `jvp` of the gradient with respect to all positional arguments, without
    forming the Hessian.

    Parameters
    ----------
    fn : callable
        A Python function returning a scalar.
    primals : tuple or list
        The positional arguments of `fn`.
    tangents : tuple or list
        The vector `v`: one entry per differentiated primal, shaped like it.
    wrt : int, str or tuple of them, optional
        The primals to differentiate with respect to, by position or parameter name, as in `grad`;
        the others (ints, labels, data) are passed as they are. Default: all of them.

    Returns
    -------
    Any
        With one differentiated primal, `H @ v` shaped like it; with several, a tuple with one entry
        per differentiated primal (the rows of the block Hessian applied to all the tangents).

    Examples
    --------
    >>> import numpy as np
    >>> A = np.array([[2.0, 1.0], [1.0, 3.0]])
    >>> v = np.array([1.0, 0.0])
    >>> bool(np.allclose(hvp(lambda x: 0.5 * x @ A @ x, (np.ones(2),), (v,)), A @ v))
    True
    """
    primals, tangents = _as_args(primals, "primals"), _as_args(tangents, "tangents")
    if wrt is None:
        gradient = Differentiated(fn, tuple(range(len(primals)))).grad
        _, hv = jvp(gradient, primals, tangents)
        return hv[0] if len(primals) == 1 else hv
    d = Differentiated(fn, wrt)
    positions = d._plan(len(primals), d._wrt)[0]
    gradient = Differentiated(fn, positions).grad

    def gradient_at(*values: Any) -> Any:  # the gradient as a function of the differentiated primals only
        args = list(primals)
        for p, v in zip(positions, values):
            args[p] = v
        return gradient(*args)

    _, hv = jvp(gradient_at, [primals[p] for p in positions], tangents)
    return hv if d._wrt_tuple else hv[0]
