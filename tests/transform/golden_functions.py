"""Functions whose listings after each pass are kept as goldens (tests/transform/test_passes.py).

Each covers a few instruction kinds; the first parameter is the differentiated one unless
`ACTIVE` names others. Append new functions at the end: the listings hold lines relative to each
function's first line, but a function moved in this file keeps its golden.
"""
import math
import operator

import numpy as np

from tests.transform import modattr_helper

SCALE = 2.0
TABLE = np.ones(3)


class Box:
    def __init__(self, v):
        self.v = v

    def scaled(self, k):
        return self.v * k


def arithmetic(x, y):
    z = x * y + x / 2.0 - y ** 2
    w = -z + (+x)
    w += 1.0
    w @= np.eye(3)
    return w % 3, w // 2, 2 ** x


def fused_dense(W, x, b):
    return np.tanh(W @ x + b) * np.exp(x) - 0.5 * np.sin(x) ** 2


def calls(x, n=3):
    a = np.sum(x, axis=0)
    b = np.reshape(x, (n, -1), order="C")
    c = x.sum(keepdims=True)
    d = len(x) + math.floor(n)
    e = np.concatenate([*x, a], **{"axis": 0})
    return operator.mul(a, b), c, d, e, max(x, key=abs)


def subscripts(x, i):
    y = x[0] + x[1:3].sum() + x[i, ::2]
    x[0] = y
    x[1:2] = 0.0
    TABLE[0] = x[0]
    return y, x.shape[0], x.T


def control(x, n):
    total = 0.0
    for k in range(n):
        if k % 2:
            total = total + x[k]
        else:
            total -= x[k]
    while n > 0:
        n -= 1
    try:
        total = total / n
    except ZeroDivisionError:
        total = total * 1.0
    return total


def containers(x, y):
    xs = [x, y]
    xs.append(x * 2)
    d = {"a": x, "b": [v for v in xs]}
    s = (x, *xs)
    a, *rest = xs
    first, second = x
    return d["a"] + a + first + s[0], {**d}, rest


def objects(x):
    box = Box(x)
    box.v = box.v + 1.0
    with np.errstate(all="ignore"):
        y = box.scaled(2.0) / 0.0
    f = lambda t: t * SCALE  # noqa: E731
    return f(y) + modattr_helper.__name__.__len__()


def closure(x):
    k = 3.0

    def inner(t):
        return t * k + x

    return inner(x) + np.cos(x) * np.sin(x)


def inactive(n, flag=True):
    total = 0
    for i in range(n):
        if i % 2 and flag:
            total += i * 2
    return [total, (lambda q: q + 1)(total), {k: k for k in range(3)}]


ACTIVE = {"arithmetic": ("x", "y"), "fused_dense": ("W", "x", "b"), "containers": ("x", "y"), "inactive": ()}
FUNCTIONS = [arithmetic, fused_dense, calls, subscripts, control, containers, objects, closure, inactive]
