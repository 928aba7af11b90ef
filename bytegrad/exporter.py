"""`bytegrad.export`: a function's gradient for one signature, as a standalone NumPy module.

The module is the compiled program (docs/compiled.md) that bytegrad captures for the example
arguments, written out by compiled/export.py without bytegrad: it imports NumPy and `math` only,
and defines `value_and_grad(...)`, with the parameters of the function, meaning what
`bytegrad.value_and_grad(fn, wrt=wrt)` means for calls of the example's signature. Any other call
raises ValueError. The command line: `bytegrad export module:function --example EXPR ... -o FILE`.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Any

from bytegrad import _lazy_tiers
from bytegrad.api import Differentiated, differentiate
from bytegrad.errors import DifferentiationError, SourceLoc

__all__ = ["ExportError", "export"]


class ExportError(DifferentiationError):
    """The function's gradient for these arguments cannot be written as a standalone module."""


def export(fn: Any, *example_args: Any, wrt: Any = 0, **example_kwargs: Any) -> str:
    """The source of a module that computes `fn`'s value and gradient without bytegrad.

    The module imports NumPy and `math` only and defines `value_and_grad(*args, **kwargs)` (with
    the parameter names of `fn`), which returns what `bytegrad.value_and_grad(fn, wrt=wrt)` returns
    for calls of the example's signature: the same types, shapes and dtypes of the arrays, the same
    ints, strings and flags, the same container layout. Another call raises `ValueError` naming what
    differs, and so does a call in which a decision the function takes on data (a branch, a mask)
    comes out otherwise than on the example: the module never gives a wrong result. The globals,
    module attributes and functions `fn` reads are fixed as of the export.

    Parameters
    ----------
    fn : callable or Differentiated
        A plain Python function (or one decorated with `differentiate`, whose `wrt` is then used).
    *example_args, **example_kwargs : Any
        Example arguments; keyword arguments are bound to `fn`'s parameters by name.
    wrt : int, str or tuple of them, default 0
        The argument(s) to differentiate.

    Returns
    -------
    str
        The module's source, formatted with `ruff format` when ruff is installed.

    Raises
    ------
    ExportError
        The signature stays on bytegrad's general path (the message says why, as
        `stats()["compiled"]["not_compiled"]` does), or the program calls a rule that has no form
        written without bytegrad.
    """
    from bytegrad.compiled.export import ExportRefused, module_source
    from bytegrad.compiled.source import Program

    fn = _lazy_tiers.resolved(fn)  # (a `differentiate` made before the general path loaded: its Differentiated)
    d = fn if isinstance(fn, Differentiated) else differentiate(fn, wrt=wrt)
    code = d._code
    args = _positional(d, code, example_args, example_kwargs)
    loc = SourceLoc(code.co_filename, code.co_firstlineno, code.co_qualname)
    if d._tiers is None:
        raise ExportError(f"{code.co_qualname} cannot be exported: a bound method, partial or callable object "
                          "has no compiled program", loc, "export the plain function")
    reasons, _ = d.eligibility(args)
    if reasons:
        raise ExportError(f"{code.co_qualname} cannot be exported for these arguments: {reasons[0]}", loc,
                          "the signature stays on bytegrad's general path; see docs/compiled.md")
    _, prog = d._capture(args, ("numpy",))
    if not isinstance(prog, Program):
        raise ExportError(f"{code.co_qualname} cannot be exported for these arguments: {prog}", loc,
                          "the signature stays on bytegrad's general path (stats()['compiled']['not_compiled'] "
                          "says the same); see docs/compiled.md")
    if prog.parts is None or prog.pullback:
        raise ExportError(f"{code.co_qualname} cannot be exported: its program is not a NumPy gradient program",
                          loc)
    params = _names(code, len(args))
    try:
        module = getattr(d, "__module__", None) if isinstance(fn, Differentiated) else getattr(fn, "__module__", None)
        source = module_source(prog, code.co_qualname, params, _header(d, code, args, params, module or "?"))
    except ExportRefused as exc:
        raise ExportError(f"{code.co_qualname} cannot be exported: {exc}", loc,
                          "rewrite that operation with one that exports (docs/export.md lists them), or use "
                          "bytegrad itself") from None
    return _formatted(source)



def _positional(d: Any, code: Any, args: tuple, kwargs: dict) -> tuple:
    """The example's arguments, positional: keyword arguments bound to parameters by name."""
    if not kwargs:
        return args
    names = code.co_varnames[:code.co_argcount]
    bound = list(args)
    for name in names[len(args):]:
        if name not in kwargs:
            break
        bound.append(kwargs[name])
    extra = set(kwargs) - set(names[len(args):len(bound)])
    if extra:
        raise ExportError(f"{code.co_qualname} cannot be exported with the keyword argument(s) "
                          f"{sorted(extra)}: only those that fill positional parameters in order are taken")
    return tuple(bound)


def _names(code: Any, n: int) -> list[str]:
    names = list(code.co_varnames[:min(n, code.co_argcount)])
    return names + [f"arg{p}" for p in range(len(names), n)]


def _header(d: Any, code: Any, args: tuple, params: list[str], module: str) -> list[str]:
    import bytegrad

    sig = ", ".join(f"{p}: {_describe(a)}" for p, a in zip(params, args))
    return [f"The value and gradient of {module}.{code.co_qualname} ({os.path.basename(code.co_filename)}, "
            f"line {code.co_firstlineno}),",
            f"exported by bytegrad {bytegrad.__version__} for the signature ({sig}),",
            f"differentiated with respect to {d._wrt!r}.",
            "It needs NumPy only. A call of another signature, or one in which a decision on the data",
            "comes out otherwise than at export, raises ValueError. The globals and functions it read",
            "are fixed as they were at export."]


def _describe(value: Any) -> str:
    import numpy as np

    t = type(value)
    if t is np.ndarray:
        return f"{value.dtype}[{', '.join(map(str, value.shape))}]"
    if t is dict:
        return "{" + ", ".join(f"{k!r}: {_describe(v)}" for k, v in value.items()) + "}"
    if t is tuple or t is list:
        inner = ", ".join(_describe(v) for v in value)
        return f"({inner})" if t is tuple else f"[{inner}]"
    if t in (int, bool, str) or value is None:
        return repr(value)
    return t.__name__


def _ruff() -> str | None:
    here = os.path.join(os.path.dirname(sys.executable), "ruff")
    return here if os.path.exists(here) else shutil.which("ruff")


def _formatted(source: str) -> str:
    """`source` through `ruff format` where ruff is installed (unchanged otherwise)."""
    compile(source, "<exported>", "exec")  # (valid Python, formatted or not)
    ruff = _ruff()
    if ruff is None:
        return source
    try:
        done = subprocess.run([ruff, "format", "--isolated", "-"], input=source,
                              capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return source
    return done.stdout if done.returncode == 0 and done.stdout else source
