"""Property tests: random straight-line and looping NumPy programs, checked against finite differences.

Each program is built from a random list of steps (elementwise functions, binary operators with
broadcast operands, reductions with axes, indexing, a data-dependent `if`, a small loop, and the
`FORMS` that hand the state to every other kind of operation) and is compiled from source, so
bytegrad sees ordinary Python code it has never seen before.
"""
import numpy as np
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import bytegrad
from tests.gradcheck import numerical_grad

UNARY = ["np.sin({})", "np.tanh({})", "np.exp(0.3 * {})", "np.log1p({} ** 2)", "np.sqrt({} ** 2 + 1.0)",
         "np.abs({}) + 0.1", "-({})", "np.cos({}) * 0.5", "np.arctan({})", "({}) ** 2"]
BINARY = ["{} + {}", "{} - {}", "{} * {}", "{} / (1.5 + np.abs({}))", "np.maximum({}, {})", "np.hypot({}, {})"]
REDUCE = ["np.sum({}, axis=0, keepdims=True)", "{}.mean(axis=-1, keepdims=True)", "{}.max(axis=0, keepdims=True)",
          "np.sum({} ** 2, axis=1, keepdims=True)"]
# operand shapes that broadcast against the (3, 4) state
SHAPES = [(3, 4), (1, 4), (3, 1), (4,), ()]

# Steps that hand the differentiated state to each operation kind the transform classifies, in
# each operand position: containers of a module attribute (and a differentiated key into a user
# object's `__getitem__`, also through a module attribute), method chains, `tolist`, star-unpacking,
# containers of containers, getattr/dict()/defaultdict (C calling back into Python), exceptions,
# and a helper without arguments reading what the program wrote into a module-level object.
FORMS = [
    "aux.table['k'] = {h}\n    h = aux.table['k'] + 0.5 * {h}",
    "h = np.r_[{h}, {h}][:3] * 0.7",
    "h = ({h} * 2.0).clip(-5.0, 5.0).T.copy().T.reshape(3, 4) - 0.5 * {h}",
    "h = {h}.reshape(4, 3).sum(axis=1).reshape(1, 4) * {h}",
    "h = np.array({h}.tolist()) * 1.5",
    "h = np.array([[v * 0.5 for v in row] for row in {h}.tolist()])",
    "first, *rest = {h}\n    h = np.stack([first * 2.0, *rest])",
    "h = np.stack([*{h}]) + 0.1",
    "d = {{'a': [{h}, ({h} * 2.0,)]}}\n    h = d['a'][1][0] - 0.5 * d['a'][0]",
    "h = getattr(Box({h}), 'sq')",
    "h = dict(Pairs({h}))['b'] + {h}",
    "dd = collections.defaultdict(lambda: {h} * 0.3)\n    h = dd['x'] + dd['y']",
    "try:\n        raise ValueError({h} * 0.9)\n    except ValueError as e:\n        h = e.args[0] + 0.1",
    "STATE['h'] = {h} * 1.2\n    h = read_state()",
    "h = operator.attrgetter('sq')(Box({h})) * 0.5",
    "h = Scaler()[{h}] - 0.5 * {h}",
    "h = aux.scaler[{h}] + aux.scaler[0.5 * {h}]",
]
PRELUDE = """
import collections, operator, types
import numpy as np
aux = types.ModuleType("aux")
aux.table = {}
class Scaler:
    def __getitem__(self, k):
        return np.tanh(k) * 2.0
aux.scaler = Scaler()
STATE = {}
def read_state():
    return STATE['h'] - 0.25
class Box:
    def __init__(self, v):
        self.v = v
    @property
    def sq(self):
        return self.v * 0.5 + np.sin(self.v)
class Pairs:
    def __init__(self, v):
        self.v = v
    def keys(self):
        return ['a', 'b']
    def __getitem__(self, k):
        return self.v if k == 'a' else np.tanh(self.v)
"""

step = st.one_of(
    st.tuples(st.just("form"), st.sampled_from(FORMS)),
    st.tuples(st.just("unary"), st.sampled_from(UNARY)),
    st.tuples(st.just("binary"), st.sampled_from(BINARY), st.sampled_from(SHAPES), st.booleans()),
    st.tuples(st.just("reduce"), st.sampled_from(REDUCE)),
    st.tuples(st.just("index"), st.sampled_from(["{}[::-1]", "{}[:, ::-1]", "{}[[0, 2, 2]][[0, 1, 2]]",
                                                  "np.concatenate([{}[:1], {}[1:]])"])),
    st.tuples(st.just("if"), st.sampled_from(UNARY), st.sampled_from(UNARY)),
    st.tuples(st.just("loop"), st.integers(1, 3), st.sampled_from(UNARY)),
)


def build(steps: list) -> str:
    lines = ["def program(x, c):", "    h = x"]
    for k, s in enumerate(steps):
        kind = s[0]
        if kind == "unary":
            lines.append(f"    h = {s[1].format('h')}")
        elif kind == "binary":
            operand = f"c[{k}]"
            expr = s[1].format(*(("h", operand) if not s[3] else (operand, "h")))
            lines.append(f"    h = {expr}")
        elif kind == "reduce":
            lines.append(f"    h = h + {s[1].format('h')}")
        elif kind == "index":
            lines.append(f"    h = {s[1].format('h', 'h')}")
        elif kind == "if":
            lines += ["    if np.sum(h) > 0:", f"        h = {s[1].format('h')}", "    else:",
                      f"        h = {s[2].format('h')}"]
        elif kind == "form":
            lines.append("    " + s[1].format(h="h"))
        elif kind == "loop":
            lines += [f"    for _ in range({s[1]}):", f"        h = 0.5 * ({s[2].format('h')})"]
    lines.append("    return np.sum(h * np.linspace(0.5, 1.5, h.size).reshape(h.shape))")
    return "\n".join(lines)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # max_examples: the profile (conftest.py)
@given(st.lists(step, min_size=1, max_size=6), st.integers(0, 2**16))
@example(  # a value of 4e5 with a derivative component of 1e-6, below what the reference resolves
    steps=[("reduce", "np.sum({}, axis=0, keepdims=True)"), ("reduce", "np.sum({}, axis=0, keepdims=True)"),
           ("unary", "np.log1p({} ** 2)"), ("unary", "({}) ** 2"), ("if", "({}) ** 2", "np.sin({})"),
           ("if", "({}) ** 2", "np.sin({})")],
    seed=76)
def test_random_programs_match_finite_differences(steps, seed):
    STATS["tried"] += 1
    try:
        _check_program(steps, seed)
    except Exception as exc:
        if not isinstance(exc, _Unsatisfied):
            STATS["failed"] += 1
        raise


#: programs tried and failed in this process (tests/conftest.py prints them at the end)
STATS = {"tried": 0, "failed": 0}
_Unsatisfied = type(__import__("hypothesis").errors.UnsatisfiedAssumption())


def _check_program(steps: list, seed: int) -> None:
    ns: dict = {}
    exec(compile(PRELUDE + build(steps), "<random program>", "exec"), ns)  # noqa: S102
    program = ns["program"]
    rng = np.random.default_rng(seed)
    consts = [rng.uniform(0.5, 1.5, SHAPES[i % len(SHAPES)] if s[0] != "binary" else s[2])
              for i, s in enumerate(steps)]
    f = bytegrad.differentiate(program)
    for _ in range(2):  # the second call reuses the cached rewritten code
        x = rng.uniform(-1.0, 1.0, (3, 4))
        x_copy = x.copy()
        plain = program(x, consts)
        assume(np.isfinite(plain) and abs(plain) < 1e6)  # random compositions can overflow; skip those
        value, g = f.value_and_grad(x, consts)
        np.testing.assert_array_equal(x, x_copy)
        assert value == plain
        ref = numerical_grad(lambda v: program(v, consts), (x,), 0, eps=1e-6)
        # A central difference with step eps cannot see a derivative below ulp(f) / eps: where
        # f is 4e5, a component of 1e-6 comes out exactly 0. The absolute tolerance covers that
        # resolution (with a margin), which only matters when the value is large.
        atol = 1e-6 + 1e-9 * abs(plain)
        if not np.allclose(g, ref, rtol=1e-4, atol=atol):
            # Central differences fail where the program curves sharply (sin of arguments in the
            # thousands): the reference is trusted only when a second step size agrees with it.
            ref2 = numerical_grad(lambda v: program(v, consts), (x,), 0, eps=1e-7)
            assume(np.allclose(ref, ref2, rtol=1e-4, atol=10 * atol))
        np.testing.assert_allclose(g, ref, rtol=1e-4, atol=atol, err_msg=build(steps))
