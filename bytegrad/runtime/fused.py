"""Fused sites at run time: one hook for a whole elementwise tree, and its tiering.

The rewrite (transform/fusion.py) replaces a tree such as `np.tanh(x @ W + b)` by
`fused_hook(tape, site, (np.tanh, <x @ W>, b))`: the tree's callables and leaf values, in push order.
Two ways to run it:

- NumPy tier (every site starts here, and stays here for anything unusual): the tree's operations
  run one by one through the ordinary hooks, exactly as unfused code would (same rules, same tape
  nodes, same errors). The time spent is recorded.
- Kernel tier: one Numba ufunc computes the output and records one tape node whose backward runs
  one ufunc per group of leaves, or one gufunc computes the output and its partials
  (runtime/kernels.py). Used only when the callables are the ones the rewrite saw, every leaf is
  a float32/float64 ndarray (not a subclass) or a Python/NumPy scalar of one dtype, and the tape
  has seen no in-place writes.

Tiering is ski rental: a site is compiled once the time it has spent on the NumPy tier (forward,
times `BACKWARD_FACTOR` for its reverse pass) exceeds what compiling would cost now (importing
Numba if it is not yet, and compiling or loading the kernels). A compiled site then compares the
two tiers, per dtype and size class, over whole gradients (a `Trial`), and keeps the faster, so
fusion never makes a gradient slower than the rules it replaces (a tie within `TIE`, below timing
noise, goes to the kernel: it keeps less memory alive). Compilation runs in the calling thread.

On a tape swept once (a plain `grad`), both tiers let go of leaf temporaries that nothing reads
again (`W @ x` in `tanh(W @ x + b)`: `_release_temporaries`), and the NumPy tier of its
intermediates too (`_release_intermediates`), as soon as the tree has run.
"""
from __future__ import annotations

import math
import sys
import time
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

import numpy as np

from bytegrad import _operators
from bytegrad._config import config as _config
from bytegrad.runtime.tape import SLIM_MIN_SIZE, Tape, sweep, tls

if TYPE_CHECKING:
    from bytegrad.runtime import kernels
    from bytegrad.runtime.costs import CostModel

_ndarray = np.ndarray
_perf = time.perf_counter
_getrefcount = sys.getrefcount
BACKWARD_FACTOR = 3.0
# runtime/costs.py (the cost model) and runtime/kernel_records.py (the kernel tier's records) are
# imported when first needed (`_rents`, `_kernel_records`): a first gradient, whose sites have spent less
# than PRICE_FLOOR, imports neither (0.3 ms of it, warm cache). `TIE`, `FUSED`, `PARTIALS`: `__getattr__`.
_COSTS: Optional[CostModel] = None
_FUSED: Any = None
_PARTIALS: Any = None
#: seconds: no kernel module costs less to get than this (loading a forward and a backward ufunc).
#: Until a site has spent this much, ski rental does not even estimate its price, which would
#: import runtime/kernels.py (kept out of a process's first gradients).
PRICE_FLOOR = 0.02
_FLOAT_DTYPES = {np.dtype(np.float64): "float64", np.dtype(np.float32): "float32"}
_SCALARS = {float: None, int: None, np.float64: "float64", np.float32: "float32"}

#: "auto" (ski rental, then the faster tier per size class, see `Trial`), "always" (compile on the first call and
#: always use the kernel where it applies: for tests and `precompile`), "never"
POLICY = _config.bind("fusion", __name__, "POLICY")
#: where a site that tiers up compiles: "sync" (in the calling thread, on its next call) or
#: "background" (a thread, while the site keeps running on NumPy). sync is the default: on the
#: 2-core machines measured, a compile thread contending for the GIL slowed the NumPy tier
#: more than it saved (bench/results/hotpath.md, "Compiling in a background thread").
COMPILE = _config.bind("compile", __name__, "COMPILE")


class Node(NamedTuple):
    """One operation of a fused tree. `args` refer to leaves ("L", j), earlier nodes ("N", k) or
    constants ("C", value); `hook` is the ordinary hook that runs it on the NumPy tier."""

    kind: str        # "bin" | "neg" | "call"
    fn: Any          # operator.add, np.tanh, ...
    hook: Any
    args: tuple
    site: Any


class FusedSite:
    """A constant of rewritten code: the tree, its operand layout, and its tiering state."""

    __slots__ = ("site", "operands", "nodes", "leaf_names", "n_leaves", "leaf_pos", "callee_pos",
                 "expr", "spent", "numpy_calls", "kernel_calls", "compile_s", "state", "plans",
                 "kernels", "choice", "price", "numpy_fn", "__weakref__")

    def __init__(self, site: Any, operands: tuple[int, ...], nodes: tuple[Node, ...],
                 leaf_names: tuple[str, ...]) -> None:
        self.site = site
        self.operands = operands      # per stack operand: leaf index >= 0, or -1 - node index
        self.nodes = nodes
        self.leaf_names = leaf_names
        self.n_leaves = len(leaf_names)
        first: dict[int, int] = {}
        callee: dict[int, int] = {}
        for pos, ref in enumerate(operands):
            if ref >= 0:
                first.setdefault(ref, pos)
            else:
                callee[-1 - ref] = pos
        self.leaf_pos = tuple(first[j] for j in range(self.n_leaves))
        self.callee_pos = tuple(callee.get(k, -1) for k in range(len(nodes)))
        self.expr = _expr(nodes, leaf_names)
        self.spent = 0.0              # seconds on the NumPy tier (forward)
        self.numpy_calls = 0
        self.kernel_calls = 0
        self.compile_s = 0.0
        self.state = "numpy"          # numpy | compiling (background) | kernel | disabled
        self.plans: dict[Any, kernels.Plan] = {}
        self.kernels: dict[Any, Optional[kernels.Kernels]] = {}
        self.choice: dict[Any, bool | Trial] = {}  # (dtype, active, size class) -> use the kernel (or its Trial)
        self.price = PRICE_FLOOR           # seconds: the compile cost to beat (see _maybe_tier_up)
        self.numpy_fn: Any = None          # the NumPy tier of this tree, generated on first use

    def __repr__(self) -> str:
        return f"<fused site {self.expr} at {self.site.filename}:{self.site.lineno}>"

    def __reduce__(self) -> Any:  # the tiering state is per process
        return (FusedSite, (self.site, self.operands, self.nodes, self.leaf_names))


def _expr(nodes: tuple[Node, ...], names: tuple[str, ...]) -> str:
    shown: list[str] = []
    sym = _operators.SYMBOL

    def ref(r: tuple) -> str:
        return names[r[1]] if r[0] == "L" else shown[r[1]] if r[0] == "N" else repr(r[1])

    def bare(s: str) -> str:
        if not (s.startswith("(") and s.endswith(")")):
            return s
        depth = 0
        for i, c in enumerate(s):
            depth += (c == "(") - (c == ")")
            if depth == 0 and i < len(s) - 1:
                return s  # "(a) + (b)": the outer parentheses are not one pair
        return s[1:-1]

    for n in nodes:
        if n.kind == "bin":
            shown.append(f"({ref(n.args[0])} {sym[n.fn]} {ref(n.args[1])})")
        elif n.kind == "neg":
            shown.append(f"(-{ref(n.args[0])})")
        else:
            shown.append(f"{getattr(n.fn, '__name__', 'f')}({', '.join(bare(ref(a)) for a in n.args)})")
    return bare(shown[-1])


# ---- the hook --------------------------------------------------------------------------------


def fused_hook(tape: Optional[Tape], fs: FusedSite, ops: tuple) -> Any:
    state = fs.state
    if tape is None or state == "disabled" or tape.capturing:  # (a capture records each op)
        return run_numpy(tape, fs, ops)
    if state == "kernel":
        dtype = _kernel_dtype(fs, ops)
        # not inside a nested derivative's forward pass (grad of grad, hvp, hessian): the kernel's
        # partials are computed unrecorded, so the outer derivative would take them for constants
        if dtype is not None and not tape.owners and not tape.stale and not getattr(tls, "nesting", 0):
            leaves = [ops[p] for p in fs.leaf_pos]
            ids = tape.ids
            parents = tuple(ids.get(id(v)) for v in leaves)
            active = tuple(p is not None for p in parents)
            size = _size(leaves)
            use = fs.choice.get((dtype, active, size))
            if use is None:
                use = _decide(fs, dtype, active, size)
            if use.__class__ is Trial:
                use = use.arm(tape, fs, ops, leaves)
            if use:
                return _run_kernel(tape, fs, dtype, active, leaves, parents)
            del leaves  # the NumPy tier releases leaf temporaries that only `ops` and the tape hold
        fs.numpy_calls += 1
        return run_numpy(tape, fs, ops)
    t0 = _perf()  # still on the NumPy tier: the time spent is the ski-rental meter
    out = run_numpy(tape, fs, ops)
    fs.spent += _perf() - t0
    fs.numpy_calls += 1
    _maybe_tier_up(fs, ops)
    return out


def run_numpy(tape: Optional[Tape], fs: FusedSite, ops: tuple) -> Any:
    """The NumPy tier: each operation through its ordinary hook (the kernels' twin), by a small
    function generated once per site (straight-line calls: no interpretation of the tree).

    On a tape swept once, the tree's intermediates and leaf temporaries that its reverse steps do
    not read are let go as soon as the tree has run (`_release_intermediates`), so the NumPy tier
    keeps alive what the kernel tier does: without that, `tanh(W @ x + b)` on this tier held three
    arrays of the output's size until the reverse pass."""
    fn = fs.numpy_fn
    if fn is None:
        fn = fs.numpy_fn = _numpy_function(fs)
    if tape is None or not tape.lean or tape.owners or tape.stale:
        return fn(tape, ops)
    start = len(tape.values)
    out = fn(tape, ops)
    _release_intermediates(tape, fs, ops, start)
    return out


def _release_intermediates(tape: Tape, fs: FusedSite, ops: tuple, start: int) -> None:
    """After the NumPy tier pushed records `start`.. on a lean tape: slim them, last first (a
    record's slimmed arguments no longer hold its producer's output), release each intermediate
    value that then only the tape holds, and then the leaf temporaries (`_release_temporaries`)."""
    nodes = tape.nodes
    values = tape.values
    ids = tape.ids
    last = len(values) - 1
    for k in range(last, start - 1, -1):
        node = nodes[k]
        v = values[k]
        slim = node[0].slim if node is not None else None
        if slim is None or v.__class__ is not _ndarray or v.size < SLIM_MIN_SIZE:
            continue  # (an elementwise tree's intermediates are no larger than its output)
        node, kept = slim(node, v)
        # the tree's output stays: the code holds it; an intermediate only the tape holds goes
        tape.replace(k, node, kept if k != last and _getrefcount(v) == _INTERMEDIATE_REFS + 1 else v)
    v = None
    leaves = [ops[p] for p in fs.leaf_pos]
    _release_temporaries(tape, leaves, tuple(ids.get(id(v)) for v in leaves), (None,) * len(leaves))


def _numpy_function(fs: FusedSite) -> Any:
    names: dict[str, Any] = {}
    lines = ["def numpy_tier(tape, ops):"]
    for k, node in enumerate(fs.nodes):
        names[f"h{k}"], names[f"s{k}"] = node.hook, node.site
        args = []
        for t, v in node.args:
            if t == "L":
                args.append(f"ops[{fs.leaf_pos[v]}]")
            elif t == "N":
                args.append(f"t{v}")
            else:
                names[f"c{k}_{len(args)}"] = v
                args.append(f"c{k}_{len(args)}")
        if node.kind == "call":
            args.insert(0, f"ops[{fs.callee_pos[k]}]")
        lines.append(f"    t{k} = h{k}(tape, s{k}, {', '.join(args)})")
    lines.append(f"    return t{len(fs.nodes) - 1}")
    exec(compile("\n".join(lines), f"<bytegrad fused site {fs.expr}>", "exec"), names)  # noqa: S102
    return names["numpy_tier"]


def _kernel_dtype(fs: FusedSite, ops: tuple) -> Optional[str]:
    """The one float dtype of the leaves, or None when the kernel tier cannot take them."""
    for k, pos in enumerate(fs.callee_pos):
        if pos >= 0 and ops[pos] is not fs.nodes[k].fn:
            return None
    dtype = None
    for p in fs.leaf_pos:
        v = ops[p]
        t = type(v)
        if t is _ndarray:
            d = _FLOAT_DTYPES.get(v.dtype)
            if d is None:
                return None
        elif t in _SCALARS:
            d = _SCALARS[t]
            if d is None:
                continue
        else:
            return None
        if dtype is None:
            dtype = d
        elif d != dtype:
            return None
    return dtype


def _size(leaves: list[Any]) -> int:
    n = 1
    for v in leaves:
        if type(v) is _ndarray and v.size > n:
            n = v.size
    return int(math.log2(n)) if n > 1 else 0


# ---- tiering ---------------------------------------------------------------------------------


def _plan_for(fs: FusedSite, dtype: str, active: tuple[bool, ...]) -> kernels.Plan:
    key = (dtype, active)
    p = fs.plans.get(key)
    if p is None:
        from bytegrad.runtime import kernels
        p = fs.plans[key] = kernels.plan(fs.nodes, fs.n_leaves, dtype, active)
    return p


def _maybe_tier_up(fs: FusedSite, ops: tuple) -> None:
    """Ski rental. `fs.price` is the compile cost last estimated for this site (at first a lower
    bound), so the estimate, which generates the kernel source and looks for it on disk, is only
    made when the time spent crosses it: not on every call of a hot site."""
    if fs.state != "numpy":
        return
    if POLICY == "never" or (POLICY != "always" and _rents(fs)):
        return
    from bytegrad.runtime import kernels
    if kernels.disabled():
        fs.state = "disabled"
        return
    dtype = _kernel_dtype(fs, ops)
    if dtype is None:
        return
    p = _plan_for(fs, dtype, tuple(True for _ in range(fs.n_leaves)))
    if POLICY != "always":
        fs.price = kernels.cost_estimate(p)
        if _rents(fs):
            return
        if COMPILE == "background":
            _compile_in_background(fs, p, dtype)
            return
    fs.state = "kernel"  # kernels compile on the next eligible call, for its activity pattern


def _rents(fs: FusedSite) -> bool:
    """Whether `fs` keeps renting NumPy: its meter (times its backward's share) has not paid its price
    (the cost model's `pays`, which is `spent >= price`: read here until the model is imported, so that a
    site below its price, as every site of a first gradient is, does not import it; tests/test_costs.py)."""
    spent = fs.spent * BACKWARD_FACTOR
    if _COSTS is None and spent < fs.price:
        return True
    return not _cost_model().pays(spent, fs.price)


def _cost_model() -> CostModel:
    global _COSTS
    if _COSTS is None:
        from bytegrad.runtime.costs import MODEL as _COSTS
    return _COSTS  # type: ignore[return-value]  # (the import above binds the global)


def _kernel_records() -> tuple[Any, Any]:
    global _FUSED, _PARTIALS
    if _FUSED is None:
        from bytegrad.runtime.kernel_records import FUSED, PARTIALS
        _FUSED, _PARTIALS = FUSED, PARTIALS
    return _FUSED, _PARTIALS


def __getattr__(name: str) -> Any:
    if name == "TIE":  # a kernel within this factor of the NumPy tier's time is a tie (costs.py `kernel_wins`)
        from bytegrad.runtime.costs import KERNEL_TIE
        return KERNEL_TIE
    if name in ("FUSED", "PARTIALS"):
        return _kernel_records()[name == "PARTIALS"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _compile_in_background(fs: FusedSite, p: kernels.Plan, dtype: str) -> None:
    """BYTEGRAD_COMPILE=background: a thread compiles the kernels of the all-leaves-active pattern
    while the site keeps running on NumPy; the site moves to the kernel tier when they are ready.
    (Measured against compiling in the calling thread by `bench/hotpath.py`; see COMPILE.)"""
    fs.state = "compiling"
    active = tuple(True for _ in range(fs.n_leaves))

    def work() -> None:
        try:
            _get_kernels(fs, dtype, active)
        finally:
            fs.state = "kernel"

    import threading  # only here: a first gradient does not import it
    threading.Thread(target=work, name=f"bytegrad-compile {fs.expr}", daemon=False).start()


def _get_kernels(fs: FusedSite, dtype: str, active: tuple[bool, ...]) -> Optional[kernels.Kernels]:
    key = (dtype, active)
    if key not in fs.kernels:
        from bytegrad.runtime import kernels
        t0 = _perf()
        fs.kernels[key] = kernels.compile_kernels(_plan_for(fs, dtype, active))
        fs.compile_s += _perf() - t0
    return fs.kernels[key]


def _decide(fs: FusedSite, dtype: str, active: tuple[bool, ...], size: int) -> Any:
    """Compile if needed, then start a `Trial` of the two tiers (or answer at once: no kernel, or
    POLICY "always")."""
    ks = _get_kernels(fs, dtype, active) if any(active) else None
    if ks is None:
        from bytegrad.runtime import kernels
        fs.choice[(dtype, active, size)] = False
        if kernels.disabled():
            fs.state = "disabled"
        return False
    if POLICY == "always":
        return True  # not remembered: a later "auto" call still compares the tiers
    trial = fs.choice[(dtype, active, size)] = Trial((dtype, active, size))
    return trial


class Trial:
    """Which tier a site runs for one (dtype, active leaves, size class), measured where it matters:
    in the gradients the site is part of.

    The site runs its next gradients in blocks of `TRIAL_BLOCK` on each tier in turn, and each
    gradient's whole time (reported by `grad`: `report`) counts for the tier the
    site ran in it; the first gradient of a block is not counted (it pays for the switch: memory
    the other tier freed or kept). After `TRIAL_SAMPLES` counted gradients on each tier, the one
    with the lower median stays; a tie within `TIE` goes to the kernel. Timing the two tiers on
    their own, in a loop, misses what a tier does to the rest of the gradient: the NumPy tier
    allocates an array per operation where NumPy's own temporary elision cannot apply (the tape
    holds the intermediates), and fresh memory costs page faults that a warm loop never sees. On
    the MLP of bench/results/hotpath.md the NumPy tier won the isolated timing by 21% and lost the
    whole gradient by a third. The blocks follow one clock, which ticks once per gradient that
    has a site in trial, so sites in trial at the same time switch together (the comparison is of
    the gradient with its undecided sites fused or not, not of one site against a mix). A site
    whose gradients are never timed (vjp, jacobian, nested derivatives) decides by timing both
    tiers on its own inputs after `TRIAL_UNTIMED` calls."""

    __slots__ = ("key", "times", "untimed")

    def __init__(self, key: tuple) -> None:
        self.key = key
        self.times: tuple[list[float], list[float]] = ([], [])  # numpy, kernel
        self.untimed = 0

    def arm(self, tape: Tape, fs: FusedSite, ops: tuple, leaves: list[Any]) -> bool:
        """The tier for this call: the one already chosen for this gradient, else the next."""
        global _trial_clock
        trials = tape.trials
        if trials is None:  # the first trial site of this gradient: a tick of the trials' clock
            _trial_clock += 1
            trials = tape.trials = []
            tape.trial_clock = _trial_clock
        for t, _fs, use, _counted in trials:
            if t is self:
                return use
        k = tape.trial_clock  # sites in trial together switch together, whenever each one started
        use = (k // TRIAL_BLOCK) % 2 == 0
        if tape.lean:
            trials.append((self, fs, use, k % TRIAL_BLOCK != 0))
        else:
            self.untimed += 1
            if self.untimed >= TRIAL_UNTIMED:
                return _decide_in_isolation(fs, ops, self.key, leaves)
        return use

    def record(self, fs: FusedSite, use: bool, seconds: float) -> None:
        times = self.times
        times[use].append(seconds)
        if len(times[0]) >= TRIAL_SAMPLES and len(times[1]) >= TRIAL_SAMPLES and fs.choice.get(self.key) is self:
            fs.choice[self.key] = _cost_model().kernel_wins(_median(times[0]), _median(times[1]))


#: consecutive gradients a `Trial` runs on one tier; the first of each is not counted
TRIAL_BLOCK = 3
_trial_clock = -1  # ticks once per gradient with a site in trial: its first one reads 0
#: gradients counted per tier before a `Trial` decides
TRIAL_SAMPLES = 4
#: calls outside a plain `grad` after which a `Trial` decides by timing the tiers on their own
TRIAL_UNTIMED = 32


def report(trials: list, seconds: float) -> None:
    """Called by `grad` with the tape's trials and the gradient's whole time."""
    for trial, fs, use, counted in trials:
        if counted:
            trial.record(fs, use, seconds)


def _median(xs: list[float]) -> float:
    ys = sorted(xs)
    n = len(ys)
    return ys[n // 2] if n % 2 else 0.5 * (ys[n // 2 - 1] + ys[n // 2])


def _decide_in_isolation(fs: FusedSite, ops: tuple, key: tuple, leaves: list[Any]) -> bool:
    """Time the kernel and the NumPy twin on these inputs, alone; remember the faster."""
    dtype, active, _size = key
    ks = _get_kernels(fs, dtype, active)
    assert ks is not None
    t_kernel = min(_time(lambda: kernel_gradients(fs, ks, leaves, active)) for _ in range(3))
    t_numpy = min(_time(lambda: numpy_gradients(fs, ops, active)) for _ in range(3))
    use = _cost_model().kernel_wins(t_numpy, t_kernel)
    fs.choice[key] = use
    return use


def _time(f: Any) -> float:
    t0 = _perf()
    f()
    return _perf() - t0


# ---- the kernel tier ---------------------------------------------------------------------------


def _run_kernel(tape: Tape, fs: FusedSite, dtype: str, active: tuple[bool, ...], leaves: list[Any],
                parents: tuple) -> Any:
    ks = fs.kernels[(dtype, active)]
    assert ks is not None  # the kernel tier runs only with its kernels compiled
    fs.kernel_calls += 1
    FUSED, PARTIALS = _FUSED, _PARTIALS
    if FUSED is None:
        FUSED, PARTIALS = _kernel_records()
    if ks.onepass:  # the output and the partials, in one pass
        out, *partials = ks.forward(*leaves)
        node: tuple = (PARTIALS, parents, fs.site, ks, partials, leaf_shapes(leaves), tape.lean)
        if tape.lean:
            _release_temporaries(tape, leaves, parents, ks.nothing_saved)
    else:
        out = ks.forward(*leaves)
        if ks.backward_plan is None:  # nothing active
            return out
        keep, _sources, needs_out = ks.backward_plan
        saved = tuple([v if k else None for v, k in zip(leaves, keep)])
        node = (FUSED, parents, fs.site, ks, saved, leaf_shapes(leaves), out if needs_out else None)
        if tape.lean:
            _release_temporaries(tape, leaves, parents, saved)
    return tape.push(node, out)


def leaf_shapes(leaves: list[Any]) -> tuple:
    """Each leaf's shape, () for a scalar."""
    return tuple([v.shape if type(v) is _ndarray else () for v in leaves])


#: references to a leaf that only this call holds: `leaves`, the `ops` tuple, the tape's `values`,
#: and `sys.getrefcount`'s own argument (CPython 3.11-3.13)
_TEMP_REFS = 4
#: references to an intermediate of the NumPy tier that only the tape holds: the tape's `values`
#: and `sys.getrefcount`'s own argument
_INTERMEDIATE_REFS = 2


def _release_temporaries(tape: Tape, leaves: list[Any], parents: tuple, saved: tuple) -> None:
    """Let go of leaf values nothing will read again: an expression's result that only this site
    consumed (`W @ x` in `tanh(W @ x + b)`), that the fused backward does not save, and whose own
    record, slimmed (a record kind's `slim`, runtime/records.py, as `tape.sweep` does for large
    records), keeps only its shape. The tape keeps the slimmed record and forgets the value's id (so
    a new array reusing that id is not taken for it). On a tape swept once (`Tape.lean`) this frees
    the temporary before the reverse pass, as a hand-written gradient would."""
    nodes = tape.nodes
    values = tape.values
    for j, k in enumerate(parents):
        if k is None or saved[j] is not None:
            continue
        v = leaves[j]
        node = nodes[k]
        slim = node[0].slim if node is not None else None
        if (slim is None or type(v) is not _ndarray or values[k] is not v
                or _getrefcount(v) != _TEMP_REFS + 1):  # + 1: `v` here
            continue
        node, kept = slim(node, v)
        if kept is not v:  # (else its reverse step reads the value itself)
            tape.replace(k, node, kept)


# ---- the twins, for tests and for the choice between tiers ---------------------------------------


def numpy_gradients(fs: FusedSite, ops: tuple, active: tuple[bool, ...], ct: Any = 1.0) -> tuple[Any, list[Any]]:
    """Value and leaf cotangents by the NumPy tier, on a private tape."""
    tape = Tape()
    args = list(ops)
    leaf_idx: list[Optional[int]] = []
    for j, pos in enumerate(fs.leaf_pos):
        if active[j]:
            v = args[pos]
            if type(v) is _ndarray:
                v = v.view()  # a fresh identity per leaf, as the API's leaf preparation does
            elif type(v) is int:
                v = float(v)
            for q, ref in enumerate(fs.operands):
                if ref == j:
                    args[q] = v
            leaf_idx.append(tape.leaf(v))
        else:
            leaf_idx.append(None)
    out = run_numpy(tape, fs, tuple(args))
    i = tape.ids.get(id(out))
    if i is None:
        return out, [None] * fs.n_leaves
    cts = sweep(tape, {i: ct})
    return out, [cts[k] if k is not None else None for k in leaf_idx]


def kernel_gradients(fs: FusedSite, ks: kernels.Kernels, leaves: list[Any], active: tuple[bool, ...],
                     ct: Any = 1.0) -> tuple[Any, list[Any]]:
    """Value and leaf cotangents by the kernel tier."""
    FUSED, PARTIALS = _kernel_records()
    if ks.onepass:
        out, *partials = ks.forward(*leaves)
        node: tuple = (PARTIALS, tuple(0 if a else None for a in active), fs.site, ks, partials,
                       leaf_shapes(leaves), False)
        return out, PARTIALS.backward(ct, node, out)
    out = ks.forward(*leaves)
    assert ks.backward_plan is not None  # (a site has an active leaf)
    keep, _sources, needs_out = ks.backward_plan
    saved = tuple(v if k else None for v, k in zip(leaves, keep))
    node = (FUSED, tuple(0 if a else None for a in active), fs.site, ks, saved,
            leaf_shapes(leaves), out if needs_out else None)
    return out, FUSED.backward(ct, node, out)
