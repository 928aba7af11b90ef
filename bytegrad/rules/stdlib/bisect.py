"""`bisect`: insort moves items about, bisect returns an index (loaded once the program imports
bisect or _bisect)."""
from __future__ import annotations

import bisect

from bytegrad.rules.registry import non_differentiable, transparent

transparent(bisect.insort_left, bisect.insort_right)
non_differentiable(bisect.bisect_left, bisect.bisect_right)
