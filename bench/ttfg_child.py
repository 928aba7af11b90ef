"""One fresh-process measurement for bench/ttfg.py: `python -m bench.ttfg_child '<json config>'`.

Nothing is imported at the top but the standard library, so that `import numpy` and the
library under test are timed from a clean interpreter. Prints one JSON line on stdout.

Modes:
  ttfg       import numpy, import the library, make the case's data (not counted), set up the gradient
             function (`bench.systems` prepare: conversions, jit wrappers), time the first and the
             second gradient call; then check the gradient against the hand-written one
  ttfg-mem   the same, with tracemalloc tracing the first gradient call only (its peak traced memory:
             Python objects and NumPy buffers; torch and XLA allocate outside tracemalloc's view)
  train      import, set up, then 200 SGD steps on one batch (numpy, bytegrad and autograd only:
             their prepared functions see in-place updates of the NumPy parameters)
  pass       nothing (the interpreter's own start-up and exit)
"""
import time

T_START = time.perf_counter()

import json  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402


def _import_library(system: str) -> None:
    if system.startswith("bytegrad"):
        import bytegrad  # noqa: F401
    elif system == "autograd":
        import autograd
        import autograd.numpy  # noqa: F401
    elif system.startswith("jax"):
        import jax
        import jax.numpy  # noqa: F401
    elif system == "torch":
        import torch  # noqa: F401


def main(config: dict) -> dict:
    clock = time.perf_counter
    out: dict = {"mode": config["mode"]}
    if config["mode"] == "pass":
        return out
    system = config["system"]

    t = clock()
    import numpy as np
    out["import_numpy_s"] = clock() - t

    t = clock()
    _import_library(system)
    out["import_library_s"] = clock() - t

    t = clock()
    from bench import cases, systems  # the user's own modules (NumPy is already loaded)
    out["import_bench_s"] = clock() - t

    case = cases.by_key(config.get("case", "mlp"))
    t = clock()
    params, data = case.inputs(np.random.default_rng(0))
    out["data_s"] = clock() - t

    prepare = next(s for s in systems.SYSTEMS if s.name == system).prepare
    systems.WARM_UP_S = 0.0  # a first gradient is what is timed here: no warm-up (that is bench.core's)
    t = clock()
    fn = prepare(case, params, data, "reverse")
    out["setup_s"] = clock() - t

    if config["mode"] == "train":
        lr, steps = config.get("lr", 0.05), config.get("steps", 200)
        out["loss_before"] = float(case.loss(params, *data))
        t = clock()
        for _ in range(steps):
            g = fn()
            if isinstance(params, dict):
                for k in params:
                    params[k] -= lr * g[k]
            else:  # one array (the SVD case)
                params -= lr * g
        out["steps_s"] = clock() - t
        out["steps"] = steps
        out["loss_after"] = float(case.loss(params, *data))
        out["to_steps_end_s"] = clock() - T_START
        return out

    if config["mode"] == "ttfg-mem":
        import tracemalloc
        tracemalloc.start()
        t = clock()
        g = fn()
        out["first_s"] = clock() - t
        out["first_peak_traced_bytes"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    else:
        t = clock()
        g = fn()
        out["first_s"] = clock() - t
    out["to_first_end_s"] = clock() - T_START

    t = clock()
    fn()
    out["second_s"] = clock() - t

    from bench import harness
    reference = case.grad(params, *data)
    ok, err, why = harness.compare(reference, g, rtol=case.rtol, atol_rel=case.atol_rel)
    out["check"] = "ok" if ok else f"wrong gradient: {why}"
    out["max_normwise_error"] = err
    return out


if __name__ == "__main__":
    result = main(json.loads(sys.argv[1]))
    result["max_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(result), flush=True)
