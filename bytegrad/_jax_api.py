"""JAX's names for what bytegrad does, with JAX's arguments: `jacfwd`, `jacrev`, `linearize`,
`custom_vjp`, `custom_jvp`, and `has_aux` for `jvp` and the Jacobians.

They are thin: a Jacobian is `bytegrad.jacobian` in the given mode, `linearize` keeps one forward pass and
pushes tangents through its tape, and the custom-derivative decorators register a rule (`rrule`, `frule`)
for the decorated function, as a rule plugin would. A `custom_jvp` function has a reverse rule too, made by
differentiating its JVP rule in the tangents with bytegrad (the tangent output is linear in the tangents,
so its pullback is the transposed Jacobian), one reverse pass per pullback, as JAX transposes the
linearised JVP.

Imported on first use of one of these names (`bytegrad.__getattr__`).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Sequence

import numpy as np

from bytegrad._api_support import def_loc, fn_name, split_aux
from bytegrad.errors import WrtError

__all__ = ["jacfwd", "jacrev", "linearize", "custom_vjp", "custom_jvp", "Ruled"]


def _recording(fn: Callable[..., Any], outs: list) -> Callable[..., Any]:
    def recorded(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        outs.append(out)
        return out

    return recorded


class JaxJacobian:
    """What `jacfwd` and `jacrev` return: call it with `fn`'s arguments."""

    def __init__(self, fn: Callable[..., Any], argnums: Any, has_aux: bool, holomorphic: bool, mode: str) -> None:
        self.fn, self.argnums, self.mode = fn, argnums, mode
        self.has_aux, self.holomorphic = bool(has_aux), bool(holomorphic)
        functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from bytegrad.api import jacobian

        positions = (self.argnums,) if not isinstance(self.argnums, (tuple, list)) else tuple(self.argnums)
        for p in positions:
            if type(p) is int and -len(args) <= p < len(args):
                self._check_input(p, args[p])
        fn, box = split_aux(self.fn) if self.has_aux else (self.fn, [])
        outs: list = []
        if self.holomorphic:
            fn = _recording(fn, outs)
        jac = jacobian(fn, argnums=self.argnums, mode=self.mode)(*args, **kwargs)
        if self.holomorphic:
            self._check_output(outs[-1])
        return (jac, box[-1]) if self.has_aux else jac

    def _check_input(self, p: int, value: Any) -> None:
        from bytegrad.tree_util import tree_leaves

        leaves = [value] if isinstance(value, (np.ndarray, np.generic, complex, float)) else tree_leaves(value)
        complex_ = [np.iscomplexobj(leaf) for leaf in leaves]
        name = "jacfwd" if self.mode == "fwd" else "jacrev"
        if self.holomorphic and not (complex_ and all(complex_)):
            raise WrtError(f"{name} with holomorphic=True differentiates complex arguments, but argument {p} "
                           "holds real values.", def_loc(self.fn),
                           "pass it as a complex value (`x.astype(complex)`), or drop holomorphic=True.")
        if not self.holomorphic and any(complex_):
            raise WrtError(f"{name} differentiates real arguments, but argument {p} holds complex values.",
                           def_loc(self.fn), "for the Jacobian f'(z) of a holomorphic function pass holomorphic=True; "
                           "or use bytegrad.jacobian, which takes complex arguments as they are.")

    def _check_output(self, out: Any) -> None:
        from bytegrad.tree_util import tree_leaves

        if not all(np.iscomplexobj(leaf) for leaf in tree_leaves(out)):
            raise WrtError("jacfwd/jacrev with holomorphic=True needs a function with complex outputs, but "
                           f"{fn_name(self.fn)} returned real ones.", def_loc(self.fn),
                           "return complex values, or drop holomorphic=True.")

    def __repr__(self) -> str:
        return f"<bytegrad.{'jacfwd' if self.mode == 'fwd' else 'jacrev'} of {fn_name(self.fn)!r} argnums={self.argnums!r}>"


def jacfwd(fn: Callable[..., Any], argnums: Any = 0, has_aux: bool = False, holomorphic: bool = False) -> JaxJacobian:
    """The Jacobian by forward mode (one tangent sweep per input element), as `jax.jacfwd`.

    `bytegrad.jacobian(fn, argnums=argnums, mode="fwd")`, with JAX's `has_aux` (the result is then
    `(jacobian, aux)`) and `holomorphic` (complex arguments and outputs; without it, complex arguments
    are refused, as JAX does). Layout: the output's structure outside, the argument's inside.

    Examples
    --------
    >>> import numpy as np
    >>> jacfwd(lambda x: (np.sin(x), x[0]), has_aux=True)(np.array([0.0, 1.0]))[0].shape
    (2, 2)
    """
    return JaxJacobian(fn, argnums, has_aux, holomorphic, "fwd")


def jacrev(fn: Callable[..., Any], argnums: Any = 0, has_aux: bool = False, holomorphic: bool = False) -> JaxJacobian:
    """The Jacobian by reverse mode (one reverse sweep per output element), as `jax.jacrev`; see `jacfwd`.

    Examples
    --------
    >>> import numpy as np
    >>> jacrev(lambda x: np.sin(x) * x[0])(np.array([1.0, 2.0])).shape
    (2, 2)
    """
    return JaxJacobian(fn, argnums, has_aux, holomorphic, "rev")


def linearize(fn: Callable[..., Any], *primals: Any) -> tuple[Any, Callable[..., Any]]:
    """`(fn(*primals), f_jvp)`, where `f_jvp(*tangents)` is the Jacobian-vector product at `primals`, as
    `jax.linearize`: the function runs once, and each `f_jvp` call pushes its tangents through the tape
    of that run (inside another derivative, where the run's tape is the outer one's, each call runs `jvp`).

    Examples
    --------
    >>> import numpy as np
    >>> out, f_jvp = linearize(np.sin, np.array([0.0, 1.0]))
    >>> bool(np.allclose(f_jvp(np.array([1.0, 1.0])), np.cos([0.0, 1.0])))
    True
    """
    from bytegrad._differentiated import Differentiated
    from bytegrad.api import jvp, seed_tangents, tangent_out
    from bytegrad.runtime.forward import push_forward
    from bytegrad.runtime.tape import tls

    if getattr(tls, "tape", None) is not None:  # (nested: each call differentiates anew)
        return fn(*primals), lambda *tangents: jvp(fn, primals, tangents)[1]
    d = Differentiated(fn)
    out, tape, specs, _ = d._forward(tuple(primals), {}, tuple(range(len(primals))), strict=False)

    def f_jvp(*tangents: Any) -> Any:
        if len(tangents) != len(primals):
            raise WrtError(f"the linearized function takes {len(primals)} tangent(s), one per primal, but got "
                           f"{len(tangents)}.", def_loc(fn), "pass one tangent per primal (None for no tangent).")
        seeds = seed_tangents(specs, tangents, tape, d)
        return tangent_out(out, push_forward(tape, seeds, 0, None), tape.ids, 0, None)

    return out, f_jvp


class Ruled:
    """The function of a `custom_vjp`/`custom_jvp`, which its rules are registered for too: differentiating
    the decorated object itself (`grad(f)`) runs its `__call__`, whose call of this object meets the rule."""

    def __init__(self, fun: Callable[..., Any]) -> None:
        self.fun = fun

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fun(*args, **kwargs)


class custom_vjp:  # noqa: N801 - JAX's name, a decorator
    """A function with its own reverse rule, as `jax.custom_vjp`.

    `fwd(*args)` returns `(out, residuals)`; `bwd(*nondiff_args, residuals, out_bar)` returns one cotangent
    per argument outside `nondiff_argnums` (None for none). Registered with `bytegrad.rrule` when
    `defvjp` is called; forward mode through it forms tangents from the pullback (a PerformanceWarning).

    Examples
    --------
    >>> import numpy as np, bytegrad
    >>> @custom_vjp
    ... def clip_grad(x):
    ...     return x
    >>> clip_grad.defvjp(lambda x: (x, None), lambda res, g: (np.clip(g, -1.0, 1.0),))
    >>> bytegrad.grad(lambda x: 5.0 * clip_grad(x))(2.0)
    1.0
    """

    def __init__(self, fun: Callable[..., Any], nondiff_argnums: Sequence[int] = ()) -> None:
        self.fun, self.nondiff_argnums = fun, tuple(nondiff_argnums)
        self.fwd: Optional[Callable[..., Any]] = None
        self.bwd: Optional[Callable[..., Any]] = None
        self.ruled = Ruled(fun)
        functools.update_wrapper(self, fun, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.ruled(*args, **kwargs)

    def defvjp(self, fwd: Callable[..., Any], bwd: Callable[..., Any]) -> None:
        """Give the function its reverse rule: `fwd(*args) -> (out, residuals)` and
        `bwd(*nondiff_args, residuals, out_bar) -> cotangents` (a tuple, one per differentiable argument)."""
        from bytegrad.rules import rrule

        self.fwd, self.bwd = fwd, bwd
        for target in (self, self.ruled):
            rrule(target, override=True)(self._rule)

    def _rule(self, *args: Any, **kwargs: Any) -> tuple[Any, Callable[[Any], tuple]]:
        assert self.fwd is not None and self.bwd is not None
        out, residuals = self.fwd(*args, **kwargs)
        nondiff = tuple(args[p] for p in self.nondiff_argnums)
        diff_positions = [p for p in range(len(args)) if p not in self.nondiff_argnums]

        def pullback(out_bar: Any) -> tuple:
            assert self.bwd is not None
            cts = self.bwd(*nondiff, residuals, out_bar)
            if not isinstance(cts, (tuple, list)) or len(cts) != len(diff_positions):
                raise WrtError(f"the bwd rule of {fn_name(self.fun)} must return a tuple of {len(diff_positions)} "
                               f"cotangent(s), one per argument outside nondiff_argnums, but returned {cts!r:.80}.",
                               def_loc(self.bwd), "return a tuple with one entry per differentiable argument.")
            return _placed(len(args), diff_positions, cts)

        return out, pullback

    def __repr__(self) -> str:
        return f"<bytegrad.custom_vjp of {fn_name(self.fun)!r}>"


class custom_jvp:  # noqa: N801 - JAX's name, a decorator
    """A function with its own forward rule, as `jax.custom_jvp`.

    `jvp(*nondiff_args, primals, tangents)` returns `(out, out_dot)` (`defjvp`). It is registered as an
    `frule`, and as an `rrule` whose pullback differentiates `jvp`'s tangent output in the tangents (it is
    linear in them) with bytegrad: one reverse pass of the JVP rule per pullback. A tangent the caller
    does not differentiate is passed as zeros.

    Examples
    --------
    >>> import numpy as np, bytegrad
    >>> @custom_jvp
    ... def softplus(x):
    ...     return np.logaddexp(0.0, x)
    >>> softplus.defjvp(lambda primals, tangents: (softplus(primals[0]),
    ...                                            tangents[0] / (1.0 + np.exp(-primals[0]))))
    >>> float(bytegrad.grad(softplus)(0.0))
    0.5
    """

    def __init__(self, fun: Callable[..., Any], nondiff_argnums: Sequence[int] = ()) -> None:
        self.fun, self.nondiff_argnums = fun, tuple(nondiff_argnums)
        self.jvp: Optional[Callable[..., Any]] = None
        self.ruled = Ruled(fun)
        functools.update_wrapper(self, fun, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.ruled(*args, **kwargs)

    def defjvp(self, jvp: Callable[..., Any]) -> None:
        """Give the function its forward rule, `jvp(*nondiff_args, primals, tangents) -> (out, out_dot)`
        (tuples of the differentiable arguments and their tangents); the reverse rule follows from it."""
        from bytegrad.rules import frule, rrule

        self.jvp = jvp
        for target in (self, self.ruled):
            frule(target, override=True)(self._frule)
            rrule(target, override=True)(self._rrule)

    def _split(self, args: tuple) -> tuple[tuple, list[int]]:
        return tuple(args[p] for p in self.nondiff_argnums), [p for p in range(len(args)) if p not in self.nondiff_argnums]

    def _frule(self, args_dot: tuple, *args: Any) -> tuple[Any, Any]:
        assert self.jvp is not None
        nondiff, diff = self._split(args)
        tangents = tuple(_zero_if_none(args_dot[p] if p < len(args_dot) else None, args[p]) for p in diff)
        return self.jvp(*nondiff, tuple(args[p] for p in diff), tangents)

    def _rrule(self, *args: Any) -> tuple[Any, Callable[[Any], tuple]]:
        from bytegrad.rules.registry import rrule_via_ad

        assert self.jvp is not None
        jvp_rule = self.jvp
        nondiff, diff = self._split(args)
        primals = tuple(args[p] for p in diff)
        out = self.fun(*args)

        def tangent_out(*tangents: Any) -> Any:
            return jvp_rule(*nondiff, primals, tangents)[1]

        def pullback(out_bar: Any) -> tuple:
            zeros = tuple(_zero_if_none(None, x) for x in primals)
            _, back = rrule_via_ad(tangent_out, *zeros)
            return _placed(len(args), diff, back(out_bar))

        return out, pullback

    def __repr__(self) -> str:
        return f"<bytegrad.custom_jvp of {fn_name(self.fun)!r}>"


def _placed(n: int, positions: Sequence[int], cotangents: Sequence[Any]) -> tuple:
    """One cotangent per argument of `n`: those of `positions` from `cotangents`, None for the others."""
    full: list[Any] = [None] * n
    for p, ct in zip(positions, cotangents):
        full[p] = ct
    return tuple(full)


def _zero_if_none(tangent: Any, primal: Any) -> Any:
    if tangent is not None:
        return tangent
    if isinstance(primal, np.ndarray):
        return np.zeros_like(primal, dtype=primal.dtype if primal.dtype.kind in "fc" else float)
    return type(primal)(0) if isinstance(primal, (float, complex, np.inexact)) else 0.0
