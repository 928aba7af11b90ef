"""A module whose attributes the tests in test_module_attrs.py read and write from a differentiated
function: a user object with a Python `__getitem__`, an object the function stores into, an array."""
import numpy as np


class Table:
    def __init__(self):
        self.w = np.array([1.0, 3.0, -2.0])

    def __getitem__(self, key):
        return self.w * key


class State:
    pass


table = Table()
state = State()
buffer = np.zeros(3)


class Window:
    """`w[a:b]` computes from the slice's bounds."""

    def __getitem__(self, s):
        return np.array([1.0, 2.0]) * s.start + s.stop ** 2


class Scaled:
    """A property whose setter computes from the object's own (differentiated) value."""

    def __init__(self, w):
        self.w = w
        self._scaled = None

    @property
    def scale(self):
        return self._scaled

    @scale.setter
    def scale(self, k):
        self._scaled = self.w * k
