"""The checking mode's guards (BYTEGRAD_CHECK=1, `monitor.CHECK`): the hooks of `runtime.abi`
that the rewrite emits at sites its activity analysis left alone, each checking first that no
operand is differentiated (a differentiated value there raises `BlindCallError` instead of passing
through unrecorded); transform/rewrite.py emits them through `guard_for`.
"""
from __future__ import annotations

from typing import Any, Callable

from bytegrad.errors import BlindCallError
from bytegrad.runtime import abi
from bytegrad.runtime.records import Site
from bytegrad.runtime.recording import parent_of

__all__ = ["GUARDS", "guard_for"]


def _guard(hook: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(tape: Any, site: Site, *operands: Any) -> Any:
        if tape is not None:
            ids = tape.ids
            made = getattr(tape, "made", ())  # (a capture tracks arrays made from constants: no derivative)
            for v in operands:
                p = parent_of(ids, v)
                if p is not None and p not in made:
                    raise BlindCallError(
                        f"a differentiated value reached the operation {site.what}, which the activity "
                        "analysis left unrewritten (BYTEGRAD_CHECK=1 checks every such site).", site.loc(),
                        "report this as a bytegrad bug, with the function; meanwhile compute the value "
                        "through a helper function that takes it as an argument.")
        return hook(None, site, *operands)

    guarded.__name__ = guarded.__qualname__ = f"guarded_{getattr(hook, '__name__', 'hook')}"
    return guarded


#: hook name -> the same operation, checking that no operand is differentiated (rewrite.py emits
#: them at inactive sites in the checking mode; a public dict, so the disk cache refers to them)
GUARDS: dict[str, Callable[..., Any]] = {}
for _k, _hook in abi.BINARY_HOOKS.items():
    GUARDS[f"binary{_k}"] = _guard(_hook)
for _name in ("getitem", "getslice", "getattr_", "neg", "pos", "iter_"):
    GUARDS[_name] = _guard(getattr(abi, _name))


def guard_for(hook: Callable[..., Any]) -> Callable[..., Any]:
    """The guarded twin of a hook of `abi`."""
    for k, h in abi.BINARY_HOOKS.items():
        if h is hook:
            return GUARDS[f"binary{k}"]
    return GUARDS[hook.__name__]
