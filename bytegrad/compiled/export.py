"""A NumPy program (compiled/lower_numpy.py) written out as a standalone module: `bytegrad.export`.

`module_source(prog, ...)` takes a program's parts (its constants, its source, the user's line of
each line, the user's file) and writes a module that imports NumPy and `math` only:

- the program's guards become checks that raise `ValueError` naming what differs (an argument's
  type, shape, dtype, container layout or value); a decision on data computed again raises
  `ValueError("... came out otherwise than at export ...")`. The guards on the globals, module
  attributes and callees the function read, and on bytegrad's rule registry, have no object to
  check in another process: the module holds their values as of the export (its header says so);
- constants become NumPy references (`np.tanh`, `np.add.reduce`), literals or module constants
  (`np.dtype('float64')`, a zero array standing for a shape);
- the helpers the program calls and the reverse rules it calls with a pullback (sums, means,
  maxima and minima along axes) are written into the module as small NumPy functions
  (compiled/export_helpers.py); a program that calls any other rule, a plugin rule, or reads an
  array from a global is refused (`ExportRefused`) naming the function and the line;
- the arguments keep the user's names, and each statement is preceded by the user's line it
  replays, as a comment.
"""
from __future__ import annotations

import linecache
import math
import operator
import re
import types
from typing import Any, Optional

import numpy as np

from bytegrad.compiled.export_helpers import HELPERS, NEEDS, POSITIONAL, REQUIRED, RULES
from bytegrad.compiled.inline import lambda_parts
from bytegrad.compiled.source import AST_LOCK
from bytegrad.errors import qualname

__all__ = ["ExportRefused", "module_source"]

_COMPARISONS = {"lt": "<", "le": "<=", "eq": "==", "ne": "!=", "gt": ">", "ge": ">="}

_GUARD = re.compile(r"^(\s*)if not \((.*)\): return (MISS|DECIDED)$")
_DROPPED_KINDS = frozenset({"global", "attr", "cell", "code", "version"})
_NAME = re.compile(r"\b[A-Za-z_][A-Za-z_0-9]*\b")


class ExportRefused(Exception):
    """The program cannot be written without bytegrad; the message says what and where."""


def module_source(prog: Any, fn_name: str, params: list[str], header: list[str]) -> str:
    """The module's source (see the module's docstring): `params` are the argument names of
    `value_and_grad`, `header` the lines of its opening comment."""
    ns, source, user_lines, filename = prog.parts
    body = source.splitlines()[1:]
    lines = list(user_lines[1:])
    first = user_lines[0]
    body, lines = _strip_value_flag(body, lines)
    readable: dict[str, str] = {}
    out: list[str] = []
    out_lines: list[int] = []
    guards = list(prog.guards)
    fixed = [g.what for g in guards if g.kind in _DROPPED_KINDS and g.kind != "version"]
    if fixed:  # what a call in another process cannot check: the module holds it as of the export
        header = header + ["Fixed as at export (what the function read besides its arguments):"]
        header += [f"  {what}" for what in fixed]
    renamed: dict[str, str] = {}
    taken = set(ns) | set(HELPERS) | {"np", "math", "ndarray", "value_and_grad", "operator"}
    taken |= {p for p in params if re.fullmatch(r"[xvpgqd][0-9]+|_.*", p)}
    for text, line in zip(body, lines):
        m = re.fullmatch(r"(\s*)(x[0-9]+) = args\[([0-9]+)\]", text)
        if m and params[int(m.group(3))] not in taken:
            renamed[m.group(2)] = params[int(m.group(3))]
            readable[m.group(2)] = params[int(m.group(3))]
            continue
        text = _rename(text, renamed)
        m = re.fullmatch(r"\s*x[0-9]+ = ([GMZ])[0-9]+(?:\[('[^']*')\]|\.cell_contents)", text)
        if m:  # an array read at call time from a global, a module attribute or a closure variable
            where = {"G": "a global", "M": "a module attribute", "Z": "a closure variable"}[m.group(1)]
            what = f"the array {m.group(2).strip(chr(39))}" if m.group(2) else "an array"
            raise ExportRefused(f"it reads {what} from {where}, which the module cannot: pass it as an argument")
        m = re.fullmatch(r"(\s*)(x[0-9]+) = (\w+)\.get\(('[^']*'|[0-9]+), MISS\)", text)
        if m:
            readable[m.group(2)] = f"{readable.get(m.group(3), m.group(3))}[{m.group(4)}]"
            item = f"{m.group(3)}_{m.group(4).strip(chr(39))}"  # params['W1'] is params_W1
            if item.isidentifier() and item not in taken and item not in params and item not in renamed.values():
                renamed[m.group(2)] = item
                readable[item] = readable[m.group(2)]
            text = f"{m.group(1)}{renamed.get(m.group(2), m.group(2))} = {m.group(3)}[{m.group(4)}]"
        m = re.fullmatch(r"(\s*)(x[0-9]+) = (\w+)\[([0-9]+)\]", text)
        if m:
            readable[m.group(2)] = f"{readable.get(m.group(3), m.group(3))}[{m.group(4)}]"
        m = re.fullmatch(r"(\s*)(x[0-9]+) = args\[([0-9]+)\]", text)
        if m:
            text = f"{m.group(1)}{m.group(2)} = {params[int(m.group(3))]}"
            readable[m.group(2)] = params[int(m.group(3))]
        g = _GUARD.match(text)
        if g:
            for stmt in _guard_lines(g, guards, readable, renamed, line, filename):
                out.append(stmt)
                out_lines.append(line)
            continue
        if "return MISS" in text:
            text = text.replace("return MISS", "raise ValueError(\"a rule's result came out otherwise than at "
                                               "export\")")
        text = _drop_inplace_scaling(text)
        if re.search(r"is ZERO or _t[0-9]+ is NO_TANGENT", text):
            continue  # (the exported rules give arrays, numbers, None or a function computing one)
        text = re.sub(r"if (_t[0-9]+)\.__class__ is FunctionType: ", r"if callable(\1): ", text)
        out.append(text)
        out_lines.append(line)
    out = _user_names(out, out_lines, filename, taken | set(params))
    return _assemble(out, out_lines, first, filename, ns, fn_name, params, header)


def _user_names(out: list[str], out_lines: list[int], filename: str, taken: set[str]) -> list[str]:
    """The statements with the values your lines assign named after your variables: on a line
    `h1 = np.tanh(...)`, the last value its forward steps compute is `h1_<n>` and its cotangent
    `h1_<n>_bar` (n keeps each name unique, as a loop assigns a variable many times)."""
    import ast

    targets: dict[int, Optional[str]] = {}
    rename: dict[str, str] = {}
    for k, (text, line) in enumerate(zip(out, out_lines)):
        m = re.match(r"\s*v([0-9]+)(?:, p[0-9]+)? = ", text)
        if m is None:
            continue
        j = k + 1
        while j < len(out) and out_lines[j] == line and not re.match(r"\s*v[0-9]+(, p[0-9]+)? = ", out[j]):
            j += 1
        if j < len(out) and out_lines[j] == line:
            continue  # (not the last forward step of its line's run)
        if line not in targets:
            try:
                with AST_LOCK:
                    stmt = ast.parse(linecache.getline(filename, line).strip()).body
            except SyntaxError:
                stmt = []
            single = len(stmt) == 1 and isinstance(stmt[0], ast.Assign) and len(stmt[0].targets) == 1
            target = stmt[0].targets[0] if single else None  # type: ignore[attr-defined]
            targets[line] = target.id if isinstance(target, ast.Name) else None
        name = targets[line]
        n = m.group(1)
        if name is not None and f"{name}_{n}" not in taken and f"{name}_{n}_bar" not in taken:
            rename[f"v{n}"], rename[f"g{n}"] = f"{name}_{n}", f"{name}_{n}_bar"
    for text in out:  # a differentiated argument's cotangent and gradient: `W_bar`, `W_grad`
        m = re.match(r"\s*if q([0-9]+) is (\w+):", text)
        if m and f"{m.group(2)}_grad" not in taken and f"{m.group(2)}_bar" not in taken:
            rename[f"q{m.group(1)}"], rename[f"g{m.group(1)}"] = f"{m.group(2)}_grad", f"{m.group(2)}_bar"
    if not rename:
        return out
    return [re.sub(r"\b[vgq][0-9]+\b", lambda m: rename.get(m.group(0), m.group(0)), t) for t in out]


def _strip_value_flag(body: list[str], lines: list[int]) -> tuple[list[str], list[int]]:
    """The program with `value` always true: `if value: s` is `s`, its `else: v = None` goes."""
    kept: list[str] = []
    kept_lines: list[int] = []
    for text, line in zip(body, lines):
        stripped = text.strip()
        if stripped.startswith("else: ") and stripped.endswith(" = None") and kept and \
                kept[-1].strip().startswith("if value: "):
            kept[-1] = kept[-1].replace("if value: ", "", 1)
            continue
        kept.append(text)
        kept_lines.append(line)
    return [t.replace("if value: ", "", 1) for t in kept], kept_lines


def _rename(text: str, renamed: dict[str, str]) -> str:
    if not renamed:
        return text
    return re.sub(r"\bx[0-9]+\b", lambda m: renamed.get(m.group(0), m.group(0)), text)


def _drop_inplace_scaling(text: str) -> str:
    """A statement that writes into a buffer where a reference count allows (`u(v, out=v) if
    _getrefcount(v) == 2 else expr`, compiled/reuse.py) written as its other branch: the same
    values, computed into a new array (the module has no reference counts to rely on)."""
    if "_getrefcount(" not in text:
        return text
    import ast

    indent = text[: len(text) - len(text.lstrip())]

    class _Plain(ast.NodeTransformer):
        def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
            if any(isinstance(n, ast.Name) and n.id == "_getrefcount" for n in ast.walk(node.test)):
                return self.visit(node.orelse)
            return self.generic_visit(node)

    with AST_LOCK:
        tree = _Plain().visit(ast.parse(text.strip()))
        return "\n".join(indent + ln for ln in ast.unparse(tree).splitlines())


def _guard_lines(g: re.Match, guards: list, readable: dict[str, str], renamed: dict[str, str], line: int,
                 filename: str) -> list[str]:
    """The checks of one guard statement (one guard, or an array's type, shape and dtype), raising
    ValueError; the guards on what the module holds as of the export are dropped."""
    indent, cond = g.group(1), g.group(2)
    taken = []
    joined = ""
    while guards:
        guard = guards.pop(0)
        taken.append(guard)
        joined = " and ".join(x.check for x in taken)
        if joined == cond or _rename(joined, renamed) == cond:
            break
    else:
        raise ExportRefused(f"a guard the program checks could not be read back: {cond}")
    stmts = []
    for guard in taken:
        if guard.kind in _DROPPED_KINDS:
            continue
        check = _rename(guard.check, renamed)
        if guard.kind == "decision":
            at = re.match(r"line ([0-9]+): (.*)", guard.what)
            at_line = int(at.group(1)) if at else line
            where = linecache.getline(filename, at_line).strip()
            what = (at.group(2) if at else guard.what).replace("_operator.", "operator.")
            msg = (f"line {at_line} ({where}): a decision on the data came out otherwise than at export "
                   f"(where {what}); export the function again for this case")
            stmts.append(f"{indent}if not ({check}):")
            stmts.append(f"{indent}    raise ValueError({msg!r})")
            continue
        subject = re.search(r"\b([A-Za-z_]\w*)\b", check)
        var = subject.group(1) if subject else ""
        name = readable.get(var, var)
        what = _rename(guard.what, renamed).replace(f"{var}", name, 1) if var else guard.what
        got = {"shape": f"{var}.shape", "dtype": f"{var}.dtype", "value": f"{var}"}.get(guard.kind,
                                                                                        f"type({var}).__name__")
        if guard.check.startswith("len(args)"):
            continue  # (the parameters of value_and_grad fix their number)
        stmts.append(f"{indent}if not ({check}):")
        stmts.append(f"{indent}    raise ValueError({('expected ' + what + ', got ')!r} + repr({got}))")
    return stmts


# ---- the module ------------------------------------------------------------------------------


def _assemble(out: list[str], out_lines: list[int], first: int, filename: str, ns: dict[str, Any],
              fn_name: str, params: list[str], header: list[str]) -> str:
    text = "\n".join(out)
    used = [n for n in dict.fromkeys(_NAME.findall(text)) if n in ns]
    inline: dict[str, str] = {}
    defs: list[str] = []
    rules: list[str] = []
    functions: dict[str, str] = {}  # rule modules' functions the constants need, by name
    for name in used:
        value = ns[name]
        if name.startswith("r") and callable(value):
            moving = _moving_rule(value, name, functions, out, out_lines, filename)
            if moving is not None:  # a rule that only moves elements: its primal and its `back`
                defs.append(moving)
                rules.append("_moving")
                continue
            rules.append(_rule(name, value, text, ns, out, out_lines, filename))
            inline[name] = _rule_name(value)
            continue
        expr = _literal(value)
        if expr is not None and len(expr) <= 60 and "\n" not in expr:
            inline[name] = expr
        else:
            made = _constant(name, value, functions, out, out_lines, filename)
            defs.append(made if made.startswith("def ") else f"{name} = {made}")
    index = {n: i for n in inline if (i := _index_literal(ns[n])) is not None}  # x[c3] read as x[:, None]
    body = [re.sub(r"\[(\w+)\]", lambda m: f"[{index[m.group(1)]}]" if m.group(1) in index else m.group(0), ln)
            for ln in out]
    keywords = {n: ", ".join(f"{k}={_literal(v)}" for k, v in ns[n].items()) for n in inline
                if type(ns[n]) is dict and ns[n] and all(type(k) is str and k.isidentifier() for k in ns[n])}
    body = [re.sub(r"\*\*(\w+)", lambda m: keywords.get(m.group(1), m.group(0)), ln) for ln in body]  # (axis=0)
    body = [re.sub(r"\b[A-Za-z_]\w*\b", lambda m: inline.get(m.group(0), m.group(0)), ln) for ln in body]
    needed = {h for r in rules for h in NEEDS.get(r, ())}
    helpers = [h for h in HELPERS if h != "_reduction" and (h in needed or re.search(rf"\b{h}\(", text))]
    code = [f"def value_and_grad({', '.join(params)}):",
            f'    """The value of {fn_name} and its gradient, as bytegrad.value_and_grad gives them."""']
    shown: Optional[int] = None
    for ln, user in zip(body, out_lines):
        if user != first and user != shown:
            src = linecache.getline(filename, user).strip()
            indent = ln[: len(ln) - len(ln.lstrip())]
            code.append(f"{indent}# line {user}: {src}")
        shown = user
        code.append(ln)
    parts = ["\n".join("# " + h if h else "#" for h in header), '"""Generated by bytegrad.export: '
             'do not edit; export the function again instead."""', "import math", "", "import numpy as np", "",
             "ndarray = np.ndarray"]
    support = [HELPERS[h].strip() for h in helpers]
    if any(r in ("sum", "mean", "max", "min") for r in rules):
        support.insert(0, HELPERS["_reduction"].strip())
    if rules:
        if any(r in ("max", "min") for r in rules):
            support.append(RULES["_extreme"][0].strip())
        support += [RULES[r][0].strip() for r in dict.fromkeys(rules)]
    defs = [*(f for f in functions.values() if f), *defs]  # (the rules' functions first, each once)
    module = "\n".join(parts) + "\n" + "".join("\n" + d for d in defs) + "\n\n\n" + "\n\n\n".join(support) + \
        "\n\n\n" + "\n".join(code) + "\n"
    if "math." not in module.split("import numpy as np", 1)[1]:
        module = module.replace("import math\n\n", "", 1)
    _check_names(module)
    return module


def _check_names(module: str) -> None:
    """ExportRefused where the module reads a name it does not define (a helper of bytegrad's that
    has no NumPy twin here): a module that fails on its first call is not written."""
    import ast
    import builtins

    with AST_LOCK:
        tree = ast.parse(module)
    defined = set(vars(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            defined.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
    missing = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id not in defined})
    if missing:
        raise ExportRefused(f"the program calls bytegrad's {', '.join(missing)}, which has no standalone form")


def _where(name: str, out: list[str], out_lines: list[int], filename: str) -> str:
    for ln, user in zip(out, out_lines):
        if re.search(rf"\b{name}\b", ln):
            return f"line {user} of {filename}: {linecache.getline(filename, user).strip()}"
    return filename


def _rule_name(value: Any) -> str:
    return f"_{_rule_key(value)}_rrule"


#: the end of a reverse rule's qualified name -> the key of its NumPy form (`RULES`)
_RULE_KEYS = (
    ("reductions.sum_rrule", "sum"), ("reductions.mean_rrule", "mean"),
    ("numpy.linalg.matmul_rrule", "matmul"), ("numpy.linalg.dot_rrule", "dot"),
    ("numpy.indexing.getitem_rrule", "getitem"), ("rules.builtins.float_rrule", "float"),
    ("numpy.linalg.outer_rrule", "outer"), ("numpy.shape.stack_rrule", "stack"),
    ("numpy.shape.concatenate_rrule", "concatenate"), ("numpy.linalg_decomp.svd_rrule", "svd"),
)
#: the reductions whose rule (`max_rrule`, `min_rrule`) closes over the function it is for
_EXTREMA = (("max", (np.max, np.amax, np.ndarray.max)), ("min", (np.min, np.amin, np.ndarray.min)))


def _rule_key(value: Any) -> Optional[str]:
    q = qualname(value)
    for suffix, key in _RULE_KEYS:
        if q.endswith(suffix):
            return key
    if q.split(".")[-1] in ("max_rrule", "min_rrule") and ".reductions." in q and value.__closure__:
        fn = next((c.cell_contents for c in value.__closure__ if callable(c.cell_contents)), None)
        for key, funcs in _EXTREMA:
            if any(fn is f for f in funcs):
                return key
    return None


def _moving_rule(value: Any, name: str, functions: dict[str, str], out: list[str], out_lines: list[int], filename: str) -> Optional[str]:
    """The definition of rule constant `name` where the rule only moves its input's elements
    (reshape, transpose, ravel, flips...: rules/numpy/shape.py's `_moving_rule`, a primal and a
    `back` moving the cotangent), or None for another rule; ExportRefused where its `back` reads
    what cannot be written without bytegrad."""
    code = getattr(value, "__code__", None)
    if code is None or set(code.co_freevars) != {"primal", "back"} or not value.__closure__:
        if qualname(value).endswith("numpy.shape.T_rrule"):
            return f"def {name}(x):\n    out = x.T\n    if out is x:\n        out = x.view()\n" \
                   f"    return out, lambda out_bar: (np.transpose(out_bar),)"
        return None
    cells = dict(zip(code.co_freevars, (c.cell_contents for c in value.__closure__)))
    primal = _reference(cells["primal"])
    if primal is None or not _function_source(cells["back"], functions):
        raise ExportRefused(f"{qualname(value)} (at {_where(name, out, out_lines, filename)}) has no form that "
                            "can be written without bytegrad")
    back = cells["back"].__name__
    return f"def {name}(x, *args, **kwargs):\n    return _moving({primal}, {back}, x, args, kwargs)"


def _rule(name: str, value: Any, text: str, ns: dict[str, Any], out: list[str], out_lines: list[int],
          filename: str) -> str:
    """The key (in RULES) of rule constant `name`, checked against each of its calls: the input
    and keyword arguments its exported form takes."""
    key = _rule_key(value)
    where = _where(name, out, out_lines, filename)
    if key is None:
        raise ExportRefused(f"{qualname(value)} (at {where}) has no form that can be written without bytegrad")
    allowed = RULES[key][1]
    import ast

    with AST_LOCK:
        calls = [n for ln in out if re.search(rf"\b{name}\(", ln)
                 for n in ast.walk(ast.parse(ln.strip() if not ln.strip().endswith(":") else ln.strip() + " pass"))
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name]
    for call in calls:
        kw = [k.value.id for k in call.keywords if k.arg is None and isinstance(k.value, ast.Name)]
        if len(call.args) != POSITIONAL.get(key, 1) or len(kw) != len(call.keywords) or len(kw) > 1:
            raise ExportRefused(f"{qualname(value)} with options passed by position (at {where}): pass them "
                                "by keyword to export it")
        options = ns.get(kw[0], {}) if kw else {}
        if type(options) is not dict or not set(options) <= allowed or \
                any(k not in options or options[k] is not v for k, v in REQUIRED.get(key, {}).items()):
            need = "".join(f", with {k}={v!r}" for k, v in REQUIRED.get(key, {}).items())
            raise ExportRefused(f"{qualname(value)} with options {options} (at {where}): its exported form takes "
                                f"{sorted(allowed)} only{need}")
    return key


def _index_literal(value: Any) -> Optional[str]:
    """An index (a slice, or a tuple of slices, ints, None and ...) as it is written in brackets."""
    items = value if type(value) is tuple else (value,)
    parts = []
    for item in items:
        if type(item) is slice and all(v is None or type(v) is int for v in (item.start, item.stop, item.step)):
            text = f"{'' if item.start is None else item.start}:{'' if item.stop is None else item.stop}"
            parts.append(text + ("" if item.step is None else f":{item.step}"))
        elif item is None or item is Ellipsis or type(item) is int:
            parts.append("..." if item is Ellipsis else repr(item))
        else:
            return None
    if type(value) is not tuple and type(value) is not slice:
        return None
    return ", ".join(parts) + ("," if type(value) is tuple and len(parts) == 1 else "") if parts else None


def _literal(value: Any) -> Optional[str]:
    """`value` as a Python expression over `np` and `math`, or None."""
    t = type(value)
    if value is None or t is bool or t is int or t is str or t is bytes:
        return repr(value)
    if t is float:
        if math.isnan(value):
            return "math.nan"
        if math.isinf(value):
            return "math.inf" if value > 0 else "-math.inf"
        return repr(value)
    if t is slice:
        return f"slice({_literal(value.start)}, {_literal(value.stop)}, {_literal(value.step)})"
    if value is Ellipsis:
        return "..."
    if t is tuple or t is list:
        items = [_literal(x) for x in value]
        if any(i is None for i in items):
            return None
        inner = ", ".join(str(i) for i in items) + ("," if t is tuple and len(items) == 1 else "")
        return f"({inner})" if t is tuple else f"[{inner}]"
    if t is dict:
        pairs = [(_literal(k), _literal(v)) for k, v in value.items()]
        if any(k is None or v is None for k, v in pairs):
            return None
        return "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
    if isinstance(value, np.dtype):
        return f"np.dtype({str(value)!r})" if value.isnative else None
    if isinstance(value, np.generic):
        if value.dtype.kind == "b":
            return f"np.bool_({value.item()!r})"
        return f"np.{value.dtype.name}({_literal(value.item())})" if value.dtype.kind in "iuf" else None
    if t is type:
        import builtins

        type_name = getattr(value, "__name__", "")
        if getattr(builtins, type_name, None) is value:
            return type_name
        return "np.ndarray" if value is np.ndarray else None
    return _reference(value)  # (a function, ufunc or module)


def _reference(value: Any) -> Optional[str]:
    """A NumPy or `math` function, ufunc, ufunc method or module by its public name."""
    if value is np:
        return "np"
    if value is math:
        return "math"
    owner = getattr(value, "__self__", None)
    if isinstance(owner, np.ufunc):  # np.add.reduce
        base = _reference(owner)
        return f"{base}.{value.__name__}" if base else None
    name = getattr(value, "__name__", None)
    if not isinstance(name, str):
        return None
    symbol = _COMPARISONS.get(name.removeprefix("_bool_"))
    if symbol is not None and (getattr(operator, name, None) is value or
                               getattr(value, "__module__", "").startswith("bytegrad.transform.opcodes")):
        cast = name.startswith("_bool_")
        return f"(lambda a, b: {'bool(' if cast else ''}a {symbol} b{')' if cast else ''})"
    if getattr(operator, name, None) is value and name in ("truth", "not_"):
        return "bool" if name == "truth" else "(lambda a: not a)"
    for prefix, module in (("np", np), ("np.linalg", np.linalg), ("np.fft", np.fft), ("math", math),
                           ("np.lib.array_utils", getattr(np.lib, "array_utils", None))):
        if getattr(module, name, None) is value:
            return f"{prefix}.{name}"
    objclass = getattr(value, "__objclass__", None)
    if objclass is np.ndarray and getattr(np.ndarray, name, None) is value:
        return f"np.ndarray.{name}"
    return None


def _constant(name: str, value: Any, functions: dict[str, str], out: list[str], out_lines: list[int], filename: str) -> str:
    """A module-level definition of constant `name`, or ExportRefused."""
    if type(value) is np.ndarray:
        if value.dtype.kind not in "biuf" or not value.dtype.isnative:
            raise ExportRefused(f"an array of {value.dtype} the program holds (at {_where(name, out, out_lines, filename)})")
        dtype = f"np.dtype({str(value.dtype)!r})"
        if value.size == 0 or (value.strides and not any(value.strides) and not value.flat[0]):
            return f"np.zeros({value.shape!r}, {dtype})"  # (a stand-in: its shape and dtype only)
        if value.size > 10_000:
            raise ExportRefused(f"an array of {value.size} elements the program holds (at "
                                f"{_where(name, out, out_lines, filename)}): pass it as an argument")
        return f"np.array({value.tolist()!r}, {dtype})"
    if isinstance(value, types.FunctionType) and value.__name__ == "<lambda>":
        lam = _lambda_source(value)
        if lam is not None:
            return lam
    if isinstance(value, types.FunctionType) and value.__module__.startswith("bytegrad.rules."):
        if _function_source(value, functions):
            return value.__name__
    expr = _literal(value)
    if expr is not None:
        return expr
    what = qualname(value) if callable(value) else type(value).__name__
    why = {"G": "a global the function reads", "M": "a module attribute", "Z": "a closure variable",
           "F": "a Python function it calls", "node": "a plugin rule's record"}.get(name.rstrip("0123456789"), "")
    raise ExportRefused(f"{what}{' (' + why + ')' if why else ''} at {_where(name, out, out_lines, filename)} "
                        "cannot be written without bytegrad: an array read from a global must be passed as an "
                        "argument to be exported")


def _lambda_source(d: Any) -> Optional[str]:
    """A rule's one-line lambda partial, as a lambda over NumPy and `math`."""
    import ast

    found = lambda_parts(d)
    if found is None:
        return None
    body, params, names = found
    subst = {}
    for n, v in names.items():
        ref = _literal(v)
        if ref is None:
            return None
        subst[n] = ref
    text = ast.unparse(body)
    text = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: subst.get(m.group(0), m.group(0)), text)
    return f"lambda {', '.join(params)}: {text}"


def _function_source(fn: Any, done: dict[str, str]) -> bool:
    """A rule module's plain function (a partial such as power_dx) and the functions of its module
    it calls, written into `done` (name -> source, annotations dropped), where they read nothing but
    NumPy, `math`, builtins and each other; False otherwise."""
    import ast
    import builtins
    import inspect
    import textwrap

    if fn.__name__ in done:
        return True
    if fn.__closure__ or fn.__name__ in ("value_and_grad", "np", "math"):
        return False
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef) or node.decorator_list:
        return False
    node.returns = None
    for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg):
        if a is not None:
            a.annotation = None
    done[fn.__name__] = ""  # (recursion: being written)
    local = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    local |= {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
    for n in ast.walk(node):
        if not isinstance(n, ast.Name) or n.id in local:
            continue
        if n.id in ("np", "math") and fn.__globals__.get(n.id) in (np, math):
            continue
        value = fn.__globals__.get(n.id, getattr(builtins, n.id, None))
        if value is None:
            return False
        if getattr(builtins, n.id, None) is value:
            continue
        ref = None if isinstance(value, types.FunctionType) and value.__module__.startswith("bytegrad.") \
            else _reference(value)
        if ref is not None:  # a NumPy function (normalize_axis_tuple): bound by name in the module
            done.setdefault(n.id, f"{n.id} = {ref}" if ref != n.id else "")
            continue
        if not (isinstance(value, types.FunctionType) and value.__module__.startswith("bytegrad.rules.")
                and value.__name__ == n.id and _function_source(value, done)):
            return False
    with AST_LOCK:
        done[fn.__name__] = ast.unparse(node)
    return True
