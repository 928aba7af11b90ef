"""`differentiate`, `grad` and `value_and_grad`: what `import bytegrad` loads of the API.

Of a plain Python function differentiated in positions, in a process that has not loaded the general
path (bytegrad/_differentiated.py, which loads the rules, the runtime and the transform: about 11 ms
of a fresh process), they make a `DeferredDifferentiated`, which checks only what it can without it.
Its first gradient asks bytegrad/_quick.py for the standalone program an earlier process stored for
this function and signature; a hit gives the gradient with none of the general path loaded. Any
other first call, and every later one, makes the `Differentiated` and runs its method (a first call
served by a stored program counts as a compiled call of its signature, whose next call loads the
signature's programs: bytegrad/_lazy_tiers.py `served`).

Anything else (keywords of parameters, `has_aux`, methods, partials, `holomorphic`, a pinned tier, a
process that has loaded the general path) gets its `Differentiated` at once, as before.
"""
from __future__ import annotations

import _thread
import functools
import sys
import types
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

from bytegrad import _lazy_tiers, _quick

if TYPE_CHECKING:
    from bytegrad._differentiated import Differentiated

__all__ = ["DeferredDifferentiated", "GradFunction", "differentiate", "grad", "value_and_grad", "wrt_or_argnums"]

Wrt = Union[int, str, Sequence[Union[int, str]]]

#: code flags of functions the first call does not take on its own (generators, coroutines, *args, **kwargs)
_PLAIN_FLAGS_OFF = 0x04 | 0x08 | 0x20 | 0x80 | 0x100 | 0x200


_BUILD = _thread.allocate_lock()  # a Differentiated made once per deferred one (threading.Lock, unimported)


def wrt_or_argnums(name: str, wrt: Optional[Wrt], argnums: Optional[Wrt], default: Wrt = 0) -> Wrt:
    """The `wrt` of a call that may spell it JAX's way (`argnums=`); TypeError when it gives both."""
    if argnums is None:
        return default if wrt is None else wrt
    if wrt is not None:
        raise TypeError(f"{name}() got both wrt={wrt!r} and argnums={argnums!r}: they are the same setting "
                        "(argnums is JAX's name for wrt); pass one of them.")
    return argnums


class DeferredDifferentiated:
    """What `differentiate` makes of a plain function while the process has not loaded the general path
    (see the module's docstring): `.grad` and `.value_and_grad` as a `Differentiated`'s, whose first call
    may run the signature's stored program; anything else makes the `Differentiated` (`differentiated`)
    and answers as it does. Calling it runs the function unchanged."""

    def __init__(self, fn: types.FunctionType, wrt: Wrt) -> None:
        self._d: Optional[Differentiated] = None
        self._quick = True  # whether the first gradient may still ask for a stored program
        self._served: Optional[tuple] = None  # the signature a stored program served
        self.fn = fn
        self._wrt_spec = wrt
        functools.update_wrapper(self, fn)

    @property
    def differentiated(self) -> Differentiated:
        """The `Differentiated` of the function (made on first need; the general path loads with it)."""
        d = self._d
        if d is None:
            from bytegrad import _differentiated

            with _BUILD:
                if self._d is None:  # (else another thread's call made it)
                    made = _differentiated.Differentiated(self.fn, self._wrt_spec)
                    if self._served is not None:  # the first gradient ran a stored program: the record counts it
                        _lazy_tiers.served(made, self._served)
                    # from now on its methods answer at once (instance attributes before the class's)
                    self.grad, self.value_and_grad = made.grad, made.value_and_grad  # type: ignore[method-assign]
                    self._d = made
            d = self._d
        return d

    def stored(self, args: tuple, kwargs: dict) -> Optional[tuple[Any, Any]]:
        """`(value, gradient)` from the signature's stored standalone program, for the first gradient only,
        or None (the caller asks the `Differentiated`)."""
        if not self._quick or kwargs or self._d is not None:
            return None
        self._quick = False
        result = _quick.first_call(self.fn, self._wrt_spec, args)
        if result is not None:
            self._served = tuple(map(type, args))
        return result

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def grad(self, *args: Any, **kwargs: Any) -> Any:
        """The gradient, as `Differentiated.grad`."""
        result = self.stored(args, kwargs) if self._quick else None
        return result[1] if result is not None else self.differentiated.grad(*args, **kwargs)

    def value_and_grad(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """`(output, gradient)`, as `Differentiated.value_and_grad`."""
        result = self.stored(args, kwargs) if self._quick else None
        return result if result is not None else self.differentiated.value_and_grad(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # (`pullback`, `stats`, ...: the Differentiated's)
        if name[:2] == "__" or name in _OWN:
            raise AttributeError(name)
        return getattr(self.differentiated, name)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else self.differentiated.__get__(obj, objtype)

    def __reduce__(self) -> Any:
        """By name where its module holds it (`@differentiate` on a module-level function), else as the
        `Differentiated` pickles (bytegrad/_pickle.py)."""
        module, qual = sys.modules.get(self.fn.__module__ or ""), self.fn.__qualname__
        if module is not None and module.__name__ != "__main__" and getattr(module, qual, None) is self:
            return qual
        return self.differentiated.__reduce__()

    def __repr__(self) -> str:
        return f"<bytegrad.differentiate {self.fn.__qualname__!r} wrt={self._wrt_spec!r}>"


_OWN = frozenset({"_d", "_quick", "_served", "fn", "_wrt_spec"})
_lazy_tiers.DEFERRED.add(DeferredDifferentiated)


class GradFunction:
    """What `grad` and `value_and_grad` return: call it with `fn`'s arguments.

    `stats()` reports on the differentiated function, as `Differentiated.stats` does for a
    function decorated with `differentiate`; `differentiated` is that `Differentiated`.
    """

    def __init__(self, method: Optional[Callable[..., Any]], name: str = "",
                 deferred: Optional[DeferredDifferentiated] = None) -> None:
        #: a bound method of a Differentiated; None until the first call that needs it (`deferred`)
        self._method = method
        self._name = method.__name__ if method is not None else name
        self._deferred = deferred
        # the name and docstring, not the __dict__ (another GradFunction's would replace ours)
        functools.update_wrapper(self, method.__self__.fn if method is not None else deferred.fn,  # type: ignore
                                 updated=())

    @property
    def differentiated(self) -> Differentiated:
        """The `Differentiated` this function calls."""
        if self._method is not None:
            return self._method.__self__  # type: ignore[attr-defined]
        return self._deferred.differentiated  # type: ignore[union-attr]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        method = self._method
        if method is None:
            return self._first(args, kwargs)
        return method(*args, **kwargs)

    def _first(self, args: tuple, kwargs: dict) -> Any:
        """A call before the `Differentiated` is made: the first may be served by a stored program (the
        next then makes it), else it is made now."""
        result = self._deferred.stored(args, kwargs)  # type: ignore[union-attr]
        if result is not None:
            return result[1] if self._name == "grad" else result
        method = self._method = getattr(self.differentiated, self._name)
        return method(*args, **kwargs)

    def stats(self) -> dict[str, Any]:
        """The differentiated function's `Differentiated.stats()`."""
        return self.differentiated.stats()

    def __reduce__(self) -> tuple[Any, ...]:
        return _grad_function, (self.differentiated, self._name)

    def __repr__(self) -> str:
        fn = self.__wrapped__  # type: ignore[attr-defined]
        wrt = self.differentiated._wrt_spec if self._method is not None else self._deferred._wrt_spec  # type: ignore
        return f"<bytegrad.{self._name} of {getattr(fn, '__qualname__', fn)!r} wrt={wrt!r}>"


def _grad_function(d: Differentiated, name: str) -> GradFunction:
    return GradFunction(getattr(d, name))


def _later(fn: Any, wrt: Wrt, has_aux: bool) -> Optional[DeferredDifferentiated]:
    """`fn`'s `DeferredDifferentiated` when its `Differentiated` can wait for the first call: a plain function
    differentiated in positional parameters by number, with nothing but positional parameters,
    in a process where the general path is not loaded (it would then serve the call itself) and
    whose settings let a stored program serve it; else None (it is made now)."""
    if type(fn) is not types.FunctionType or has_aux or "bytegrad._differentiated" in sys.modules or not _quick.enabled():
        return None
    code = fn.__code__
    items = wrt if type(wrt) is tuple else (wrt,)
    if code.co_flags & _PLAIN_FLAGS_OFF or code.co_kwonlyargcount or not items or \
            not all(type(w) is int and 0 <= w < code.co_argcount for w in items) or len(set(items)) != len(items):
        return None
    return DeferredDifferentiated(fn, wrt)


def differentiate(fn: Optional[Callable[..., Any]] = None, *, wrt: Optional[Wrt] = None, has_aux: bool = False,
                  tier: Optional[str] = None, argnums: Optional[Wrt] = None) -> Any:
    """Decorator: `fn` keeps working as before and gains `.grad`, `.value_and_grad` and `.pullback`.

    Parameters
    ----------
    fn : callable, optional
        The function. Without it, `differentiate(wrt=..., has_aux=...)` returns the decorator.
        As everywhere in this API it may be a Python function, a bound method, a static or class
        method, an object with a `__call__` method, or a `functools.partial` of one (`wrt` then
        counts the arguments the partial is called with, as in JAX).
    wrt : int, str or tuple of them, default 0
        The argument(s) to differentiate with respect to, by position or parameter name; a tuple
        gives a tuple of gradients.
    has_aux : bool, default False
        `fn` returns a pair `(value, aux)`: `value` is differentiated, `aux` (anything) comes back
        as it was returned, undifferentiated. Then `.grad` returns `(gradient, aux)`,
        `.value_and_grad` returns `((value, aux), gradient)` and `.pullback` returns
        `(value, back, aux)`, as in JAX. A function that returns something else raises
        `bytegrad.AuxOutputError`.
    tier : {"general", "numpy", "numba", "auto"}, optional
        How gradients run: "general" (the rewritten code and a tape, every call), "numpy" (a
        compiled program from the first call that can be compiled), "numba" (the same, with the
        Numba back end where it can be written) or "auto" (a compiled program once the function
        has run a few gradients). Default: `bytegrad.config.tier` when `fn` is differentiated
        (the BYTEGRAD_TIER environment variable, else "auto"). See bytegrad/compiled/policy.py.
    argnums : int or tuple of int, optional
        JAX's name for `wrt`: give one or the other.

    Returns
    -------
    Differentiated
        Calling it runs `fn` unchanged. (Of a plain function differentiated in positions, made before
        anything loaded bytegrad's general path, a `DeferredDifferentiated`, which answers as its
        `Differentiated` and makes it on first need: its first `.grad` may run a stored program.)

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
    wrt = wrt_or_argnums("differentiate", wrt, argnums)
    if fn is None:
        return lambda f: differentiate(f, wrt=wrt, has_aux=has_aux, tier=tier)
    deferred = _later(fn, wrt, has_aux) if tier is None else None
    if deferred is not None:
        return deferred
    from bytegrad import _differentiated
    return _differentiated.Differentiated(fn, wrt, has_aux, tier)


def grad(fn: Callable[..., Any], wrt: Optional[Wrt] = None, has_aux: bool = False, *,
         argnums: Optional[Wrt] = None, holomorphic: bool = False) -> Callable[..., Any]:
    """The gradient function of scalar-valued `fn` with respect to `wrt`.

    Parameters
    ----------
    fn : callable
        A Python function returning a scalar (or `(scalar, aux)` with `has_aux=True`); or a bound
        method, a callable object, a `functools.partial` (see `differentiate`).
    wrt : int, str or tuple of them, default 0
        The argument(s) to differentiate with respect to; a tuple gives a tuple of gradients.
    has_aux : bool, default False
        `fn` returns `(value, aux)`; the gradient function then returns `(gradient, aux)`.
    argnums : int or tuple of int, optional
        JAX's name for `wrt`: give one or the other.
    holomorphic : bool, default False
        `fn` is holomorphic in complex arguments (given by position) and returns a complex scalar:
        the result is the complex derivative `f'(z)`, as `jax.grad(..., holomorphic=True)`.

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
    >>> import functools
    >>> grad(functools.partial(lambda w, x: np.sum(w * x), x=np.array([1.0, 2.0])))(np.zeros(2)).tolist()
    [1.0, 2.0]
    >>> grad(lambda w, x: np.sum(w * x), argnums=1)(np.array([3.0, 4.0]), np.zeros(2)).tolist()
    [3.0, 4.0]
    >>> grad(lambda z: z ** 3, holomorphic=True)(1.0 + 1.0j)
    6j
    """
    return _made("grad", fn, wrt_or_argnums("grad", wrt, argnums), has_aux, holomorphic)


def value_and_grad(fn: Callable[..., Any], wrt: Optional[Wrt] = None, has_aux: bool = False, *,
                   argnums: Optional[Wrt] = None, holomorphic: bool = False) -> Callable[..., tuple[Any, Any]]:
    """A function returning `(fn(...), gradient)`, from one forward and one reverse pass.

    Parameters
    ----------
    fn : callable
        A Python function returning a scalar (or `(scalar, aux)` with `has_aux=True`).
    wrt : int, str or tuple of them, default 0
        The argument(s) to differentiate with respect to.
    has_aux : bool, default False
        `fn` returns `(value, aux)`; the function then returns `((value, aux), gradient)`.
    argnums : int or tuple of int, optional
        JAX's name for `wrt`: give one or the other.
    holomorphic : bool, default False
        As for `grad`: the gradient is the complex derivative `f'(z)` of a holomorphic `fn`.

    Returns
    -------
    callable
        Takes `fn`'s arguments; returns `(value, gradient)` or `((value, aux), gradient)`.

    Examples
    --------
    >>> value_and_grad(lambda x: (x ** 2, x + 1.0), has_aux=True)(3.0)
    ((9.0, 4.0), 6.0)
    """
    return _made("value_and_grad", fn, wrt_or_argnums("value_and_grad", wrt, argnums), has_aux, holomorphic)


def _made(name: str, fn: Any, wrt: Wrt, has_aux: bool, holomorphic: bool) -> Any:
    if holomorphic:
        from bytegrad._holomorphic import HolomorphicGrad
        return HolomorphicGrad(fn, wrt, has_aux, with_value=name == "value_and_grad")
    deferred = _later(fn, wrt, has_aux)
    if deferred is not None:
        return GradFunction(None, name, deferred)
    from bytegrad import _differentiated
    return GradFunction(getattr(_differentiated.Differentiated(fn, wrt, has_aux), name))
