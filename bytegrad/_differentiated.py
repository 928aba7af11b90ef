"""`Differentiated`: a function with derivatives (what `bytegrad.differentiate` returns).

It wires the transform to the runtime for one function: rewrites it for the differentiated arguments,
runs it with a tape, sweeps the tape backwards and mirrors the gradient; it hands hot signatures to the
compiled tier (bytegrad/compiled/). `grad`, `vjp`, `jacobian`... are bytegrad/api.py's, built on it.
"""
from __future__ import annotations

import functools
import inspect
import time
import types
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union, cast

import numpy as np

from bytegrad import _lazy_tiers, _ruled, transform
from bytegrad._config import config as _config
from bytegrad.errors import (
    ComplexOutputError, NonScalarOutputError, SourceLoc, WrtError,
)
from bytegrad.rules import closures as _closures, registry
from bytegrad.runtime import abi, fpwarn, monitor as _monitor, pytree, writes
from bytegrad.runtime.dispatch import call_python
from bytegrad.runtime.sentinels import MISS
from bytegrad.runtime.tape import Tape, call_site, sweep, tls
from bytegrad.transform import cache

from bytegrad._api_support import KeywordSlots, Nested, aux_pair, checking_tape, general_back, is_complex, return_loc, suspending_error
from bytegrad.runtime import dispatch as _dispatch

__all__ = ["Differentiated", "Wrt", "general_back"]

Wrt = Union[int, str, Sequence[Union[int, str]]]

_ndarray = np.ndarray
_float64 = np.float64


if TYPE_CHECKING:
    from bytegrad.compiled import policy as _compiled_module
    from bytegrad.compiled.lower_numpy import Program
    from bytegrad.compiled.policy import Pending


_compiled = _lazy_tiers.compiled  # bytegrad.compiled's policy, imported on first use (it loads bytegrad/compiled/)
_perf = time.perf_counter

#: code flags of functions whose call returns a generator or coroutine instead of running the body
_SUSPENDING = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE


class Differentiated:
    """A function with derivatives: call it as usual, or ask for `.grad`, `.value_and_grad`, `.pullback`.

    With `has_aux=True` the function returns `(value, aux)`: only `value` is differentiated, and
    `aux` comes back as it was returned (see `differentiate`).
    """

    fn: Callable[..., Any]
    _tier: Optional[str]
    _tiers = _lazy_tiers.TiersSlot()  # the compiled tier's record: under `auto`, made by the second gradient
    _tiers_obj: Any
    _tiers_due: bool

    def __init__(self, fn: Callable[..., Any], wrt: Wrt = 0, has_aux: bool = False,
                 tier: Optional[str] = None) -> None:
        fn = _lazy_tiers.resolved(fn)  # (`differentiate(f)` made before the general path loaded)
        if isinstance(fn, Differentiated):
            tier = fn._tier if tier is None else tier
            fn = fn.fn
        # a functools.partial: its function, called with the partial's arguments in front (wrt counts
        # the arguments the partial is called with, as in JAX)
        target, bound, self._bound_kwargs = _unwrap_partial(fn)
        if not isinstance(target, types.FunctionType):
            call = getattr(type(target), "__call__", None)
            if not (isinstance(target, types.MethodType) and isinstance(target.__func__, types.FunctionType)
                    or isinstance(call, types.FunctionType)):
                target = _ruled.python_caller(target)  # np.sum, np.add: its rule (TypeError without one)
        self.fn = fn
        functools.update_wrapper(self, fn)
        self._target, bound_self = self._python_target(target)
        #: the arguments put in front of the caller's: a bound method's object, a partial's arguments
        self._bound = bound if bound_self is None else (bound_self, *bound)
        self._offset = len(self._bound)
        self._wrt_spec = wrt
        self._has_aux = bool(has_aux)
        self._tier = tier
        wrt_key = tuple(wrt) if isinstance(wrt, list) else wrt
        _lazy_tiers.init(self, wrt_key, tier, bool(self._bound or self._bound_kwargs))
        self._pb_tiers: Optional[_compiled_module.Tiers] = None  # pullback programs: made on the first pullback
        self._use_code(self._target.__code__)
        #: a bound method, partial or callable object: its function, the bound arguments in front (guarded)
        shifted = _compiled().shift_wrt(wrt, self._offset) if self._bound or self._bound_kwargs else None
        try:  # (after the checks of `wrt` above: their errors count the caller's positions; its own fail quietly)
            self._inner = Differentiated(self._target, shifted, has_aux, tier) if shifted is not None else None
        except WrtError:
            self._inner = None
        if self._inner is not None:
            self._tiers = self._inner._tiers
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

    @staticmethod
    def _python_target(fn: Any) -> tuple[types.FunctionType, Any]:
        if isinstance(fn, types.FunctionType):
            return fn, None
        if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
            return fn.__func__, fn.__self__
        call: Any = type(fn).__call__  # (a FunctionType for a class written in Python)
        return call, fn

    def _loc(self) -> SourceLoc:
        c = self._code
        return SourceLoc(c.co_filename, c.co_firstlineno, c.co_name)

    def _resolve_wrt(self, wrt: Wrt) -> tuple[tuple[int, ...], bool]:
        items = wrt if isinstance(wrt, (tuple, list)) else (wrt,)
        positions: list[Any] = []  # positions, and the names of keyword parameters
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

    def _rewritten(self, active: frozenset[str], args: tuple, made: bool = False) -> types.FunctionType:
        # Keyed by the active parameters and argument types (not dtypes, shapes); `made`: a capture's rewrite.
        key = (active, registry.settled_version(), tuple(map(type, args)), True) if made else \
            (active, registry.settled_version(), tuple(map(type, args)))
        fn = self._fns.get(key)
        if fn is not None:
            self._hits += 1
            return fn
        target = self._target
        names = self._params
        immutable = frozenset(n for n, a in zip(names, args) if type(a) in transform.INERT_TYPES and n not in active)
        t0 = time.perf_counter()
        code = cache.lookup(target.__code__, key,
                            lambda: transform.rewrite_code(target.__code__, active, target.__globals__, immutable, made),
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
        norm: tuple[Any, ...] = tuple(p if type(p) is str else p % nargs for p in positions)  # (and names)
        code = self._target.__code__
        names = self._params[self._offset:]
        argc = max(code.co_argcount - self._offset, 0)
        varkw = code.co_varnames[code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04)] \
            if code.co_flags & 0x08 else None
        active = {names[p] for p in norm if type(p) is not str and p < argc}
        # (a name that is not keyword-only was resolved only if `**kwargs` takes it: varkw is set)
        active |= {p if p in self._kwonly else cast(str, varkw) for p in norm if type(p) is str}
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

    def _forward(self, args: Sequence[Any], kwargs: dict, positions: Sequence[int], strict: bool,
                 lean: bool = False, capture: Optional[type] = None, tracked: Sequence[Any] = (),
                 protect: Optional[frozenset] = None, prepare_other: Optional[Callable] = None) \
            -> tuple[Any, Tape, list, Optional["Nested"]]:
        """Run the function with a tape: (output, tape, leaf specs, the nested record or None).

        `lean`: the caller sweeps the tape once and drops it (see `Tape.lean`); `capture`: record
        on a tape of this class (compiled/capture.py), with the arrays `tracked` (read from globals, closures
        and module attributes: inputs of the program) tracked as they are; `protect`: the positions whose
        arrays a write may not touch (default: all of `positions`; a capture tracks more arguments
        than it differentiates, and writes into the others are the user's, as on the general path);
        `prepare_other`: how the arguments outside `protect` are tracked (default `pytree.prepare`)."""
        if self._target.__code__ is not self._code or self._target.__defaults__ is not self._defaults \
                or self._target.__kwdefaults__ is not self._kwdefaults:
            old_wrt = self._wrt
            self._use_code(self._target.__code__)
            if positions is old_wrt:  # `wrt` named a parameter of the old body: resolved anew
                positions = self._wrt
        if self._code.co_flags & _SUSPENDING:
            raise suspending_error(self._code, self._loc())
        if self._bound_kwargs:  # a partial's keywords; the call's own win, as in functools.partial
            kwargs = {**self._bound_kwargs, **kwargs}
        if kwargs:
            args, kwargs = self._normalize_call(tuple(args), kwargs)  # (a tuple: tuple() returns it)
        plan = self._plans.get((len(args), positions))
        norm, active = plan if plan is not None else self._plan(len(args), positions)
        outer = getattr(tls, "tape", None)
        if outer is not None:
            return self._forward_nested(outer, args, kwargs, norm, strict)
        tape = capture() if capture is not None else (Tape() if not _config.debug_nans else checking_tape())
        tape.lean = lean
        args = list(args)
        if any(type(p) is str for p in norm):
            args, kwargs = self._keyword_slots(args, kwargs, norm)
        specs = []
        for p in norm:
            v = args[p]
            if type(v) is _ndarray and v.dtype.kind == "f" and (protect is None or p in protect):  # the common case
                fresh = v.view()
                tape.protected.add(id(v))
                if v.base is not None:
                    tape.protected.add(id(v.base))
                spec = pytree.Leaf(tape.leaf(fresh), v)
                args[p] = fresh
                specs.append(spec)
                continue
            try:
                if protect is None or p in protect or prepare_other is None:
                    fresh, spec = pytree.prepare(args[p], tape, strict=strict)
                else:
                    fresh, spec = prepare_other(args[p], tape)
            except pytree.NotDifferentiable as exc:
                raise self._wrt_type_error(p, exc) from None
            args[p] = fresh
            specs.append(spec)
        for v in tracked:
            if id(v) not in tape.ids:
                if protect is None:
                    tape.protected.add(id(v))
                tape.track_read(v)
        if type(args) is KeywordSlots:
            args, named = args.split()
            kwargs = {**kwargs, **named}
        call_args = (*self._bound, *args) if self._bound else tuple(args)
        # bytegrad's own functions (hessian = jacobian of grad) run as they are: they find the tape
        fn = self._rewritten(active, call_args, capture is not None) if self._target.__module__ not in _dispatch.API_MODULES \
            else self._target
        old = getattr(tls, "tape", None)
        tls.tape = tape
        if capture is not None:
            tape.started = True  # type: ignore[union-attr]  # (the user's body runs from here: compiled/abandon.py)
        watch = _monitor.start()  # Python code started blind from C is stopped (runtime/monitor.py)
        try:
            with fpwarn.at_user_lines():  # NumPy's floating-point warnings name the user's line, not a hook's
                out = fn(*call_args, **kwargs) if kwargs else fn(*call_args)
        finally:
            _monitor.stop(watch)
            tls.tape = old
        return out, tape, specs, None

    def _forward_nested(self, tape: Tape, args: Sequence[Any], kwargs: dict, norm: tuple[int, ...],
                        strict: bool) -> tuple[Any, Tape, list, "Nested"]:
        """The forward pass of a derivative taken while `tape` is active: it is recorded on `tape`.

        Each differentiated leaf enters as a fresh value whose node is an identity linked to the
        outer value (so the outer derivative flows through it) and the function runs through the
        rewriter like any callee (closures over outer values are seen). The inner derivative
        sweeps only the nodes after its leaves: see runtime/nested.py."""
        site = self._call_site()
        nested = Nested(tape, site, len(tape.nodes))
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
        if type(args) is KeywordSlots:
            args, named = args.split()
            kwargs = {**kwargs, **named}
        nested.stop = len(tape.nodes) - 1
        added = tape.protected - protected  # the inner inputs are protected while the inner code runs
        call_args = (*self._bound, *args) if self._bound else tuple(args)
        # while it runs, checkpointed calls record as usual and fused sites run their NumPy tier (their
        # kernels compute partials unrecorded): see runtime/checkpoint.py and runtime/fused.py
        tls.nesting = getattr(tls, "nesting", 0) + 1
        try:
            out = call_python(tape, site, self._target, call_args, kwargs or None)
        finally:
            tape.protected -= added
            tls.nesting -= 1
        return out, tape, specs, nested

    def _keyword_slots(self, args: list, kwargs: dict, norm: tuple) -> tuple["KeywordSlots", dict]:
        """The positional arguments and the keyword-only ones `wrt` names, indexable by position or name."""
        kwargs = dict(kwargs or {})
        slots = KeywordSlots(args)
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
        if isinstance(p, str):
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
        if cache.PENDING:  # what the first gradient left for later: its rewrites' disk cache entries
            cache.flush_stores()
        return self._grad_tiered(args, kwargs, value)

    def _grad_tiered(self, args: tuple, kwargs: dict, value: bool = True) -> tuple[Any, Any]:
        """A compiled program's result when one applies (bytegrad/compiled/policy.py), else the general path's.
        `value=False`: only the gradient is used (a program skips the output's value). A bound
        method's programs are its function's (`_inner`), called with the bound arguments in front."""
        tiers, d = self._tiers_obj, self._inner or self
        if (tiers is not None or self._tiers_due) and getattr(tls, "tape", None) is None and not _config.debug_nans:
            call_args, call_kw = ((*self._bound, *args), {**self._bound_kwargs, **kwargs}) if d is not self \
                else (args, kwargs)
            if call_kw:  # keywords of positional parameters move into place (others: compiled/keywords.py)
                call_args, call_kw = d._normalize_call(call_args, call_kw)
            if tiers is None:  # (a record left due: None again for the first gradient)
                tiers = _lazy_tiers.first_or_made(self, call_args) if not call_kw else \
                    self._tiers if self._first_s is not None else None  # (keywords: made by a second gradient)
            if tiers is not None:  # (keywords left, of keyword-only parameters or **kwargs: compiled/keywords.py)
                result = tiers.call(d._target, call_args, d._capture, value=value) if not call_kw else \
                    _lazy_tiers.keywords().grad(tiers, d, call_args, call_kw, value)
                if result is not MISS:
                    return result
        return self._grad_now(args, kwargs)

    def _capture(self, args: tuple, backends: Sequence[str] = ("numpy",)) -> tuple[tuple[Any, Any], Union[Program, str]]:
        """One gradient by a capture run, and the program made from it or why none (compiled/capture.py)."""
        from bytegrad.compiled import capture
        return capture.capture(self, args, backends)

    def _capture_pullback(self, args: tuple, backends: Sequence[str] = ()) -> tuple[Any, Union[Pending, str]]:
        """One pullback by a capture run, and the pullback program made from it or why none."""
        from bytegrad.compiled import capture
        return capture.capture_pullback(self, args, general_back, backends)

    def eligibility(self, args: tuple) -> tuple[list[str], list[tuple]]:
        """(reasons this function cannot be a compiled program for arguments like `args`, guards on
        the globals it reads): see compiled/eligibility.py."""
        from bytegrad.compiled import capture
        return capture.eligibility(self, args)

    def _check_scalar(self, out: Any) -> None:
        t = type(out)
        if t is not _float64 and t is not float and is_complex(out):
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
            grads = pytree.not_callers(grads, args)
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
        return aux_pair(out, self._code.co_name, self._return_loc)

    def _complex_output_error(self, out: Any) -> ComplexOutputError:
        return ComplexOutputError(
            f"grad needs a function that returns a real scalar, but {self._code.co_name} returned the complex "
            f"value {out!r}: a complex value has no gradient, and bytegrad will not silently "
            "differentiate its real part.", self._return_loc(),
            "return the real quantity you mean (`np.real(...)`, `np.abs(...) ** 2`); for f'(z) of a "
            "holomorphic function, grad(f, holomorphic=True); or bytegrad.vjp with a cotangent of your choice.")

    def _return_loc(self) -> SourceLoc:
        return return_loc(self._code)

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
        from bytegrad import _stats
        return _stats.differentiated_stats(self)

    def grad(self, *args: Any, **kwargs: Any) -> Any:
        """The gradient of the scalar output with respect to the `wrt` argument(s);
        `(gradient, aux)` with `has_aux=True`."""
        if self._has_aux:
            (_, aux), grads = self._grad(args, kwargs)
            return grads, aux
        return self._grad(args, kwargs, value=False)[1]

    def value_and_grad(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """(output, gradient) from one forward and one reverse pass; `((output, aux), gradient)` with `has_aux=True`."""
        return self._grad(args, kwargs)

    def pullback(self, *args: Any, **kwargs: Any) -> Any:
        """(output, back): `back(out_bar)` returns one cotangent per positional argument;
        `(output, back, aux)` with `has_aux=True`."""
        if not self._bound and not self._bound_kwargs and not kwargs and getattr(tls, "tape", None) is None \
                and not _config.debug_nans:
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
            grads = fpwarn.at_user_lines.run(back, out_bar)  # (its floating-point warnings at the user's lines)
            if grads is MISS:
                return self._pullback_now(args, {})[1](out_bar)
            return grads

        return checked

    def _pullback_now(self, args: tuple, kwargs: dict) -> Any:
        positions = tuple(range(len(args)))
        out, tape, specs, nested = self._forward(args, kwargs, positions, strict=False)
        if self._has_aux:
            out, aux = self._split_aux(out)
        back = general_back(out, tape, specs, nested)
        return (out, back, aux) if self._has_aux else (out, back)


def _unwrap_partial(fn: Any) -> tuple[Any, tuple, dict]:
    """(the function, the positional arguments put in front, the keywords) of a functools.partial,
    nested ones and partials of differentiated functions included; `(fn, (), {})` for anything else."""
    args: tuple = ()
    keywords: dict = {}
    while True:
        if isinstance(fn, functools.partial):
            args = (*fn.args, *args)
            keywords = {**fn.keywords, **keywords}  # the outer partial's keywords win
            fn = fn.func
        elif isinstance(fn, Differentiated) or type(fn) in _lazy_tiers.DEFERRED:  # its function (run as it
            fn = fn.fn                                                                # is, it would hide the derivative)
        else:
            return fn, args, keywords


def _vjp(fn: Callable[..., Any], *args: Any, has_aux: bool = False, **kwargs: Any) -> Any:
    """`bytegrad.vjp`, for `rrule_via_ad` (the rules call back into bytegrad through `registry.set_ad_backend`)."""
    return Differentiated(fn, has_aux=has_aux).pullback(*args, **kwargs)


# The layers that cannot import each other, connected once this module is loaded (by `bytegrad.api`, by
# `grad`'s first call that needs it, or by unpickling a differentiated function): the dispatch rewrites
# the Python callees it meets through the transform, runs bytegrad's own API as it is, and the rules
# ask whether a value is differentiated now (`rules/closures.tracked`, `registry.recording`).
abi.set_rewriter(transform.rewritten_function)
_dispatch.API_MODULES.update(("bytegrad.api", __name__, "bytegrad._front", "bytegrad._api_support"))  # (general_back)
registry.set_ad_backend(_vjp)
registry.set_tape_probe(lambda: getattr(tls, "tape", None) is not None)
_closures.set_tracked_probe(lambda v: (t := getattr(tls, "tape", None)) is not None and id(v) in t.ids
                            and (not t.capturing or t.general_tracked(v)))
