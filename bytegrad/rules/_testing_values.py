"""What `check_rule` compares besides derivatives: a rule's value against the function's (arrays,
numbers, containers), and a THROUGH or TRANSPARENT rule's effect against the function's."""
from __future__ import annotations

import copy
import math
import numbers
from typing import Any, Callable, Optional

import numpy as np

__all__ = ["assert_same_value", "check_same_effect", "describe"]


def describe(x: Any) -> str:
    if type(x) is np.ndarray:
        return f"ndarray{x.shape} {x.dtype}"
    if isinstance(x, np.generic):
        return f"{x.dtype} scalar"
    if isinstance(x, (list, tuple)):
        inner = ", ".join(describe(item) for item in x[:4]) + (", ..." if len(x) > 4 else "")
        return f"{type(x).__name__}[{inner}]"
    return type(x).__name__


def assert_same_value(name: str, what: str, out: Any, expected: Any) -> None:
    if type(expected) is np.ndarray or type(out) is np.ndarray:
        if type(out) is not np.ndarray or type(expected) is not np.ndarray:
            raise AssertionError(f"check_rule({name}): {what} is a {type(out).__name__}, expected "
                                 f"a {type(expected).__name__}")
        if out.shape != expected.shape or out.dtype != expected.dtype:
            raise AssertionError(f"check_rule({name}): {what} is {describe(out)}, expected {describe(expected)}")
        if out.dtype.kind in "fc":
            rtol = 10 * float(np.finfo(out.dtype).eps) ** 0.5
            np.testing.assert_allclose(out, expected, rtol=rtol, atol=rtol, equal_nan=True,
                                       err_msg=f"check_rule({name}): {what} differs from the function's value")
        elif not np.array_equal(out, expected):
            raise AssertionError(f"check_rule({name}): {what} differs from the function's value")
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(out, (list, tuple)) or len(out) != len(expected):
            raise AssertionError(f"check_rule({name}): {what} is {describe(out)}, expected {describe(expected)}")
        for i, (a, b) in enumerate(zip(out, expected)):
            assert_same_value(name, f"{what}[{i}]", a, b)
        return
    if isinstance(expected, dict):
        if not isinstance(out, dict) or out.keys() != expected.keys():
            raise AssertionError(f"check_rule({name}): {what} has keys {list(out)}, expected {list(expected)}")
        for k in expected:
            assert_same_value(name, f"{what}[{k!r}]", out[k], expected[k])
        return
    if isinstance(expected, np.generic) and (not isinstance(out, np.generic) or out.dtype != expected.dtype):
        raise AssertionError(f"check_rule({name}): {what} is {describe(out)}, expected {describe(expected)}")
    if isinstance(expected, numbers.Number) and not isinstance(expected, (bool, np.bool_)):
        if not isinstance(out, numbers.Number) or not (
            out == expected or math.isclose(out, expected, rel_tol=1e-7, abs_tol=1e-12)  # type: ignore[arg-type]
            or (out != out and expected != expected)
        ):
            raise AssertionError(f"check_rule({name}): {what} is {out!r}, expected {expected!r}")
        return
    try:
        same = bool(out == expected)
    except Exception:  # noqa: BLE001 - objects without a usable ==: identity is the only check left
        same = out is expected
    if not same and out is not expected:
        raise AssertionError(f"check_rule({name}): {what} is {out!r}, expected {expected!r}")


def check_same_effect(name: str, what: str, fn: Any, impl: Callable[..., Any], args: tuple[Any, ...],
                       kwargs: dict[str, Any]) -> None:
    """`impl` must behave like `fn`: the same result (iterators compared item by item), the same
    effect on its arguments (`list.extend`), or the same type of exception."""

    def run(f: Callable[..., Any]) -> tuple[Any, Any, Optional[BaseException]]:
        try:
            call_args = copy.deepcopy(args)
        except TypeError:  # generators and other uncopyable arguments
            call_args = args
        try:
            result = f(*call_args, **kwargs)
            if hasattr(result, "__next__"):
                result = [item for item in result]
            return result, call_args, None
        except Exception as exc:  # noqa: BLE001 - compared with the other implementation's exception below
            return None, call_args, exc

    expected, expected_args, expected_exc = run(fn)
    out, out_args, exc = run(impl)
    if expected_exc is not None or exc is not None:
        if type(exc) is not type(expected_exc):
            raise AssertionError(f"check_rule({name}): {what} raised {exc!r}, the function raised {expected_exc!r}")
        return
    assert_same_value(name, f"the result of {what}", out, expected)
    assert_same_value(name, f"the arguments after {what}", _data(out_args), _data(expected_args))


def _data(x: Any) -> Any:
    """`x` with everything but data (arrays, numbers, strings, containers) replaced by its type's name."""
    if isinstance(x, (list, tuple)):
        return [_data(item) for item in x]
    if isinstance(x, dict):
        return {k: _data(v) for k, v in x.items()}
    if x is None or isinstance(x, (np.ndarray, np.generic, numbers.Number, str, bytes)):
        return x
    return type(x).__name__
