"""In-place writes into arrays the function owns: assignments, writes through views, in-place methods.

Writes are recorded on the array that owns the memory (the view's `.base`), as a new version of
it. A view read after a write is re-derived from the owner's latest version, so `buf.reshape(...)`,
`row = buf[2:]` and friends see the values that were written, with the right derivative.

Record kinds (runtime/records.py), each `(kind, (old, value), site, *fields)` but `VIEW`'s
`(kind, (owner,), site, ...)`: `SETITEM` (key, value shape), `OWNER_WRITE` (memory positions, value
shape, which of repeated positions wrote last), `VIEW` (positions, owner shape, memory order),
`ADD_AT` (positions, value shape, sign).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Optional

import numpy as np
from numpy.lib.stride_tricks import as_strided

from bytegrad.errors import MutationError
from bytegrad.rules._shape import materialize, unbroadcast
from bytegrad.runtime.records import Kind

if TYPE_CHECKING:  # (tape.py imports this module)
    from bytegrad.runtime.tape import Tape

_ndarray = np.ndarray
_BASIC = (int, slice, type(None), type(Ellipsis))


def owner_of(a: np.ndarray) -> np.ndarray:
    """The array whose memory `a` uses (itself when it owns its memory)."""
    b = a.base
    return b if type(b) is _ndarray else a


def _is_basic(key: Any) -> bool:
    if type(key) is tuple:
        return all(type(k) in _BASIC or isinstance(k, np.integer) for k in key)
    return type(key) in _BASIC or isinstance(key, np.integer)


def memory_positions(view: np.ndarray, owner: np.ndarray) -> Optional[np.ndarray]:
    """For each element of `view`, its position in `owner`'s memory (None when not expressible)."""
    if not (owner.flags.c_contiguous or owner.flags.f_contiguous) or view.itemsize != owner.itemsize:
        return None
    itemsize = owner.itemsize
    offset = view.__array_interface__["data"][0] - owner.__array_interface__["data"][0]
    if offset % itemsize or any(s % itemsize for s in view.strides):
        return None
    flat = np.arange(owner.size, dtype=np.intp)
    start = offset // itemsize
    if not 0 <= start < max(owner.size, 1):
        return None
    step = flat.itemsize
    return np.array(as_strided(flat[start:], shape=view.shape,
                               strides=tuple(s // itemsize * step for s in view.strides)))


def _positions(view: np.ndarray, owner: np.ndarray, site: Any, what: str) -> np.ndarray:
    """`memory_positions`, or a MutationError when the layout cannot be followed."""
    pos = memory_positions(view, owner)
    if pos is None:
        raise MutationError(
            f"{what}, in a memory layout bytegrad cannot map back to the array that owns it.",
            site.loc() if site is not None else None,
            "write into an array you allocated (or a copy) directly, not through this view.")
    return pos


def memory_order(owner: np.ndarray) -> Literal["C", "F"]:
    """The order ('C' or 'F') in which `owner`'s elements lie in memory."""
    return "C" if owner.flags.c_contiguous else "F"


# ---- backward functions --------------------------------------------------------------------------


def _bw_setitem(ct: Any, node: tuple, out: Any) -> tuple[Any, Any]:
    """`out[key] = value` with a basic key (no repeats): the key splits the cotangent."""
    key, v_shape = node[3], node[4]
    p_old, p_val = node[1]
    ct = materialize(ct, out)
    old_bar = None
    val_bar = None
    if p_old is not None:
        old_bar = np.array(ct, copy=True)
        old_bar[key] = 0
    if p_val is not None:
        part = ct[key]
        val_bar = unbroadcast(part, v_shape, np.shape(part)) if np.shape(part) != v_shape else part
    return old_bar, val_bar


def _bw_owner_write(ct: Any, node: tuple, out: Any) -> tuple[Any, Any]:
    """A write of `value` at memory positions `pos` of the owner (repeats: the last write wins)."""
    pos, v_shape, last = node[3], node[4], node[5]
    p_old, p_val = node[1]
    order = memory_order(out)
    flat = materialize(ct, out).ravel(order=order)
    old_bar = None
    val_bar = None
    if p_val is not None:
        part = flat[pos]
        if last is not None:  # only the last write of a repeated position reached the output
            keep = np.zeros(pos.size, dtype=bool)
            keep[last] = True
            part = np.where(keep.reshape(pos.shape), part, 0)
        val_bar = unbroadcast(part, v_shape, part.shape) if part.shape != v_shape else part
    if p_old is not None:
        old_flat = np.array(flat, copy=True)
        old_flat[pos] = 0
        old_bar = old_flat.reshape(out.shape, order=order)
    return old_bar, val_bar


def _bw_view(ct: Any, node: tuple, out: Any) -> tuple[Any]:
    """A view of the owner's memory, re-derived after a write: scatter back to the owner."""
    pos, owner_shape, order = node[3], node[4], node[5]
    ct = materialize(ct, out)
    flat = np.zeros(int(np.prod(owner_shape)), dtype=np.result_type(ct, np.float64)
                    if np.asarray(ct).dtype.kind not in "fc" else np.asarray(ct).dtype)
    np.add.at(flat, pos.ravel(), np.broadcast_to(ct, pos.shape).ravel())
    return (flat.reshape(owner_shape, order=order),)


def _bw_add_at(ct: Any, node: tuple, out: Any) -> tuple[Any, Any]:
    """`np.add.at(a, idx, b)` (sign -1 for subtract.at): a passes through, b gathers."""
    pos, v_shape, sign = node[3], node[4], node[5]
    ct = materialize(ct, out)
    flat = ct.ravel(order=memory_order(out))
    part = flat[pos]
    if sign < 0:
        part = -part
    val_bar = unbroadcast(part, v_shape, part.shape) if part.shape != v_shape else part
    return ct, val_bar


# ---- pushforwards (forward mode) ----------------------------------------------------------------


def _zeros_like(out: np.ndarray) -> np.ndarray:
    return np.zeros(out.shape, out.dtype if out.dtype.kind in "fc" else np.float64)


def pf_setitem(node: tuple, out: Any, parent_dots: Any) -> Any:
    """`out[key] = value` (basic key): the old tangent with the value's tangent written in."""
    old_dot, val_dot = parent_dots
    out_dot = _zeros_like(out) if old_dot is None else np.array(old_dot, dtype=_zeros_like(out).dtype, copy=True)
    out_dot[node[3]] = 0 if val_dot is None else val_dot
    return out_dot


def pf_owner_write(node: tuple, out: Any, parent_dots: Any) -> Any:
    """A write at memory positions of the owner: the same positions of the tangent."""
    old_dot, val_dot = parent_dots
    order = memory_order(out)
    base = _zeros_like(out) if old_dot is None else old_dot
    flat = np.array(base.ravel(order=order), dtype=_zeros_like(out).dtype, copy=True)
    pos = node[3]
    flat[pos] = 0 if val_dot is None else np.broadcast_to(val_dot, pos.shape)
    return flat.reshape(out.shape, order=order)


def pf_view(node: tuple, out: Any, parent_dots: Any) -> Any:
    """A view re-derived from its owner after a write: the owner's tangent at the same positions."""
    owner_dot = parent_dots[0]
    return np.asarray(owner_dot).ravel(order=node[5])[node[3]]


def pf_add_at(node: tuple, out: Any, parent_dots: Any) -> Any:
    """`np.add.at(a, idx, b)` (or subtract.at): the same accumulation on the tangents."""
    old_dot, val_dot = parent_dots
    order = memory_order(out)
    base = _zeros_like(out) if old_dot is None else old_dot
    flat = np.array(base.ravel(order=order), dtype=_zeros_like(out).dtype, copy=True)
    if val_dot is not None:
        pos = node[3]
        (np.add if node[5] > 0 else np.subtract).at(flat, pos, np.broadcast_to(val_dot, pos.shape))
    return flat.reshape(out.shape, order=order)


SETITEM = Kind("setitem", ("key", "value_shape"), _bw_setitem, pushforward=pf_setitem, moves=True)
OWNER_WRITE = Kind("owner write", ("positions", "value_shape", "last"), _bw_owner_write,
                   pushforward=pf_owner_write, moves=True)
VIEW = Kind("view", ("positions", "owner_shape", "order"), _bw_view, pushforward=pf_view, moves=True)
ADD_AT = Kind("add at", ("positions", "value_shape", "sign"), _bw_add_at, pushforward=pf_add_at, moves=True)
#: the kinds that record a write into memory: parents (previous version of the memory, value written)
WRITE_KINDS = frozenset({SETITEM, OWNER_WRITE, VIEW, ADD_AT})


# ---- views and versions ----------------------------------------------------------------------------


def view_parent(tape: Tape, site: Any, a: np.ndarray) -> Optional[int]:
    """Node index for an array that shares memory with a written owner (None if it does not)."""
    owner = owner_of(a)
    if id(owner) not in tape.owners:
        return None
    io = tape.ids.get(id(owner))
    if io is None:
        return None
    if owner is a:
        return io
    pos = _positions(a, owner, site, "this value is a view of an array that was written in place")
    node = (VIEW, (io,), site, pos, owner.shape, memory_order(owner))
    return _push(tape, node, a)


def refresh(tape: Tape, site: Any, i: int) -> int:
    """A current node for the value of node `i`, whose memory was overwritten since it was recorded."""
    value = tape.values[i]
    if type(value) is _ndarray:
        j = view_parent(tape, site, value)
        if j is not None:
            return j
    raise tape.stale_error(i, site)


def current(tape: Tape, site: Any, a: Any) -> Optional[int]:
    """The node index of `a`'s current value: tracked, re-derived after a write, or None."""
    i = tape.ids.get(id(a))
    if i is None:
        if tape.owners and type(a) is _ndarray:
            return view_parent(tape, site, a)
        return None
    if tape.stale and i in tape.stale:
        return refresh(tape, site, i)
    return i


def _push(tape: Tape, node: tuple, out: Any) -> int:
    idx = len(tape.values)
    tape.push(node, out)
    return idx


def region(obj: np.ndarray, key: Any) -> np.ndarray:
    """A view of the part of `obj` that `obj[key] = ...` writes (all of it when unsure)."""
    keys = key if type(key) is tuple else (key,)
    parts: list[Any] = []
    for k in keys:
        if type(k) is int or isinstance(k, np.integer):
            k = int(k)
            parts.append(slice(k, k + 1) if k != -1 else slice(-1, None))
        elif k is None or k is Ellipsis or type(k) is slice:
            parts.append(k)
        else:
            return obj
    try:
        view = obj[tuple(parts)]
    except (IndexError, TypeError):
        return obj
    return view if type(view) is _ndarray else obj


def put_strided(tape: Tape, site: Any, fn: Any, args: tuple, kwargs: dict, obj: np.ndarray, value: Any) -> None:
    """`np.put` (`fn(*args, **kwargs)`) into `obj`, an array that is not contiguous (runtime/dispatch.py's rule
    takes contiguous ones): a plain store when nothing in it is tracked (as `write` makes one), or, in a capture
    run, when nothing in it depends on a differentiated argument (compiled/plainly.py `plain`: the general path
    tracks none of it); else MutationError."""
    ids = tape.ids
    if (ids.get(id(owner_of(obj))) is None and ids.get(id(obj)) is None and not _holds_tracked(ids, value)) \
            or (tape.capturing and tape.plain(fn, args, kwargs, site)):
        fn(*args, **kwargs)
        return
    raise MutationError("bytegrad supports np.put only on contiguous arrays.", site.loc(),
                        "assign with a.reshape(-1)[ind] = v on a contiguous array instead.")


def _holds_tracked(ids: dict[int, int], value: Any) -> bool:
    """`value` or a value a (nested) list or tuple of it holds is tracked (as recording.py `parent_of` sees)."""
    t = type(value)
    if t is list or t is tuple:
        return any(_holds_tracked(ids, v) for v in value)
    return id(value) in ids


def write(tape: Tape, site: Any, obj: np.ndarray, key: Any, value: Any, iv: Any) -> None:
    """`obj[key] = value`, recorded as a new version of the memory's owner."""
    owner = owner_of(obj)
    io = current(tape, site, owner)  # the owner's value before this write (check_write marks it stale)
    plain = tape.capturing and (io is not None or iv is not None) and not (owner is obj and _is_basic(key)) \
        and memory_positions(obj, owner) is None  # (a capture's write through a view it cannot map: `plain_write`)
    before = set(tape.stale) if plain else ()
    tape.check_write(obj, region(obj, key), site)
    if plain and tape.plain_write((io, iv), site, [j for j in tape.stale if j not in before]):
        obj[key] = value  # (values the general path does not track: it stores them as they are)
        return
    if owner is obj and _is_basic(key):
        obj[key] = value
        if io is None and iv is None:
            return
        tape.push((SETITEM, (io, iv), site, key, np.shape(value)), obj)
        tape.owners[id(obj)] = obj
        if tape.capturing:  # (compiled/writes.py replays it)
            tape.note_write(obj, obj, key, value)
        return
    if obj is not owner:
        j = tape.ids.get(id(obj))
        if j is not None:  # the view's own record is now out of date: re-derived when next read
            tape.stale[j] = site.loc() if site is not None else None
    if io is None and iv is None:  # nothing differentiated on either side: a plain store
        if tape.capturing:  # (an index used where nothing is recorded: compiled/writes.py)
            tape.note_index(key)
        obj[key] = value
        return
    pos = _positions(obj, owner, site, "this write goes through a view")
    written = pos[key]
    obj[key] = value
    last = None
    if not _is_basic(key):
        flat = written.ravel()
        uniq, first_rev = np.unique(flat[::-1], return_index=True)
        if uniq.size != flat.size:
            last = flat.size - 1 - first_rev
    tape.push((OWNER_WRITE, (io, iv), site, written, np.shape(value), last), owner)
    tape.owners[id(owner)] = owner
    if tape.capturing:
        tape.note_write(obj, owner, key, value)


def add_at(tape: Tape, site: Any, obj: np.ndarray, indices: Any, value: Any, iv: Any, sign: int) -> None:
    """`np.add.at(obj, indices, value)` (or subtract.at): repeated indices accumulate."""
    owner = owner_of(obj)
    io = current(tape, site, owner)
    tape.check_write(obj, obj, site)
    pos = _positions(obj, owner, site, "this in-place accumulation goes through a view")
    (np.add if sign > 0 else np.subtract).at(obj, indices, value)
    if io is None and iv is None:
        return
    tape.push((ADD_AT, (io, iv), site, pos[indices], np.shape(value), sign), owner)
    tape.owners[id(owner)] = owner
    if tape.capturing:
        tape.note_write(obj, owner, indices, value)
