"""Dump every catalogue case's compiled program source (numpy and numba tiers) into a folder.

Run it from the root of two checkouts (say, before and after a change to the compiled tier) and
compare the folders: `python bench/program_sources.py /tmp/before` in one, `/tmp/after` in the
other, then `diff -r`. Addresses are blanked; constant names (c3, kw7...) may be numbered
otherwise where a guard was added. bench/results/program-sources.md records the last comparison.
"""
import os
import re
import sys

sys.path[:0] = ["tests", "."]

import bytegrad  # noqa: E402
import functions as catalogue  # noqa: E402  (tests/functions.py)
from test_catalogue import make_inputs  # noqa: E402

try:
    from bytegrad.compiled import policy
except ImportError:  # (before the compiled/ package)
    from bytegrad import compiled as policy  # type: ignore[no-redef]


def main(out: str) -> int:
    os.makedirs(out, exist_ok=True)
    n = 0
    for tier in ("numpy", "numba"):
        for case in catalogue.CASES:
            fast = bytegrad.differentiate(case.fn, wrt=case.wrt, tier=tier)
            try:
                for call in range(2):
                    args, kwargs = make_inputs(case, call)
                    fast.value_and_grad(*args, **kwargs)
            except bytegrad.DifferentiationError:
                continue
            for t in policy._BY_FUNCTION.get(fast._target, {}).values():
                if t.tier != tier:
                    continue
                for k, p in enumerate(t.programs):
                    with open(os.path.join(out, f"{tier}-{case.id}-{k}.py"), "w") as fh:
                        fh.write(re.sub(r"0x[0-9a-f]+", "0x", p.source))
                    n += 1
    print(n, "programs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
