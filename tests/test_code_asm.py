"""bytegrad's own disassembler and assembler (bytegrad/transform/code/) against the `bytecode`
package (a test dependency only) and against CPython's compiler.

For every code object of a corpus (each function, class body, comprehension and lambda of twenty
stdlib modules, seven of NumPy's Python modules, every module of bytegrad, the test suite's programs
and a module of constructs they may lack, compiled from their sources: about 6,200-7,000 code
objects and 330,000-350,000 instructions depending on the version):
(a) the disassembly agrees with `bytecode.Bytecode.from_code` item by item (labels, exception-table
ranges with their depth and lasti flag, instruction names, arguments, positions, stack effects);
(b) assembling the disassembly gives back the compiler's co_code, co_consts, co_names, co_varnames,
co_linetable, co_exceptiontable, co_stacksize and co_flags exactly. And (c) for the transform's own
rewrites of the golden programs and the test suite's functions, our assembly and the `bytecode`
package's assembly of the same instructions run the same instructions: the constant and name tables
are numbered differently (ours keeps the original's and appends, `bytecode` renumbers by first use),
so the code is compared instruction by instruction with its arguments resolved, and the positions,
the exception table (as instruction indices) and the stack size exactly.
"""
from __future__ import annotations

import dis
import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import pytest

from bytegrad.transform import code as ours

try:  # (the test extra's: the comparisons with it are skipped without it, the round trips still run)
    import bytecode as B
except ImportError:  # pragma: no cover
    B = None
_needs_bytecode = pytest.mark.skipif(B is None, reason="the `bytecode` package (the test extra) is not installed")


def _kinds(name: str) -> tuple:
    return (getattr(ours, name),) + ((getattr(B, name),) if B is not None else ())

_STDLIB = ["json.decoder", "json.encoder", "ast", "dis", "inspect", "collections", "enum", "dataclasses", "typing",
           "functools", "argparse", "tokenize", "textwrap", "asyncio.tasks", "contextlib", "re._parser",
           "pathlib", "string", "traceback", "difflib"]
_NUMPY = ["numpy._core.numeric", "numpy._core.fromnumeric", "numpy.lib._function_base_impl", "numpy.linalg._linalg",
          "numpy.lib._shape_base_impl", "numpy._core.shape_base", "numpy.lib._index_tricks_impl"]
#: every module of bytegrad, and the programs the test suite differentiates
_ROOT = Path(__file__).resolve().parent.parent
_BYTEGRAD = sorted(".".join(p.relative_to(_ROOT).with_suffix("").parts).removesuffix(".__init__")
                   for p in (_ROOT / "bytegrad").rglob("*.py")) + \
    ["tests.functions", "tests.transform.golden_functions"]


def _codes(code: types.CodeType):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


#: constructs the modules above may lack: match, except*, async for/with, a cell a 3.12 comprehension
#: saves and clears (LOAD_FAST_AND_CLEAR of a cell), f-string conversions, walrus, yield from, super()
_CONSTRUCTS = """
import asyncio

def matcher(cmd):
    match cmd:
        case ["go", direction] if direction != "up":
            return direction
        case {"x": x, **rest}:
            return x, rest
        case Point(x=0, y=y) | Point(x=y, y=0):
            return y
        case [1, 2, *others]:
            return others
        case str() | bytes() as s:
            return s
        case _:
            return None

class Point:
    __match_args__ = ("x", "y")

    def __init__(self, x, y):
        super().__init__()
        self.x, self.y = x, y

    def __repr__(self):
        return f"{self.x!r}:{self.y!s}:{self.x!a}:{self.y:>{self.x}}"

def groups(fs):
    caught = None
    try:
        fs()
    except* ValueError as eg:
        caught = eg
    except* TypeError:
        raise
    return caught

async def agen(n):
    async with asyncio.timeout(1):
        async for v in aiter_(n):
            yield v
    await asyncio.sleep(0)

async def aiter_(n):
    for i in range(n):
        yield i

def cells(xs):
    x = 0
    fs = [lambda: x for x in xs]
    ys = [x * 2 for x in xs if (z := x) > 0]
    return fs, ys, x, {k: v for k, v in zip(xs, ys)}, {*xs}

def delegating(it):
    got = yield from it
    nonlocal_ = 0

    def inner():
        nonlocal nonlocal_
        nonlocal_ += 1
        global G
        G = nonlocal_
    inner()
    return got

def kwonly(a, /, b, *args, c=1, d, **kw):
    with open(a) as f, open(b) as g:
        return f.read() + g.read(), args, kw, c, d

def loops(n):
    total = 0
    while True:
        for i in range(n):
            if i % 3 == 0:
                continue
            try:
                total += 1 / i
            except ZeroDivisionError:
                break
            finally:
                total -= 0.5
        else:
            n -= 1
        if n < 0:
            return total
"""


def _corpus() -> list[types.CodeType]:
    out = list(_codes(compile(_CONSTRUCTS, "<constructs>", "exec")))
    for name in _STDLIB + _NUMPY + _BYTEGRAD:
        try:
            spec = importlib.util.find_spec(name)
        except ImportError:
            continue
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue
        with open(spec.origin, encoding="utf-8") as fh:
            out.extend(_codes(compile(fh.read(), spec.origin, "exec")))
    return out


CORPUS = _corpus()


def _norm(arg, labels):
    if arg is ours.UNSET or (B is not None and arg is B.instr.UNSET):
        return ("unset",)
    if isinstance(arg, _kinds("Label")):
        return ("label", labels[id(arg)])
    if isinstance(arg, _kinds("CellVar")):
        return ("cell", arg.name)
    if isinstance(arg, _kinds("FreeVar")):
        return ("free", arg.name)
    if type(arg) is tuple:
        return tuple(_norm(a, labels) for a in arg)
    if isinstance(arg, types.CodeType):
        return ("code", id(arg))
    if isinstance(arg, int) and not isinstance(arg, bool):
        return ("int", int(arg), getattr(arg, "name", None) if type(arg) is not int else None)
    return (type(arg), repr(arg))


def _items(bc) -> list:
    labels = {id(x): k for k, x in enumerate(x for x in bc if isinstance(x, _kinds("Label")))}
    tries: dict[int, int] = {}
    out = []
    for x in bc:
        if isinstance(x, _kinds("Label")):
            out.append(("label", labels[id(x)]))
        elif isinstance(x, _kinds("TryBegin")):
            tries[id(x)] = len(tries)
            out.append(("try", labels[id(x.target)], bool(x.push_lasti), int(x.stack_depth)))
        elif isinstance(x, _kinds("TryEnd")):
            out.append(("end", tries[id(x.entry)]))
        else:
            loc = x.location
            where = (loc.lineno, loc.end_lineno, loc.col_offset, loc.end_col_offset) if loc is not None else None
            effects = tuple(x.pre_and_post_stack_effect(jump=j) for j in (False, True)) + \
                tuple(x.stack_effect(jump=j) for j in (False, True))
            out.append((x.name, _norm(x.arg, labels), where, effects, x.has_jump(), x.is_uncond_jump(),
                        x.is_final()))
    return out


def test_the_corpus_is_large():
    assert len(CORPUS) > 3000, len(CORPUS)


@_needs_bytecode
@pytest.mark.parametrize("chunk", range(8))
def test_disassembly_agrees_with_the_bytecode_package(chunk):
    checked = 0
    for code in CORPUS[chunk::8]:
        try:
            theirs = B.Bytecode.from_code(code, conserve_exception_block_stackdepth=True)
        except (IndexError, ValueError):
            continue  # (`bytecode` cannot read it: a cell read by LOAD_FAST_AND_CLEAR before 3.13)
        mine = ours.Bytecode.from_code(code)
        assert _items(mine) == _items(theirs), code
        assert (mine.cellvars, mine.freevars, mine.flags) == \
            (list(theirs.cellvars), list(theirs.freevars), int(theirs.flags))
        checked += 1
    assert checked > 300


_EXACT = ("co_code", "co_consts", "co_names", "co_varnames", "co_linetable", "co_exceptiontable", "co_stacksize",
          "co_flags", "co_cellvars", "co_freevars", "co_argcount", "co_posonlyargcount", "co_kwonlyargcount",
          "co_nlocals", "co_firstlineno", "co_qualname", "co_name")


@pytest.mark.parametrize("chunk", range(8))
def test_assembly_gives_back_the_compilers_code(chunk):
    codes = CORPUS[chunk::8]
    for code in codes:
        back = ours.Bytecode.from_code(code).to_code()
        wrong = [a for a in _EXACT if getattr(back, a) != getattr(code, a)]
        assert not wrong, (code, wrong)
    assert len(codes) > 300


# ---- (c): the transform's rewrites, assembled by both ------------------------------------------


def _to_theirs(bc):
    labels: dict[int, object] = {}
    entries: dict[int, object] = {}

    def label(x):
        return labels.setdefault(id(x), B.Label())

    def arg(a):
        if isinstance(a, ours.Label):
            return label(a)
        if isinstance(a, ours.CellVar):
            return B.CellVar(a.name)
        if isinstance(a, ours.FreeVar):
            return B.FreeVar(a.name)
        if type(a) is tuple:
            return tuple(arg(v) for v in a)
        for mine, theirs in ((ours.BinaryOp, "BinaryOp"), (ours.Compare, "Compare"),
                             (ours.Intrinsic1Op, "Intrinsic1Op"), (ours.Intrinsic2Op, "Intrinsic2Op")):
            if type(a) is mine:
                return getattr(B.instr, theirs)(int(a))
        return a

    out = B.Bytecode()
    for x in bc:
        if isinstance(x, ours.Label):
            out.append(label(x))
        elif isinstance(x, ours.TryBegin):
            entries[id(x)] = tb = B.TryBegin(label(x.target), x.push_lasti, x.stack_depth)
            out.append(tb)
        elif isinstance(x, ours.TryEnd):
            out.append(B.TryEnd(entries[id(x.entry)]))
        else:
            loc = x.location
            bloc = B.instr.InstrLocation(loc.lineno, loc.end_lineno, loc.col_offset, loc.end_col_offset)
            out.append(B.Instr(x.name, arg(x.arg), location=bloc) if x.arg is not ours.UNSET
                       else B.Instr(x.name, location=bloc))
    for a in ("name", "qualname", "filename", "argcount", "posonlyargcount", "kwonlyargcount", "first_lineno"):
        setattr(out, a, getattr(bc, a))
    out.flags = B.CompilerFlags(bc.flags)
    out.cellvars, out.freevars, out.argnames = list(bc.cellvars), list(bc.freevars), list(bc.argnames)
    return out


def _behaviour(code):
    instrs = list(dis.get_instructions(code))
    index = {i.offset: k for k, i in enumerate(instrs)}
    ops = [(i.opname, index.get(i.argval) if i.opcode in dis.hasjrel else _argval(i.argval)) for i in instrs]
    from bytegrad.transform.code.disasm import parse_exception_table
    spans = [(index[2 * s], min((index[o] for o in index if o > 2 * e), default=None), index[2 * t], d, lasti)
             for s, e, t, d, lasti in parse_exception_table(code.co_exceptiontable)]
    positions = list(code.co_positions())
    where = [positions[i.offset // 2] for i in instrs]
    return ops, spans, where, code.co_stacksize, code.co_flags, sorted(code.co_varnames), code.co_cellvars


def _argval(v):
    return ("code", id(v)) if isinstance(v, types.CodeType) else (type(v), repr(v))


def _rewrites():
    from bytegrad.errors import SourceLoc
    from bytegrad.transform import pipeline
    from tests import functions as F
    from tests.transform import golden_functions as G
    fns = list(G.FUNCTIONS) + [v for v in vars(F).values() if isinstance(v, types.FunctionType)
                              and v.__module__ == F.__name__ and v.__code__.co_argcount]
    out = []
    for fn in fns:
        code = fn.__code__
        active = G.ACTIVE.get(fn.__name__) or code.co_varnames[:1]
        unit = pipeline.Unit(ours.Bytecode.from_code(code), frozenset(active), fn.__globals__,
                             SourceLoc(code.co_filename, code.co_firstlineno, code.co_name))
        try:
            pipeline.run(unit)
        except Exception:  # noqa: BLE001  (a function the transform refuses: nothing to assemble)
            continue
        out.append((fn.__name__, unit.out))
    return out


@_needs_bytecode
def test_the_transforms_rewrites_assemble_as_the_bytecode_package_assembles_them():
    rewrites = _rewrites()
    assert len(rewrites) >= 20
    for name, bc in rewrites:
        theirs = _to_theirs(bc).to_code()
        mine = bc.to_code()
        assert _behaviour(mine) == _behaviour(theirs), name


def test_what_the_disassembler_cannot_read_declines_the_rewrite():
    from bytegrad.errors import UnsupportedOpcodeError

    def f(x):
        return x + 1

    broken = f.__code__.replace(co_code=f.__code__.co_code[:-2] + bytes((dis.opmap["EXTENDED_ARG"], 1)))
    with pytest.raises(UnsupportedOpcodeError, match="cannot read the bytecode of"):
        ours.Bytecode.from_code(broken)
    bc = ours.Bytecode.from_code(f.__code__)
    bc.insert(len(bc) - 1, ours.Instr("POP_TOP"))  # the value RETURN_VALUE returns is gone: an underflow
    with pytest.raises(UnsupportedOpcodeError, match="cannot assemble"):
        bc.to_code()


def test_a_first_gradient_on_an_empty_cache_does_not_import_the_bytecode_package(tmp_path):
    """Nor does the compiled tier's capture and static check."""
    prog = ("import sys, numpy as np, bytegrad\n"
            "def f(W, x):\n"
            "    try:\n"
            "        h = np.tanh(x @ W)\n"
            "    except ValueError:\n"
            "        h = x\n"
            "    return np.sum([v * 2.0 for v in h])\n"
            "g = bytegrad.grad(f)(np.ones((3, 2)), np.ones((4, 3)))\n"
            "assert g.shape == (3, 2)\n"
            "bytegrad.grad(f)(np.ones((3, 2)), np.ones((4, 3)))\n"
            "d = bytegrad.differentiate(f, tier='numpy')\n"  # (the compiled tier: capture, eligibility check)
            "for _ in range(3):\n"
            "    d.grad(np.ones((3, 2)), np.ones((4, 3)))\n"
            "assert 'bytegrad.compiled.eligibility' in sys.modules\n"
            "print(bytegrad.__file__)\n"
            "print(sorted(m for m in sys.modules if m == 'bytecode' or m.startswith('bytecode.')))\n")
    env = {"BYTEGRAD_CACHE_DIR": str(tmp_path / "cache"), "BYTEGRAD_DISABLE_DISK_CACHE": "",
           "PATH": "/usr/bin:/bin"}
    root = _ROOT
    run = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=env, timeout=300,
                         cwd=str(root))
    assert run.returncode == 0, run.stderr
    where, imported = run.stdout.strip().splitlines()
    assert Path(where).resolve().parent.parent == root  # (this tree's bytegrad, not an installed one)
    assert imported == "[]"


# ---- EXTENDED_ARG, long jumps, many constants -------------------------------------------------


def _wide_source(n: int) -> str:
    consts = ", ".join(f"{k}.5" for k in range(n))
    body = "\n".join(f"        y = y + {k}.25 * x" for k in range(n))
    return (f"def wide(x, flag):\n    y = 0.0\n    table = ({consts},)\n    if flag:\n{body}\n"
            "    else:\n        y = -x\n    for v in table[:3]:\n        y += v\n    return y\n")


def test_many_constants_and_long_jumps_round_trip_exactly():
    ns: dict = {}
    exec(compile(_wide_source(300), "<wide>", "exec"), ns)  # noqa: S102
    code = ns["wide"].__code__
    assert any(i.opname == "EXTENDED_ARG" for i in dis.get_instructions(code))
    back = ours.Bytecode.from_code(code).to_code()
    assert [getattr(back, a) for a in _EXACT] == [getattr(code, a) for a in _EXACT]


def test_a_jump_that_grows_an_extended_arg_is_resolved_again():
    """Instructions inserted into a short branch push its jump past 255 code units: the jump takes an
    EXTENDED_ARG, which moves every later offset, and the function still runs both branches."""
    def f(x, flag):
        if flag:
            y = x * 2
        else:
            y = x - 1
        return y

    bc = ours.Bytecode.from_code(f.__code__)
    k = next(k for k, x in enumerate(bc) if isinstance(x, ours.Instr) and x.name == "STORE_FAST")
    loc = bc[k].location
    bc[k:k] = [ours.Instr("NOP", location=loc) for _ in range(400)]
    code = bc.to_code()
    jumps = [i for i in dis.get_instructions(code) if i.opcode in dis.hasjrel]
    assert any(i.arg > 255 for i in jumps)
    g = types.FunctionType(code, {})
    assert g(3, True) == 6 and g(3, False) == 2
    if B is not None:
        assert _behaviour(code) == _behaviour(_to_theirs(bc).to_code())


def test_a_new_local_moves_the_cells_after_it():
    """A local the rewrite adds (the tape's) goes after the original's, before the cells that are not
    arguments: every cell and free variable index moves by one, and the closure still reads them."""
    def outer(a):
        c = a + 1

        def inner(b):
            return a + b + c
        return inner(2) + c

    bc = ours.Bytecode.from_code(outer.__code__)
    k = next(k for k, x in enumerate(bc) if isinstance(x, ours.Instr) and x.name == "RESUME") + 1
    bc[k:k] = [ours.Instr("LOAD_CONST", 7.0, location=bc[k].location),
               ours.Instr("STORE_FAST", "__new_local__", location=bc[k].location)]
    code = bc.to_code()
    assert code.co_varnames[-1] == "__new_local__" and code.co_cellvars == outer.__code__.co_cellvars
    assert types.FunctionType(code, {})(1) == outer(1)
    if B is not None:
        assert _behaviour(code) == _behaviour(_to_theirs(bc).to_code())


def test_code_that_digs_below_a_handlers_depth_is_refused():
    """Inside a loop's try block the iterator sits below the handler's depth: a rewrite that popped it
    (and pushed something else back, so that nothing underflows) would leave the handler cutting the
    stack to a depth it no longer has. The assembler refuses it instead of writing it."""
    from bytegrad.errors import UnsupportedOpcodeError

    def f(xs):
        total = 0
        for v in xs:
            try:
                total += v
            except TypeError:
                pass
        return total

    bc = ours.Bytecode.from_code(f.__code__)
    k = next(k for k, x in enumerate(bc) if isinstance(x, ours.TryBegin) and x.stack_depth == 1) + 1
    loc = bc[k].location
    bc.to_code()  # (as it is, it assembles)
    bc[k:k] = [ours.Instr("POP_TOP", location=loc), ours.Instr("LOAD_CONST", None, location=loc)]
    with pytest.raises(UnsupportedOpcodeError, match="below its exception handler"):
        bc.to_code()


@pytest.mark.skipif(sys.version_info < (3, 13), reason="LOAD_FAST_LOAD_FAST is new in 3.13")
def test_a_local_pair_past_the_fifteenth_local_becomes_two_loads():
    """LOAD_FAST_LOAD_FAST packs two local indices in four bits each: a pair naming a local past the
    fifteenth is written as two LOAD_FASTs (and the code still computes the same)."""
    names = [f"v{k}" for k in range(18)]
    src = "def f():\n" + "".join(f"    {n} = {k}\n" for k, n in enumerate(names)) + "    return v0 - v1\n"
    ns: dict = {}
    exec(compile(src, "<pairs>", "exec"), ns)  # noqa: S102
    bc = ours.Bytecode.from_code(ns["f"].__code__)
    k = next(k for k, x in enumerate(bc) if isinstance(x, ours.Instr) and x.name == "LOAD_FAST_LOAD_FAST")
    assert bc[k].arg == ("v0", "v1")
    bc[k].arg = ("v0", "v17")
    code = bc.to_code()
    ops = [(i.opname, i.argval) for i in dis.get_instructions(code)]
    assert ("LOAD_FAST", "v0") in ops and ("LOAD_FAST", "v17") in ops
    assert types.FunctionType(code, {})() == 0 - 17
