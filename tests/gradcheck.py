"""Finite-difference checks of bytegrad gradients over pytrees of arrays and Python floats.

`check_grad(f, args, wrt)` compares bytegrad's gradient of a scalar function with central
differences computed in float64, leaf by leaf, and checks that the gradient mirrors the
differentiated argument (same container types, keys, shapes and dtypes) and that the caller's
arguments are left unchanged. The tree helpers here are reusable by any test.

`agree_with_general(fn, calls, tier)` compares a compiled tier with tier="general" call by call
(values, gradients, exceptions, effects): the one helper the compiled tier's tests share.
"""
from __future__ import annotations

import copy
import dataclasses
import inspect
import math
from typing import Any, Callable, Iterator, Optional, Sequence, Union

import numpy as np

__all__ = [
    "check_grad", "check_jvp", "check_grad_and_jvp", "numerical_grad", "bytegrad_grad", "assert_mirrors", "assert_trees_equal",
    "assert_trees_close", "tree_paths", "tree_replace", "tree_map_arrays", "is_diff_leaf",
    "resolve_wrt", "scalar_value", "format_path",
    "agree_with_general", "assert_same_call",
]

Wrt = Union[int, str, Sequence[Union[int, str]]]
Path = tuple[Any, ...]

_FLOAT_KINDS = ("f",)


# ---- pytrees ----------------------------------------------------------------------------------


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _is_dataclass_instance(x: Any) -> bool:
    return dataclasses.is_dataclass(x) and not isinstance(x, type)


def _children(x: Any) -> Optional[list[tuple[Any, Any]]]:
    """The (key, child) pairs of a container, or None for a leaf."""
    if isinstance(x, dict):
        return [(k, x[k]) for k in x]
    if _is_namedtuple(x):
        return [(f, getattr(x, f)) for f in x._fields]
    if isinstance(x, (list, tuple)):
        return list(enumerate(x))
    if _is_dataclass_instance(x):
        return [(f.name, getattr(x, f.name)) for f in dataclasses.fields(x)]
    return None


def _rebuild(x: Any, values: list[Any]) -> Any:
    """A container like `x` holding `values` (in the order `_children` gives)."""
    if isinstance(x, dict):
        out = copy.copy(x)
        out.clear()
        out.update(zip(list(x.keys()), values))
        return out
    if _is_namedtuple(x):
        return type(x)(*values)
    if isinstance(x, tuple):
        return tuple(values)
    if isinstance(x, list):
        return list(values)
    if _is_dataclass_instance(x):
        out = copy.copy(x)
        for f, v in zip(dataclasses.fields(x), values):
            object.__setattr__(out, f.name, v)  # works for frozen dataclasses too
        return out
    raise TypeError(f"not a container: {type(x).__name__}")


def tree_paths(x: Any, prefix: Path = ()) -> Iterator[tuple[Path, Any]]:
    """Every leaf of `x` with its path (a tuple of keys, indices and field names)."""
    kids = _children(x)
    if kids is None:
        yield prefix, x
        return
    for k, child in kids:
        yield from tree_paths(child, prefix + (k,))


def _get(x: Any, path: Path) -> Any:
    for k in path:
        x = dict(_children(x))[k]
    return x


def tree_replace(x: Any, path: Path, value: Any) -> Any:
    """A copy of the tree `x` (containers rebuilt along `path` only) with the leaf at `path` set."""
    if not path:
        return value
    kids = _children(x)
    assert kids is not None, f"path {path} goes through a leaf"
    values = [tree_replace(child, path[1:], value) if k == path[0] else child for k, child in kids]
    return _rebuild(x, values)


def tree_map_arrays(fn: Callable[[np.ndarray], Any], x: Any) -> Any:
    """Apply `fn` to every ndarray leaf of `x`, rebuilding the containers."""
    kids = _children(x)
    if kids is None:
        return fn(x) if isinstance(x, np.ndarray) else x
    return _rebuild(x, [tree_map_arrays(fn, c) for _, c in kids])


def format_path(path: Path) -> str:
    return "".join(f".{k}" if isinstance(k, str) and not k.isdigit() else f"[{k!r}]" for k in path) or "<root>"


def is_diff_leaf(x: Any) -> bool:
    """A leaf bytegrad differentiates: a real floating ndarray, a Python float, a NumPy float scalar."""
    if isinstance(x, np.ndarray):
        return x.dtype.kind in _FLOAT_KINDS
    if isinstance(x, bool):
        return False
    return isinstance(x, (float, np.floating))


# ---- equality of trees --------------------------------------------------------------------------


def assert_trees_equal(a: Any, b: Any, path: Path = (), *, what: str = "value") -> None:
    """Exact equality of two trees: same types, same shapes and dtypes, bitwise-equal values (nan==nan)."""
    where = f"{what} at {format_path(path)}"
    assert type(a) is type(b), f"{where}: type {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, np.ndarray):
        assert a.shape == b.shape, f"{where}: shape {a.shape} != {b.shape}"
        assert a.dtype == b.dtype, f"{where}: dtype {a.dtype} != {b.dtype}"
        assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), f"{where}: values differ\n{a}\n!=\n{b}"
        return
    ka, kb = _children(a), _children(b)
    if ka is not None:
        assert kb is not None
        assert [k for k, _ in ka] == [k for k, _ in kb], f"{where}: keys {[k for k, _ in ka]} != {[k for k, _ in kb]}"
        for (k, ca), (_, cb) in zip(ka, kb):
            assert_trees_equal(ca, cb, path + (k,), what=what)
        return
    if isinstance(a, (float, np.floating)) and math.isnan(a) and math.isnan(b):
        return
    if hasattr(a, "__dict__") and not callable(a) and type(a).__eq__ is object.__eq__:
        assert_trees_equal(vars(a), vars(b), path, what=what)
        return
    assert a == b, f"{where}: {a!r} != {b!r}"


def assert_trees_close(a: Any, b: Any, *, rtol: float, atol: float, path: Path = (), what: str = "value") -> None:
    """Numerical closeness of two trees of the same structure (types of containers must match)."""
    where = f"{what} at {format_path(path)}"
    ka, kb = _children(a), _children(b)
    if ka is not None or kb is not None:
        assert type(a) is type(b), f"{where}: type {type(a).__name__} != {type(b).__name__}"
        assert [k for k, _ in ka] == [k for k, _ in kb], f"{where}: keys differ"
        for (k, ca), (_, cb) in zip(ka, kb):
            assert_trees_close(ca, cb, rtol=rtol, atol=atol, path=path + (k,), what=what)
        return
    if a is None or b is None:
        assert a is None and b is None, f"{where}: {a!r} vs {b!r}"
        return
    if isinstance(a, (str, bytes)):
        assert a == b, f"{where}: {a!r} != {b!r}"
        return
    if hasattr(a, "__dict__") and not callable(a) and not isinstance(a, (np.ndarray, np.generic)):
        assert type(a) is type(b), f"{where}: type {type(a).__name__} != {type(b).__name__}"
        assert_trees_close(vars(a), vars(b), rtol=rtol, atol=atol, path=path, what=what)  # (a registered pytree)
        return
    assert np.shape(a) == np.shape(b), f"{where}: shape {np.shape(a)} != {np.shape(b)}"
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64),
                               rtol=rtol, atol=atol, err_msg=where)


# ---- a compiled tier against the general path -------------------------------------------------------


def _outcome(d: Any, args: tuple, exceptions: bool) -> Any:
    if not exceptions:
        return d.value_and_grad(*args)
    try:
        return d.value_and_grad(*args)
    except Exception as exc:  # noqa: BLE001 - the general path's exception is part of the result
        return type(exc).__name__


def assert_same_call(fast: Any, general: Any, args: tuple, general_args: Optional[tuple] = None, *,
                     rtol: float = 1e-12, atol: float = 1e-300, value_atol: Optional[float] = None,
                     exceptions: bool = False, close: Optional[Callable[[Any, Any], None]] = None,
                     effects: Optional[Callable[[tuple], Any]] = None, what: str = "call") -> Any:
    """One call of `fast` (a function differentiated under a compiled tier) on `args` and of `general`
    (the same under tier="general") on `general_args` (default `args`), `fast` first: the same
    `(value, gradient)` to `rtol`/`atol` (the value to `value_atol` where given), or as
    `close(got, want)` says (it raises AssertionError); with `exceptions`, an exception of either
    is part of the result, compared by its type's name; `effects(args)`: what the call changed (in
    its arguments, or anywhere), equal after each. Returns `fast`'s result."""
    got = _outcome(fast, args, exceptions)
    mine = args if general_args is None else general_args
    want = _outcome(general, mine, exceptions)
    if isinstance(got, str) or isinstance(want, str):
        assert got == want, f"{what}: {got} != general's {want}"
    elif close is not None:
        close(got, want)
    elif value_atol is None:
        assert_trees_close(got, want, rtol=rtol, atol=atol, what=what)
    else:
        assert_trees_close(got[0], want[0], rtol=rtol, atol=value_atol, what=f"{what}: value")
        assert_trees_close(got[1], want[1], rtol=rtol, atol=atol, what=f"{what}: gradient")
    if effects is not None:
        assert_trees_equal(effects(args), effects(mine), what=f"{what}: effects")
    return got


def agree_with_general(fn: Callable[..., Any], calls: Any, tier: str, *, wrt: Wrt = 0,
                       between: Optional[Callable[[int], Any]] = None, **same: Any) -> dict:
    """`fn` differentiated under `tier` and under tier="general", compared call by call with
    `assert_same_call` (`same`: its keywords) on `calls`, argument tuples; `between(k)` runs before
    call k (it changes what the function reads). With `effects`, `calls` is a function giving the
    calls, called once per tier so that each writes into arguments of its own. Returns the tier's
    `stats()["compiled"]`."""
    import bytegrad

    fast = bytegrad.differentiate(fn, wrt=wrt, tier=tier)
    general = bytegrad.differentiate(fn, wrt=wrt, tier="general")
    fast_calls, general_calls = (calls(), calls()) if callable(calls) else (calls, calls)
    for k, (args, general_args) in enumerate(zip(fast_calls, general_calls, strict=True)):
        if between is not None:
            between(k)
        assert_same_call(fast, general, args, general_args, what=f"call {k}", **same)
    return fast.stats()["compiled"]


# ---- gradients ------------------------------------------------------------------------------------


def assert_mirrors(x_bar: Any, x: Any, path: Path = ()) -> None:
    """The gradient `x_bar` has the structure, types, shapes and dtypes of the argument `x`.

    ndarray -> ndarray of the same shape and dtype; Python float -> float; NumPy float scalar ->
    a float of the same dtype; containers -> the same type with the same keys/fields; int, bool,
    str, None (and other non-differentiable leaves) -> None.
    """
    where = f"gradient at {format_path(path)}"
    kids = _children(x)
    if kids is not None:
        assert type(x_bar) is type(x), (
            f"{where}: expected a {type(x).__name__} mirroring the argument, got {type(x_bar).__name__}: {x_bar!r}")
        bar_kids = _children(x_bar)
        assert [k for k, _ in bar_kids] == [k for k, _ in kids], (
            f"{where}: keys/fields {[k for k, _ in bar_kids]} != argument's {[k for k, _ in kids]}")
        for (k, c), (_, cb) in zip(kids, bar_kids):
            assert_mirrors(cb, c, path + (k,))
        return
    if isinstance(x, np.ndarray) and is_diff_leaf(x):
        assert type(x_bar) is np.ndarray, f"{where}: expected an ndarray, got {type(x_bar).__name__}: {x_bar!r}"
        assert x_bar.shape == x.shape, f"{where}: shape {x_bar.shape} != argument's {x.shape}"
        assert x_bar.dtype == x.dtype, f"{where}: dtype {x_bar.dtype} != argument's {x.dtype}"
        return
    if type(x) is float:
        assert type(x_bar) is float, f"{where}: expected a Python float, got {type(x_bar).__name__}: {x_bar!r}"
        return
    if isinstance(x, np.floating):
        assert isinstance(x_bar, (float, np.floating)) and np.asarray(x_bar).dtype == x.dtype, (
            f"{where}: expected a {x.dtype} scalar, got {type(x_bar).__name__}: {x_bar!r}")
        return
    if x is None or isinstance(x, (bool, int, str, bytes)):
        assert x_bar is None, f"{where}: expected None for a {type(x).__name__} leaf, got {x_bar!r}"
        return
    # Other leaves (integer arrays, objects): no gradient, or an all-zero one.
    assert x_bar is None or not np.any(np.asarray(x_bar)), f"{where}: non-zero gradient {x_bar!r} for {type(x).__name__}"


def scalar_value(out: Any) -> float:
    """The output of a scalar function as a Python float; fails for anything non-scalar."""
    assert np.ndim(out) == 0 and not isinstance(out, (tuple, list, dict)), (
        f"the function must return a scalar, got {type(out).__name__} of shape {np.shape(out)}")
    return float(np.real(out))


def resolve_wrt(fn: Callable[..., Any], args: tuple, kwargs: dict, wrt: Wrt) -> list[tuple[str, Any]]:
    """Each `wrt` entry as ("arg", position) or ("kw", name), for these args/kwargs."""
    entries = list(wrt) if isinstance(wrt, (tuple, list)) else [wrt]
    out: list[tuple[str, Any]] = []
    params: Optional[list[inspect.Parameter]] = None
    for w in entries:
        if isinstance(w, int):
            assert 0 <= w < len(args), f"wrt={w} but only {len(args)} positional arguments"
            out.append(("arg", w))
            continue
        if params is None:
            params = list(inspect.signature(getattr(fn, "__wrapped__", fn)).parameters.values())
        for i, p in enumerate(params):
            if p.name == w:
                positional = p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                if positional and i < len(args):
                    out.append(("arg", i))
                elif w in kwargs:
                    out.append(("kw", w))
                else:
                    raise AssertionError(f"wrt={w!r}: that argument was not passed")
                break
        else:
            raise AssertionError(f"wrt={w!r} names no parameter of {fn}")
    return out


def _get_arg(args: tuple, kwargs: dict, loc: tuple[str, Any]) -> Any:
    return args[loc[1]] if loc[0] == "arg" else kwargs[loc[1]]


def _with_arg(args: tuple, kwargs: dict, loc: tuple[str, Any], value: Any) -> tuple[tuple, dict]:
    if loc[0] == "arg":
        args = args[: loc[1]] + (value,) + args[loc[1] + 1:]
    else:
        kwargs = {**kwargs, loc[1]: value}
    return args, kwargs


def _upcast(x: Any) -> Any:
    return tree_map_arrays(lambda a: a.astype(np.float64) if a.dtype.kind == "f" else a, x)


def numerical_grad(
    f: Callable[..., Any], args: Sequence[Any], wrt: Wrt = 0, *, kwargs: Optional[dict] = None,
    eps: float = 1e-6, max_elements: Optional[int] = 200, seed: int = 0, upcast: bool = True,
) -> Any:
    """The central-difference gradient of scalar `f` w.r.t. `wrt`, mirroring the argument(s).

    Array leaves are perturbed element by element in float64 (float32 arguments are upcast when
    `upcast`); leaves with more than `max_elements` elements are sampled (unsampled entries are nan).
    Non-differentiable leaves get None. A tuple `wrt` gives a tuple of gradients.
    """
    args, kwargs = tuple(args), dict(kwargs or {})
    rng = np.random.default_rng(seed)
    locs = resolve_wrt(f, args, kwargs, wrt)
    base_args, base_kwargs = (_upcast(args), _upcast(kwargs)) if upcast else (args, kwargs)

    def evaluate(a: tuple, k: dict) -> float:
        a, k = copy.deepcopy((a, k))
        return scalar_value(f(*a, **k))

    results = []
    for loc in locs:
        arg = _get_arg(base_args, base_kwargs, loc)
        grad_tree = arg
        for path, leaf in tree_paths(arg):
            if not is_diff_leaf(leaf):
                grad_tree = tree_replace(grad_tree, path, None)
                continue
            if isinstance(leaf, np.ndarray):
                leaf64 = leaf.astype(np.float64)
                num = np.full(leaf.shape, np.nan)
                flat_idx = np.arange(leaf.size)
                if max_elements is not None and leaf.size > max_elements:
                    flat_idx = rng.choice(leaf.size, size=max_elements, replace=False)
                for fi in flat_idx:
                    idx = np.unravel_index(fi, leaf.shape)
                    vals = []
                    for sign in (1.0, -1.0):
                        pert = leaf64.copy()
                        pert[idx] += sign * eps
                        new_arg = tree_replace(arg, path, pert)
                        vals.append(evaluate(*_with_arg(base_args, base_kwargs, loc, new_arg)))
                    num[idx] = (vals[0] - vals[1]) / (2 * eps)
                grad_tree = tree_replace(grad_tree, path, num)
            else:
                vals = []
                for sign in (1.0, -1.0):
                    value = float(leaf) + sign * eps
                    value = value if type(leaf) is float else (np.float64(value) if upcast else type(leaf)(value))
                    new_arg = tree_replace(arg, path, value)
                    vals.append(evaluate(*_with_arg(base_args, base_kwargs, loc, new_arg)))
                grad_tree = tree_replace(grad_tree, path, (vals[0] - vals[1]) / (2 * eps))
        results.append(grad_tree)
    return tuple(results) if isinstance(wrt, (tuple, list)) else results[0]


def bytegrad_grad(f: Callable[..., Any], args: Sequence[Any], wrt: Wrt = 0, *, kwargs: Optional[dict] = None) -> Any:
    """bytegrad's gradient: `f.grad` when `f` is already decorated, else `bytegrad.grad(f, wrt)`."""
    import bytegrad

    kwargs = dict(kwargs or {})
    if hasattr(f, "grad") and hasattr(f, "value_and_grad"):
        return f.grad(*args, **kwargs)
    return bytegrad.grad(f, wrt=wrt)(*args, **kwargs)


def _compare_leaves(analytic: Any, numeric: Any, arg: Any, *, rtol: float, atol: float, label: str) -> None:
    for path, leaf in tree_paths(arg):
        if not is_diff_leaf(leaf):
            continue
        a = np.asarray(_get(analytic, path), dtype=np.float64)
        n = np.asarray(_get(numeric, path), dtype=np.float64)
        sel = ~np.isnan(n)
        where = f"{label}{format_path(path)}"
        assert np.all(np.isfinite(a)), f"{where}: non-finite gradient\n{a}"
        np.testing.assert_allclose(
            a[sel], n[sel], rtol=rtol, atol=atol,
            err_msg=f"{where}: bytegrad gradient (actual) != central differences (desired)\n"
                    f"bytegrad:\n{a}\nnumerical:\n{n}")


def check_grad(
    f: Callable[..., Any], args: Sequence[Any], wrt: Wrt = 0, *, kwargs: Optional[dict] = None,
    eps: float = 1e-6, rtol: float = 1e-5, atol: float = 1e-6, seed: int = 0,
    max_elements: Optional[int] = 200,
) -> Any:
    """Check bytegrad's gradient of scalar `f` against central differences; return bytegrad's gradient.

    `f` is a plain function (differentiated with `bytegrad.grad(f, wrt=wrt)`) or one decorated with
    `bytegrad.differentiate(..., wrt=wrt)` (its `.grad` is used, its plain call gives the values).
    Checks, in order: the caller's arguments are unchanged by the gradient call; the gradient
    mirrors each differentiated argument (`assert_mirrors`); every differentiable leaf agrees with
    float64 central differences to `rtol`/`atol`.
    """
    args, kwargs = tuple(args), dict(kwargs or {})
    before = copy.deepcopy((args, kwargs))
    x_bar = bytegrad_grad(f, args, wrt, kwargs=kwargs)
    assert_trees_equal((args, kwargs), before, what="caller's argument after the gradient call")

    locs = resolve_wrt(f, args, kwargs, wrt)
    many = isinstance(wrt, (tuple, list))
    if many:
        assert type(x_bar) is tuple and len(x_bar) == len(locs), (
            f"wrt={wrt!r}: expected a tuple of {len(locs)} gradients, got {type(x_bar).__name__}: {x_bar!r}")
        bars = list(x_bar)
    else:
        bars = [x_bar]
    numeric = numerical_grad(f, args, wrt, kwargs=kwargs, eps=eps, max_elements=max_elements, seed=seed)
    numerics = list(numeric) if many else [numeric]
    for loc, bar, num in zip(locs, bars, numerics):
        arg = _get_arg(args, kwargs, loc)
        label = f"argument {loc[1]!r}" if loc[0] == "kw" else f"argument {loc[1]}"
        try:
            assert_mirrors(bar, arg)
        except AssertionError as exc:
            raise AssertionError(f"{label}: {exc}") from None
        _compare_leaves(bar, num, arg, rtol=rtol, atol=atol, label=label)
    assert_trees_equal((args, kwargs), before, what="caller's argument after the finite differences")
    return x_bar


def check_jvp(f: Callable[..., Any], x: np.ndarray, x_dot: np.ndarray, *, rtol: float = 1e-6) -> Any:
    """Check `bytegrad.jvp` of scalar `f` at array `x` along `x_dot` against <central differences, x_dot>;
    return bytegrad's tangent."""
    import bytegrad

    _, out_dot = bytegrad.jvp(f, (x,), (x_dot,))
    np.testing.assert_allclose(out_dot, np.sum(numerical_grad(f, [x]) * x_dot), rtol=rtol,
                               err_msg="bytegrad.jvp (actual) != central differences along x_dot (desired)")
    return out_dot


def check_grad_and_jvp(f: Callable[..., Any], x: np.ndarray, x_dot: Optional[np.ndarray] = None) -> None:
    """`check_grad` of scalar `f` at array `x` with tolerances for x's dtype (float64 or float32), and
    for float64 also `check_jvp` along `x_dot` (a fixed direction by default)."""
    if x.dtype == np.float32:
        check_grad(f, [x], rtol=3e-3, atol=3e-3)
        return
    check_grad(f, [x], rtol=1e-5, atol=1e-6)
    if x_dot is None:
        x_dot = np.cos(np.arange(1.0, x.size + 1.0)).reshape(x.shape)  # no zero, no symmetry
    check_jvp(f, x, x_dot)
