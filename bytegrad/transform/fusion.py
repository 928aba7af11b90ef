"""Fusion: find maximal elementwise expression trees among the active sites of a code object.

Input: the instructions of a `Bytecode` and their `Activity`. Output: one `FusedPlan` per tree root,
telling the rewrite which instructions to drop (the tree's operators and calls), which callable
loads to keep without their NULL (the callables become operands, checked at run time), and the
`runtime.fused.FusedSite` to call instead. The leaves of a tree (arrays, scalars, `W @ x`) are
computed by their own code, in place and in the original order; constants are baked into the site.

A tree is made of `+ - * / -x`, `** constant` and calls of functions whose rule carries a kernel
formula (`registry.kernel_formula`: np.tanh, np.exp...) reached through a global or a module
attribute, all in one basic block, with at least two operations. `act(W @ x + b)` is such a tree, with `W @ x` as a leaf: the dense pattern.
Producers are found by simulating the stack inside each block; anything the simulation does not
model exactly makes the values it touches unknown, and a tree with an unknown operand is not fused.
"""
from __future__ import annotations

import operator
from typing import Any, Optional

from bytegrad.transform.code import Instr, Label, TryBegin, TryEnd

from bytegrad.errors import SourceLoc
from bytegrad.rules import registry
from bytegrad.runtime import abi, fused
from bytegrad.transform import opcodes
from bytegrad.transform.activity import Activity
from bytegrad.transform.opcodes import OpKind

#: binary operators that fuse (the in-place forms never do: they write into their operand)
_FUSED_BINARY = frozenset({operator.add, operator.mul, operator.pow, operator.sub, operator.truediv})
MIN_OPS = 2
#: the kinds that end a block: terminators and branches (a tuple: see `opcodes.TERMINATOR_KINDS`)
_ENDS_BLOCK = (*opcodes.TERMINATOR_KINDS, OpKind.POP_JUMP, OpKind.JUMP_OR_POP, OpKind.FOR_ITER)


class _Item:
    """A simulated stack value: who pushed it (instruction index, which of its pushes) and where
    the code computing it starts. `producer` -1 means unknown."""

    __slots__ = ("producer", "sub", "start", "epoch")  # (plain classes: a dataclass costs its import)

    def __init__(self, producer: int, sub: int, start: int, epoch: int) -> None:
        self.producer, self.sub, self.start, self.epoch = producer, sub, start, epoch


_UNKNOWN = _Item(-1, 0, -1, -1)


class _Op:
    __slots__ = ("index", "fn", "kind", "operands", "callee", "null")

    def __init__(self, index: int, fn: Any, kind: str, operands: list[_Item], callee: Optional[_Item] = None,
                 null: Optional[_Item] = None) -> None:
        self.index = index            # instruction index
        self.fn = fn                  # operator.add, np.tanh...
        self.kind = kind              # "bin" | "neg" | "call"
        self.operands = operands      # value operands, in order
        self.callee = callee
        self.null = null


class FusedPlan:
    __slots__ = ("root", "site", "n_operands", "drop", "plain_loads")

    def __init__(self, root: int, site: fused.FusedSite, n_operands: int, drop: set[int],
                 plain_loads: dict[int, list[Instr]]) -> None:
        self.root = root                  # index of the root instruction: emit the fused call here
        self.site = site
        self.n_operands = n_operands      # values the region leaves on the stack for the site
        self.drop = drop                  # instructions removed (tree ops, PRECALLs, baked constants)
        self.plain_loads = plain_loads    # callee loads re-emitted without their NULL


def find(instrs: list[Any], act: Activity, loc: SourceLoc) -> dict[int, FusedPlan]:
    """The fused trees of a code object, by root instruction index."""
    ops = _simulate(instrs, act)
    consumers: dict[int, _Op] = {}
    for op in ops.values():
        for it in op.operands:
            if it.producer in ops and it.sub == 0:
                consumers[it.producer] = op
    plans: dict[int, FusedPlan] = {}
    for idx in sorted(ops):
        if idx in consumers:
            continue  # not a root: it belongs to its consumer's tree
        plan = _plan(ops[idx], ops, instrs, loc)
        if plan is not None:
            plans[idx] = plan
    return plans


# ---- stack simulation ------------------------------------------------------------------------


def _simulate(instrs: list[Any], act: Activity) -> dict[int, _Op]:
    """The fusable operations of every block, each with the stack items it consumes."""
    stacks = act.stacks
    stack: list[_Item] = []
    epoch = 0
    ops: dict[int, _Op] = {}
    prev_depth_ok = False
    for i, ins in enumerate(instrs):
        if not isinstance(ins, Instr):
            if isinstance(ins, (Label, TryBegin, TryEnd)):
                epoch += 1
                prev_depth_ok = False
            continue
        st = stacks[i]
        if st is None:
            prev_depth_ok = False
            continue
        if not prev_depth_ok or len(stack) != len(st):
            stack = [_UNKNOWN] * len(st)
        prev_depth_ok = True
        kind = opcodes.kind_of(ins)
        if kind is OpKind.PRECALL or kind is OpKind.KW_NAMES:
            continue
        if kind in _ENDS_BLOCK:
            epoch += 1
            prev_depth_ok = False
            continue
        effect = _effect(ins, kind)
        if effect is None:
            prev_depth_ok = False
            continue
        consumed, produced = effect
        taken = stack[len(stack) - consumed:]
        del stack[len(stack) - consumed:]
        op = _fusable_op(ins, kind, i, taken, st, instrs)
        if op is not None:
            ops[i] = op
        start = i
        for it in taken:  # the code computing the result starts where its operands' code does
            start = min(start, it.start) if it.start >= 0 and start >= 0 else -1
        stack.extend(_Item(i, k, start, epoch) for k in range(produced))
    return ops


def _effect(ins: Instr, kind: OpKind) -> Optional[tuple[int, int]]:
    """(consumed, produced) of an instruction, or None when it is not modelled exactly."""
    if opcodes.is_simple_load(ins):
        return 0, opcodes.simple_load_pushes(ins)
    if kind is OpKind.LOAD_GLOBAL:
        return 0, 2 if opcodes.global_parts(ins)[1] else 1
    if kind in (OpKind.LOAD_ATTR, OpKind.LOAD_METHOD):
        return 1, 2 if opcodes.attr_parts(ins)[1] else 1
    if opcodes.is_push_null(ins):
        return 0, 1
    if kind is OpKind.BINARY:
        return 2, 1
    if kind is OpKind.UNARY_NEG:
        return 1, 1
    if kind is OpKind.CALL:
        return opcodes.int_arg(ins) + 2, 1
    try:
        return _exact_effect(ins)
    except ValueError:
        return None


def _fusable_op(ins: Instr, kind: OpKind, i: int, taken: list[_Item], st: Any, instrs: list[Any]) -> Optional[_Op]:
    if kind is OpKind.BINARY:
        fn = opcodes.binary_operator(ins).fn
        fuses = fn in _FUSED_BINARY and registry.fusable(fn) and (st[-1].active or st[-2].active)
        return _Op(i, fn, "bin", taken) if fuses else None
    if kind is OpKind.UNARY_NEG:
        return _Op(i, operator.neg, "neg", taken) if st[-1].active else None
    if kind is OpKind.CALL:
        return _call_op(ins, i, opcodes.int_arg(ins), taken, st, instrs)
    return None


def _exact_effect(ins: Instr) -> tuple[int, int]:
    pre, post = ins.pre_and_post_stack_effect(jump=False)
    if pre > 0:
        raise ValueError("push-before-use instruction: not modelled")
    return -pre, post


def _call_op(ins: Instr, i: int, n: int, taken: list[_Item], st: Any, instrs: list[Any]) -> Optional[_Op]:
    if n not in (1, 2):
        return None
    j = i - 1
    while j >= 0 and isinstance(instrs[j], Instr) and opcodes.kind_of(instrs[j]) in (OpKind.PRECALL, OpKind.KW_NAMES):
        if opcodes.is_kw_names(instrs[j]):
            return None
        j -= 1
    slot = opcodes.callable_slot(n, st)
    if slot is None or slot.known is None:
        return None
    fn = slot.known
    formula = registry.kernel_formula(fn)
    if formula is None or len(formula.partials) != n:  # (operator.pow fuses as `x ** c` only)
        return None
    if not any(s.active for s in st[-n:]):
        return None
    null, callee = (taken[0], taken[1]) if opcodes.NULL_BELOW_CALLABLE else (taken[1], taken[0])
    if null.producer < 0 or callee.producer < 0:
        return None
    if null.producer != callee.producer and not _pushes_null_alone(instrs[null.producer], null.sub):
        return None  # the NULL must come from a load that can be re-emitted without it
    return _Op(i, fn, "call", taken[2:], callee=callee, null=null)


def _pushes_null_alone(ins: Instr, sub: int) -> bool:
    """A PUSH_NULL, or the NULL of a LOAD_GLOBAL that pushes [NULL, value] / [value, NULL]."""
    if opcodes.is_push_null(ins):
        return True
    if opcodes.kind_of(ins) is OpKind.LOAD_GLOBAL and opcodes.global_parts(ins)[1]:
        return sub == (0 if opcodes.NULL_BELOW_CALLABLE else 1)
    return False


# ---- planning one tree -------------------------------------------------------------------------


def _plan(root: _Op, ops: dict[int, _Op], instrs: list[Any], loc: SourceLoc) -> Optional[FusedPlan]:
    tree: list[_Op] = []

    def collect(op: _Op) -> None:
        for it in op.operands:
            child = ops.get(it.producer) if it.sub == 0 else None
            if child is not None and child is not op:
                collect(child)
        tree.append(op)

    collect(root)
    if len(tree) < MIN_OPS:
        return None
    tree_idx = {op.index for op in tree}
    first_op = min(tree_idx)
    leaves: list[_Item] = []
    callees: list[_Item] = []
    for op in tree:
        if op.callee is not None:
            assert op.null is not None  # _call_op sets both
            callees.append(op.callee)
            callees.append(op.null)
        for it in op.operands:
            if not (it.producer in tree_idx and it.sub == 0):
                leaves.append(it)
    epoch = None
    start = root.index
    for it in leaves + callees:
        if it.producer < 0 or it.start < 0:
            return None
        if epoch is None:
            epoch = it.epoch
        elif it.epoch != epoch:
            return None
        start = min(start, it.start)
    for it in leaves:  # a leaf computed by arbitrary code must run before any fused operation
        ins = instrs[it.producer]
        if not opcodes.is_simple_load(ins) and opcodes.kind_of(ins) is not OpKind.LOAD_GLOBAL \
                and it.producer > first_op:
            return None
    for j in range(start, root.index + 1):
        ins = instrs[j]
        if isinstance(ins, (Label, TryBegin, TryEnd)):
            return None
        if isinstance(ins, Instr) and (opcodes.binds_names(ins) or opcodes.is_kw_names(ins)):
            return None
    for op in tree:  # `x ** y` fuses only with a constant y
        if op.fn is operator.pow:
            y = op.operands[1]
            ins = instrs[y.producer] if y.producer >= 0 else None
            if ins is None or not opcodes.is_const_load(ins) or not _numeric(ins.arg):
                return None
    return _build(root, tree, tree_idx, leaves, callees, instrs, loc, start)


def _numeric(v: Any) -> bool:
    return type(v) in (int, float)


def _leaf_key(ins: Instr, sub: int) -> Optional[str]:
    """Loads of one variable in one block without stores between them are one leaf."""
    if opcodes.is_variable_load(ins):
        names = opcodes.local_names(ins)
        return names[sub] if sub < len(names) else None
    return None


def _build(root: _Op, tree: list[_Op], tree_idx: set[int], leaves: list[_Item], callees: list[_Item],
           instrs: list[Any], loc: SourceLoc, start: int) -> FusedPlan:
    drop: set[int] = set(tree_idx)
    plain_loads: dict[int, list[Instr]] = {}
    # PRECALLs of fused calls go with them
    for op in tree:
        if op.kind == "call":
            j = op.index - 1
            while j >= 0 and isinstance(instrs[j], Instr) and opcodes.kind_of(instrs[j]) is OpKind.PRECALL:
                drop.add(j)
                j -= 1
    # constants are baked in; variables become leaves (one per distinct variable)
    leaf_ids: dict[tuple[int, int], Any] = {}
    leaf_names: list[str] = []
    by_key: dict[str, int] = {}
    for it in leaves:
        ins = instrs[it.producer]
        if opcodes.is_const_load(ins) and _numeric(ins.arg):
            leaf_ids[(it.producer, it.sub)] = ("C", ins.arg)
            drop.add(it.producer)
            continue
        key = _leaf_key(ins, it.sub)
        if key is not None and key in by_key:
            leaf_ids[(it.producer, it.sub)] = ("L", by_key[key])
            continue
        n = len(leaf_names)
        leaf_names.append(key if key is not None else _describe(ins))
        if key is not None:
            by_key[key] = n
        leaf_ids[(it.producer, it.sub)] = ("L", n)
    node_of = {op.index: k for k, op in enumerate(tree)}
    nodes: list[fused.Node] = []
    for op in tree:
        args = tuple(("N", node_of[it.producer]) if (it.producer in tree_idx and it.sub == 0)
                     else leaf_ids[(it.producer, it.sub)] for it in op.operands)
        ins = instrs[op.index]
        lineno = ins.lineno if isinstance(ins.lineno, int) else loc.lineno
        if op.kind == "bin":
            symbol = opcodes.binary_operator(ins).symbol
            site = abi.Site(loc.filename, lineno, loc.function, symbol)
            nodes.append(fused.Node("bin", op.fn, abi.BINARY_HOOKS[symbol], args, site))
        elif op.kind == "neg":
            site = abi.Site(loc.filename, lineno, loc.function, "unary -")
            nodes.append(fused.Node("neg", op.fn, abi.neg, args, site))
        else:
            site = abi.Site(loc.filename, lineno, loc.function, "call", op.fn)  # (callee: named in warnings, explain)
            nodes.append(fused.Node("call", op.fn, abi.call1 if len(args) == 1 else abi.call2, args, site))
    # the operands left on the stack, in push order: callables of fused calls, and leaf values
    kept: list[tuple[int, int, Any]] = []
    for op in tree:
        if op.callee is not None and op.null is not None:
            kept.append((op.callee.producer, 0, -1 - node_of[op.index]))
            if op.null.producer == op.callee.producer:  # one load pushed both: re-emit it plain
                plain_loads[op.callee.producer] = _plain_load(instrs[op.callee.producer])
            elif opcodes.is_push_null(instrs[op.null.producer]):
                drop.add(op.null.producer)
            else:  # LOAD_GLOBAL pushing [NULL, module]; the attribute load that follows stays
                plain_loads[op.null.producer] = _plain_load(instrs[op.null.producer])
    for it in leaves:
        ref = leaf_ids[(it.producer, it.sub)]
        if ref[0] == "L":
            kept.append((it.producer, it.sub, ref[1]))
    kept.sort(key=lambda t: (t[0], t[1]))
    root_ins = instrs[root.index]
    lineno = root_ins.lineno if isinstance(root_ins.lineno, int) else loc.lineno
    fused_site = fused.FusedSite(
        abi.Site(loc.filename, lineno, loc.function, "fused"),
        tuple(k[2] for k in kept), tuple(nodes), tuple(leaf_names))
    return FusedPlan(root.index, fused_site, len(kept), drop, plain_loads)


def _plain_load(ins: Instr) -> list[Instr]:
    """The callable load of a fused call, pushing the callable alone (no NULL, no method slot)."""
    kind = opcodes.kind_of(ins)
    if kind is OpKind.LOAD_GLOBAL:
        name, _ = opcodes.global_parts(ins)
        return [opcodes.plain_global_load(name, ins.location)]
    name, _ = opcodes.attr_parts(ins)
    return [opcodes.plain_attr_load(name, ins.location)]


def _describe(ins: Instr) -> str:
    if opcodes.kind_of(ins) is OpKind.LOAD_GLOBAL:
        return opcodes.global_parts(ins)[0]
    if opcodes.is_const_load(ins):
        return repr(ins.arg)
    return f"<{ins.name.lower()}>"
