"""Tiers: when a gradient runs the general path, and when a compiled program.

The general path (the rewritten function, a hook per operation, a tape) is the reference and the
fallback for everything. Once a signature has run there often enough, one gradient call is a
*capture*: the rewritten function runs with every float argument tracked (so the tape holds every
operation on the arguments, differentiated or not), the bytecode is checked for what a replay
cannot reproduce (compiled/eligibility.py), and compiled/lower_numpy.py turns the tape into one
generated function with guards. The program is then run once on the capture's own arguments and
must agree with the capture's gradient; from the next call on, calls whose guards hold run it.

`BYTEGRAD_TIER` (read at import) or `differentiate(tier=...)` pins the tier:

- `general`: never compile;
- `numpy`: the NumPy back end, compiled on the first call that can be (no warm-up);
- `numba`: the Numba back end (compiled/lower_numba.py) on the first call, where a kernel can
  be written; the NumPy back end elsewhere;
- `auto` (the default): the NumPy back end after `AUTO_AFTER` general-path gradients of a
  signature, so a function called once never pays for a capture; then, once the program has
  taken longer than compiling its Numba twin is expected to (ski rental, `numba_price`, priced by
  the cost model the fused sites share: runtime/costs.py), that
  twin, kept if it is faster on the arguments of the call that made it.

`grad`, `value_and_grad` (with or without `has_aux`) and `pullback` (so `vjp`; without `has_aux`)
calls with positional arguments (or keywords, for gradients: compiled/keywords.py), outside
other derivatives, use programs; a pullback program (NumPy back end only) returns
the output and a `back` that takes any cotangent shaped like the output (others go to the general
path). Forward mode and higher order stay on the general path.
"""
from __future__ import annotations

import time
import types
import weakref
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

from bytegrad._config import config as _config
from bytegrad.compiled.guards import same_value
from bytegrad.rules import pytrees
from bytegrad.compiled.objects import shift_wrt as shift_wrt  # (_differentiated.py's, re-exported)
from bytegrad.runtime.costs import MODEL as COSTS
from bytegrad.runtime.fpwarn import HOLDERS as _FP_HOLDERS, redirect as _redirect, restore as _restore
from bytegrad.runtime.sentinels import DECIDED, FP_ERROR, MISS

if TYPE_CHECKING:  # (compiled/lower_numpy.py is imported by the first capture or load, not by a first gradient)
    from bytegrad.compiled.lower_numpy import Program

_perf = time.perf_counter
_LOGGER: Any = None


def log() -> Any:
    """The `bytegrad` logger (standard `logging`), which records each capture, compile, refusal and
    change of back end with its duration (INFO; a program's build, DEBUG). bytegrad gives it only a
    NullHandler: the application's logging configuration decides what is shown. (Imported at the
    first capture: a first gradient does not load `logging`.)"""
    global _LOGGER
    if _LOGGER is None:
        import logging

        logger = logging.getLogger("bytegrad")
        if not any(type(h) is logging.NullHandler for h in logger.handlers):
            logger.addHandler(logging.NullHandler())
        _LOGGER = logger
    return _LOGGER

__all__ = ["TIERS", "Tiers", "default_tier", "tiers_for"]

TIERS = ("general", "numpy", "numba", "auto")
#: the `wrt` key of a function's pullback programs (`tiers_for(fn, PULLBACK, tier)`)
PULLBACK = "pullback"
#: the first half of the `wrt` key of a function's programs with `has_aux=True`: `(AUX, wrt)`
AUX = "aux"
#: general-path gradients of a signature before `auto` captures it
AUTO_AFTER = 2
#: programs per function (each for other shapes, dtypes or int values); then no more captures
MAX_PROGRAMS = 8
#: captures of one signature whose programs' decisions on data came out otherwise; then no more
MAX_RECAPTURES = 3
#: captures of one signature that raised (the call's error, raised once); then no more
MAX_FAILED_CAPTURES = 3
CONSTANT_TYPES = (int, bool, str, bytes, type(None))


def _check_tier(tier: str, where: str) -> str:
    if tier not in TIERS:
        raise ValueError(f"{where} must be one of {', '.join(TIERS)}, got {tier!r}")
    return tier


def default_tier() -> str:
    """The tier of functions that do not pin one: BYTEGRAD_TIER, else `auto`."""
    return _DEFAULT


_DEFAULT = _config.bind("tier", __name__, "_DEFAULT")  # bytegrad.config.tier (BYTEGRAD_TIER), checked there


class _Signature:
    """What the tiers know of one argument signature (the types of the positional arguments)."""

    __slots__ = ("calls", "reason", "recaptures", "looked", "failed")

    def __init__(self) -> None:
        self.calls = 0                       # general-path gradients so far
        self.reason: Optional[str] = None    # why it is not compiled, once known
        self.recaptures = 0                  # captures after a program's decision came out otherwise
        self.failed = 0                      # captures that raised (the call's error)
        self.looked = False                  # the disk cache was asked for its stored programs


class _Keyword(str):
    """A keyword of a signature (`k=float`), named in `describe` as the argument types are."""

    @property
    def __name__(self) -> str:
        return str(self)


class Run:
    """What the tiers count of one program (compiled/source.py `Program`, an immutable artefact):
    the calls it answered, the time measured in it, its Numba twin's verdict, the signature it
    serves. `Tiers.runs` holds them in the order the programs are tried."""

    __slots__ = ("program", "signature", "calls", "seconds", "upgraded", "why_not_numba", "decided")

    def __init__(self, program: Program, signature: tuple[type, ...] = ()) -> None:
        self.program = program
        self.signature = signature  # the argument types of its capture
        self.calls = 0            # calls it answered
        self.seconds = 0.0        # time spent in it (estimated from a sample), for the ski-rental meter
        self.upgraded = program.pullback  # whether its Numba twin was tried (a pullback program has none)
        self.why_not_numba = program.declined  # what came of that (or why the Numba back end declined)
        self.decided = 0          # calls it refused because a decision on data came out otherwise


class Tiers:
    """The compiled programs of one function and wrt, and the policy that makes them."""

    def __init__(self, fn: types.FunctionType, tier: str, key: Any = None) -> None:
        self.tier = tier
        self.key = key  # the `wrt` key of `tiers_for`: part of the programs' disk key
        self.loaded = 0  # programs loaded from disk (stored by `bytegrad.precompile`)
        self.code = fn.__code__
        self.defaults = fn.__defaults__
        self.kwdefaults = fn.__kwdefaults__
        self.kwstate = dict(fn.__kwdefaults__) if fn.__kwdefaults__ is not None else None
        self.runs: list[Run] = []  # the programs, each with what the policy counts of it
        self.signatures: dict[tuple, _Signature] = {}
        self.compiled_calls = 0
        self.general_calls = 0
        self.capture_s = 0.0
        self.disagreements = 0

    @property
    def programs(self) -> tuple[Program, ...]:
        """The programs, in the order a call tries them (a tuple: a program joins through `runs`)."""
        return tuple(r.program for r in self.runs)

    def run_of(self, program: Program) -> Run:
        """The policy's record of `program` (one of `programs`)."""
        return next(r for r in self.runs if r.program is program)

    def call(self, fn: types.FunctionType, args: tuple, capture: Callable[[tuple], Any], now: bool = False,
             value: bool = True, keywords: Optional[dict] = None) -> Any:
        """`(value, gradient)` from a program, from a capture (`capture(args)`), or MISS: the caller
        runs the general path. `now`: capture without waiting for the warm-up (precompile).
        `value=False`: the caller uses the gradient only (a program may give None for the value).
        `keywords`: the call's keywords that name no positional parameter (`keywords`)."""
        kw = fn.__kwdefaults__
        if fn.__code__ is not self.code or fn.__defaults__ is not self.defaults or kw is not self.kwdefaults \
                or (kw is not None and not same_value(kw, self.kwstate)):  # (the dict written in place)
            type(self).__init__(self, fn, self.tier, self.key)  # the body or defaults were replaced: start again
        if keywords:
            return self.keywords(args, keywords)
        decided = False
        for run in self.runs:
            prog = run.program
            calls = run.calls = run.calls + 1
            timed = calls & 15 == 0 and prog.backend == "numpy" and self.tier == "auto"
            t0 = _perf() if timed else 0.0
            token = _redirect()  # NumPy's floating-point warnings at the user's lines (runtime/fpwarn.py),
            result = MISS  # reported if the result is used (else the general path computes and reports them)
            try:
                result = prog.fn(args, value)
            except Exception:  # noqa: BLE001 - the general path raises it again, with the user's line
                self.general_calls += 1
                return MISS
            finally:
                _restore(token, result is not MISS and result is not DECIDED and result is not FP_ERROR)
            if result is FP_ERROR:  # a Numba kernel met a floating-point error: the general path reports it
                run.calls -= 1      # (compiled/numba_fpflag.py), with no capture
                self.general_calls += 1
                return MISS
            if result is not MISS and result is not DECIDED:
                self.compiled_calls += 1
                if timed:  # one call in 16 is timed: the ski-rental meter of the Numba back end, which
                    # counts the share of the time that a twin could save (not its BLAS calls)
                    run.seconds += 16 * (_perf() - t0) * prog.share
                    if COSTS.pays(run.seconds, numba_price(prog)) and not run.upgraded:
                        return self._upgrade(run, args, capture)
                return result
            run.calls -= 1
            if result is DECIDED:
                decided = True
                run.decided += 1
        key = tuple(map(type, args))
        sig = self.signatures.get(key)
        if sig is None:
            sig = self.signatures[key] = _Signature()
            if self._load_due(sig, now) and self._load(key):  # programs a precompile stored: this call runs one
                return self.call(fn, args, capture, now, value)
        elif sig.calls == 1 and self._load_due(sig, now) and self._load(key):
            return self.call(fn, args, capture, now, value)
        if decided:
            self._decided(sig)
        if sig.reason is None and len(self.runs) < MAX_PROGRAMS and \
                (now or self.tier in ("numpy", "numba") or sig.calls >= AUTO_AFTER):
            return self._capture(sig, args, capture, fn)
        sig.calls += 1
        self.general_calls += 1
        return MISS

    def keywords(self, args: tuple, kwargs: dict, why: Optional[str] = None) -> Any:
        """MISS for a call with keywords that name no positional parameter that no program serves (those
        that can be are served by compiled/keywords.py): it runs on the general path, and its signature (the
        arguments' types, then each keyword's name and type, in order) says why (`why`) in `describe`."""
        key = (*map(type, args), *(_Keyword(f"{k}={type(v).__name__}") for k, v in kwargs.items()))
        sig = self.signatures.get(key)
        if sig is None:
            sig = self.signatures[key] = _Signature()
            sig.reason = why or (f"it is called with the keyword argument{'s' if len(kwargs) > 1 else ''} "
                                 f"{', '.join(kwargs)} (a keyword-only parameter or **kwargs): a call with keywords "
                                 "runs on the general path here")
        sig.calls += 1
        self.general_calls += 1
        return MISS

    def note_general(self, code: Any, defaults: Any, kwdefaults: Any, signature: tuple, served: bool = False) -> None:
        """Count a first gradient of `signature` that ran before this record was made (bytegrad/_lazy_tiers.py)
        as `call` counts one: on the general path, or (`served`) by the signature's stored standalone program
        (bytegrad/_quick.py), a compiled call; not when the body or defaults changed since, nor when the
        signature was seen. Either way its next call looks for the signature's stored programs."""
        if code is self.code and defaults is self.defaults and kwdefaults is self.kwdefaults \
                and signature not in self.signatures:
            self.signatures[signature] = sig = _Signature()
            sig.calls = 1
            if served:
                self.compiled_calls += 1
            else:
                self.general_calls += 1

    def _decided(self, sig: _Signature) -> None:
        """A decision on data came out otherwise than in a program's capture: a capture of this call
        adds a program for the other outcome (a branch that flips between two ways), up to
        MAX_RECAPTURES; a program that such decisions refuse far more often than they let it run
        goes, and so does a signature's compiling once it has recaptured enough."""
        self.runs = [r for r in self.runs if not (r.decided >= 16 and r.decided > 4 * r.calls)]
        sig.recaptures += 1
        if sig.recaptures > MAX_RECAPTURES and sig.reason is None:
            sig.reason = (f"its decisions on data came out otherwise than at capture again after "
                          f"{MAX_RECAPTURES} captures (a value compared or queried changes from call to call)")

    def _capture(self, sig: _Signature, args: tuple, capture: Callable[..., Any],
                 fn: Optional[types.FunctionType] = None) -> Any:
        from bytegrad.compiled.lower_numpy import Program

        t0 = time.perf_counter()
        try:
            result, program = capture(args, ("numba", "numpy") if self.tier == "numba" else ("numpy",))
        except Exception as exc:
            self._failed(sig, exc)
            raise
        finally:
            spent = time.perf_counter() - t0
            self.capture_s += spent
        what = f"{self.code.co_qualname} ({', '.join(t.__name__ for t in map(type, args))}; tier {self.tier})"
        if isinstance(program, Program):
            log().info("captured %s: a %s program of %d operations, in %.3f s", what, program.backend,
                       program.records, spent)
        elif isinstance(program, Pending):
            log().info("captured %s: a pullback program of %d operations, checked at its first back(), in %.3f s",
                       what, program.program.records, spent)
        else:
            log().info("not compiled %s: %s (the capture took %.3f s)", what, program, spent)
        if isinstance(program, Program):
            if len(self.runs) < MAX_PROGRAMS:  # (threads that captured at once: the budget holds)
                self.runs.append(Run(program, tuple(map(type, args))))
            self.compiled_calls += 1
            if self.tier == "auto" and fn is not None:  # for the next process's calls: stored at exit
                from bytegrad.compiled import store as program_store
                program_store.later(self, tuple(map(type, args)), fn)
        elif isinstance(program, Pending):  # adopted or refused by `settle`, later
            program.signature = tuple(map(type, args))
            program.sig = sig
            sig.reason = PENDING
            sig.calls += 1
            self.general_calls += 1
        else:
            sig.reason = program
            sig.calls += 1
            self.general_calls += 1
        return result

    def _failed(self, sig: _Signature, exc: Exception) -> None:
        """A capture of `sig` raised `exc`, as the call's error (once, with the run's effects once): after
        MAX_FAILED_CAPTURES of them, or at once when the capture was abandoned after its body ran, the signature
        is not captured again, and says why (compiled/abandon.py `failed`)."""
        from bytegrad.compiled import abandon

        sig.failed += 1
        why = abandon.failed(exc, sig.failed, MAX_FAILED_CAPTURES)
        if why is not None and sig.reason is None:
            sig.reason = why
            log().info("not compiled %s: %s", self.code.co_qualname, why)

    def _upgrade(self, run: Run, args: tuple, capture: Callable[..., Any]) -> Any:
        """The NumPy program of `run` has run long enough to pay for compiling its Numba twin: capture
        again for the Numba back end (this call's result comes from that capture), time both
        programs on these arguments, and keep the faster (a tie goes to NumPy, which compiles
        nothing more and keeps no Numba state)."""
        from bytegrad.runtime import kernels
        from bytegrad.compiled.lower_numpy import Program

        prog = run.program
        run.upgraded = True
        had_numba = kernels.numba_loaded()
        t0 = _perf()
        try:
            result, twin = capture(args, ("numba",))
        finally:
            spent = _perf() - t0
            self.capture_s += spent
        # what compiling cost, for the next program's price (a twin Numba loaded from its cache says nothing)
        if isinstance(twin, Program) and not kernels.program_from_disk(twin.twin or ()):
            COSTS.learn_program(spent, twin.records, imported=not had_numba, statements=prog.statements)
        what = self.code.co_qualname
        if not isinstance(twin, Program):
            run.why_not_numba = twin
            log().info("%s keeps its NumPy program: no Numba twin (%s; %.3f s)", what, twin, spent)
            return result
        faster, run.why_not_numba = twin_wins(prog, twin, args)
        if faster:
            twin_run = Run(twin, run.signature)
            twin_run.upgraded, twin_run.calls = True, run.calls
            twin_run.why_not_numba = f"moved from its NumPy program, once the meter had paid: {run.why_not_numba}"
            self.runs[self.runs.index(run)] = twin_run
        log().info("%s %s: %s (the twin's capture and compile took %.3f s)", what,
                   "moves to its Numba program" if faster else "keeps its NumPy program",
                   run.why_not_numba, spent)
        self.compiled_calls += 1
        return result

    def agree(self, program: Program, args: tuple, reference: tuple[Any, Any]) -> Optional[str]:
        """None when `program` gives `reference` (value, gradient) on `args`, else why not."""
        try:
            with np.errstate(all="ignore"):  # (the capture reported this call's floating-point warnings)
                got = program.fn(args)
        except Exception as exc:  # noqa: BLE001
            return f"the program raised {type(exc).__name__}: {exc}"
        return self._verdict(got, reference)

    def _verdict(self, got: Any, reference: Any) -> Optional[str]:
        """None when a program's result `got` on its capture's arguments is the capture's `reference`."""
        if got is MISS or got is DECIDED:
            return "the program's guards refused the arguments it was captured from"
        try:
            same = _same(got, reference)
        except Exception:  # noqa: BLE001 - a result the comparison cannot read is not the same
            same = False
        if not same:
            self.disagreements += 1
            return "the program disagreed with the general path on the capture's own arguments"
        return None

    def store(self, programs: Optional[list[Program]] = None, signature: tuple = (),
              fn: Optional[types.FunctionType] = None) -> int:
        """Write the NumPy programs (default: this function's; else `programs`, of `signature`) to the
        disk cache, one entry per argument signature, and, given the function `fn`, each signature's
        standalone form (compiled/quick.py) for a fresh process's first call; returns the number of
        programs stored."""
        from bytegrad.compiled import store as program_store

        by_signature: dict[tuple, list[Program]] = {}
        for prog, sig in ((r.program, r.signature) for r in self.runs) if programs is None else \
                ((p, signature) for p in programs):
            if prog.backend == "numpy" and prog.parts is not None and sig:
                by_signature.setdefault(sig, []).append(prog)
        return sum(program_store.save(self.code, self.key, signature, progs, fn, (self.defaults, self.kwstate))
                   for signature, progs in by_signature.items())

    def _load_due(self, sig: _Signature, now: bool) -> bool:
        """Whether this call of `sig` looks on disk for its stored programs: the first call under a
        pinned tier (or a precompile's); under `auto`, the second (a signature called once runs the
        general path, whose rewrite a warm cache holds: loading is paid only where it is used)."""
        if sig.looked or not (sig.calls or now or self.tier != "auto"):
            return False
        sig.looked = True
        return True

    def _load(self, signature: tuple) -> bool:
        """Programs of this signature from the disk cache, if a precompile stored them and every
        reference in them still holds; they join this function's programs."""
        from bytegrad.compiled import store as program_store
        from bytegrad import diskcache

        key = program_store.key(self.code, self.key, signature, (self.defaults, self.kwstate))
        payload = diskcache.load(program_store.NAMESPACE, key) if key is not None else None
        progs = program_store.loads(payload) if payload is not None else None
        if not progs:
            return False
        if self.tier == "numba":  # a precompile's Numba twin: its capture loads it from Numba's cache
            progs = [p for p in progs if not p.twin]
        for prog in progs[:MAX_PROGRAMS - len(self.runs)]:
            self.runs.append(Run(prog, signature))
            self.loaded += 1
        return True

    def settle(self, pending: "Pending", out: Any, out_bar: Any, grads: Any) -> None:
        """A pullback program waiting for its check (see `Pending`) meets the general path's
        `back(out_bar) = grads` of its capture: adopted if it gives the same output (`(output, aux)`
        with has_aux) and cotangents, refused if not; a cotangent the program does not take leaves
        it waiting."""
        if pending.sig is None or pending.sig.reason is not PENDING:
            return
        program = pending.program
        try:
            with np.errstate(all="ignore"):  # (the general path reported this call's floating-point warnings)
                got = program.fn(pending.args)
                if got is not MISS and got is not DECIDED:  # (output, back) or (output, back, aux)
                    got = (got[0] if len(got) == 2 else (got[0], got[2]), got[1](out_bar))
                if got[1] is MISS:
                    return  # a cotangent not shaped as at capture says nothing: the next one may
        except Exception as exc:  # noqa: BLE001 - a rule that needs a tape, say: the program is refused
            pending.sig.reason = f"the program raised {type(exc).__name__}: {exc}"
            log().info("%s's pullback program is refused: %s", self.code.co_qualname, pending.sig.reason)
            return
        why = pending.sig.reason = self._verdict(got, (out, grads))
        if why is None and len(self.runs) < MAX_PROGRAMS:
            self.runs.append(Run(program, pending.signature))
        log().info("%s's pullback program %s", self.code.co_qualname,
                   "runs from now on" if why is None else f"is refused: {why}")

    def describe(self) -> dict[str, Any]:
        return {
            "tier": self.tier,
            "programs": [{"backend": p.backend, "operations": p.records, "guards": [g.describe() for g in p.guards], "calls": r.calls,
                          "decided_otherwise": r.decided,
                          **({"numba": note} if (note := numba_note(r, self.tier)) else {}),
                          **({"numba_kernels": twin_note(p)} if p.twin else {})}
                         for r in self.runs for p in (r.program,)],
            "not_compiled": {", ".join(t.__name__ for t in key): s.reason
                             for key, s in self.signatures.items() if s.reason is not None},
            "compiled_calls": self.compiled_calls,
            "general_calls": self.general_calls,
            "capture_s": round(self.capture_s, 6),
            "loaded_from_disk": self.loaded,
            "disagreements": self.disagreements,  # programs refused for not giving the capture's result
        }


_FP_HOLDERS.add(Tiers.call.__code__)  # (a program's warnings wait for its result: runtime/fpwarn.py HOLDERS)


def numba_price(prog: Program) -> float:
    """What compiling `prog`'s Numba twin is expected to cost here, in seconds (the one cost model,
    runtime/costs.py, prices it: importing Numba, then compiling the twin or loading a precompile's)."""
    from bytegrad.runtime import kernels

    if kernels.disabled():
        return float("inf")
    load = kernels.program_load_price(prog.twin) if prog.twin else None  # a precompile's twin, on disk
    return COSTS.program_price(prog.rolled or prog.records, load, kernels.numba_loaded(),  # (rolled: compiled/roll.py)
                               getattr(prog, "statements", 0))


def twin_wins(prog: Program, twin: Program, args: tuple) -> tuple[bool, str]:
    """Whether the Numba twin `twin` replaces the NumPy program `prog` (it is at least 5% faster on
    `args`, the best of 5 runs each), and the note that says so (`numba_note`). The tier-up's one
    timing: tests replace it to drive the meter without a clock."""
    mine, theirs = _time(prog.fn, args), _time(twin.fn, args)
    return COSTS.faster(mine, theirs), f"Numba's program took {theirs * 1e6:.1f} us against NumPy's {mine * 1e6:.1f} us"


def numba_note(run: Run, tier: str) -> str:
    """What came of a NumPy program's Numba twin under the automatic tier, or where its meter stands."""
    prog = run.program
    if run.why_not_numba or prog.backend != "numpy" or tier != "auto" or run.upgraded:
        return run.why_not_numba
    return (f"not tried yet: {run.seconds:.2g} s of its time counted against the twin's price, "
            f"{numba_price(prog):.2g} s (the meter counts {prog.share:.0%} of its time: what a twin could save)")


def twin_note(prog: Program) -> str:
    """Where a program's Numba kernels (or its twin's) come from, for `explain` and `stats()`."""
    from bytegrad.runtime import kernels

    if prog.backend == "numpy":
        if kernels.program_load_price(prog.twin or ()) is None:
            return "its Numba twin was precompiled, and is no longer on disk"
        return "its Numba twin is on disk (precompiled): tiering up loads it from Numba's cache"
    came = kernels.program_from_disk(prog.twin or ())
    return {True: "loaded from Numba's disk cache", False: "compiled in this process (and cached on disk)",
            None: "not run yet"}[came]


#: the reason of a signature whose pullback program waits for its check
PENDING = "its pullback program waits for the first call of a back() to be checked against it"


class Pending:
    """A pullback program not yet checked: its capture's `back`, on its first call, compares the
    program with itself (`Tiers.settle`), so the check runs when the general path would run the
    reverse pass anyway, never earlier (a pullback may be expensive, or raise)."""

    __slots__ = ("program", "args", "sig", "signature")

    def __init__(self, program: Program, args: tuple) -> None:
        self.program = program
        self.args = args
        self.sig: Optional[_Signature] = None
        self.signature: tuple[type, ...] = ()  # the argument types of its capture


def _time(fn: Callable[[tuple], Any], args: tuple, repeat: int = 5) -> float:
    """The best of `repeat` runs of a program on `args`; inf where its guards refuse them (a MISS is
    fast, and must not win the comparison with a twin that computes)."""
    best = float("inf")
    with np.errstate(all="ignore"):  # (timing runs: the call's own warnings were reported once)
        for _ in range(repeat):
            t0 = _perf()
            out = fn(args)
            if out is MISS or out is DECIDED:
                return float("inf")
            best = min(best, _perf() - t0)
    return best


def _same(a: Any, b: Any) -> bool:
    """Results equal to 1e-12 relative (the same operations in the same order: usually bit for bit);
    float32 results to float32 rounding (`F32_RTOL`): the Numba back end's loop computes them in
    float64 where the general path rounds each operation to float32."""
    ta = type(a)
    if ta is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if a is None:
        return True
    if ta is str or ta is bytes or ta is bool or ta is int:
        return a == b
    if hasattr(ta, "__dataclass_fields__") and type(getattr(a, "__dict__", None)) is dict:  # (a dataclass's gradient)
        return _same(a.__dict__, b.__dict__)
    node = pytrees.node_for(a)
    if node is not None:  # a registered pytree's gradient: its children and aux
        (ca, xa), (cb, xb) = pytrees.flatten(node, a), pytrees.flatten(node, b)
        return same_value(xa, xb) and _same(ca, cb)
    x, y = np.asarray(a), np.asarray(b)
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    if x.dtype == np.float32:  # relative to the array's largest element too: a sum that cancels to near 0
        finite = np.abs(y[np.isfinite(y)])
        scale = float(finite.max()) if finite.size else 0.0
        return bool(np.allclose(x, y, rtol=F32_RTOL, atol=F32_RTOL * scale, equal_nan=True))
    return bool(np.allclose(x, y, rtol=1e-12, atol=0.0, equal_nan=True))


#: how far a float32 program may be from the general path: a few hundred float32 roundings, as in
#: the 100-operation chains of bench/cases.py (what the benchmark checks float32 results to)
F32_RTOL = 1e-4


#: function -> {(wrt, tier): Tiers}; functions are weakly held (programs die with them)
_BY_FUNCTION: "weakref.WeakKeyDictionary[types.FunctionType, dict[Any, Tiers]]" = weakref.WeakKeyDictionary()


def tiers_for(fn: types.FunctionType, wrt: Any, tier: Optional[str]) -> Optional[Tiers]:
    """The programs of `fn` differentiated at `wrt`, shared by every `grad(fn)` of it; None when the
    tier is `general`."""
    tier = _DEFAULT if tier is None else _check_tier(tier, "tier")
    if tier == "general":
        return None
    table = _BY_FUNCTION.get(fn)
    if table is None:
        table = _BY_FUNCTION[fn] = {}
    key = (wrt if not isinstance(wrt, list) else tuple(wrt), tier)
    t = table.get(key)
    if t is None:
        t = table[key] = Tiers(fn, tier, key[0])
    return t


def capture_positions(args: tuple) -> tuple[int, ...]:
    """The arguments a capture tracks: everything but ints, strings, flags and None (their values
    are guarded instead)."""
    return tuple(p for p, a in enumerate(args) if type(a) not in CONSTANT_TYPES)
