"""tril, triu, diag and meshgrid against finite differences."""
from __future__ import annotations

import numpy as np
import pytest

from bytegrad.rules._apply import as_rrule
from bytegrad.rules.registry import ZERO, lookup

from ..cases import Arr, case, params

BUILDING = [
    case(np.tril, Arr((3, 4))), case(np.tril, Arr((3, 4)), -1, name="tril-k"),
    case(np.tril, Arr((2, 3, 3)), k=1, name="tril-batched"),
    case(np.tril, Arr((3,)), name="tril-1d"),
    case(np.triu, Arr((4, 3))), case(np.triu, Arr((4, 3)), 2, name="triu-k"),
    case(np.diag, Arr((3,))), case(np.diag, Arr((3,)), -2, name="diag-1d-k"),
    case(np.diag, Arr((3, 4))), case(np.diag, Arr((3, 4)), 1, name="diag-2d-k"),
    case(np.diag, Arr((4, 3)), k=-2, name="diag-2d-negative-k"),
]
MESHGRID = [
    case(np.meshgrid, Arr((3,)), Arr((4,))),
    case(np.meshgrid, Arr((3,)), Arr((4,)), Arr((2,)), indexing="ij", name="meshgrid-ij"),
    case(np.meshgrid, Arr((3,)), Arr((2, 2)), Arr((2,)), name="meshgrid-xy-3"),
    case(np.meshgrid, Arr((3,)), Arr((4,)), sparse=True, name="meshgrid-sparse"),
    case(np.meshgrid, Arr((3,)), name="meshgrid-one"),
]
TABLES = [BUILDING, MESHGRID]


@pytest.mark.parametrize("case,dtype", params(BUILDING + MESHGRID))
def test_building_rule(case, dtype):
    case.check(dtype)


def test_meshgrid_skips_outputs_without_cotangent():
    _, pullback = as_rrule(lookup(np.meshgrid))(np.ones(2), np.ones(3))
    x_bar, y_bar = pullback((ZERO, np.ones((3, 2))))
    assert x_bar is ZERO and y_bar.tolist() == [2.0, 2.0, 2.0]
