"""bytegrad's own functions that steer differentiation: `stop_gradient`, a non-differentiable rule.

Declared with `non_differentiable`, it needs nothing from the runtime: its output is a fresh value
the tape never saw, so no derivative flows back through it in reverse mode, forward mode, or at
any order.
"""
from __future__ import annotations

from typing import Any, TypeVar

import numpy as np

from bytegrad.rules import pytrees
from bytegrad.rules.registry import non_differentiable

__all__ = ["stop_gradient"]

T = TypeVar("T")

_ndarray = np.ndarray


def stop_gradient(x: T) -> T:
    """The value of `x`, through which no derivative flows.

    Parameters
    ----------
    x : array, float, complex, or a dict / list / tuple / namedtuple / dataclass / registered pytree of them
        The value to treat as a constant. Ints, bools, strings and None pass through.

    Returns
    -------
    same type as `x`
        Equal to `x`. A float or complex array comes back as a read-only view of `x` (copy it with
        `np.array(...)` to write into it); a float is a new float with the same value; containers
        are rebuilt around the detached leaves.

    Raises
    ------
    TypeError
        For an instance of a user class that is not a dataclass, a namedtuple or registered with
        `bytegrad.register_pytree`: bytegrad cannot tell which of its attributes to detach.

    Notes
    -----
    It works in reverse mode, in forward mode (`bytegrad.jvp`: its output's tangent is zero) and
    at any order (grad of grad, `hvp`, `hessian`, `jacobian`): it is declared a non-differentiable
    function, so the tape never links its output to its input.

    Examples
    --------
    >>> import bytegrad
    >>> bytegrad.grad(lambda x: x * stop_gradient(x))(3.0)  # d/dx of x * c, with c = x
    3.0
    >>> bytegrad.jvp(lambda x: x ** 2 + stop_gradient(x ** 2), (2.0,), (1.0,))
    (8.0, 4.0)
    """
    return _detach(x)


def _detach(x: Any) -> Any:
    t = type(x)
    if t is _ndarray or isinstance(x, _ndarray):
        if x.dtype.kind not in "fc":
            return x
        out = x.view()
        out.flags.writeable = False
        return out
    if t is float or t is complex or isinstance(x, (np.inexact, float, complex)):
        if isinstance(x, np.generic):
            return x.copy()
        return complex(x.real, x.imag) if isinstance(x, complex) else float(x) * 1.0
    node = pytrees.node_for(x)
    if node is not None:
        children, aux = pytrees.flatten(node, x)
        return pytrees.unflatten(node, aux, [_detach(v) for v in children])
    if t is list:
        return [_detach(v) for v in x]
    if t is tuple:
        return tuple(_detach(v) for v in x)
    if t is dict:
        return {k: _detach(v) for k, v in x.items()}
    if isinstance(x, tuple):
        items = [_detach(v) for v in x]
        return t(*items) if hasattr(x, "_fields") else t(items)
    if isinstance(x, dict):  # OrderedDict, defaultdict...: a copy with its keys re-assigned
        out = pytrees.shallow_copy(x)
        for k, v in x.items():
            out[k] = _detach(v)
        return out
    if isinstance(x, list):
        out = pytrees.shallow_copy(x)
        out[:] = [_detach(v) for v in x]
        return out
    if pytrees.dataclass_instance(x):
        out = pytrees.shallow_copy(x)
        for name in pytrees.dataclass_fields(x):
            object.__setattr__(out, name, _detach(getattr(x, name)))
        return out
    if pytrees.user_object(x):
        raise TypeError(
            f"stop_gradient cannot take apart an instance of {t.__qualname__}: bytegrad does not know which "
            f"of its attributes hold values to detach. Register the class with bytegrad.register_pytree, "
            f"apply stop_gradient to the arrays themselves, or make the class a dataclass.")
    return x  # ints, bools, strings, None, functions: nothing to detach


stop_gradient.__module__ = "bytegrad"  # its public name, in error messages and docs/rules.md
non_differentiable(stop_gradient)
