"""The public API: `differentiate`, `grad`, `value_and_grad`, `vjp`.

It wires the transform to the runtime: rewrites the user's function for the differentiated
arguments, runs it with a tape, sweeps the tape backwards and mirrors the gradient.
"""
from __future__ import annotations

import functools
import types
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from bytegrad import transform
from bytegrad.errors import NonScalarOutputError, SourceLoc, WrtError
from bytegrad.rules import registry
from bytegrad.runtime import abi, pytree
from bytegrad.runtime.tape import Tape, _tls, sweep
from bytegrad.transform import cache

__all__ = ["differentiate", "grad", "value_and_grad", "vjp", "Differentiated"]

Wrt = Union[int, str, Sequence[Union[int, str]]]

abi.set_rewriter(transform.rewritten_function)
_ndarray = np.ndarray


class Differentiated:
    """A function with derivatives: call it as usual, or ask for `.grad`, `.value_and_grad`, `.pullback`."""

    def __init__(self, fn: Callable[..., Any], wrt: Wrt = 0) -> None:
        if isinstance(fn, Differentiated):
            fn = fn.fn
        if not isinstance(fn, types.FunctionType):
            call = getattr(type(fn), "__call__", None)
            if isinstance(fn, types.MethodType) or isinstance(call, types.FunctionType):
                pass
            else:
                raise TypeError(f"bytegrad can differentiate Python functions, not {type(fn).__name__}")
        self.fn = fn
        functools.update_wrapper(self, fn)
        self._target, self._bound_self = self._python_target(fn)
        code = self._target.__code__
        self._code = code
        self._params = transform.param_names(code)
        self._positional = code.co_varnames[: code.co_argcount]
        self._offset = 1 if self._bound_self is not None else 0
        self._wrt_spec = wrt
        self._wrt, self._wrt_tuple = self._resolve_wrt(wrt)
        self._fns: dict[Any, types.FunctionType] = {}
        self._plans: dict[Any, Any] = {}
        self._hits = 0

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
                if w not in visible:
                    raise WrtError(
                        f"wrt={w!r} names no positional parameter of {self._code.co_name}; its parameters "
                        f"are {', '.join(visible) or '(none)'}.", self._loc(),
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
        return Differentiated(types.MethodType(self.fn, obj), self._wrt_spec)

    def __repr__(self) -> str:
        return f"<bytegrad.differentiate {getattr(self.fn, '__qualname__', self.fn)!r} wrt={self._wrt_spec!r}>"

    # ---- running with a tape -------------------------------------------------------------

    def _rewritten(self, active: frozenset[str], args: tuple) -> types.FunctionType:
        # The rewrite depends on which parameters are active and on the argument types (an int
        # can never become active), not on dtypes or shapes: those stay out of the key.
        key = (active, registry._version, tuple(map(type, args)))
        fn = self._fns.get(key)
        if fn is not None:
            self._hits += 1
            return fn
        target = self._target
        names = self._params
        immutable = frozenset(n for n, a in zip(names, args) if type(a) in transform._INERT and n not in active)
        code = cache.lookup(target.__code__, key,
                            lambda: transform.rewrite_code(target.__code__, active, target.__globals__, immutable),
                            self._params[self._offset:])
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
            if not -nargs <= p < nargs:
                raise WrtError(
                    f"wrt={p} is out of range: {self._code.co_name} was called with {nargs} positional "
                    f"argument{'s' if nargs != 1 else ''}.", self._loc(),
                    "pass the differentiated argument positionally, or fix wrt.")
        norm = tuple(p % nargs for p in positions)
        code = self._target.__code__
        names = self._params[self._offset:]
        argc = code.co_argcount - self._offset
        active = {names[p] for p in norm if p < argc}
        if any(p >= argc for p in norm) and code.co_flags & 0x04:
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

    def _forward(self, args: tuple, kwargs: dict, positions: Sequence[int], strict: bool) -> tuple[Any, Tape, list]:
        if kwargs:
            args, kwargs = self._normalize_call(args, kwargs)
        plan = self._plans.get((len(args), positions))
        norm, active = plan if plan is not None else self._plan(len(args), positions)
        tape = Tape()
        args = list(args)
        specs = []
        values = tape.values
        for p in norm:
            v = args[p]
            if type(v) is _ndarray and v.dtype.kind == "f":  # the common case, inline
                fresh = v.view()
                tape.protected.add(id(v))
                if v.base is not None:
                    tape.protected.add(id(v.base))
                spec = pytree.Leaf(len(values), v)
                tape.ids[id(fresh)] = len(values)
                values.append(fresh)
                tape.nodes.append(None)
                args[p] = fresh
                specs.append(spec)
                continue
            try:
                fresh, spec = pytree.prepare(args[p], tape, strict=strict)
            except pytree.NotDifferentiable as exc:
                name = self._positional[self._offset + p] if self._offset + p < len(self._positional) else f"#{p}"
                raise WrtError(f"argument {name!r} (wrt={p}) cannot be differentiated: {exc}.", self._loc(),
                               "differentiate with respect to float arrays, floats, or containers of them; "
                               "leave ints, strings and flags out of wrt.") from None
            args[p] = fresh
            specs.append(spec)
        call_args = tuple(args) if self._bound_self is None else (self._bound_self, *args)
        fn = self._rewritten(active, call_args)
        tls = _tls
        old = getattr(tls, "tape", None)
        tls.tape = tape
        try:
            out = fn(*call_args, **kwargs) if kwargs else fn(*call_args)
        finally:
            tls.tape = old
        return out, tape, specs

    def _grad(self, args: tuple, kwargs: dict) -> tuple[Any, Any]:
        out, tape, specs = self._forward(args, kwargs, self._wrt, strict=True)
        t = type(out)
        if not (t is float or t is int or (t is np.ndarray and out.ndim == 0) or isinstance(out, np.generic)):
            shape = getattr(out, "shape", None)
            found = f"an array of shape {shape}" if shape is not None else f"a {t.__name__}"
            raise NonScalarOutputError(
                f"grad needs a function that returns a scalar, but {self._code.co_name} returned {found}.",
                self._return_loc(),
                "reduce the output (for example `.sum()` or `np.mean(...)`), or use .pullback / "
                "bytegrad.vjp for vector-valued functions.")
        idx = tape.ids.get(id(out))
        cts = sweep(tape, {idx: 1.0}) if idx is not None else [None] * len(tape.nodes)
        grads = tuple([pytree.project(cts[s.idx], s.primal) if type(s) is pytree.Leaf else pytree.gradient(s, cts)
                       for s in specs])
        if len(grads) > 1:
            grads = _unalias(grads)
        return out, grads if self._wrt_tuple else grads[0]

    def _return_loc(self) -> SourceLoc:
        from bytecode import Bytecode, Instr
        lines = {i.lineno for i in Bytecode.from_code(self._code) if isinstance(i, Instr)
                 and i.name in ("RETURN_VALUE", "RETURN_CONST") and isinstance(i.lineno, int)}
        line = lines.pop() if len(lines) == 1 else self._code.co_firstlineno
        return SourceLoc(self._code.co_filename, line, self._code.co_name)

    def stats(self) -> dict[str, int]:
        """Cache figures: `hits` (gradients that reused rewritten code), `misses` (rewrites), `entries`."""
        s = cache.stats(self._code)
        return {"hits": self._hits + s["hits"], "misses": s["misses"], "entries": s["entries"]}

    def grad(self, *args: Any, **kwargs: Any) -> Any:
        """The gradient of the scalar output with respect to the `wrt` argument(s)."""
        return self._grad(args, kwargs)[1]

    def value_and_grad(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """(output, gradient) from one forward and one reverse pass."""
        return self._grad(args, kwargs)

    def pullback(self, *args: Any, **kwargs: Any) -> tuple[Any, Callable[[Any], tuple[Any, ...]]]:
        """(output, back): `back(out_bar)` returns one cotangent per positional argument."""
        positions = tuple(range(len(args)))
        out, tape, specs = self._forward(args, kwargs, positions, strict=False)

        def back(out_bar: Any) -> tuple[Any, ...]:
            pairs: list[tuple[int, Any]] = []
            pytree.cotangent_leaves(out, out_bar, tape.ids, pairs)
            seeds: dict[int, Any] = {}
            for i, c in pairs:
                if c is not None:
                    seeds[i] = c if i not in seeds else seeds[i] + c
            cts = sweep(tape, seeds)
            return _unalias(tuple(pytree.gradient(s, cts) for s in specs))

        return out, back


def _unalias(grads: tuple[Any, ...]) -> tuple[Any, ...]:
    """Gradients handed to the user never share memory with each other."""
    ids = [id(g) for g in grads if type(g) is _ndarray]
    if len(set(ids)) == len(ids):
        return grads
    seen: set[int] = set()
    out = []
    for g in grads:
        if type(g) is _ndarray:
            if id(g) in seen:
                g = g.copy()
            seen.add(id(g))
        out.append(g)
    return tuple(out)


def differentiate(fn: Optional[Callable[..., Any]] = None, *, wrt: Wrt = 0) -> Any:
    """Decorator: `fn` keeps working as before and gains `.grad`, `.value_and_grad` and `.pullback`.

    >>> import numpy as np
    >>> @differentiate
    ... def f(x):
    ...     return np.sum(np.sin(x) ** 2)
    >>> x = np.array([0.1, 0.2])
    >>> bool(np.allclose(f.grad(x), 2 * np.sin(x) * np.cos(x)))
    True
    """
    if fn is None:
        return lambda f: Differentiated(f, wrt)
    return Differentiated(fn, wrt)


def grad(fn: Callable[..., Any], wrt: Wrt = 0) -> Callable[..., Any]:
    """The gradient function of scalar-valued `fn` with respect to `wrt`."""
    return Differentiated(fn, wrt).grad


def value_and_grad(fn: Callable[..., Any], wrt: Wrt = 0) -> Callable[..., tuple[Any, Any]]:
    """A function returning `(fn(...), gradient)`."""
    return Differentiated(fn, wrt).value_and_grad


def vjp(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, Callable[[Any], tuple[Any, ...]]]:
    """`(fn(*args), back)` where `back(out_bar)` returns one cotangent per positional argument."""
    return Differentiated(fn).pullback(*args, **kwargs)



registry.set_ad_backend(vjp)  # rrule_via_ad: rules call back into bytegrad through this slot
