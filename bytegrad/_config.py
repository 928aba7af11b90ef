"""`bytegrad.config`: every `BYTEGRAD_*` switch, declared once, validated when read, settable at run time.

Each switch is a `Switch` in `SWITCHES`: its attribute name, environment variable, kind, default,
allowed values and documentation. The environment is read once, when bytegrad is imported; a value
that is not allowed raises a `ValueError` there, naming the variable, the value and what is allowed
(names are case-insensitive: `BYTEGRAD_TIER=Numba` is `numba`). After import the environment is not
read again: set a switch on `bytegrad.config` (validated the same way), or for a block of code with
`bytegrad.config.override(...)`.

Reading a switch is a plain attribute read (`config.tier`), cheap enough for a hot path. Modules that
keep a switch in a module constant take it with `config.bind(name, __name__, "CONSTANT")`, which
returns the current value and rewrites the constant on every later change; `config.on_change(names,
fn)` calls `fn()` after one of `names` changes (the rewrite cache forgets code written under the old
value). This module imports nothing of bytegrad: every layer may read it.

`python -m bytegrad config` prints the switches and where each value came from; `--markdown` prints
the table of docs/usage.md (tests/test_config.py checks that the two agree).
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Iterable, Optional

__all__ = ["Config", "Switch", "SWITCHES", "config", "markdown_table", "switch", "IMPORTED_NS", "LOAD_GENERAL", "edited_stamp"]

#: when this process imported bytegrad (`time.time_ns()`)
IMPORTED_NS = time.time_ns()
#: what loads bytegrad's general path (bytegrad/__init__.py puts it here): for a lower layer that needs it
#: loaded (`rrule_via_ad` called before any gradient, as `bytegrad.rules.testing` does) and cannot import it
LOAD_GENERAL: list[Callable[[], None]] = []


def edited_stamp(lines: Iterable[str]) -> str:
    """'' when no source file of these stamps ('name:size:mtime_ns;', diskcache.py and
    transform/cache.py fingerprint bytegrad's sources so) was modified since this process imported
    bytegrad; else a suffix unique to this process, for the fingerprint. The code running here was read
    before the edit, while the stamp, taken on first use, describes the files after it: the entries this
    process writes must not be found by a process that runs the edited code, nor the other way round."""
    now = time.time_ns()
    for line in lines:
        mtime = line.rstrip(";").rpartition(":")[2]
        if mtime.isdigit() and IMPORTED_NS < int(mtime) <= now:
            return f"+edited-{os.getpid()}-{now}"
    return ""

#: the passes of transform/pipeline.py, by name (tests/test_config.py checks them against PASS_NAMES)
PASS_NAMES = ("activity", "fusion", "rewrite")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class Switch:
    """One switch: `kind` is "bool", "choice" (one of `choices`, case-insensitive), "path" (a
    directory; unset: the default), "size" (a positive number), "names" (comma-separated names) or
    "passes" (comma-separated names among `choices`, or `all`); `when` says when a new value takes
    effect, if not at once (for the docs). (A plain class: a NamedTuple costs import time.)"""

    __slots__ = ("name", "env", "kind", "default", "doc", "choices", "when")

    def __init__(self, name: str, env: str, kind: str, default: Any, doc: str, choices: tuple[str, ...] = (),
                 when: str = "") -> None:
        self.name, self.env, self.kind, self.default, self.doc = name, env, kind, default, doc
        self.choices, self.when = choices, when

    def __repr__(self) -> str:
        return f"Switch({self.name!r}, {self.env!r}, {self.kind!r}, default={self.default!r})"


SWITCHES: tuple[Switch, ...] = (
    Switch("tier", "BYTEGRAD_TIER", "choice", "auto",
           "How gradients of functions that do not pin a tier (`differentiate(tier=...)`) run: `general` "
           "never compiles; `numpy` and `numba` compile a program on the first call that can be compiled "
           "(`numba`: with the Numba back end where it can be written); `auto` compiles a NumPy program "
           "after a few gradients of a signature and its Numba twin once that pays (docs/compiled.md).",
           ("general", "numpy", "numba", "auto"), when="a change applies to functions differentiated after it"),
    Switch("check", "BYTEGRAD_CHECK", "bool", False,
           "The checking mode: every site the rewrite left alone checks that no differentiated value "
           "reaches it, and Python code run blind from C is watched in every forward pass (the test "
           "suite sets it). Slower; for finding bugs in bytegrad."),
    Switch("debug_nans", "BYTEGRAD_DEBUG_NANS", "bool", False,
           "The first NaN or inf an operation produces, in the forward or the reverse pass, raises "
           "`bytegrad.NaNError` naming the line and the operation (docs/nans.md)."),
    Switch("disable_numba", "BYTEGRAD_DISABLE_NUMBA", "bool", False,
           "Never use Numba: no fused kernels and no Numba programs; every operation runs on its "
           "NumPy rule."),
    Switch("disable_fusion", "BYTEGRAD_DISABLE_FUSION", "bool", False,
           "The rewrite fuses no elementwise expressions: each operation is hooked and recorded on "
           "its own."),
    Switch("fusion", "BYTEGRAD_FUSION", "choice", "auto",
           "When a fused site runs its Numba kernel: `auto` once the site has spent what compiling "
           "it is expected to cost (then the faster tier per size), `always` from its first call, "
           "`never`.", ("auto", "always", "never")),
    Switch("compile", "BYTEGRAD_COMPILE", "choice", "sync",
           "Where a fused site that tiers up compiles its kernels: `sync` in the calling thread, "
           "`background` in a thread while the site keeps running on NumPy.", ("sync", "background")),
    Switch("cache_dir", "BYTEGRAD_CACHE_DIR", "path", None,
           "The disk cache's directory (created with mode 0700), by default `$XDG_CACHE_HOME/bytegrad` "
           "or `~/.cache/bytegrad`."),
    Switch("cache_max_mb", "BYTEGRAD_CACHE_MAX_MB", "size", 256.0,
           "The disk cache's size cap in MiB; the least recently loaded entries are evicted first."),
    Switch("disable_disk_cache", "BYTEGRAD_DISABLE_DISK_CACHE", "bool", False,
           "No disk cache: rewritten code and kernels stay in memory."),
    Switch("dump", "BYTEGRAD_DUMP", "names", "",
           "Print the rewritten bytecode (`dis`) of the functions named (comma-separated code names; "
           "`1`: every function) as they are rewritten."),
    Switch("dump_after", "BYTEGRAD_DUMP_AFTER", "passes", frozenset(),
           "Print each code object's listing to stderr after the transform passes named "
           "(comma-separated, or `all`).", PASS_NAMES),
)
_BY_NAME = {s.name: s for s in SWITCHES}


def switch(name: str) -> Switch:
    """The declaration of switch `name`."""
    return _BY_NAME[name]


def _allowed(s: Switch) -> str:
    """The allowed values of `s`, in words."""
    if s.kind == "bool":
        return "1/0, true/false, yes/no or on/off (case-insensitive)"
    if s.kind == "choice":
        return f"one of {', '.join(s.choices)} (case-insensitive)"
    if s.kind == "passes":
        return f"a comma-separated list of {', '.join(s.choices)}, or all (case-insensitive)"
    if s.kind == "size":
        return "a positive number"
    if s.kind == "path":
        return "a directory path"
    return "comma-separated function names, or 1 for every function"


def _parse(s: Switch, value: Any, where: str) -> Any:
    """`value` (a string from the environment, or anything set in Python) as switch `s` holds it;
    a ValueError naming `where`, the value and the allowed values when it is not allowed."""
    def bad(why: str = "") -> ValueError:
        return ValueError(f"{where}={value!r} is not valid{why}: {s.name} takes {_allowed(s)}")

    text = value.strip().lower() if isinstance(value, str) else None
    if s.kind == "bool":
        if isinstance(value, bool) or (type(value) is int and value in (0, 1)):
            return bool(value)
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise bad()
    if s.kind == "choice":
        if text in s.choices:
            return text
        raise bad()
    if s.kind == "size":
        if isinstance(value, bool):
            raise bad()
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise bad() from None
        if not number > 0 or number == float("inf"):
            raise bad()
        return number
    if s.kind == "path":
        if value is None:
            return None
        try:
            path = os.fspath(value)
        except TypeError:
            raise bad() from None
        if not isinstance(path, str):
            raise bad(" (a str path)")
        return path or None
    if s.kind == "passes":
        names = text.split(",") if text is not None else list(value) if isinstance(value, (list, tuple, set, frozenset)) \
            else None
        if names is None:
            raise bad()
        names = [n.strip().lower() if isinstance(n, str) else n for n in names]
        if names == ["all"]:
            return frozenset(s.choices)
        if not all(n in s.choices for n in names if n != ""):
            raise bad()
        return frozenset(n for n in names if n)
    if not isinstance(value, str):
        raise bad()
    return ",".join(n.strip() for n in value.split(",") if n.strip())  # names: case-sensitive


class Config:
    """bytegrad's switches: one attribute per `Switch` in `SWITCHES`, read from the environment at
    import, checked when set.

    >>> import bytegrad
    >>> bytegrad.config.debug_nans = True
    >>> bytegrad.config.debug_nans = False
    >>> with bytegrad.config.override(tier="general"):
    ...     bytegrad.config.tier
    'general'
    >>> bytegrad.config.tier = "jit"
    Traceback (most recent call last):
    ...
    ValueError: bytegrad.config.tier='jit' is not valid: tier takes one of general, numpy, numba, auto (case-insensitive)
    """

    __slots__ = tuple(s.name for s in SWITCHES) + ("_sources", "_bindings", "_watchers")

    # the slots' types, for the type checker (tests/test_config.py checks them against SWITCHES)
    tier: str
    check: bool
    debug_nans: bool
    disable_numba: bool
    disable_fusion: bool
    fusion: str
    compile: str
    cache_dir: Optional[str]
    cache_max_mb: float
    disable_disk_cache: bool
    dump: str
    dump_after: frozenset[str]
    _sources: dict[str, str]
    _bindings: dict[str, list[tuple[str, str]]]
    _watchers: dict[str, list[Callable[[], None]]]

    def __init__(self, environ: Optional[dict[str, str]] = None) -> None:
        env = os.environ if environ is None else environ
        object.__setattr__(self, "_sources", {})
        object.__setattr__(self, "_bindings", {})
        object.__setattr__(self, "_watchers", {})
        for s in SWITCHES:
            raw = env.get(s.env)
            if raw is None or not raw.strip():
                object.__setattr__(self, s.name, s.default)
                self._sources[s.name] = "default"
            else:
                object.__setattr__(self, s.name, _parse(s, raw, s.env))
                self._sources[s.name] = f"environment ({s.env})"

    def __setattr__(self, name: str, value: Any) -> None:
        s = _BY_NAME.get(name)
        if s is None:
            raise AttributeError(f"bytegrad.config has no switch {name!r}; the switches: {', '.join(_BY_NAME)}")
        self._set({name: _parse(s, value, f"bytegrad.config.{name}")})

    def _set(self, values: dict[str, Any]) -> None:
        """Store already-parsed values; refresh the bound constants and call the watchers of those
        that changed."""
        changed = set()
        for name, value in values.items():
            if getattr(self, name) != value:
                changed.add(name)
            object.__setattr__(self, name, value)
            self._sources[name] = "set in Python"
        for name in changed:
            for module, attr in self._bindings.get(name, ()):
                mod = sys.modules.get(module)
                if mod is not None:
                    setattr(mod, attr, values[name])
        called = set()
        for name in changed:
            for fn in self._watchers.get(name, ()):
                if fn not in called:
                    called.add(fn)
                    fn()

    def override(self, **values: Any) -> "_Override":
        """A context manager that sets switches for the block and restores them after it (even when
        it raises): `with bytegrad.config.override(tier="general", check=True): ...`. Every value is
        checked before any is set. The switches are the process's: other threads see them too."""
        parsed = {}
        for name, value in values.items():
            s = _BY_NAME.get(name)
            if s is None:
                raise TypeError(f"bytegrad.config.override() got {name!r}, which is not a switch; "
                                f"the switches: {', '.join(_BY_NAME)}")
            parsed[name] = _parse(s, value, f"bytegrad.config.{name}")
        return _Override(self, parsed)

    def bind(self, name: str, module: str, attr: str) -> Any:
        """The value of switch `name`, and from now on `module.attr` is set to each new value (for a
        module that keeps the switch in a constant: `CHECK = config.bind("check", __name__, "CHECK")`)."""
        self._bindings.setdefault(name, []).append((module, attr))
        return getattr(self, name)

    def on_change(self, names: Iterable[str], fn: Callable[[], None]) -> None:
        """Call `fn()` after a change of any of the switches `names` (once per change)."""
        for name in names:
            if name not in _BY_NAME:
                raise AttributeError(f"bytegrad.config has no switch {name!r}")
            self._watchers.setdefault(name, []).append(fn)

    def source(self, name: str) -> str:
        """Where the value of switch `name` came from: the default, the environment, or Python."""
        return self._sources[name]

    def as_dict(self) -> dict[str, Any]:
        return {s.name: getattr(self, s.name) for s in SWITCHES}

    def __repr__(self) -> str:
        return "bytegrad.config(" + ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items()) + ")"


class _Override:
    __slots__ = ("config", "values", "saved")

    def __init__(self, config: Config, values: dict[str, Any]) -> None:
        self.saved: list[tuple[dict[str, Any], dict[str, str]]] = []
        self.config, self.values = config, values

    def __enter__(self) -> Config:
        c = self.config
        self.saved.append(({n: getattr(c, n) for n in self.values}, {n: c._sources[n] for n in self.values}))
        c._set(self.values)
        return c

    def __exit__(self, *exc: Any) -> None:
        values, sources = self.saved.pop()
        self.config._set(values)
        self.config._sources.update(sources)


def _shown(s: Switch, value: Any) -> str:
    if s.kind == "bool":
        return "1" if value else "0"
    if s.kind == "passes":
        return ",".join(n for n in s.choices if n in value)
    if s.kind == "size":
        return f"{value:g}"
    return "" if value is None else str(value)


def markdown_table() -> str:
    """The table of every switch, as docs/usage.md shows it (`python -m bytegrad config --markdown`)."""
    rows = ["| variable | `bytegrad.config.` | values | default | effect |", "|---|---|---|---|---|"]
    for s in SWITCHES:
        values = {"bool": "`1`/`0`", "size": "MiB", "path": "a directory", "names": "function names, or `1`",
                  "passes": " ".join(f"`{c}`" for c in s.choices) + ", or `all`"}.get(s.kind) \
            or " ".join(f"`{c}`" for c in s.choices)
        default = _shown(s, s.default)
        effect = s.doc + (f" {s.when[0].upper()}{s.when[1:]}." if s.when else "")
        rows.append(f"| `{s.env}` | `{s.name}` | {values} | {f'`{default}`' if default else 'unset'} | {effect} |")
    return "\n".join(rows) + "\n"


def describe(cfg: "Config") -> str:
    """Each switch's value and where it came from (`python -m bytegrad config`)."""
    width = max(len(s.env) for s in SWITCHES)
    return "".join(f"{s.env:<{width}}  {s.name} = {getattr(cfg, s.name)!r}  ({cfg.source(s.name)})\n"
                   for s in SWITCHES)


config = Config()
