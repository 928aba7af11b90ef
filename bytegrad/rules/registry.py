"""The rule registry: the one mutable global of `rules/`, typed, locked and versioned. A rule is attached to
a function object (`np.sin`, `operator.mul`, `np.ndarray.sum`...); registering one bumps `version()`."""
from __future__ import annotations

import sys
import _thread
import types
import warnings
from typing import Any, Callable, Optional

from bytegrad import _config
from bytegrad.errors import DuplicateRuleError, SourceLoc, qualname
from bytegrad.rules._targets import replaced
from bytegrad.rules._types import (  # (re-exported: rules and plugins import them from here)
    Zero as Zero, NoTangent as NoTangent, ZERO as ZERO, NO_TANGENT as NO_TANGENT, RuleKind as RuleKind, Partial as
    Partial, Formula as Formula, kernel as kernel, Kernel as Kernel, Rule as Rule, OWN_RULES_DIR as OWN_RULES_DIR,
    ProgramForm as ProgramForm, program_form as program_form,
)

__all__ = [
    "Zero", "NoTangent", "ZERO", "NO_TANGENT", "RuleKind", "Rule", "register", "lookup", "outdate", "version",
    "settled_version", "scalar_rule", "rrule", "frule", "non_differentiable", "transparent", "not_implemented",
    "differentiate_through", "opt_out", "opted_out", "all_rules", "load_plugins", "load_lazy_rules", "lazy_rule_modules",
    "LAZY_MODULES", "LAZY_PENDING", "rrule_via_ad", "load_deferred", "DEFERRED_PENDING", "DEFERRED", "LOCK",
    "set_ad_backend", "set_tape_probe", "recording", "Formula", "kernel", "kernel_formula", "fusable", "FOREIGN",
]


_RULES: dict[Any, Rule] = {}
#: `_RULES.get` itself, for the hooks' hot path (they catch an unhashable callable's TypeError)
get_rule = _RULES.get
_LOCK = _thread.RLock()  # threading.RLock, without importing threading (2-3 ms)
LOCK = _LOCK  # (held by rules/_deferred.py while it imports a deferred module)
#: grows with every rule registered or opted out (read it as `registry.current_version`, or `version()`)
current_version = 0
_plugins_loaded = False
# Functions opted out of their rule (opt_out), with where; their rules are kept aside in _SHADOWED (lookup finds none).
_OPTED_OUT: dict[Any, SourceLoc] = {}
_SHADOWED: dict[Any, Rule] = {}
#: functions given a rule or opted out outside bytegrad/rules/: what a stored program checks (compiled/store.py)
FOREIGN: dict[Any, Any] = {}
# How rrule_via_ad calls back into bytegrad: bytegrad/_differentiated.py fills it in (rules never import upward).
_ad_backend: Optional[Callable[..., tuple[Any, Callable[[Any], tuple[Any, ...]]]]] = None


def _caller_loc(depth: int) -> SourceLoc:  # (the user's line `depth` frames above the caller)
    return SourceLoc.of_frame(sys._getframe(depth + 1))


def _is_forward_only(rule: Rule) -> bool:
    return rule.kind is RuleKind.RRULE and rule.rrule is None and rule.frule is not None


def _has_reverse(rule: Rule) -> bool:
    return rule.kind is RuleKind.ELEMENTWISE or (rule.kind is RuleKind.RRULE and rule.rrule is not None)


def _duplicate(fn: Any, form: str, first: Optional[SourceLoc], second: Optional[SourceLoc]) -> DuplicateRuleError:
    return DuplicateRuleError(
        f"a second {form} was registered for {qualname(fn)}.\n"
        f"  first defined at {first}\n  second defined at {second}",
        second,
        "remove one of them, or pass override=True to the second to replace the first.",
    )


def _merge(old: Rule, new: Rule, override: bool) -> Rule:
    """The rule `fn` has once `new` is registered beside `old`.

    A forward rule (frule) and a reverse form (rrule or scalar_rule) combine into one Rule, in
    either order. Two rules of the same form are an error unless `override`; an override replaces
    the forms the new registration provides and keeps the old rule's other forms.
    """
    if _is_forward_only(new) and (_has_reverse(old) or _is_forward_only(old)):
        if old.frule is not None and not override:
            raise _duplicate(new.fn, "forward rule (frule)", old.frule_defined_at or old.defined_at, new.defined_at)
        if _is_forward_only(old):
            return new
        return old.replaced(frule=new.frule, frule_defined_at=new.defined_at)
    if _has_reverse(new) and _is_forward_only(old):
        return new.replaced(frule=old.frule, frule_defined_at=old.frule_defined_at or old.defined_at)
    if not override:
        form = "reverse rule" if _has_reverse(new) and _has_reverse(old) else "rule"
        raise _duplicate(new.fn, form, old.defined_at, new.defined_at)
    if _has_reverse(new) and _has_reverse(old) and old.frule is not None and new.frule is None:
        return new.replaced(frule=old.frule, frule_defined_at=old.frule_defined_at)
    return new


def register(rule: Rule, *, override: bool = False) -> Rule:
    """Add `rule` to the registry and return the rule now in force for its function (one of bytegrad's
    own for a replaced function, `_targets.replaced`, is not added). An frule combines with an rrule or
    scalar_rule of the same function; a second rule of the same form raises DuplicateRuleError naming
    both definition sites, unless it says `override=True`."""
    global current_version
    if rule.trusted and replaced(rule):
        return rule
    if rule.frule is not None and rule.frule_defined_at is None:
        rule.frule_defined_at = rule.defined_at
    if DEFERRED_PENDING:  # bytegrad's own rule for it first, as if loaded eagerly (merges, duplicates)
        load_deferred(rule.fn)
    with _LOCK:
        table = _SHADOWED if rule.fn in _OPTED_OUT else _RULES
        old = table.get(rule.fn)
        merged = rule if old is None else _merge(old, rule, override)
        table[rule.fn] = merged
        if not rule.trusted:
            FOREIGN[rule.fn] = None
        current_version += 1
        return merged


def outdate() -> None:
    """Something the rewrite depends on besides the rules changed (`config.disable_fusion`): a new version."""
    global current_version
    with _LOCK:
        current_version += 1


def version() -> int:
    """The registry's version: it grows with every rule registered or opted out, so anything derived
    from the rules (rewritten code, compiled programs) can tell that it is out of date."""
    return current_version


def program_version() -> int:
    """`version()` less what loading bytegrad's own rules for a module imported later added (Numba's
    import brings heapq and bisect, say): those rules cover functions that had none, so a compiled
    program built before them still computes what the general path computed; any other rule
    registered or opted out outdates every program. Cheap: a program checks it on every call."""
    return current_version - _lazy_increments


def settled_version() -> int:
    """`version()` once the rules of every module the program has imported are loaded (`load_lazy_rules`):
    what a key of rewritten code holds, so that the rewrite (which loads them) does not outdate its own key."""
    if _LAZY_RULES:
        load_lazy_rules()
    return current_version


def lookup(fn: Any) -> Optional[Rule]:
    """The rule for `fn`, or None (also for functions opted out with `opt_out`, and unhashable ones).

    A miss first loads the rules of optional libraries the program has imported since (`load_lazy_rules`).
    """
    try:
        rule = _RULES.get(fn)
        if rule is None and ((DEFERRED_PENDING and load_deferred(fn)) or (_LAZY_RULES and load_lazy_rules())):
            rule = _RULES.get(fn)
        return rule
    except TypeError:
        return None


# bytegrad's own rules modules that `import bytegrad` leaves out (rules/_deferred.py fills these):
# function -> the modules that register a rule for it, imported on its first lookup. Every lookup
# consults it, so loading one changes no lookup's answer and leaves the version as it is.
DEFERRED: dict[Any, tuple[str, ...]] = {}
DEFERRED_PENDING: set[str] = set()  # the deferred modules not imported yet


def load_deferred(fn: Any = _LOCK) -> bool:
    """Import the deferred rules modules covering `fn` (all without an argument); whether one was."""
    try:
        if not DEFERRED_PENDING or (fn is not _LOCK and fn not in DEFERRED):
            return False
    except TypeError:  # unhashable
        return False
    # (not `from ... import`: during bytegrad's own import that waits on the package's import lock)
    loaded = sys.modules["bytegrad.rules._deferred"].load(None if fn is _LOCK else (fn,))
    if fn is _LOCK:
        return loaded
    DEFERRED.pop(fn, None)  # its modules are imported now, by this call or by one it set off (a
    return True             # profile hook's `all_rules`): the caller looks it up again, once


# Rules loaded once the program imports the module they cover, by that module's name: optional
# libraries (scipy; bytegrad never imports them) and parts of the standard library and of NumPy that
# `import numpy` does not import, so that `import bytegrad` does not either. A function object of
# such a module exists only once the module is in sys.modules, so loading its rules before any
# lookup that can meet it is sound: `load_lazy_rules` runs on every registry miss (`lookup`,
# `runtime.dispatch.resolve`), before every rewrite, and in `all_rules`. A rules module may cover
# several names (`heapq` and the `_heapq` it re-exports): it loads on the first one imported.
_LAZY_RULES: dict[str, str] = {
    "scipy.special": "bytegrad.rules.scipy.special",
    "scipy.linalg": "bytegrad.rules.scipy.linalg",
    "scipy.signal": "bytegrad.rules.scipy.signal",
    "scipy.stats": "bytegrad.rules.scipy.stats",
    "scipy.optimize": "bytegrad.rules.scipy.optimize",
    "scipy.integrate": "bytegrad.rules.scipy.integrate",
    "numpy.fft": "bytegrad.rules.numpy.fft",
    "statistics": "bytegrad.rules.stdlib.statistics",
    "heapq": "bytegrad.rules.stdlib.heapq",
    "_heapq": "bytegrad.rules.stdlib.heapq",
    "bisect": "bytegrad.rules.stdlib.bisect",
    "_bisect": "bytegrad.rules.stdlib.bisect",
}
#: every module `_LAZY_RULES` covers, loaded or not (for the docs and tests)
LAZY_MODULES: tuple[str, ...] = tuple(_LAZY_RULES)
#: `_LAZY_RULES` itself, for a hot path's test of whether any rules are still to load (empty: none)
LAZY_PENDING = _LAZY_RULES


def lazy_rule_modules() -> list[str]:
    """The modules whose rules load once the program imports them, not loaded yet."""
    return list(_LAZY_RULES)


#: what loading lazy rule modules added to `current_version` (see `program_version`)
_lazy_increments = 0


def load_lazy_rules() -> int:
    """Load the rules of each module in `_LAZY_RULES` that the program has imported; return how many loaded.

    Cheap when there is nothing to do (one C-level set test against sys.modules), so misses may call
    it freely. A rule module that fails to load (an old scipy) gives one warning and is skipped.
    """
    global _lazy_increments
    modules = sys.modules
    if modules.keys().isdisjoint(_LAZY_RULES.keys()):  # iterates the small side, in C
        return 0
    ready = [name for name in list(_LAZY_RULES) if name in modules]  # list(): a snapshot, atomic under the GIL
    import importlib

    count = 0
    with _LOCK:
        for name in ready:
            rules_module = _LAZY_RULES.pop(name, None)
            if rules_module is None:  # another thread loaded it
                continue
            for other in [n for n, m in _LAZY_RULES.items() if m == rules_module]:
                del _LAZY_RULES[other]  # the other names the same rules module covers
            before = current_version
            try:
                importlib.import_module(rules_module)
            except Exception as exc:  # noqa: BLE001 - reported, not raised: code that does not need them still runs
                warnings.warn(f"bytegrad: the rules for {name} ({rules_module}) failed to load and are "
                              f"skipped: {type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)
                continue
            finally:
                _lazy_increments += current_version - before
            count += 1
    return count


def all_rules() -> dict[Any, Rule]:
    """A snapshot of the registry (for docs and tests), with the rules of every module the program
    has imported (`load_lazy_rules`)."""
    if _LAZY_RULES:
        load_lazy_rules()
    if DEFERRED_PENDING:
        load_deferred()
    with _LOCK:
        return dict(_RULES)


def load_plugins() -> int:
    """Load the rule packages of the entry-point group `bytegrad.rules`, once; return how many loaded.

    Called on the first registry miss (never at import); every call also loads `load_lazy_rules`'s.
    An entry point names a module, whose import registers its rules, or a callable, which is called. A
    plugin that fails gives one warning naming it and is skipped: a broken plugin must not break
    differentiating code that does not need it.
    """
    global _plugins_loaded
    lazy = load_lazy_rules() if _LAZY_RULES else 0  # also a miss's: a module imported since the last one
    if _plugins_loaded:
        return lazy
    with _LOCK:
        if _plugins_loaded:
            return lazy
        _plugins_loaded = True
        from importlib.metadata import entry_points

        count = lazy
        for ep in entry_points(group="bytegrad.rules"):
            try:
                obj = ep.load()
                if callable(obj):
                    obj()
            except Exception as exc:  # noqa: BLE001 - reported, not raised: see the docstring
                warnings.warn(f"bytegrad: the rule plugin {ep.name!r} ({ep.value}) failed to load and is "
                              f"skipped: {type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)
                continue
            count += 1
        return count


def set_ad_backend(vjp: Callable[..., tuple[Any, Callable[[Any], tuple[Any, ...]]]]) -> None:
    """Install the function `rrule_via_ad` calls: `vjp(fn, *args, **kwargs) -> (out, pullback)`.

    `bytegrad.api` installs `bytegrad.vjp` when it is imported (the rules layer cannot import it).
    """
    global _ad_backend
    _ad_backend = vjp


_tape_probe: Callable[[], bool] = lambda: False  # noqa: E731  (installed by bytegrad.api)


def set_tape_probe(probe: Callable[[], bool]) -> None:
    """Install what `recording` asks: whether a tape records this thread's operations now."""
    global _tape_probe
    _tape_probe = probe


def recording() -> bool:
    """Whether a tape records what runs now: inside a pullback, that a nested derivative is
    differentiating it (a rule whose pullback cannot be differentiated can refuse clearly)."""
    return _tape_probe()


def rrule_via_ad(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, Callable[[Any], tuple[Any, ...]]]:
    """Differentiate `fn(*args, **kwargs)` with bytegrad itself, from inside a rule.

    For rules of higher-order functions (`np.vectorize`, user map-like functions) that apply a
    user's function.

    Parameters
    ----------
    fn : callable
        The function to differentiate (a Python function, or anything with a rule).
    *args, **kwargs : Any
        Its arguments; every positional argument is differentiated.

    Returns
    -------
    out : Any
        `fn(*args, **kwargs)`.
    pullback : callable
        `pullback(out_bar)` returns one cotangent per positional argument of `fn`.

    Examples
    --------
    >>> import numpy as np
    >>> out, pullback = rrule_via_ad(lambda x, y: x * np.sin(y), 2.0, 0.0)
    >>> pullback(1.0)
    (0.0, 2.0)
    """
    if _ad_backend is None and _config.LOAD_GENERAL:  # (`import bytegrad` leaves the general path for later)
        _config.LOAD_GENERAL[0]()
    if _ad_backend is None:  # (a lower layer imported on its own)
        raise RuntimeError("rrule_via_ad needs bytegrad's general path (bytegrad/_differentiated.py): import bytegrad")
    return _ad_backend(fn, *args, **kwargs)


# ---- the forms rule authors use -------------------------------------------------------------


def scalar_rule(fn: Any, *partials: Partial, override: bool = False, kernel: Optional[Kernel] = None) -> Rule:
    """Declare an elementwise function by its partial derivatives, written in terms of inputs and `out`.

    bytegrad derives the reverse rule (`x_bar = out_bar * partial`, broadcasting undone) and the
    forward rule from the partials; `kernel` (a `Formula`) is the same rule for one scalar, which
    fused kernels inline.

    Parameters
    ----------
    fn : callable
        The function (a ufunc, a C function, a Python function).
    *partials : callable, float or None
        One per positional argument: a function `(*args, out) -> d out / d arg`, a constant, or
        None for an argument with no derivative.
    override : bool, default False
        Replace an existing rule for `fn` instead of raising `DuplicateRuleError`.
    kernel : Formula, optional
        The value and partials as scalar source (`kernel(...)`), for fused kernels; without one,
        `fn` is never fused.

    Returns
    -------
    Rule
        The registered rule.

    Examples
    --------
    >>> import numpy as np
    >>> _ = scalar_rule(np.cbrt, lambda x, out: 1.0 / (3.0 * out**2), override=True)
    """
    const = all(p is None or isinstance(p, (int, float)) for p in partials)
    return register(
        Rule(fn, RuleKind.ELEMENTWISE, partials=tuple(partials), defined_at=_caller_loc(1),
             constant_partials=const, kernel=kernel),
        override=override,
    )


def kernel_formula(fn: Any, constant: Optional[float] = None) -> Optional[Formula]:
    """The kernel formula of `fn`'s rule (for `x ** c`, of its constant `c`), or None."""
    rule = lookup(fn)
    k = rule.kernel if rule is not None else None
    if k is None or isinstance(k, Formula):
        return k
    return None if constant is None else k(constant)


def fusable(fn: Any) -> bool:
    """Whether `fn` may appear in a fused kernel: its rule has a kernel formula."""
    rule = lookup(fn)
    return rule is not None and rule.kernel is not None


def rrule(fn: Any, *, override: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register a reverse rule `f_rrule(*args, **kwargs) -> (out, f_pullback)` for `fn`.

    The pullback takes the output's cotangent and returns one cotangent per positional argument
    (`NO_TANGENT` or None for arguments with no derivative). An entry may be a zero-argument
    function (a thunk), which bytegrad calls only if that argument is being differentiated.

    Parameters
    ----------
    fn : callable
        The function the rule differentiates.
    override : bool, default False
        Replace an existing reverse rule for `fn` instead of raising `DuplicateRuleError`.

    Returns
    -------
    callable
        The decorator; it returns the rule function unchanged.

    Examples
    --------
    >>> import numpy as np
    >>> def cube(x):
    ...     return x ** 3
    >>> @rrule(cube)
    ... def cube_rrule(x):
    ...     out = cube(x)
    ...     def cube_pullback(out_bar):
    ...         return (3.0 * x ** 2 * out_bar,)
    ...     return out, cube_pullback
    """

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        loc = _caller_loc(1)
        register(Rule(fn, RuleKind.RRULE, rrule=f, defined_at=loc), override=override)
        return f

    return deco


def frule(fn: Any, *, override: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register a forward rule `f_frule(args_dot, *args, **kwargs) -> (out, out_dot)`.

    `args_dot` holds one tangent per positional argument (None for "no tangent"). Used by
    `jvp`, `jacobian(mode="fwd")` and forward-over-reverse Hessians; a `scalar_rule` gives one
    for free.

    Parameters
    ----------
    fn : callable
        The function whose tangents the rule pushes forward.
    override : bool, default False
        Replace an existing forward rule for `fn` (a duplicate is a `DuplicateRuleError`).

    Returns
    -------
    callable
        A decorator that registers the rule function and returns it as it was.

    Examples
    --------
    >>> def square(x):
    ...     return x * x
    >>> @frule(square)
    ... def square_frule(args_dot, x):
    ...     (x_dot,) = args_dot
    ...     return square(x), 2.0 * x * x_dot
    """

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        loc = _caller_loc(1)
        register(Rule(fn, RuleKind.RRULE, frule=f, defined_at=loc), override=override)
        return f

    return deco


def non_differentiable(*fns: Any, override: bool = False) -> None:
    """Declare functions whose outputs carry no derivative (argmax, shape queries, floor...).

    Parameters
    ----------
    *fns : callable
        The functions.
    override : bool, default False
        Replace existing rules for them instead of raising `DuplicateRuleError`.
    """
    loc = _caller_loc(1)
    for fn in fns:
        register(Rule(fn, RuleKind.NONDIFF, defined_at=loc), override=override)


def transparent(*fns: Any, override: bool = False) -> None:
    """Declare functions that only move values around (list.append, len, isinstance): called as is."""
    loc = _caller_loc(1)
    for fn in fns:
        register(Rule(fn, RuleKind.TRANSPARENT, defined_at=loc), override=override)


def not_implemented(fn: Any, reason: str, *, override: bool = False) -> None:
    """Declare a known gap: differentiating `fn` raises a clear error giving `reason`.

    Parameters
    ----------
    fn : callable
        The function.
    reason : str
        Why it has no rule yet; the error shows it.
    override : bool, default False
        Replace an existing rule for `fn` instead of raising `DuplicateRuleError`.
    """
    register(Rule(fn, RuleKind.NOT_IMPLEMENTED, reason=reason, defined_at=_caller_loc(1)), override=override)


def differentiate_through(fn: Any, impl: Callable[..., Any], *, override: bool = False) -> None:
    """Differentiate calls to `fn` by running the Python function `impl` through bytegrad.

    For C functions whose arithmetic is easy to write in Python (`sum`, `zip`,
    `functools.reduce`): bytegrad's own rules for them are written this way.

    Parameters
    ----------
    fn : callable
        The function.
    impl : callable
        A Python function with `fn`'s signature and result.
    override : bool, default False
        Replace an existing rule for `fn` instead of raising `DuplicateRuleError`.

    Raises
    ------
    TypeError
        When `impl` is not callable, or is `fn` itself without Python code of its own (a NumPy
        function written in Python, `differentiate_through(np.copy, np.copy)`, runs its Python
        implementation).
    """
    own_impl = getattr(fn, "_implementation", None) if impl is fn else None
    if impl is fn and isinstance(own_impl, types.FunctionType):
        impl = own_impl  # calling the dispatcher would come back to this rule
    elif impl is fn or not callable(impl):
        raise TypeError(f"differentiate_through({qualname(fn)}, {qualname(impl) if callable(impl) else repr(impl)}): "
                        f"the implementation must be a callable other than {qualname(fn)} itself (a Python "
                        f"function computing the same result); or give {qualname(fn)} a rule with @bytegrad.rrule")
    register(Rule(fn, RuleKind.THROUGH, impl=impl, defined_at=_caller_loc(1)), override=override)


def opt_out(fn: Any) -> None:
    """Differentiate through `fn`'s own Python code even though a rule exists (or is registered later).

    The rule is kept aside, not deleted: `lookup(fn)` reports no rule, so bytegrad treats `fn` like
    any Python function it has no rule for. Use it to bypass a plugin's rule, or to check a rule
    against differentiating the implementation.

    Parameters
    ----------
    fn : callable
        A function written in Python.

    Raises
    ------
    TypeError
        When `fn` has no Python code to differentiate through.

    Examples
    --------
    >>> def square(x):
    ...     return x * x
    >>> opt_out(square)
    >>> lookup(square) is None
    True
    """
    global current_version
    if not _has_python_code(fn):
        raise TypeError(f"opt_out({qualname(fn)}): bytegrad can only differentiate through a function "
                        f"written in Python, and {qualname(fn)} is not one; keep or override its rule instead")
    if DEFERRED_PENDING:
        load_deferred(fn)
    with _LOCK:
        _OPTED_OUT[fn] = FOREIGN[fn] = _caller_loc(1)
        rule = _RULES.pop(fn, None)
        if rule is not None:
            _SHADOWED[fn] = rule
        current_version += 1


def opted_out(fn: Any) -> bool:
    """Whether `opt_out(fn)` was declared."""
    try:
        return fn in _OPTED_OUT
    except TypeError:
        return False


def _has_python_code(fn: Any) -> bool:
    """A Python function, or a NumPy function whose implementation is written in Python (np.diff)."""
    return isinstance(fn, types.FunctionType) or isinstance(getattr(fn, "_implementation", None), types.FunctionType)
