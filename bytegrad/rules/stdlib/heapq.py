"""`heapq`: its C functions only move items about (loaded once the program imports heapq or _heapq)."""
from __future__ import annotations

import heapq

from bytegrad.rules.registry import transparent

# heapq compares items and moves them about; the items keep their identity (nsmallest, nlargest and
# merge are Python and run rewritten on top of these)
transparent(*(getattr(heapq, name) for name in (
    "heappush", "heappop", "heapify", "heapreplace", "heappushpop", "_heapify_max", "_heappop_max",
    "_heapreplace_max", "heapify_max", "heappop_max", "heapreplace_max", "heappush_max", "heappushpop_max")
    if hasattr(heapq, name)))
