"""`check_rule`: test a function's differentiation rule against finite differences, the way plugin
authors test theirs (like ChainRulesTestUtils' `test_rrule`).
"""
from __future__ import annotations

import numbers
from typing import Any, Callable, Iterator, Optional

import numpy as np

from bytegrad.errors import qualname
from bytegrad.rules._apply import as_frule, as_rrule
from bytegrad.rules._project import is_float
from bytegrad.rules._testing_gauge import eig_invariants, eigh_invariants, qr_invariants, r_invariants, svd_invariants
from bytegrad.rules._testing_second import flat_cotangent, check_second_order
from bytegrad.rules._testing_values import describe, assert_same_value, check_same_effect
from bytegrad.rules.registry import NO_TANGENT, ZERO, Rule, RuleKind, load_plugins, lookup, rrule_via_ad

__all__ = ["check_rule", "eig_invariants", "eigh_invariants", "qr_invariants", "r_invariants", "svd_invariants"]

_EMPTY = (NO_TANGENT, None, ZERO)


def check_rule(fn: Any, *args: Any, rtol: Optional[float] = None, atol: Optional[float] = None,
               eps: Optional[float] = None, seed: int = 0, through: Optional[Callable[[Any], Any]] = None,
               second_order: bool = False, **kwargs: Any) -> None:
    """Check the rule registered for `fn` at the point `fn(*args, **kwargs)`; raise AssertionError if wrong.

    Checks that the rule's primal equals `fn`'s, that inputs are not modified and the output is a
    fresh object, that the pullback gives one cotangent per positional argument (NO_TANGENT for
    ints, bools, int arrays, axes), with the primal's shape and dtype, and that `<out_bar, J v>`
    from the pullback (and from the forward rule, if any) matches a central finite difference,
    for a random `out_bar` and a random direction `v` over every float argument (also floats
    inside lists). Tolerances follow the lowest float precision involved.

    Parameters
    ----------
    fn : callable
        The function whose rule is checked (a plugin's rules are loaded if it has none yet).
    *args, **kwargs : Any
        The point: `fn(*args, **kwargs)`. Complex inputs are checked with the convention in the
        plugin guide.
    rtol, atol : float, optional
        Tolerances of the finite-difference comparison (defaults from the precision).
    eps : float, optional
        The finite-difference step (default from the precision).
    seed : int, default 0
        Seed of the random cotangent and direction.
    through : callable, optional
        Compare `through(out)` instead of the raw output `out`: for decompositions whose outputs are
        defined up to a sign or phase (eigenvectors, singular vectors, QR), pass gauge-invariant
        functions of them (`eigh_invariants`, `svd_invariants`, `qr_invariants`, `eig_invariants`),
        so that the check does not depend on the signs a LAPACK build picks. `through` is written
        with NumPy operations bytegrad differentiates; the rule's pullback receives its pullback of
        a random cotangent (bytegrad differentiates it: `import bytegrad` first).
    second_order : bool, default False
        Also check the derivative of the pullback (and of the forward rule): nested
        differentiation of `Re <w, pullback_x(out_bar)>` against central differences of it, as
        grad-of-grad, hessians and hvp use the rule (needs `import bytegrad`).

    Raises
    ------
    AssertionError
        With a message saying what is wrong.

    Examples
    --------
    >>> import numpy as np
    >>> check_rule(np.sin, np.linspace(-1.0, 1.0, 5))
    """
    rule = lookup(fn)
    if rule is None and load_plugins():  # a plugin's function: its rules load on the first miss
        rule = lookup(fn)
    name = qualname(fn)
    if rule is None:
        raise AssertionError(f"check_rule({name}): no rule is registered for {name}")
    if rule.kind is RuleKind.NOT_IMPLEMENTED:
        raise AssertionError(f"check_rule({name}): the rule is declared not implemented: {rule.reason}")
    if rule.kind is RuleKind.THROUGH:
        check_same_effect(name, "the Python implementation", fn, rule.impl, args, kwargs)  # type: ignore[arg-type]
        return
    if rule.kind is RuleKind.TRANSPARENT:
        rrule = as_rrule(rule)
        check_same_effect(name, "the rule", fn, lambda *a, **k: rrule(*a, **k)[0], args, kwargs)
        return
    checker = _Checker(name, fn, rule, args, kwargs, rtol, atol, eps, seed, through)
    if checker.run() and second_order:
        check_second_order(checker, _leaves, _call)


# ---- structures: float leaves inside lists, tuples and dicts ---------------------------------------

def _leaves(x: Any) -> list[Any]:
    """The float leaves (float scalars and arrays) of `x`, in order."""
    if is_float(x):
        return [x]
    if isinstance(x, (list, tuple)):
        return [leaf for item in x for leaf in _leaves(item)]
    if isinstance(x, dict):
        return [leaf for item in x.values() for leaf in _leaves(item)]
    return []


def _rebuild(x: Any, new: Iterator[Any]) -> Any:
    """`x` with its float leaves replaced, in order, by the items of `new`."""
    if is_float(x):
        return next(new)
    if isinstance(x, list):
        return [_rebuild(item, new) for item in x]
    if isinstance(x, tuple):
        items = [_rebuild(item, new) for item in x]
        return type(x)(*items) if hasattr(x, "_fields") else tuple(items)
    if isinstance(x, dict):
        return {k: _rebuild(v, new) for k, v in x.items()}
    return x


def _call(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call `fn`; attribute descriptors (`np.ndarray.T`) and (type, method name) keys are supported."""
    if isinstance(fn, tuple) and len(fn) == 2 and isinstance(fn[1], str):
        return getattr(args[0], fn[1])(*args[1:], **kwargs)
    if not callable(fn) and hasattr(fn, "__get__"):  # (getattr: a nested derivative differentiates it too)
        return getattr(args[0], fn.__name__) if hasattr(fn, "__name__") else fn.__get__(args[0], type(args[0]))
    return fn(*args, **kwargs)


def _snapshot(x: Any) -> Any:
    if type(x) is np.ndarray:
        return x.copy()
    if isinstance(x, (list, tuple)):
        return [_snapshot(item) for item in x]
    if isinstance(x, dict):
        return {k: _snapshot(v) for k, v in x.items()}
    return x


def _unchanged(x: Any, snap: Any) -> bool:
    if type(x) is np.ndarray:
        return x.shape == snap.shape and np.array_equal(x, snap, equal_nan=x.dtype.kind in "fc")
    if isinstance(x, (list, tuple)):
        return len(x) == len(snap) and all(_unchanged(a, b) for a, b in zip(x, snap))
    if isinstance(x, dict):
        return x.keys() == snap.keys() and all(_unchanged(x[k], snap[k]) for k in x)
    return True


def _resolve(c: Any) -> Any:
    """Evaluate thunks (zero-argument callables), also inside lists and tuples."""
    if callable(c) and not isinstance(c, (np.ndarray, np.generic)):
        return _resolve(c())
    if isinstance(c, list):
        return [_resolve(item) for item in c]
    if isinstance(c, tuple):
        return tuple(_resolve(item) for item in c)
    return c


def _float_dtypes(x: Any) -> set[Any]:
    return {np.dtype(np.float64) if isinstance(leaf, (float, complex)) and not isinstance(leaf, np.generic)
            else leaf.dtype for leaf in _leaves(x)}


def _is_complex(x: Any) -> bool:
    return isinstance(x, complex) or (isinstance(x, (np.ndarray, np.generic)) and x.dtype.kind == "c")


def _wide(x: Any) -> Any:
    """`x` as float64, or complex128 if complex: the precision sums and comparisons are made in."""
    return np.asarray(x, dtype=np.complex128 if np.iscomplexobj(x) else np.float64)


def _real_pairing(a: Any, b: Any) -> float:
    """<a, b> = Re(sum(a * b)), without conjugation: the pairing of cotangents with tangents (see check_rule)."""
    return float(np.sum(_wide(a) * _wide(b)).real)


def _low_precision(dtype: Any) -> bool:
    return float(np.finfo(dtype).eps) > 1e-10


def _lowest_eps(dtypes: set[Any]) -> float:
    return max((float(np.finfo(d).eps) for d in dtypes), default=float(np.finfo(np.float64).eps))


# ---- the rrule/frule check ------------------------------------------------------------------------

class _Checker:
    def __init__(self, name: str, fn: Any, rule: Rule, args: tuple[Any, ...], kwargs: dict[str, Any],
                 rtol: Optional[float], atol: Optional[float], eps: Optional[float], seed: int,
                 through: Optional[Callable[[Any], Any]] = None) -> None:
        self.name, self.fn, self.rule, self.args, self.kwargs = name, fn, rule, args, kwargs
        self.through = through
        self.user_rtol, self.user_atol, self.user_eps = rtol, atol, eps
        self.rng = np.random.default_rng(seed)

    def fail(self, message: str) -> None:
        sizes = ", ".join(describe(a) for a in self.args)
        raise AssertionError(f"check_rule({self.name}) with arguments ({sizes}): {message}")

    def random_like(self, x: Any) -> Any:
        """A random cotangent/tangent with x's structure, dtypes and shapes; ZERO for non-float parts."""
        leaves = []
        for leaf in _leaves(x):
            r = self.random_direction(leaf)
            if type(leaf) is np.ndarray:
                leaves.append(r.astype(leaf.dtype))
            elif isinstance(leaf, np.generic):
                leaves.append(leaf.dtype.type(r))
            else:
                leaves.append(complex(r) if isinstance(leaf, complex) else float(r))
        if not leaves:
            return ZERO
        return _rebuild(x, iter(leaves))

    def random_direction(self, leaf: Any) -> Any:
        """Standard normal values of leaf's shape (float64), complex (real and imaginary parts) if leaf is."""
        shape = np.shape(leaf)
        r = self.rng.standard_normal(shape)
        if _is_complex(leaf):
            r = r + 1j * self.rng.standard_normal(shape)
        return r

    def run(self) -> bool:
        """The first-order checks; whether there was a derivative to check."""
        args, kwargs, rule = self.args, self.kwargs, self.rule
        expected = _call(self.fn, args, kwargs)
        if rule.kind is RuleKind.RRULE and rule.rrule is None:  # a forward rule only
            if not _leaves(expected):
                return False
            self.set_output(expected)
            self.setup_directions()
            self.check_frule(rule.frule)  # type: ignore[arg-type]
            return True
        snapshot = _snapshot(args)
        out, pullback = as_rrule(rule)(*args, **kwargs)
        assert_same_value(self.name, "the rule's primal output", out, expected)
        out_leaves = _leaves(out)
        if rule.kind is not RuleKind.NONDIFF:
            # (An element of a list argument may come back as is: containers keep their items' identity.)
            arg_arrays = [a for a in args if type(a) is np.ndarray]
            if any(o is a for o in out_leaves for a in arg_arrays):
                self.fail("the rule returned one of its inputs as its output; return a fresh object (x.view())")
        if not out_leaves:  # an int or bool output carries no derivative
            return False
        self.set_output(out)
        self.setup_directions()
        if rule.kind is RuleKind.NONDIFF:
            self.check_flat()
            return False
        cotangents = pullback(self.inner_bar)
        if not _unchanged(args, snapshot):
            self.fail("the rule or its pullback modified an input")
        if not isinstance(cotangents, tuple) or len(cotangents) != len(args):
            got = len(cotangents) if isinstance(cotangents, tuple) else type(cotangents).__name__
            self.fail(f"the pullback must return a tuple with one cotangent per positional argument "
                      f"({len(args)}), got {got}")
        dense = [self.dense_cotangent(i, a, _resolve(c)) for i, (a, c) in enumerate(zip(args, cotangents))]
        self.check_directional(dense, "the pullback")
        if rule.kind is RuleKind.ELEMENTWISE and type(out) is np.ndarray and out.ndim:
            self.check_uniform(pullback)
        frule = as_frule(rule)
        if frule is not None:
            self.check_frule(frule)
        return True

    def set_output(self, out: Any) -> None:
        """The output compared (`through(out)` if given), a random cotangent of it, and the
        cotangent of `out` the rule receives (`through`'s pullback of it)."""
        if self.through is None:
            self.out = out
            self.out_bar = self.inner_bar = self.random_like(out)
            return
        self.out, g_pullback = rrule_via_ad(self.through, out)
        self.out_bar = self.random_like(self.out)
        bars = flat_cotangent(g_pullback(self.out_bar)[0], out, _leaves)
        self.inner_bar = _rebuild(out, iter(np.zeros_like(o) if b is None else b for o, b in zip(_leaves(out), bars)))

    def evaluate(self, args: tuple[Any, ...]) -> Any:
        """The function's output at `args` (mapped by `through`), for finite differences."""
        out = _call(self.fn, args, self.kwargs)
        return out if self.through is None else self.through(out)

    # -- cotangents ------------------------------------------------------------------------------

    def dense_cotangent(self, i: int, x: Any, c: Any) -> list[Any]:
        """Check argument i's cotangent against its primal; return its float leaves as float64 arrays."""
        where = f"argument {i} ({describe(x)})"
        if not _leaves(x):
            if self.rule.kind is RuleKind.ELEMENTWISE:
                return []  # elementwise pullbacks also fill int arguments; the runtime drops those
            if not self.is_empty(c):
                self.fail(f"{where} cannot be differentiated, so its cotangent must be NO_TANGENT "
                          f"(or None), got {describe(c)}")
            return []
        if c is NO_TANGENT or c is None:
            self.fail(f"{where} is a float argument but its cotangent is {c!r}")
        out: list[Any] = []
        self.collect(where, x, c, out)
        return out

    def is_empty(self, c: Any) -> bool:
        if any(c is e for e in _EMPTY):
            return True
        return isinstance(c, (list, tuple)) and all(self.is_empty(item) for item in c)

    def collect(self, where: str, x: Any, c: Any, out: list[Any]) -> None:
        if is_float(x):
            out.append(self.dense_leaf(where, x, c))
            return
        if isinstance(x, (list, tuple, dict)):
            if c is ZERO:
                out.extend(np.zeros(np.shape(leaf)) for leaf in _leaves(x))
                return
            if isinstance(x, dict):
                if not isinstance(c, dict) or c.keys() != x.keys():
                    self.fail(f"{where}: the cotangent of a dict must be a dict with the same keys")
                pairs = [(x[k], c[k], f"{where}[{k!r}]") for k in x]
            else:
                if not isinstance(c, (list, tuple)) or len(c) != len(x):
                    self.fail(f"{where}: the cotangent of a {type(x).__name__} of {len(x)} must be a "
                              f"list/tuple of {len(x)} cotangents, got {describe(c)}")
                pairs = [(xi, ci, f"{where}[{j}]") for j, (xi, ci) in enumerate(zip(x, c))]
            for xi, ci, w in pairs:
                if not _leaves(xi):
                    if self.rule.kind is not RuleKind.ELEMENTWISE and not self.is_empty(ci):
                        self.fail(f"{w} cannot be differentiated, so its cotangent must be NO_TANGENT")
                    continue
                self.collect(w, xi, _resolve(ci), out)
            return

    def dense_leaf(self, where: str, x: Any, c: Any) -> Any:
        if c is ZERO:
            return np.zeros(np.shape(x))
        if c is NO_TANGENT or c is None:
            self.fail(f"{where} is a float value but its cotangent is {c!r}")
        allowed = {np.dtype(x.dtype)} if isinstance(x, (np.ndarray, np.generic)) else set()
        allowed |= _float_dtypes(self.out)  # mixed precision: the promoted dtype is accepted too
        is_scalar = isinstance(c, numbers.Number) or (type(c) is np.ndarray and c.ndim == 0)
        if not (is_scalar or type(c) is np.ndarray):
            self.fail(f"{where}: its cotangent must be an array or a number, got {describe(c)}")
        if isinstance(c, (np.ndarray, np.generic)):
            if c.dtype.kind == "c" and np.result_type(x).kind != "c":
                self.fail(f"{where}: a real argument got a complex cotangent")
            if allowed and c.dtype not in allowed and not (type(x) is float and c.dtype.kind == "f"):
                self.fail(f"{where}: its cotangent has dtype {c.dtype}, expected "
                          f"{' or '.join(sorted(str(d) for d in allowed))}")
        elif isinstance(c, complex) and not _is_complex(x):
            self.fail(f"{where}: a real argument got a complex cotangent")
        if type(x) is np.ndarray:
            if type(c) is np.ndarray and c.ndim and c.shape != x.shape:
                self.fail(f"{where}: its cotangent has shape {c.shape}, expected {x.shape}")
            # A scalar cotangent of an array stands for that value everywhere (a uniform cotangent).
            return np.broadcast_to(_wide(c), x.shape)
        if not is_scalar:
            self.fail(f"{where}: a scalar argument got a cotangent of shape {np.shape(c)}")
        if isinstance(c, complex) and not isinstance(c, np.generic) and not _is_complex(x):
            self.fail(f"{where}: a real argument got a complex cotangent")
        return _wide(c)

    # -- finite differences ----------------------------------------------------------------------

    def setup_directions(self) -> None:
        """Random directions over every float leaf of every argument, and the finite-difference setup."""
        self.directions = [[self.random_direction(leaf) for leaf in _leaves(a)] for a in self.args]
        in_dtypes = _float_dtypes(self.args)
        out_dtypes = _float_dtypes(self.out)
        self.ad_eps = _lowest_eps(in_dtypes | out_dtypes)
        # Finite differences in float64 where the function accepts upcast inputs and keeps the precision.
        self.upcast = False
        if any(_low_precision(d) for d in in_dtypes):
            try:
                y = self.evaluate(self.perturbed(0.0, upcast=True))
                self.upcast = [np.shape(leaf) for leaf in _leaves(y)] == [np.shape(o) for o in _leaves(self.out)]
                if self.upcast:
                    out_dtypes = _float_dtypes(y)
            except Exception:  # noqa: BLE001 - the function insists on its dtypes: difference in its own precision
                self.upcast = False
        self.fd_eps_machine = _lowest_eps(out_dtypes if self.upcast else in_dtypes | out_dtypes)
        self.eps = self.user_eps if self.user_eps is not None else self.fd_eps_machine ** (1 / 3)
        fd_rtol = 1e-6 if self.fd_eps_machine < 1e-10 else 2e-2
        ad_rtol = 1e-6 if self.ad_eps < 1e-10 else 5e-4
        self.rtol = self.user_rtol if self.user_rtol is not None else max(fd_rtol, ad_rtol)
        self.atol = self.user_atol if self.user_atol is not None else (1e-10 if self.ad_eps < 1e-10 else 1e-5)

    def perturbed(self, t: float, upcast: Optional[bool] = None, only: Optional[int] = None) -> tuple[Any, ...]:
        upcast = self.upcast if upcast is None else upcast
        new_args = []
        for i, (a, dirs) in enumerate(zip(self.args, self.directions)):
            if not dirs:
                new_args.append(a)
                continue
            step = t if only is None or only == i else 0.0
            leaves = []
            for x, d in zip(_leaves(a), dirs):
                if isinstance(x, (np.ndarray, np.generic)):
                    dtype = x.dtype
                    if upcast and _low_precision(x.dtype):
                        dtype = np.dtype(np.complex128 if x.dtype.kind == "c" else np.float64)
                    moved = np.asarray(x, dtype=dtype) + step * d
                    if type(x) is np.ndarray:
                        leaf = np.empty_like(x, dtype=dtype)  # keeps x's memory layout (ravel order='A')
                        leaf[...] = moved
                        leaves.append(leaf)
                    else:
                        leaves.append(dtype.type(moved))  # type: ignore[arg-type]  # (a NumPy scalar leaf)
                else:
                    leaves.append(x + step * (complex(d) if isinstance(x, complex) else float(d)))
            new_args.append(_rebuild(a, iter(leaves)))
        return tuple(new_args)

    def pair(self, y: Any, bar: Any = None) -> tuple[float, Any]:
        """<out_bar, y> in float64 (`bar` instead of out_bar if given), and the products elementwise."""
        ys = _leaves(y)
        bar = self.out_bar if bar is None else bar
        bars = _leaves(bar) if bar is not ZERO else []
        if len(ys) != len(bars):
            self.fail(f"the function's output changed structure under a perturbation of size {self.eps:g}")
        total, products = 0.0, []
        for b, v in zip(bars, ys):
            if _is_complex(v) and not _is_complex(b):
                self.fail(f"the function's output became complex under a perturbation of size {self.eps:g}")
            prod = (_wide(b) * _wide(v)).real
            products.append(prod)
            total += float(np.sum(prod))
        return total, products

    def finite_difference(self, only: Optional[int] = None) -> tuple[float, float, float]:
        """(<out_bar, J v> by central differences, sum |out_bar * J v|, a bound on its rounding error)."""
        h = self.eps
        plus, p_plus = self.pair(self.evaluate(self.perturbed(h, only=only)))
        minus, p_minus = self.pair(self.evaluate(self.perturbed(-h, only=only)))
        scale = sum(float(np.sum(np.abs(a - b))) for a, b in zip(p_plus, p_minus)) / (2 * h)
        noise = self.fd_eps_machine * sum(float(np.sum(np.abs(a) + np.abs(b))) for a, b in zip(p_plus, p_minus)) / h
        return (plus - minus) / (2 * h), scale, noise

    def compare(self, ad: float, ad_scale: float, only: Optional[int] = None) -> bool:
        fd, fd_scale, noise = self.finite_difference(only)
        tol = self.atol + self.rtol * max(ad_scale, fd_scale) + 10 * noise
        self.last = (fd, tol)
        return abs(ad - fd) <= tol

    def check_directional(self, dense: list[list[Any]], what: str) -> None:
        terms = [[_real_pairing(c, d) for c, d in zip(cs, ds)] for cs, ds in zip(dense, self.directions)]
        scales = [[float(np.sum(np.abs(c * d))) for c, d in zip(cs, ds)] for cs, ds in zip(dense, self.directions)]
        ad = sum(sum(t) for t in terms)
        if self.compare(ad, sum(sum(s) for s in scales)):
            return
        fd, tol = self.last
        culprits = []
        for i, (a, ds) in enumerate(zip(self.args, self.directions)):
            if ds and not self.compare(sum(terms[i]), sum(scales[i]), only=i):
                culprits.append(f"argument {i} ({describe(a)}): <x_bar, v> = {sum(terms[i]):.6g}, "
                                f"finite difference {self.last[0]:.6g}")
        detail = "; ".join(culprits) or "no single argument is wrong alone"
        self.fail(f"{what} disagrees with finite differences: <out_bar, J v> = {ad:.6g} from the rule, "
                  f"{fd:.6g} by central differences (eps={self.eps:g}, tolerance {tol:.3g}). {detail}")

    def check_flat(self) -> None:
        """A non-differentiable rule: the function must be flat (zero derivative) at this point."""
        if not any(self.directions):
            return
        fd, scale, noise = self.finite_difference()
        if scale > self.atol + 10 * noise:  # sum |out_bar * J v|: no cancellation can hide a slope
            self.fail(f"it is declared non-differentiable, but its output changes with its inputs here "
                      f"(<out_bar, J v> = {fd:.6g} by central differences)")

    def check_uniform(self, pullback: Callable[..., Any]) -> None:
        """An elementwise pullback given a scalar out_bar must treat it as that value everywhere."""
        out = self.out
        value = out.dtype.type(0.75) if out.dtype.kind in "fc" else 0.75
        uniform = pullback(value)
        full = pullback(np.full(out.shape, value, dtype=out.dtype if out.dtype.kind in "fc" else np.float64))
        for i, (a, cu, cf) in enumerate(zip(self.args, uniform, full)):
            if not _leaves(a):
                continue
            du = self.dense_cotangent(i, a, _resolve(cu))
            df = self.dense_cotangent(i, a, _resolve(cf))
            for u, f in zip(du, df):
                if not np.allclose(u, f, rtol=self.rtol, atol=self.atol + self.rtol * float(np.max(np.abs(f), initial=0))):
                    self.fail(f"argument {i}: the pullback of a uniform (scalar) out_bar differs from the "
                              f"pullback of the same value as a full array")

    def tangents(self) -> tuple[Any, ...]:
        """The directions as tangents of the arguments, in their dtypes (NO_TANGENT for non-floats)."""
        args_dot = []
        for a, ds in zip(self.args, self.directions):
            if not ds:
                args_dot.append(NO_TANGENT)
                continue
            tangents = [d.astype(x.dtype) if type(x) is np.ndarray else
                        (x.dtype.type(d) if isinstance(x, np.generic) else complex(d) if isinstance(x, complex)
                         else float(d))
                        for x, d in zip(_leaves(a), ds)]
            args_dot.append(_rebuild(a, iter(tangents)))
        return tuple(args_dot)

    def check_frule(self, frule: Callable[..., Any]) -> None:
        out, out_dot = frule(self.tangents(), *self.args, **self.kwargs)
        assert_same_value(self.name, "the forward rule's primal output", out, _call(self.fn, self.args, self.kwargs))
        if isinstance(out_dot, (list, tuple)):  # ZERO components of a tuple output
            out_dot = [np.zeros(np.shape(o)) if od is ZERO else od for od, o in zip(out_dot, out)]
        if out_dot is ZERO:
            ad, ad_scale = 0.0, 0.0
        else:
            for o, od in zip(_leaves(out), _leaves(out_dot)):
                if np.shape(od) != np.shape(o):
                    self.fail(f"the forward rule's tangent has shape {np.shape(od)}, expected {np.shape(o)}")
                if isinstance(o, (np.ndarray, np.generic)) and isinstance(od, (np.ndarray, np.generic)) \
                        and od.dtype != o.dtype:
                    self.fail(f"the forward rule's tangent has dtype {od.dtype}, expected {o.dtype} (the output's)")
            ad, products = self.pair(out_dot, self.inner_bar)
            ad_scale = sum(float(np.sum(np.abs(p))) for p in products)
        if not self.compare(ad, ad_scale):
            fd, tol = self.last
            self.fail(f"the forward rule disagrees with finite differences: <out_bar, out_dot> = {ad:.6g}, "
                      f"{fd:.6g} by central differences (eps={self.eps:g}, tolerance {tol:.3g})")
