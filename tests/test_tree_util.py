"""`bytegrad.tree_map`, `tree_flatten`, `tree_unflatten` and `tree_leaves` (issue 26): the trees bytegrad
differentiates (dicts, lists, tuples, namedtuples, dataclasses, registered pytrees), taken apart and
built back for optimisers over parameter trees; and docs/pytrees.md, whose examples run as written.
"""
from __future__ import annotations

import collections
import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bytegrad
from bytegrad import tree_flatten, tree_leaves, tree_map, tree_unflatten

ROOT = Path(__file__).resolve().parent.parent

Pair = collections.namedtuple("Pair", "first second")


@dataclasses.dataclass
class Layer:
    W: np.ndarray
    b: float
    name: str = "layer"


class Block:
    def __init__(self, scale, shift, tag="block"):
        self.scale, self.shift, self.tag = scale, shift, tag


bytegrad.register_pytree(Block, lambda m: ((m.scale, m.shift), m.tag), lambda tag, ch: Block(*ch, tag=tag))


def example():
    return {
        "layers": [Layer(np.ones((2, 2)), 0.5), Layer(np.zeros(2), -1.0, "out")],
        "pair": Pair(np.arange(3.0), (2.0, None)),
        "block": Block(np.float32(1.5), np.ones(1)),
        "od": collections.OrderedDict(z=1.0, a=2.0),
    }


def test_the_public_names():
    for name in ("tree_map", "tree_flatten", "tree_unflatten", "tree_leaves"):
        assert name in bytegrad.__all__ and getattr(bytegrad, name) is getattr(bytegrad.tree_util, name)


def test_flatten_gives_the_leaves_in_order_and_unflatten_builds_the_tree_back():
    tree = example()
    leaves, treedef = tree_flatten(tree)
    assert [type(v).__name__ for v in leaves] == ["ndarray", "float", "str", "ndarray", "float", "str",
                                                   "ndarray", "float", "float32", "ndarray", "float", "float"]
    assert leaves[-2:] == [1.0, 2.0]  # a dict's leaves in insertion order
    assert treedef.num_leaves == len(leaves) == len(tree_leaves(tree))
    back = tree_unflatten(treedef, leaves)
    assert type(back["od"]) is collections.OrderedDict and list(back["od"]) == ["z", "a"]
    assert isinstance(back["layers"][1], Layer) and back["layers"][1].name == "out"
    assert back["layers"][1] is not tree["layers"][1]  # a new instance
    assert type(back["pair"]) is Pair and back["pair"].second[1] is None
    assert isinstance(back["block"], Block) and back["block"].tag == "block"
    assert tree_flatten(back)[1] == treedef
    assert "Pair(" in repr(treedef) and "None" in repr(treedef) and "Layer(W=*" in repr(treedef)


def test_none_is_an_empty_subtree_and_a_leaf_is_its_own_tree():
    assert tree_leaves(None) == [] and tree_leaves([None, (None,)]) == []
    leaves, treedef = tree_flatten(np.ones(2))
    assert len(leaves) == 1 and tree_unflatten(treedef, [5.0]) == 5.0
    assert tree_leaves("text") == ["text"]


def test_unflatten_checks_the_number_of_leaves():
    _, treedef = tree_flatten({"a": 1.0, "b": [2.0, 3.0]})
    with pytest.raises(ValueError, match="has 3 leaves, but 2 were given"):
        tree_unflatten(treedef, [1.0, 2.0])
    with pytest.raises(TypeError, match="TreeDef"):
        tree_unflatten([1.0], treedef)


def test_structures_compare_by_types_keys_and_fields():
    a = tree_flatten({"w": np.ones(2), "b": 1.0})[1]
    assert a == tree_flatten({"w": 3.0, "b": np.zeros(5)})[1]
    assert a != tree_flatten({"w": 3.0, "c": 1.0})[1]
    assert a != tree_flatten([3.0, 1.0])[1]
    assert tree_flatten(Pair(1.0, 2.0))[1] != tree_flatten((1.0, 2.0))[1]


def test_tree_map_over_one_and_several_trees():
    params = {"W": np.ones((2, 2)), "b": np.array([1.0, 2.0]), "n": 3}
    doubled = tree_map(lambda p: p * 2, params)
    np.testing.assert_array_equal(doubled["W"], 2 * np.ones((2, 2)))
    assert doubled["n"] == 6
    grads = {"b": np.array([0.5, 0.5]), "W": np.ones((2, 2)), "n": None}  # other key order: matched by key
    new = tree_map(lambda p, g: p if g is None else p - 0.1 * g, params, grads)
    assert list(new) == ["W", "b", "n"]
    np.testing.assert_allclose(new["b"], [0.95, 1.95])
    np.testing.assert_allclose(new["W"], 0.9 * np.ones((2, 2)))
    assert new["n"] == 3
    np.testing.assert_array_equal(params["W"], np.ones((2, 2)))  # the inputs are left as they were


def test_tree_map_passes_the_matching_subtree_where_the_first_has_a_leaf():
    seen = []
    tree_map(lambda a, b: seen.append(b), {"x": 1.0, "y": 2.0}, {"x": [1, 2], "y": None})
    assert seen == [[1, 2], None]


def test_tree_map_names_where_the_trees_differ():
    with pytest.raises(ValueError, match=r"tree 1 differs from the first tree at \['b'\]\[1\]"):
        tree_map(lambda a, b: a, {"a": 1.0, "b": [1.0, (2.0, 3.0)]}, {"a": 1.0, "b": [1.0, [2.0, 3.0]]})
    with pytest.raises(ValueError, match=r"at its top: .* tree 2 has a dict with keys \['a'\]"):
        tree_map(lambda a, b, c: a, {"a": 1.0, "b": 2.0}, {"a": 1.0, "b": 2.0}, {"a": 1.0})


def test_is_leaf_stops_the_flattening():
    tree = {"pair": Pair(1.0, 2.0), "x": [3.0]}
    leaves, treedef = tree_flatten(tree, is_leaf=lambda t: isinstance(t, Pair))
    assert leaves == [Pair(1.0, 2.0), 3.0]
    assert tree_map(lambda t: t, tree, is_leaf=lambda t: isinstance(t, Pair)) == tree


@pytest.mark.parametrize("dtype", (np.float64, np.float32))
def test_an_sgd_step_over_every_kind_of_tree(dtype):
    params = {"layer": Layer(np.ones((2, 2), dtype), dtype(0.5)), "pair": Pair(np.arange(2, dtype=dtype), dtype(1.0)),
              "block": Block(np.ones(2, dtype), dtype(0.0))}

    def loss(p, x):
        h = np.tanh(p["layer"].W @ x + p["layer"].b)
        return np.sum(h * p["pair"].first) * p["pair"].second + np.sum(p["block"].scale * h) + p["block"].shift

    x = np.array([0.3, -0.7], dtype)
    grads = bytegrad.grad(loss)(params, x)
    new = tree_map(lambda p, g: p if g is None else p - 0.5 * g, params, grads)
    assert tree_flatten(new)[1] == tree_flatten(params)[1]
    assert new["layer"].name == "layer" and new["block"].tag == "block"
    def check(p, g, n):
        if g is None:  # the layer's name (a string): no gradient, kept
            assert n is p
        else:
            np.testing.assert_allclose(n, p - 0.5 * g, rtol=1e-6)
            assert np.asarray(n).dtype == dtype

    tree_map(check, params, grads, new)
    assert loss(new, x) < loss(params, x)


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), re.S)


@pytest.mark.parametrize("k", range(len(_python_blocks(ROOT / "docs" / "pytrees.md"))))
def test_the_pytrees_page_examples_run(k):
    # each block in a fresh interpreter, as a reader would paste it (it registers a class)
    code = _python_blocks(ROOT / "docs" / "pytrees.md")[k]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
