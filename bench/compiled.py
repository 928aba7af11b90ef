"""The compiled-programs benchmark (`make bench-compiled`): bench/results/compiled.md and .json.

Every tier of bytegrad as its own system, beside hand-written NumPy (the reference of every
ratio), hand-fused Numba where a case has it, and the peers, all timed in one run by bench.core:

- `bytegrad`: the default, automatic tier (a compiled program after a few general-path
  gradients, moved to Numba when it has run long enough to pay for the compile and the kernel is
  faster), after 2 s of warm-up gradients (bench.systems.WARM_UP_S);
- `bytegrad (general)`: the general path on every call (a hook per operation, a tape);
- `bytegrad (numpy program)`: the compiled program's NumPy back end, from the first call;
- `bytegrad (numba program)`: its Numba back end where a kernel can be written (elementwise
  programs ending in a sum become one loop over the elements), else the NumPy back end.

    python -m bench.compiled                 # the cases below, full batches
    python -m bench.compiled --cases dense2  # any bench.core option passes through
    python -m bench.compiled --cases dense2 loop50 --out bench/out --name compiled-small  # a partial run

On the small cases (hand-written NumPy under 1 ms) each system is also timed alone in a fresh
process, and a ratio whose system ran more than 20% slower or faster there is flagged
(bench/alone.py; `--alone none` skips the check, `--alone all` checks every case). A partial run
belongs in another folder or under another name: the default writes bench/results/compiled.md.
"""
from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import core

CASES = ["dense2", "dense20", "dense200", "dense2000", "conv16", "mlp", "elem10", "sin100", "loop50", "loop50f",
         "dense2f32", "dense20f32", "mlpf32", "elem10f32", "sin100f32", "loop50f32"]
SYSTEMS = ["bytegrad", "bytegrad (general)", "bytegrad (numpy program)", "bytegrad (numba program)",
           "numba (hand-fused)", "autograd", "jax-jit", "torch"]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    defaults = ["--full", "--name", "compiled", "--directions", "reverse", "--no-previous"]
    if "--cases" not in argv:
        defaults += ["--cases", *CASES]
    if "--alone" not in argv:
        defaults += ["--alone", "small"]
    if "--systems" not in argv:
        defaults += ["--systems", *SYSTEMS]
    return core.main(defaults + argv)


if __name__ == "__main__":
    raise SystemExit(main())
