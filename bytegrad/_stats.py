"""What `Differentiated.stats()` reports of a function's rewritten code: its fused sites (their
tiers, calls and compile times), its timings and the disk cache's counters. (`bytegrad.explain`,
in introspect.py, prints the same and more; it sits above api.py, this module below it.)"""
from __future__ import annotations

import types
from typing import Any, Iterator

from bytegrad.runtime import fused
from bytegrad.transform import cache

__all__ = ["codes", "function_stats", "fused_sites", "site_stats"]


def codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from codes(c)


def fused_sites(code: types.CodeType) -> list[fused.FusedSite]:
    """The fused sites among the constants of `code` and its nested code objects."""
    return [c for co in codes(code) for c in co.co_consts if isinstance(c, fused.FusedSite)]


def site_stats(fs: fused.FusedSite) -> dict[str, Any]:
    return {
        "line": fs.site.lineno, "expr": fs.expr, "state": fs.state,
        "numpy_calls": fs.numpy_calls, "kernel_calls": fs.kernel_calls,
        "numpy_s": round(fs.spent, 6), "compile_s": round(fs.compile_s, 6),
        "choices": {f"{d} {''.join('a' if x else '-' for x in act)} 2^{size}":
                    "kernel" if use is True else "numpy" if use is False else "trial"  # a fused.Trial
                    for (d, act, size), use in fs.choice.items()},
    }


def function_stats(d: Any) -> dict[str, Any]:
    """The timing, fusion and disk-cache part of `Differentiated.stats()`."""
    sites: list[fused.FusedSite] = []
    seen: set[int] = set()
    for fn in list(d._fns.values()):
        for fs in fused_sites(fn.__code__):
            if id(fs) not in seen:
                seen.add(id(fs))
                sites.append(fs)
    disk = cache.disk_stats()
    return {
        "first_gradient_s": d._first_s,
        "rewrite_s": d._rewrite_s,
        "compile_s": sum(fs.compile_s for fs in sites),
        "fused_sites": [site_stats(fs) for fs in sites],
        "disk": disk,
    }


def differentiated_stats(d: Any) -> dict[str, Any]:
    """`Differentiated.stats()` (bytegrad/_differentiated.py documents the keys)."""
    s = cache.stats(d._code)
    result: dict[str, Any] = {"hits": d._hits + s["hits"], "misses": s["misses"], "entries": s["entries"]}
    result.update(function_stats(d))
    if d._tiers is not None:
        from bytegrad.compiled import keywords  # (a call with keyword-only arguments: its twins' programs)
        result["compiled"] = keywords.merge(d._tiers.describe(), d._inner or d)
    elif d._bound or d._bound_kwargs:
        tier = d._tier or _default_tier()
        if tier != "general":  # (a pinned general tier has no compiled entry at all)
            result["compiled"] = {
                "tier": tier, "programs": [], "compiled_calls": 0, "general_calls": d._hits + s["misses"],
                "not_compiled": {"every signature": "a bound method, partial or callable object differentiated "
                                 "with a negative wrt position: compiled programs count positions of its "
                                 "function's parameters (pass wrt as a name or a position from the start)"}}
    if d._pb_tiers is not None:
        result["compiled_pullback"] = d._pb_tiers.describe()
    return result


def _default_tier() -> str:
    from bytegrad.compiled import policy
    return policy.default_tier()
