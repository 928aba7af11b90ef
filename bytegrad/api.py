"""The public API: `differentiate`, `grad`, `value_and_grad`, `vjp`, `jvp`, `jacobian`, `hessian`, `hvp`.

It wires the transform to the runtime: rewrites the user's function for the differentiated
arguments, runs it with a tape, sweeps the tape backwards and mirrors the gradient.
"""
from __future__ import annotations

import functools
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

from bytegrad.errors import (
    WrtError,
)
from bytegrad.rules import pytrees
from bytegrad.runtime import pytree
from bytegrad.runtime.tape import Tape, tls

from bytegrad._api_support import Nested, split_aux
from bytegrad._differentiated import Differentiated, Wrt
from bytegrad._front import (
    GradFunction as GradFunction, differentiate as differentiate, grad as grad, value_and_grad as value_and_grad,
    wrt_or_argnums,
)

__all__ = ["differentiate", "grad", "value_and_grad", "vjp", "jvp", "jacobian", "hessian", "hvp", "Differentiated",
           "GradFunction", "JacobianFunction"]

_ndarray = np.ndarray
_float64 = np.float64
#: functions of these modules called inside differentiated code run as they are: they find the tape
_perf = time.perf_counter


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




# ---- forward mode, Jacobians and Hessians ---------------------------------------------------------


def jvp(fn: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any], has_aux: bool = False) -> Any:
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
    has_aux : bool, default False
        `fn` returns `(value, aux)`: only `value` is differentiated, and the result is
        `(out, out_dot, aux)`, as `jax.jvp`.

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
    if has_aux:
        value_only, box = split_aux(fn)
        return (*jvp(value_only, primals, tangents), box[-1])
    d = Differentiated(fn)
    if len(tangents) != len(primals):
        raise WrtError(f"jvp got {len(primals)} primals but {len(tangents)} tangents.", d._loc(),
                       "pass one tangent per positional argument (None for arguments with no tangent).")
    out, tape, specs, nested = d._forward(tuple(primals), {}, tuple(range(len(primals))), strict=False)
    seeds = seed_tangents(specs, tangents, tape, d)
    start = nested.start if nested is not None else 0
    from bytegrad.runtime.forward import push_forward

    dots = push_forward(tape, seeds, start, nested.recorder() if nested is not None else None)
    return out, tangent_out(out, dots, tape.ids, start, nested)


def seed_tangents(specs: list, tangents: Sequence[Any], tape: Tape, d: Differentiated) -> dict[int, Any]:
    """The tangent of each tape leaf that `specs` (the arguments' leaf specs) and `tangents` give."""
    seeds: dict[int, Any] = {}
    for k, (spec, tangent) in enumerate(zip(specs, tangents)):
        _seed(spec, tangent, seeds, tape, d, k)
    return seeds


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


def tangent_out(value: Any, dots: list[Any], ids: dict[int, int], start: int, nested: Optional[Nested]) -> Any:
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
        return pytrees.unflatten(node, aux, [tangent_out(v, dots, ids, start, nested) for v in children])
    if isinstance(value, dict):
        return type(value)((k, tangent_out(v, dots, ids, start, nested)) for k, v in value.items())
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return t(*[tangent_out(v, dots, ids, start, nested) for v in value])
    if isinstance(value, (list, tuple)):
        return t(tangent_out(v, dots, ids, start, nested) for v in value)
    return None


_MODES = ("auto", "rev", "fwd")


class JacobianFunction:
    """What `jacobian` and `hessian` return: call it with `fn`'s arguments.

    `stats()` reports on the differentiated function, as `GradFunction.stats` does;
    `differentiated` is the `Differentiated` it takes the Jacobian of.
    """

    def __init__(self, d: Differentiated, mode: str = "auto", grad_like: bool = False,
                 stats_of: Optional[Differentiated] = None) -> None:
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
        self.differentiated = d
        self.mode = mode
        self._grad_like = grad_like  # the inner derivative of a hessian: a scalar output's blocks are gradients
        self._stats_of = stats_of    # a hessian's: the user's function, not the inner Jacobian
        functools.update_wrapper(self, (stats_of or d).fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _jacobian_at(self, args, kwargs)

    def stats(self) -> dict[str, Any]:
        """The differentiated function's `Differentiated.stats()`."""
        return (self._stats_of or self.differentiated).stats()

    def __reduce__(self) -> tuple[Any, ...]:
        return JacobianFunction, (self.differentiated, self.mode, self._grad_like, self._stats_of)

    def __repr__(self) -> str:
        d = self._stats_of or self.differentiated
        what = "hessian" if self._stats_of is not None else "jacobian"
        return f"<bytegrad.{what} of {getattr(d.fn, '__qualname__', d.fn)!r} wrt={d._wrt_spec!r} mode={self.mode!r}>"


def _jacobian_at(j: JacobianFunction, args: tuple, kwargs: dict) -> Any:
    # (a function of this module, so that rewritten code calling a JacobianFunction runs it as it is)
    from bytegrad import _jacobian

    d = j._stats_of or j.differentiated
    if d._first_s is None and getattr(tls, "tape", None) is None:  # stats()["first_gradient_s"]
        t0 = _perf()
        result = _jacobian.jacobian_of(j.differentiated, args, kwargs, j.mode, j._grad_like)
        d._first_s = _perf() - t0
        return result
    return _jacobian.jacobian_of(j.differentiated, args, kwargs, j.mode, j._grad_like)


def jacobian(fn: Callable[..., Any], wrt: Optional[Wrt] = None, mode: str = "auto", *,
             argnums: Optional[Wrt] = None) -> JacobianFunction:
    """The Jacobian function of `fn` with respect to argument(s) `wrt`.

    The function runs once; the Jacobian is assembled from sweeps of its tape. Arguments and
    outputs may be trees (dicts, lists, tuples, dataclasses, registered pytrees): the Jacobian
    then has JAX's layout, the output's structure outside and the argument's inside.

    Parameters
    ----------
    fn : callable
        A Python function returning a float array or a float, or a tree of them.
    wrt : int, str or tuple of them, default 0
        The argument(s) to differentiate with respect to, by position or parameter name (float
        arrays, floats, or trees of them); a tuple gives a tuple of Jacobians.
    mode : {"auto", "rev", "fwd"}, default "auto"
        "rev": one reverse sweep per output element; "fwd": one tangent sweep per input element;
        "auto": "fwd" when the inputs have fewer elements than the output, else "rev".
    argnums : int or tuple of int, optional
        JAX's name for `wrt`: give one or the other.

    Returns
    -------
    JacobianFunction
        Takes `fn`'s arguments and returns the Jacobian, of shape `out.shape + x.shape` for an
        output of shape `out.shape` and an argument of shape `x.shape` (as `jax.jacobian`). For
        trees, the output's tree holding, at each leaf `y`, the argument's tree (a tuple of them
        when `wrt` is a tuple) of blocks shaped `y.shape + x.shape`. Its `stats()` reports on `fn`.

    Examples
    --------
    >>> import numpy as np
    >>> J = jacobian(lambda x: np.sin(x) * x[0])(np.array([1.0, 2.0]))
    >>> J.shape
    (2, 2)
    >>> J = jacobian(lambda p: {"y": p["w"] * 2.0, "s": np.sum(p["w"])})({"w": np.ones(3)})
    >>> J["y"]["w"].shape, J["s"]["w"].shape
    ((3, 3), (3,))
    """
    return JacobianFunction(Differentiated(fn, wrt_or_argnums("jacobian", wrt, argnums)), mode)


def hessian(fn: Callable[..., Any], wrt: Optional[Wrt] = None, mode: str = "fwd", *,
            argnums: Optional[Wrt] = None) -> JacobianFunction:
    """The Hessian function of `fn` with respect to argument(s) `wrt`: the Jacobian of its gradient.

    The gradient is computed by a nested reverse pass recorded on the outer tape, and
    differentiated again. For a function whose output is not a scalar, the inner derivative is
    its Jacobian, as in JAX (`jacobian(jacobian(fn))`).

    Parameters
    ----------
    fn : callable
        A Python function, usually returning a scalar (an array of one element counts as one, as
        in `grad`).
    wrt : int, str or tuple of them, default 0
        The argument(s) to differentiate with respect to; a tuple gives the blocks
        `((H00, H01), (H10, H11))`, and an argument that is a tree (a dict of arrays) gives a tree
        of trees (`{k: {k2: block}}`), as `jax.hessian` does.
    mode : {"fwd", "rev"}, default "fwd"
        "fwd" pushes one tangent per input element through the gradient (forward-over-reverse);
        "rev" sweeps it backwards once per element (reverse-over-reverse).
    argnums : int or tuple of int, optional
        JAX's name for `wrt`: give one or the other.

    Returns
    -------
    JacobianFunction
        Takes `fn`'s arguments and returns the Hessian, of shape `x.shape + x.shape` for a scalar
        output (`out.shape + x.shape + x.shape` otherwise). Its `stats()` reports on `fn`.

    Examples
    --------
    >>> import numpy as np
    >>> A = np.array([[2.0, 1.0], [1.0, 3.0]])
    >>> H = hessian(lambda x: 0.5 * x @ A @ x)(np.array([1.0, -1.0]))
    >>> bool(np.allclose(H, A))
    True
    >>> (Hxx, Hxy), (Hyx, Hyy) = hessian(lambda x, y: x * x * y, wrt=(0, 1))(2.0, 3.0)
    >>> float(Hxx), float(Hxy), float(Hyx), float(Hyy)
    (6.0, 4.0, 4.0, 0.0)
    """
    inner = JacobianFunction(Differentiated(fn, wrt_or_argnums("hessian", wrt, argnums)), "rev", grad_like=True)
    d = inner.differentiated
    outer = Differentiated(inner, d._wrt if d._wrt_tuple else d._wrt[0])
    return JacobianFunction(outer, mode, stats_of=d)


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
        The vector `v`: one entry per differentiated primal, shaped like it. Without `wrt`, one
        entry per primal, None for a primal that is not differentiated (an int, labels, data).
    wrt : int, str or tuple of them, optional
        The primals to differentiate with respect to, by position or parameter name, as in `grad`;
        the others (ints, labels, data) are passed as they are. Default: all of them whose tangent
        is not None.

    Returns
    -------
    Any
        With one primal, `H @ v` shaped like it. With several, a tuple (the rows of the block
        Hessian applied to all the tangents): with `wrt`, one entry per differentiated primal;
        without, one per primal, None where the tangent was None.

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
        given = tuple(k for k, t in enumerate(tangents) if t is not None)
        if len(given) == len(primals) or len(tangents) != len(primals):  # (jvp names the mismatch)
            gradient = Differentiated(fn, tuple(range(len(primals)))).grad
            _, hv = jvp(gradient, primals, tangents)
            return hv[0] if len(primals) == 1 else hv
        if not given:  # nothing differentiated
            return None if len(primals) == 1 else (None,) * len(primals)
        rows = iter(hvp(fn, primals, [tangents[k] for k in given], wrt=given))
        return tuple(next(rows) if t is not None else None for t in tangents)
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
