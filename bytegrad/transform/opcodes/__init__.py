"""The only package that spells opcode names or knows CPython 3.11 / 3.12 / 3.13 differences.

`decode` reads instructions (each classified into an `OpKind`, arguments decoded), `emit` writes
the few sequences the rewrite emits. Everything else imports `bytegrad.transform.opcodes` and
dispatches on kinds; both modules' names are this package's.
"""
from bytegrad.transform.opcodes.decode import *  # noqa: F403
from bytegrad.transform.opcodes.decode import __all__ as _decode_names
from bytegrad.transform.opcodes.emit import *  # noqa: F403
from bytegrad.transform.opcodes.emit import __all__ as _emit_names

__all__ = [*_decode_names, *_emit_names]  # pyright: ignore
