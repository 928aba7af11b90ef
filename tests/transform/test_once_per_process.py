"""What the rewrite computes once per process instead of once per instruction gives what computing it
each time gives: the stack-effect model (`Instr.pre_and_post_stack_effect`, kept per (opcode, oparg,
jump)), `opcodes.call_hook`'s SWAP sequence (kept per layout) and the instructions `opcodes` emits
(checked once per kind). The corpus comparison of tests/test_code_asm.py checks the first on
every instruction of thousands of code objects."""
from __future__ import annotations

import dis

import pytest

from bytegrad.transform import opcodes
from bytegrad.transform.code import CodeError, Instr, InstrLocation
from bytegrad.transform.code import instr as instr_mod
from bytegrad.transform.opcodes import emit


def _split_now(ins: Instr, jump: bool) -> tuple[int, int]:
    return instr_mod._split_effect(ins.opcode, ins.name, ins.arg, ins.stack_effect(jump), jump)


@pytest.mark.parametrize("name,args", [("SWAP", (2, 3, 2, 5)), ("COPY", (1, 3, 1)), ("BUILD_TUPLE", (0, 4, 2)),
                                       ("LOAD_FAST", ("a", "b")), ("BINARY_OP", (0, 5, 13)),
                                       ("UNPACK_SEQUENCE", (2, 3)), ("CALL", (0, 2, 7))])
def test_the_kept_stack_effects_are_the_computed_ones(name, args):
    if name == "BINARY_OP":
        args = tuple(instr_mod.BinaryOp(a) for a in args)
    for arg in args:
        ins = Instr(name, arg)
        for jump in (False, True, None):
            assert ins.pre_and_post_stack_effect(jump=jump) == _split_now(ins, jump)


def test_an_argument_the_model_reads_that_is_not_an_int_is_not_kept():
    """SWAP's (pre, post) is read from its argument: one that is no int (so asked of `dis` as 0) must
    not answer for the next."""
    assert Instr("SWAP", 2.5).pre_and_post_stack_effect(jump=False) == (-2.5, 2.5)
    assert Instr("SWAP", 3.5).pre_and_post_stack_effect(jump=False) == (-3.5, 3.5)


def _call_hook_reference(n_operands: int, hook, tape_local: str, site, loc, null: bool) -> list:
    """`call_hook` as it was, the permutation worked out for each call."""
    h, t, s = object(), object(), object()
    ops = [object() for _ in range(n_operands)]
    seq = [opcodes.load_const(hook, loc), opcodes.load_local(tape_local, loc), opcodes.load_const(site, loc)]
    if null and not opcodes.NULL_BELOW_CALLABLE:
        n = object()
        seq += opcodes.permute([ops[0], n, *ops[1:], h, t, s], [h, n, t, s, *ops], loc)
    else:
        seq += opcodes.permute([*ops, h, t, s], [h, t, s, *ops], loc)
    seq += opcodes.call(n_operands + (2 if null else 1), loc)
    return seq


def _same(a: Instr, b: Instr) -> bool:
    return (a.name, a.opcode, a.arg, a.location) == (b.name, b.opcode, b.arg, b.location)


@pytest.mark.parametrize("null", [False, True])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7])
def test_call_hook_emits_what_its_permutation_gives(n, null):
    loc = InstrLocation(3, 3, 4, 9)
    for _ in range(2):  # the first call works the permutation out, the second reuses it
        got = opcodes.call_hook(n, len, "__bg_tape__", "site", loc, null=null)
        want = _call_hook_reference(n, len, "__bg_tape__", "site", loc, null)
        assert len(got) == len(want) and all(_same(a, b) for a, b in zip(got, want))


def test_emitted_instructions_are_the_checked_constructor_s():
    loc = InstrLocation(1, 1, 0, 2)
    for _ in range(2):
        for got, want in ((opcodes.pop_top(loc), Instr("POP_TOP", location=loc)),
                          (opcodes.load_const(None, None), Instr("LOAD_CONST", None)),
                          (opcodes.swap(3, loc), Instr("SWAP", 3, location=loc)),
                          (opcodes.build_tuple(2, loc), Instr("BUILD_TUPLE", 2, location=loc))):
            assert _same(got, want) and type(got) is Instr


def test_an_emitted_instruction_is_still_checked_when_its_argument_is_wrong():
    emit._instr("POP_TOP")
    with pytest.raises(CodeError):
        emit._instr("POP_TOP", 1)  # takes no argument: the kind with an argument was never checked
    with pytest.raises(CodeError):
        emit._instr("SWAP")
    with pytest.raises(CodeError):
        emit._instr("NO_SUCH_OPCODE", 1)
    assert dis.opmap["SWAP"] == emit._instr("SWAP", 2).opcode


def test_a_first_gradient_imports_the_guards_only_under_check(tmp_path):
    """rewrite.py imports runtime.guards where BYTEGRAD_CHECK=1 emits a guard, not at import."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    prog = ("import sys, numpy as np, bytegrad\n"
            "def f(W, x):\n"
            "    return np.sum(np.tanh(x @ W) * 2.0) + len(x)\n"
            "bytegrad.grad(f)(np.ones((3, 2)), np.ones((4, 3)))\n"
            "print(bytegrad.__file__)\n"
            "print('bytegrad.runtime.guards' in sys.modules)\n")
    for check, imported in (("", "False"), ("1", "True")):
        env = {"BYTEGRAD_CACHE_DIR": str(tmp_path / f"cache{check}"), "BYTEGRAD_CHECK": check,
               "PATH": "/usr/bin:/bin"}
        run = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=env, timeout=300,
                             cwd=str(root))
        assert run.returncode == 0, run.stderr
        where, got = run.stdout.strip().splitlines()
        assert Path(where).resolve().parent.parent == root
        assert got == imported, (check, got)
