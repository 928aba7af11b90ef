"""The NumPy-only helpers an exported module carries (compiled/export.py): source text, each piece
written into the module only where its program calls it.

Each is the NumPy part of a helper the generated programs call (compiled/parts.py's namespace) or
of a reverse rule (bytegrad/rules/numpy/reductions.py), written again without bytegrad: the same
operations in the same order, so an exported gradient is the program's, bit for bit in practice.
tests/test_export.py compares them with bytegrad on new values.
"""
from __future__ import annotations

__all__ = ["HELPERS", "NEEDS", "POSITIONAL", "RULES"]

#: name the program calls -> the module-level source that defines it
HELPERS: dict[str, str] = {
    "_acc": '''
def _acc(old, new):
    """A cotangent contribution that may be None added to one that may be None."""
    if old is None:
        return new
    if new is None:
        return old
    return old + new
''',
    "_unbroadcast": '''
def _unbroadcast(x_bar, shape, out_shape):
    """A cotangent of an output of `out_shape` summed down to an input of `shape`."""
    if type(x_bar) is not np.ndarray or x_bar.ndim == 0:
        if out_shape == shape:
            return x_bar
        n_out = math.prod(out_shape)
        n_in = math.prod(shape)
        return x_bar * (n_out // n_in if n_in else 0)
    if x_bar.shape != out_shape:
        x_bar = np.broadcast_to(x_bar, out_shape)
    if x_bar.shape == shape:
        return x_bar
    lead = len(out_shape) - len(shape)
    kept = out_shape[lead:] if lead > 0 else out_shape
    axes = tuple(i for i, d in enumerate(shape) if d == 1 and kept[i] != 1)
    if lead > 0:
        x_bar = np.add.reduce(x_bar, axis=tuple(range(lead)))
    if axes:
        x_bar = np.add.reduce(x_bar, axis=axes, keepdims=True)
    if x_bar.shape != shape:
        x_bar = x_bar.reshape(shape)
    return x_bar
''',
    "_materialize": '''
def _materialize(x_bar, like):
    """A uniform (scalar) cotangent expanded to the shape of `like`; arrays of its shape pass."""
    if type(x_bar) is not np.ndarray or x_bar.shape != like.shape:
        if type(x_bar) is np.ndarray and x_bar.ndim:
            return np.broadcast_to(x_bar, like.shape).copy()
        dtype = like.dtype if like.dtype.kind in "fc" else np.result_type(x_bar, np.float64)
        out = np.empty(like.shape, dtype)
        np.copyto(out, x_bar, casting="unsafe")
        return out
    return x_bar
''',
    "_project": '''
def _project(ct, primal):
    """A cotangent as a gradient shaped and typed like its primal."""
    if type(primal) is np.ndarray:
        if ct is None:
            return np.zeros(primal.shape, primal.dtype)
        arr = ct if type(ct) is np.ndarray else np.asarray(ct)
        if primal.dtype.kind == "f" and arr.dtype.kind == "c":
            arr = arr.real
        if arr.shape != primal.shape:
            if arr.ndim == 0:
                out = np.empty(primal.shape, primal.dtype)
                np.copyto(out, arr, casting="unsafe")
                return out
            arr = np.broadcast_to(arr, primal.shape)
        if arr.dtype != primal.dtype or arr.base is not None or not arr.flags.writeable:
            return np.array(arr, dtype=primal.dtype, copy=True)
        return arr
    if isinstance(primal, np.generic):
        if ct is None:
            return primal.dtype.type(0)
        v = np.asarray(ct)
        if primal.dtype.kind == "f" and v.dtype.kind == "c":
            v = v.real
        return primal.dtype.type(v.sum() if v.ndim else v)
    if ct is None:
        return 0.0
    v = np.asarray(ct)
    if v.dtype.kind == "c":
        v = v.real
    return float(v.sum()) if v.ndim else float(v)
''',
    "_singular": '''
def _singular(d, args, out):
    """A partial that divided by a Python float zero, evaluated again on NumPy scalars (inf or NaN)."""
    def f64(v):
        return np.float64(v) if type(v) is float or type(v) is int else v

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return d(*map(f64, args), f64(out))
''',
    "_unalias": '''
def _unalias(grads):
    """Gradients that never share memory with each other."""
    seen = set()
    out = []
    for g in grads:
        if type(g) is np.ndarray:
            if id(g) in seen:
                g = g.copy()
            seen.add(id(g))
        out.append(g)
    return tuple(out)
''',
    "_decided": '''
def _decided(got, captured):
    """Whether a decision on data came out as at export (arrays: every element, zeros' signs too)."""
    if type(got) is not type(captured):
        return False
    if type(captured) is np.ndarray:
        if got.shape != captured.shape or got.dtype != captured.dtype or not bool((got == captured).all()):
            return False
        return got.dtype.kind not in "fc" or bool((np.signbit(got) == np.signbit(captured)).all())
    if type(captured) is float:
        return got == captured and math.copysign(1.0, got) == math.copysign(1.0, captured)
    return bool(got == captured)
''',
    "_reduction": '''
def _reduced_axes(x, axis):
    if axis is None:
        return tuple(range(x.ndim))
    if np.ndim(axis) == 0:
        return (int(axis) % x.ndim,)
    return tuple(sorted(int(a) % x.ndim for a in axis))


def _expand(value, x, axes, keepdims):
    """A reduced value brought back to the input's rank (size 1 on the reduced axes)."""
    if keepdims or not axes:
        return value
    return np.reshape(value, tuple(1 if i in axes else d for i, d in enumerate(x.shape)))


def _uniform(value, x):
    """A scalar cotangent standing for `value` everywhere in `x`, in x's dtype."""
    if isinstance(value, (np.generic, np.ndarray)) and value.dtype != x.dtype and x.dtype.kind in "fc":
        return x.dtype.type(value)
    return value


def _finish(x_bar, x):
    """An input's cotangent from an array broadcastable to its shape, in its dtype."""
    if np.shape(x_bar) != x.shape:
        full = np.empty(x.shape, dtype=np.result_type(x_bar))
        full[...] = x_bar
        x_bar = full
    if x_bar.dtype == x.dtype or x.dtype.kind not in "fc":
        return x_bar
    return np.array(x_bar, dtype=x.dtype, copy=True)
''',
}

#: an exported rule -> the helpers its source calls (besides `_reduction`'s)
NEEDS: dict[str, tuple[str, ...]] = {"matmul": ("_project", "_unbroadcast"), "dot": ("_project", "_unbroadcast"),
                                     "float": ("_project",), "_moving": ("_project",), "outer": ("_project",),
                                     "stack": ("_project",), "concatenate": ("_project",), "svd": ("_project",)}
#: an exported rule -> the option values its exported form requires (the singular values alone, for svd)
REQUIRED: dict[str, dict[str, object]] = {"svd": {"compute_uv": False}}
#: an exported rule -> how many positional arguments its calls pass (1 unless said here)
POSITIONAL: dict[str, int] = {"matmul": 2, "dot": 2, "getitem": 2, "outer": 2}

#: the reverse rules an exported module may call, by the rule's name: (the module-level source
#: defining `name`, the keyword arguments it takes); each `(out, pullback)` with `pullback(out_bar)`
#: the tuple of cotangents, as the rule's
RULES: dict[str, tuple[str, frozenset[str]]] = {
    "sum": ('''
def _sum_rrule(x, axis=None, keepdims=False):
    """np.sum and its pullback (bytegrad's sum_rrule)."""
    out = np.sum(x, axis=axis, keepdims=keepdims)

    def sum_pullback(out_bar):
        axes = _reduced_axes(x, axis)
        if not keepdims and len(axes) == x.ndim:
            return (_uniform(out_bar, x), None)
        return (_finish(_expand(out_bar, x, axes, keepdims), x), None)

    return out, sum_pullback
''', frozenset({"axis", "keepdims"})),
    "mean": ('''
def _mean_rrule(x, axis=None, keepdims=False):
    """np.mean and its pullback (bytegrad's mean_rrule)."""
    out = np.mean(x, axis=axis, keepdims=keepdims)

    def mean_pullback(out_bar):
        axes = _reduced_axes(x, axis)
        if axis is None and not keepdims and x.size:
            return (out_bar / x.size, None)
        count = math.prod(x.shape[a] for a in axes)
        if not keepdims and len(axes) == x.ndim:
            return (_uniform(out_bar / count, x), None)
        return (_finish(_expand(out_bar, x, axes, keepdims) / count, x), None)

    return out, mean_pullback
''', frozenset({"axis", "keepdims"})),
    "svd": ('''
def _svd_rrule(x, full_matrices=True, compute_uv=True):
    """np.linalg.svd(x, compute_uv=False), the singular values, and their pullback (bytegrad's svd_rrule):
    U diag(s_bar) Vt from the reduced decomposition, conjugated for complex input."""
    out = np.linalg.svd(x, compute_uv=False)

    def svd_pullback(out_bar):
        u, s, vt = np.linalg.svd(x, full_matrices=False)
        k = s.shape[-1]
        inner = np.zeros(s.shape + (k,), dtype=u.dtype)
        inner[..., np.arange(k), np.arange(k)] = out_bar
        x_bar = u @ inner @ vt
        return (_project(np.conj(x_bar) if x_bar.dtype.kind == "c" else x_bar, x),)

    return out, svd_pullback
''', frozenset({"full_matrices", "compute_uv"})),
    "max": ('''
def _max_rrule(x, axis=None, keepdims=False):
    """np.max and its pullback: the cotangent split evenly among tied maxima (bytegrad's rule)."""
    return _extreme(np.max, x, axis, keepdims)
''', frozenset({"axis", "keepdims"})),
    "min": ('''
def _min_rrule(x, axis=None, keepdims=False):
    """np.min and its pullback: the cotangent split evenly among tied minima (bytegrad's rule)."""
    return _extreme(np.min, x, axis, keepdims)
''', frozenset({"axis", "keepdims"})),
    "_extreme": ('''
def _extreme(fn, x, axis, keepdims):
    out = fn(x, axis=axis, keepdims=keepdims)

    def extreme_pullback(out_bar):
        axes = _reduced_axes(x, axis)
        mask = x == _expand(out, x, axes, keepdims)
        count = np.sum(mask, axis=axes, keepdims=True)
        dtype = x.dtype if x.dtype.kind in "fc" else np.result_type(out_bar, np.float64)
        share = _expand(out_bar, x, axes, keepdims) / np.maximum(count, 1).astype(dtype)
        return (_finish(mask * share, x), None)

    return out, extreme_pullback
''', frozenset()),
    "matmul": ('''
def _matmul_rrule(a, b):
    """a @ b and its pullback (bytegrad's matmul_rrule): vectors taken as a row (a) or a column (b)."""
    out = np.matmul(a, b)

    def matmul_pullback(out_bar):
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        ob = np.asarray(out_bar)
        if a.ndim == 1 and b.ndim == 1:
            ob = ob.reshape(1, 1)
        elif a.ndim == 1:
            ob = ob[..., None, :]
        elif b.ndim == 1:
            ob = ob[..., None]

        def a_bar():
            x_bar = ob @ np.swapaxes(b2, -1, -2)
            return _project(_unbroadcast(x_bar, a2.shape, x_bar.shape).reshape(a.shape), a)

        def b_bar():
            x_bar = np.swapaxes(a2, -1, -2) @ ob
            return _project(_unbroadcast(x_bar, b2.shape, x_bar.shape).reshape(b.shape), b)

        return a_bar, b_bar

    return out, matmul_pullback
''', frozenset()),
    "getitem": ('''
def _getitem_rrule(x, index):
    """x[index] and its pullback (bytegrad's getitem_rrule): the cotangent put where x[index] read,
    added up where an index array reads an element more than once."""
    if type(x) is not np.ndarray:
        raise TypeError("the exported x[index] takes an array")
    out = x[index]
    if out is x:
        out = x.view()
    items = index if type(index) is tuple else (index,)
    once = all(
        type(i) in (int, slice, type(None), type(Ellipsis), bool)
        or isinstance(i, (np.integer, np.bool_))
        or (type(i) is np.ndarray and i.dtype == np.bool_)
        for i in items
    )

    def getitem_pullback(out_bar):
        dtype = x.dtype if x.dtype.kind in "fc" else np.result_type(out_bar, np.float64)
        x_bar = np.zeros(x.shape, dtype=dtype)
        if once:
            x_bar[index] = out_bar
        else:
            np.add.at(x_bar, index, out_bar)
        return x_bar, None

    return out, getitem_pullback
''', frozenset()),
    "float": ('''
def _float_rrule(x):
    """float(x) and its pullback."""
    return float(x), lambda out_bar: (_project(out_bar, x),)
''', frozenset()),
    "dot": ('''
def _dot_rrule(a, b):
    """np.dot of vectors and matrices (a 1-D or 2-D a, b) and its pullback (bytegrad's dot_rrule)."""
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.ndim in (1, 2) and b.ndim in (1, 2)):
        raise TypeError("the exported np.dot takes 1-D and 2-D arrays")
    out = np.dot(a, b)

    def dot_pullback(out_bar):
        if a.ndim == 2 and b.ndim == 2:
            return (
                lambda: _project(out_bar @ np.swapaxes(b, -1, -2), a),
                lambda: _project(np.swapaxes(a, -1, -2) @ out_bar, b),
            )
        free_a = tuple(range(a.ndim - 1))
        if b.ndim == 1:
            return (
                lambda: _project(np.multiply(np.expand_dims(out_bar, -1), b), a),
                lambda: _project(np.tensordot(out_bar, a, axes=(free_a, free_a)), b),
            )
        out_axes_of_b = tuple(range(a.ndim - 1, a.ndim - 1 + b.ndim - 2)) + (a.ndim - 1 + b.ndim - 2,)
        b_axes = tuple(range(b.ndim - 2)) + (b.ndim - 1,)
        return (
            lambda: _project(np.tensordot(out_bar, b, axes=(out_axes_of_b, b_axes)), a),
            lambda: _project(np.moveaxis(np.tensordot(a, out_bar, axes=(free_a, free_a)), 0, b.ndim - 2), b),
        )

    return out, dot_pullback
''', frozenset()),
    "_moving": ('''
def _moving(primal, back, x, args, kwargs):
    """A function that only moves x's elements (reshape, transpose...) and its pullback: `back`
    moves the cotangent into x's layout (bytegrad's moving rules)."""
    out = primal(x, *args, **kwargs)
    if out is x:
        out = x.view()

    def moving_pullback(out_bar):
        return (_project(back(out_bar, x, args, kwargs), x),) + (None,) * len(args)

    return out, moving_pullback
''', frozenset()),
    "outer": ('''
def _outer_rrule(a, b):
    """np.outer and its pullback (bytegrad's outer_rrule)."""
    out = np.outer(a, b)

    def outer_pullback(out_bar):
        return (
            lambda: _project(np.reshape(out_bar @ np.ravel(b), np.shape(a)), a),
            lambda: _project(np.reshape(np.ravel(a) @ out_bar, np.shape(b)), b),
        )

    return out, outer_pullback
''', frozenset()),
    "stack": ('''
def _stack_rrule(arrays, axis=0):
    """np.stack and its pullback (bytegrad's stack_rrule): a cotangent per array."""
    out = np.stack(arrays, axis=axis)

    def stack_pullback(out_bar):
        moved = np.moveaxis(out_bar, axis % out.ndim, 0)
        bars = [_project(np.reshape(p, np.shape(a)), a) for p, a in zip(list(moved), arrays)]
        return (bars if isinstance(arrays, list) else tuple(bars), None)

    return out, stack_pullback
''', frozenset({"axis"})),
    "concatenate": ('''
def _concatenate_rrule(arrays, axis=0):
    """np.concatenate and its pullback (bytegrad's concatenate_rrule): a cotangent per array."""
    out = np.concatenate(arrays, axis=axis)

    def concatenate_pullback(out_bar):
        if axis is None:
            sizes, ax, whole = [np.size(a) for a in arrays], 0, np.reshape(out_bar, -1)
        else:
            ax = axis % out.ndim
            sizes, whole = [np.shape(a)[ax] for a in arrays], out_bar
        pieces = np.split(whole, np.cumsum(sizes)[:-1], axis=ax)
        bars = [_project(np.reshape(p, np.shape(a)), a) for p, a in zip(pieces, arrays)]
        return (bars if isinstance(arrays, list) else tuple(bars), None)

    return out, concatenate_pullback
''', frozenset({"axis"})),
}
