"""What NaN-safe masks cost (runtime/zerosafe.py): instructions per gradient, counted by Valgrind as
in bench/instructions.py, for gradients without a mask (which must not change) and one with it.

    python -m bench.where            # one JSON line per case, for this checkout

Run it in a checkout before the change and in one after it (with this file and the `where1000`
case of bench/instructions.py copied in); bench/results/where.md holds both runs.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import instructions

CASES = ["sum4", "elem10", "loop50", "where1000"]


def main() -> int:
    for case in CASES:
        print(json.dumps(instructions.measure(case, "bytegrad (no numba)")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
