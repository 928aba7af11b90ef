"""Dump every catalogue case's compiled program source (numpy and numba tiers) into a folder.

Run it from the root of two checkouts (say, before and after a change to the compiled tier) and
compare the folders: `python bench/program_sources.py /tmp/before` in one, `/tmp/after` in the
other, then `diff -r`. Addresses are blanked; constant names (c3, kw7...) may be numbered
otherwise where a guard was added. bench/results/program-sources.md records the last comparison.
"""
import os, sys, re
sys.path.insert(0, "tests"); sys.path.insert(0, ".")
import numpy as np
import bytegrad
import functions as catalogue
from test_catalogue import make_inputs
try:
    from bytegrad.compiled import policy
except ImportError:
    from bytegrad import compiled as policy  # (before the compiled/ package)
out = sys.argv[1]; os.makedirs(out, exist_ok=True)
n = 0
for tier in ("numpy", "numba"):
    for case in catalogue.CASES:
        fast = bytegrad.differentiate(case.fn, wrt=case.wrt, tier=tier)
        try:
            for call in range(2):
                args, kwargs = make_inputs(case, call)
                fast.value_and_grad(*args, **kwargs)
        except Exception:
            continue
        for t in policy._BY_FUNCTION.get(fast._target, {}).values():
            if t.tier != tier: continue
            for k, p in enumerate(t.programs):
                src = re.sub(r"0x[0-9a-f]+", "0x", p.source)
                with open(os.path.join(out, f"{tier}-{case.id}-{k}.py"), "w") as fh:
                    fh.write(src); n += 1
print(n, "programs")
