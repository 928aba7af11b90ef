"""Refusal reasons as data: the text a user reads, and what the reason refuses, for code that matches them.

compiled/eligibility.py gives its reasons as text (`stats()["compiled"]`, `explain`); the
allowances of compiled/reach_super.py and compiled/reach_params.py drop some of them again (a
`super()` lookup, an attribute read off a parameter that holds a number). They match a reason by
its `key` (kind, line, name), never by its words, so a reworded message cannot silently stop an
allowance from applying: a `Reason` is a `str` (its text unchanged) carrying that key.
"""
from __future__ import annotations

from typing import Optional

__all__ = ["ATTR_OFF_CONSTANT", "CALL_ON_CONSTANTS", "SUPER", "Reason", "key", "located"]

#: `obj.name` read off an object that is neither an argument nor statically known (`name`: the attribute)
ATTR_OFF_CONSTANT = "attribute-off-constant"
#: a call of a known callable that is not pure on constants (`name`: the callable's qualified name)
CALL_ON_CONSTANTS = "call-on-constants"
#: LOAD_SUPER_ATTR (3.12, 3.13: `super().name`)
SUPER = "super"


class Reason(str):
    """A refusal reason: its text, its `kind` (one of the constants above), the `name` it is about
    ("" when none) and its `line` (-1 until `located`)."""

    kind: str
    name: str
    line: int

    def __new__(cls, text: str, kind: str, name: str = "", line: int = -1) -> Reason:
        self = super().__new__(cls, text)
        self.kind, self.name, self.line = kind, name, line
        return self


def located(why: str, line: Optional[int]) -> str:
    """`why (line N)`: a Reason keeps its kind and name, and has its line."""
    text = f"{why} (line {line})"
    return Reason(text, why.kind, why.name, -1 if line is None else line) if isinstance(why, Reason) else text


def key(reason: str) -> Optional[tuple[str, int, str]]:
    """(kind, line, name) of a located Reason; None for any other text (an allowance never matches it)."""
    return (reason.kind, reason.line, reason.name) if isinstance(reason, Reason) and reason.line >= 0 else None
