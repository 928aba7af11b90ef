"""`OpKind` is made by `enum._simple_enum` (cheaper to import); it must be the Enum its class
statement makes: the same members, names, values and order, and enum behaviour."""
from __future__ import annotations

import ast
import enum
import inspect

from bytegrad.transform.opcodes import OpKind, decode


def _from_class_statement() -> type[enum.Enum]:
    """The Enum a plain `class OpKind(enum.Enum)` with the same body makes (every member is
    `enum.auto()`: values 1, 2, ... in order, what the functional API gives)."""
    tree = ast.parse(inspect.getsource(decode))
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "OpKind")
    names = [t.id for n in node.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]
    assert all(isinstance(n.value, ast.Call) and ast.unparse(n.value) == "enum.auto()"
               for n in node.body if isinstance(n, ast.Assign))
    return enum.Enum("OpKind", names)


def test_same_members_as_the_class_statement():
    plain = _from_class_statement()
    assert [(m.name, m.value) for m in OpKind] == [(m.name, m.value) for m in plain]
    assert len(OpKind) == len(plain) > 40


def test_enum_behaviour():
    assert issubclass(OpKind, enum.Enum)
    assert isinstance(OpKind.CALL, OpKind)
    assert OpKind(OpKind.CALL.value) is OpKind.CALL
    assert OpKind["CALL"] is OpKind.CALL
    assert OpKind.CALL is not OpKind.CALL_KW and OpKind.CALL != OpKind.CALL_KW
    assert repr(OpKind.CALL) == f"<OpKind.CALL: {OpKind.CALL.value}>"
    assert {OpKind.CALL: 1}[OpKind.CALL] == 1
    assert set(OpKind.__members__) == {m.name for m in OpKind}


def test_members_are_plain_class_attributes():
    """As the class statement leaves them (a descriptor in front of each would slow every pass)."""
    for m in OpKind:
        assert OpKind.__dict__[m.name] is m
