"""Every error bytegrad raises for a differentiation problem: `DifferentiationError` and its family.

Each error carries the user's source location (file, line, source text), what was found, and a fix.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from types import FrameType

__all__ = [
    "SourceLoc", "DifferentiationError", "NoRuleError", "MutationError", "NonScalarOutputError", "ComplexOutputError",
    "UnsupportedOpcodeError", "PullbackError", "DuplicateRuleError", "WrtError", "NotImplementedRuleError",
    "RuleCaseError", "AuxOutputError", "NaNError", "BlindCallError", "public_name",
]


class SourceLoc:
    """Where in the user's source an operation sits: immutable, compared and hashed by value.

    Written out rather than a frozen dataclass: `import bytegrad` does not import dataclasses.
    `SourceLoc.of_frame` finds the line number when it is first read (a frame's `f_lineno` scans
    the code's line table: for a module body, thousands of instructions per rule registered)."""

    __slots__ = ("filename", "_lineno", "function", "_at")
    filename: str
    function: str
    _lineno: Optional[int]
    _at: Optional[tuple[Any, int]]  # (code, instruction offset) until the line is looked up

    def __init__(self, filename: str, lineno: Optional[int], function: str) -> None:
        object.__setattr__(self, "filename", filename)
        object.__setattr__(self, "_lineno", lineno)
        object.__setattr__(self, "function", function)
        object.__setattr__(self, "_at", None)

    @classmethod
    def of_frame(cls, frame: Any) -> "SourceLoc":
        """The location a frame is at (its code's file and name, the line of its current instruction)."""
        code = frame.f_code
        loc = cls(code.co_filename, None, code.co_name)
        object.__setattr__(loc, "_at", (code, frame.f_lasti))
        return loc

    @property
    def lineno(self) -> Optional[int]:
        at = self._at
        if at is not None:  # of_frame's: the line of the instruction at that offset (what f_lineno gives)
            code, offset = at
            line = next((ln for start, end, ln in code.co_lines() if start <= offset < end), None)
            object.__setattr__(self, "_lineno", line)
            object.__setattr__(self, "_at", None)
        return self._lineno

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: a SourceLoc is immutable")

    def _key(self) -> tuple[str, Optional[int], str]:
        return (self.filename, self.lineno, self.function)

    def __eq__(self, other: object) -> bool:
        return type(other) is SourceLoc and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"SourceLoc(filename={self.filename!r}, lineno={self.lineno!r}, function={self.function!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (SourceLoc, self._key())

    def source(self) -> str:
        if self.lineno is None:
            return ""
        import linecache  # lazily: it imports tokenize

        return linecache.getline(self.filename, self.lineno).strip()

    def format(self) -> str:
        head = f'File "{self.filename}", line {self.lineno}, in {self.function}'
        text = self.source()
        return f"{head}\n    {text}" if text else head

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno} ({self.function})"


def qualname(fn: Any) -> str:
    """A readable dotted name for a function, ufunc or method."""
    if isinstance(fn, tuple) and len(fn) == 2 and isinstance(fn[0], type):  # (type, method name)
        return f"{qualname(fn[0])}.{fn[1]}"
    mod = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if name is None:  # an instance (`operator.methodcaller('sum')`): its repr, without the module again
        return repr(fn)
    if type(fn).__name__ == "ufunc":
        return f"{_public_module(fn, 'numpy') or _public_module(fn, 'scipy.special') or 'numpy'}.{fn.__name__}"
    if mod in (None, "builtins"):
        return name
    if mod.startswith("numpy"):
        mod = next((m for m in ("numpy.linalg", "numpy.fft") if mod.startswith(m)), "numpy")
    elif mod.startswith("scipy.") and "._" in mod:  # scipy.special._logsumexp.logsumexp: scipy.special's
        mod = _public_module(fn, mod.split("._")[0]) or mod
    return f"{mod}.{name}"


def _public_module(fn: Any, module: str) -> Optional[str]:
    """`module` if it is imported and exports `fn` under its name (never imports it)."""
    import sys

    found = sys.modules.get(module)
    return module if found is not None and getattr(found, getattr(fn, "__name__", ""), None) is fn else None


class DifferentiationError(Exception):
    """Base class: something prevented a correct derivative. The message cites the user's line."""

    #: raised while the user's code runs (not during the reverse pass), so the stack holds its caller
    _cites_caller = True

    def __init__(self, message: str, loc: Optional[SourceLoc] = None, fix: Optional[str] = None) -> None:
        self.loc = loc
        self.problem = message
        self.fix = fix
        self.caller: Optional[SourceLoc] = None  # the user's line that reached `loc`, when loc is a library's
        parts = []
        if loc is not None:
            parts.append(loc.format())
            # inside NumPy's or Python's own code, on the forward pass: say where the user's code called it
            if self._cites_caller and library_file(loc.filename):
                caller = _user_caller()
                if caller is not None:
                    self.caller = caller
                    parts.append("  reached from your code at " + caller.format().replace("\n", "\n  "))
        parts.append(message)
        if fix:
            parts.append(f"  Fix: {fix}")
        super().__init__("\n".join(parts))


_LIBRARY_DIRS: Optional[tuple[str, ...]] = None


def library_file(filename: str) -> bool:
    """Whether `filename` is NumPy's, SciPy's, the standard library's or bytegrad's own code."""
    global _LIBRARY_DIRS
    import sys

    if _LIBRARY_DIRS is None or (len(_LIBRARY_DIRS) < 4 and "scipy" in sys.modules):
        import os
        import sysconfig  # only when an error is being reported

        dirs = [os.path.dirname(os.path.abspath(__file__)), sysconfig.get_paths()["stdlib"]]
        for name in ("numpy", "scipy"):  # (SciPy's once it is imported)
            module_file = getattr(sys.modules.get(name), "__file__", None)
            if module_file:
                dirs.append(os.path.dirname(os.path.abspath(module_file)))
        _LIBRARY_DIRS = tuple(d.rstrip(os.sep) + os.sep for d in dirs)
    return filename.startswith(_LIBRARY_DIRS)


def _user_caller() -> Optional[SourceLoc]:
    """The innermost frame on the current stack that runs the user's code (not NumPy's, Python's
    or bytegrad's), as a SourceLoc; None if there is none."""
    import sys

    frame: Optional[FrameType] = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if not library_file(code.co_filename) and not code.co_filename.startswith("<frozen"):
            return SourceLoc(code.co_filename, frame.f_lineno, code.co_name)
        frame = frame.f_back
    return None


def public_name(fn: Any) -> Optional[str]:
    """The dotted name under which `fn` can be imported from a public module (`numpy.fft.rfft`,
    `scipy.special.expit`: no part starts with `_`), the shortest there is; None if there is none."""
    import sys

    name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or type(fn) is type(sys):
        return None
    mod = getattr(fn, "__module__", None)
    if isinstance(mod, str):  # first the packages above the defining module (`numpy.fft._pocketfft`)
        parts = mod.split(".")
        for i in range(1, len(parts) + 1):
            if parts[i - 1].startswith("_"):
                break
            m = sys.modules.get(".".join(parts[:i]))
            if m is not None and getattr(m, name, None) is fn:
                return f"{m.__name__}.{name}"
    found = [m_name for m_name, m in list(sys.modules.items())  # ufuncs carry no module: look where they are
             if m is not None and "._" not in m_name and not m_name.startswith("_")
             and getattr(m, name, None) is fn]
    return f"{min(found, key=len)}.{name}" if found else None


def _entry_point() -> Any:
    """The function that the user's code called and that, from inside its library code, reached the
    current frame: the outermost library frame below the innermost user frame, as the object its
    module's globals hold under the code's name; None when the stack has no such frame."""
    import os
    import sys

    own = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame: Optional[FrameType] = sys._getframe(1)
    entry = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if not library_file(filename) and not filename.startswith("<frozen"):
            break
        if not filename.startswith(own):
            entry = frame
        frame = frame.f_back
    if frame is None or entry is None:
        return None
    obj: Any = entry.f_globals
    for part in getattr(entry.f_code, "co_qualname", entry.f_code.co_name).split("."):
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part, None)
        if obj is None or part == "<locals>":
            return None
    return obj


class NoRuleError(DifferentiationError):
    """A differentiated value reached a function that has no differentiation rule.

    Raised inside a library's code (NumPy's, the standard library's), the message and fix name the
    public function the user's line called (`numpy.fft.rfft`), not the helper it met inside."""

    def __init__(self, fn: Any, loc: Optional[SourceLoc] = None, detail: str = "") -> None:
        public = public_name(fn)
        name = public or qualname(fn)
        self.fn = fn
        entry = _entry_point() if loc is not None and library_file(loc.filename) else None
        entry_name = (public_name(entry) or qualname(entry)) if entry is not None and entry is not fn else None
        if entry_name is not None and entry_name != name:
            inner = public or (qualname(fn) if isinstance(fn, tuple) else
                               f"the internal {type(fn).__name__} {getattr(fn, '__name__', None) or fn!r}")
            detail = f"{detail} (inside it, the value reached {inner}, which has none either)"
            name = entry_name
        super().__init__(
            f"no differentiation rule for {name}, and a differentiated value was passed to it{detail}.",
            loc,
            f"define one with @bytegrad.rrule({name}) (or bytegrad.scalar_rule for an elementwise "
            f"function), or declare it bytegrad.non_differentiable({name}) if its output does not "
            f"depend smoothly on its inputs.",
        )


class BlindCallError(DifferentiationError):
    """A differentiated value reached Python code that bytegrad did not rewrite (runtime/monitor.py)."""


class NotImplementedRuleError(DifferentiationError):
    """The rule for this function is known to be missing (declared with `not_implemented`)."""


class RuleCaseError(NotImplementedRuleError):
    """A rule covers only some cases of its function (np.cross of 3-vectors, real input), and this call
    is another. A rule raises it without a location; the runtime then differentiates the call through
    the function's own Python implementation where NumPy has one, and otherwise raises it again at the
    user's line."""


#: the fix a RuleCaseError gets at the user's line when its rule gave none
RULE_CASE_FIX = ("compute this part without differentiating through it, or write a rule with "
                 "@bytegrad.rrule(..., override=True) that covers it.")


class MutationError(DifferentiationError):
    """An in-place write into the caller's data, or a read of a value whose memory was overwritten
    since it was computed and cannot be re-derived. (Overwriting a value an operation saved for the
    reverse pass is not an error: the operation is given a copy first.)"""


class NonScalarOutputError(DifferentiationError):
    """`grad` needs a function whose output is a scalar."""


class ComplexOutputError(NonScalarOutputError, TypeError):
    """`grad` needs a real output: the gradient of a complex value is not defined (JAX and PyTorch
    refuse it too); differentiate its real part, its absolute value, or use `bytegrad.vjp`. Also a
    `TypeError`, which is what JAX and autograd raise here."""


class AuxOutputError(DifferentiationError):
    """A function declared `has_aux=True` did not return a pair `(value, aux)`."""


class UnsupportedOpcodeError(DifferentiationError):
    """The function uses a bytecode instruction or construct bytegrad cannot rewrite."""


class PullbackError(DifferentiationError):
    """A rule's pullback failed or returned something of the wrong shape during the reverse pass."""

    _cites_caller = False


class PushforwardError(DifferentiationError):
    """Forward mode's PullbackError: a rule's frule (or another pushforward) failed while tangents
    were pushed through the recorded operations (`jvp`, `jacobian(mode="fwd")`)."""

    _cites_caller = False


class NaNError(DifferentiationError):
    """Debug mode (`bytegrad.config.debug_nans`, BYTEGRAD_DEBUG_NANS=1): an operation produced the
    first NaN or inf of the forward or reverse pass."""


class DuplicateRuleError(DifferentiationError):
    """A second rule was registered for a function without `override=True`."""


class WrtError(DifferentiationError, TypeError):
    """`wrt` names no parameter, or a parameter that cannot be differentiated."""
