"""Kernel sources that runtime/kernels.py compiles with Numba beside runtime/vmath.py's functions: a
small matrix product as loops, a 2-D array's sums along one axis as loops, and a vmath function
over a whole array. Plain text here (this module imports nothing), so that kernels.py, the one
module that imports Numba, stays the size of what it does.
"""

#: the sources (kernels.py hashes them into a program kernel's module name)
__all__ = ["ARRAY_MATH", "SMALL_MATMUL", "SMALL_MATMUL_CONSTANTS", "SUMS", "TRIG_FIX"]

SMALL_MATMUL = """
def small_matmul(a, b):
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n), a.dtype)
    if b.strides[0] < b.strides[1]:  # b's columns are contiguous (`x.T`): i, j, l, a dot product each
        for i in range(m):
            for j in range(n):
                s = out[i, j]
                for l in range(k):
                    s = _radd(s, a[i, l] * b[l, j])
                out[i, j] = s
        return out
    for i in range(m):
        for l in range(k):
            ail = a[i, l]
            for j in range(n):
                out[i, j] += ail * b[l, j]
    return out
"""
#: small_matmul's one constant: vector_math's `radd`, an addition LLVM may reassociate, so that a dot
#: product vectorises (it adds in another order than BLAS, as BLAS's own kernels differ between machines)
SMALL_MATMUL_CONSTANTS = ("from bytegrad.runtime import kernels as _kernels\n"
                          "_radd = _kernels.vector_math()['radd']")

#: a 2-D array's sums along axis 1 and 0 as loops (Numba's `sum(axis=...)` is several times slower),
#: added in float64
SUMS = """
def sum_rows(a):
    n, m = a.shape
    out = np.empty(n, a.dtype)
    for i in range(n):
        s = 0.0
        for j in range(m):
            s = radd(s, float(a[i, j]))
        out[i] = s
    return out


def sum_cols(a):
    n, m = a.shape
    acc = np.zeros(m, np.float64)
    for i in range(n):
        for j in range(m):
            acc[j] += a[i, j]
    return acc.astype(a.dtype)


def nonfinite_array(a):  # 0.0, or NaN where an element of `a` (an array or a float) is inf or NaN (numba_fpflag)
    s = 0.0
    for v in np.asarray(a).flat:
        s = radd(s, v - v)
    return s
"""

ARRAY_MATH = """
def {name}_array(a):
    c = np.ascontiguousarray(a)
    out = np.empty_like(c)
    flat = c.reshape(-1)
    into = out.reshape(-1)
    for i in range(flat.size):
        into[i] = {name}({load})
{fix}    return out
"""

#: in sin's or cos's `*_array`, after its loop: the elements beyond TRIG_MAX (where vmath gives NaN)
#: recomputed by Numba's libm call, NumPy's value to an ulp (a second pass, its branch taken only then)
TRIG_FIX = """\
    bad = False
    for i in range(flat.size):
        bad = bad | (not abs(flat[i]) <= {limit})
    if bad:
        for i in range(flat.size):
            if not abs(flat[i]) <= {limit}:
                into[i] = np.{base}({load})
"""


def array_math(name: str, trig: tuple[str, ...]) -> str:
    """The source of `{name}_array`, vmath's function `name` over a whole array (its float32 twins
    on float32 arrays: elements read as they are), with TRIG_FIX for those of `trig`."""
    load = "flat[i]" if name.endswith("_f32") else "float(flat[i])"
    base = name.removesuffix("_f32")
    limit = "_FTRIG_MAX" if name.endswith("_f32") else "TRIG_MAX"
    fix = TRIG_FIX.format(base=base, limit=limit, load=load) if base in trig else ""
    return ARRAY_MATH.format(name=name, load=load, fix=fix)
