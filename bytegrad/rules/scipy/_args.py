"""Reading a scipy function's optional parameters from a rule's `*args, **kwargs`."""
from __future__ import annotations

from typing import Any


def params(args: tuple[Any, ...], kwargs: dict[str, Any], names: tuple[str, ...],
           defaults: tuple[Any, ...]) -> list[Any]:
    """The values of the parameters `names` (in signature order after the array arguments), positional or
    by keyword, else their defaults."""
    return [args[i] if i < len(args) else kwargs.get(n, d) for i, (n, d) in enumerate(zip(names, defaults))]
