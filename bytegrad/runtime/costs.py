"""One cost model for compiling with Numba: the fused sites' kernels (runtime/fused.py,
runtime/kernels.py) and the compiled tier's Numba twins (compiled/policy.py) price, learn and
decide here, from one set of figures.

Both tiers rent NumPy until what they spent there would have paid for Numba (ski rental, `pays`):
a fused site until its time (times its backward's share) reaches `kernel_price`, a compiled NumPy
program until its metered time reaches `program_price`. Then a twin replaces its NumPy program
only where it is `faster`, and a site's kernels replace its rules where they `kernel_wins`. A
program's meter counts the share of its time a twin could save (`savable_share`).

The figures, in seconds (`CostModel.seconds`):

- `import`: importing Numba (paid once a process, by whichever tier first needs it);
- `compile`, `load`: compiling one kernel function, or loading it from Numba's disk cache;
- `fixed`, `per_op`: compiling a program twin, a fixed part and a part per operation;
- `per_statement`: and a part per array statement of its kernel (compiled/numba_price.py: an
  outlined statement compiles in about 11 ms, RK4 programs of 148-592 statements).

Defaults are from a 2-core VM (`import numba` 0.35-0.45 s; the first module a process loads from
Numba's cache 0.73-0.81 s for two functions, later loads cheap; compiling 0.4-0.5 s per kernel
function; 0.4-1.4 s for the 100-250-operation program twins of bench/cases.py). What this process
measures replaces them (`learn_*`); `import`, `compile` and `load` are kept in the disk cache for
the next process on this machine (`remembered`, `remember`), which prices by them rather than by
the defaults (a slow machine priced by the quick machine's figures tiers up at a loss: a 200-step
cold start after `precompile` took 2.0x NumPy's time instead of 1.0x).

The model decides on figures it is given, never on a clock of its own (tests/test_costs.py feeds
it figures); the callers measure and say whether Numba is loaded and what is on disk.
"""
from __future__ import annotations

import marshal
from typing import Iterable, Optional

__all__ = ["CostModel", "KERNEL_TIE", "MODEL", "TWIN_MARGIN"]

#: the defaults (see the module's docstring)
DEFAULTS: dict[str, float] = {"import": 0.45, "compile": 0.40, "load": 0.20, "fixed": 0.2, "per_op": 0.0025,
                             "per_statement": 0.011}
#: the figures a later process takes from the disk cache (a program twin's are learned anew each process)
PERSISTED = ("import", "compile", "load")
#: a twin replaces its NumPy program where it takes less than this share of its time
TWIN_MARGIN = 0.95
#: a fused site's kernel within this factor of the NumPy tier's time counts as a tie, and ties go to
#: the kernel: the difference is below the timing noise, and the kernel keeps less memory alive (only
#: what its backward reads, against every intermediate of the per-operation rules)
KERNEL_TIE = 1.05
#: one program compile moves the per-operation figure at most to this (a first compile in a process
#: also pays for Numba's own start, LLVM and BLAS bindings: a 5-operation Dense kernel took 7.8 s
#: here, which says nothing about the next program's size), and never below the floor
PER_OP_MAX, PER_OP_MIN = 0.01, 0.0005
_KEY = "tier-up-seconds"
#: what a NumPy program's operations cost, roughly, on this machine kind: per record, its Python
#: (forward and reverse); per element of an array step, its NumPy passes; per multiply-add of a
#: contraction, BLAS's (`savable_share`)
PER_RECORD_S, PER_ELEMENT_S, PER_MAC_S = 1.5e-6, 1e-9, 0.025e-9


class CostModel:
    """The figures, what they price, and how a measurement corrects them."""

    def __init__(self, seconds: Optional[dict[str, float]] = None, persist: bool = False) -> None:
        self.seconds = dict(DEFAULTS)
        if seconds:
            self.seconds.update(seconds)
        #: whether this model reads and writes the disk cache (the process's model does; a test's not)
        self.persist = persist
        self.read = not persist  # the disk cache's figures taken (once, when first priced)

    # -- prices --

    def kernel_price(self, n_functions: int, on_disk: bool, numba_loaded: bool) -> float:
        """Seconds compiling (or, `on_disk`, loading) a fused site's `n_functions` kernels costs now."""
        s = self._figures()
        return (0.0 if numba_loaded else s["import"]) + (s["load"] if on_disk else s["compile"]) * n_functions

    def load_price(self, n_modules: int) -> float:
        """Seconds loading `n_modules` kernel modules from Numba's cache costs, once Numba is imported."""
        return self._figures()["load"] * n_modules

    def build_price(self, records: int, statements: int = 0) -> float:
        """Seconds compiling a program twin of `records` operations and `statements` array statements
        (compiled/numba_price.py) costs, once Numba is imported."""
        s = self._figures()
        return s["fixed"] + s["per_op"] * records + s["per_statement"] * statements

    def program_price(self, records: int, load: Optional[float], numba_loaded: bool, statements: int = 0) -> float:
        """Seconds a program twin costs now: importing Numba unless `numba_loaded`, then compiling
        it, or loading it where that is cheaper (`load`: `load_price` of its modules where all are
        on disk, a precompile's twin; None where one is not)."""
        build = self.build_price(records, statements)
        return (0.0 if numba_loaded else self._figures()["import"]) + (build if load is None else min(load, build))

    @staticmethod
    def savable_share(steps: Iterable[tuple[bool, float]]) -> float:
        """The share of a NumPy program's time a Numba twin could save, from its steps: each
        `(contraction, work)`, work a contraction's multiply-adds (m k n: the twin runs it in the
        same BLAS, forward and twice in reverse) or another step's elements (its NumPy passes, saved);
        each step's Python is saved too. A program's ski-rental meter counts only this share of its
        time, so one that spends it in BLAS (an MLP's large layers) never pays for a twin."""
        blas = rest = 0.0
        for contraction, work in steps:
            if contraction:
                blas += 3 * work * PER_MAC_S
            else:
                rest += 3 * work * PER_ELEMENT_S
            rest += PER_RECORD_S
        return rest / (rest + blas) if rest + blas > 0 else 1.0

    # -- decisions --

    @staticmethod
    def pays(spent: float, price: float) -> bool:
        """Ski rental: whether `spent` seconds rented (on NumPy) would have paid `price` (Numba's)."""
        return spent >= price

    @staticmethod
    def faster(numpy_s: float, twin_s: float) -> bool:
        """Whether a twin that took `twin_s` replaces a NumPy program that took `numpy_s` (best of
        runs each): it must be at least 5% faster; a tie goes to NumPy, which compiles nothing more."""
        return twin_s < TWIN_MARGIN * numpy_s

    @staticmethod
    def kernel_wins(numpy_s: float, kernel_s: float) -> bool:
        """Whether a fused site's kernels (`kernel_s`) replace its NumPy rules (`numpy_s`): a tie
        within KERNEL_TIE goes to the kernel (unlike a twin's: see KERNEL_TIE)."""
        return kernel_s < numpy_s * KERNEL_TIE

    # -- learning --

    def learn_import(self, seconds: float) -> None:
        """Importing Numba took `seconds` in this process."""
        self.seconds["import"] = seconds

    def learn_kernels(self, per_function: float, loaded: bool) -> None:
        """A fused site's kernels took `per_function` seconds each to load (`loaded`) or compile."""
        self.seconds["load" if loaded else "compile"] = per_function

    def learn_program(self, seconds: float, records: int, imported: bool, statements: int = 0) -> None:
        """A program twin of `records` operations took `seconds` to capture and compile, importing
        Numba too where `imported` (its figure is taken off, and so are its `statements`' at
        `per_statement`). One compile moves the per-operation figure halfway to what it measured,
        at most to PER_OP_MAX, never below PER_OP_MIN."""
        s = self._figures()
        seconds -= (s["import"] if imported else 0.0) + s["per_statement"] * statements
        per_op = min(PER_OP_MAX, max(0.0, seconds - s["fixed"]) / max(records, 1))
        s["per_op"] = max(PER_OP_MIN, 0.5 * s["per_op"] + 0.5 * per_op)

    # -- the disk cache --

    def _figures(self) -> dict[str, float]:
        if not self.read:
            self.remembered()
        return self.seconds

    def remembered(self) -> None:
        """Take the figures the last process that measured them on this machine kept (read once a
        process, when something is first priced: never in a first gradient)."""
        self.read = True
        if not self.persist:
            return
        try:
            from bytegrad import diskcache
            payload = diskcache.load("costs", _KEY)
            kept = marshal.loads(payload) if payload is not None else None
        except Exception:  # noqa: BLE001 - a cache problem never stops a gradient
            return
        if isinstance(kept, dict):
            for k, v in kept.items():
                if k in PERSISTED and type(v) is float and 0.0 <= v < 60.0:
                    self.seconds[k] = v

    def remember(self, figures: dict[str, float]) -> None:
        """Take `figures` (measured in this process) and keep them for the next processes."""
        if not self.read:
            self.remembered()  # older figures, for what this process has not measured
        self.seconds.update(figures)
        if not self.persist:
            return
        try:
            from bytegrad import diskcache
            kept = {k: self.seconds[k] for k in PERSISTED}
            diskcache.store("costs", _KEY, marshal.dumps(kept), label="tier-up prices")
        except Exception:  # noqa: BLE001
            pass


#: the process's model: both tiers price and learn here
MODEL = CostModel(persist=True)
