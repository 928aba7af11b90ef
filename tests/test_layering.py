"""The import layering of CONTRIBUTING.md (rules 1 and 2), checked by walking every import in the package with `ast`.

api.py, precompile.py, __main__.py -> compiled/ -> transform/ -> runtime/ -> rules/ -> errors.py:
nothing imports upward (the general path never imports the compiled tier), and only
runtime/kernels.py imports numba, inside functions.
"""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "bytegrad"

# The top layer: importing any of these (or the package itself, whose __init__ imports api)
# from a lower layer is an upward import.
TOP = ("bytegrad.api", "bytegrad._differentiated", "bytegrad._lazy_tiers", "bytegrad._api_support", "bytegrad._jacobian", "bytegrad._stats",
       "bytegrad.introspect", "bytegrad.precompile", "bytegrad.exporter", "bytegrad.__main__")

BANNED: dict[str, tuple[str, ...]] = {
    "bytegrad.errors": ("bytegrad.rules", "bytegrad.runtime", "bytegrad.transform", "bytegrad.compiled", *TOP),
    "bytegrad.rules": ("bytegrad.transform", "bytegrad.runtime", "bytegrad.compiled", *TOP),
    "bytegrad.runtime": ("bytegrad.transform", "bytegrad.compiled", *TOP),
    "bytegrad.transform": ("bytegrad.runtime.kernels", "bytegrad.compiled", "numba", *TOP),
    "bytegrad.compiled": TOP,
}
LOWER_LAYERS = tuple(BANNED)
NUMBA_ONLY_IN = "bytegrad.runtime.kernels"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def is_submodule(name: str) -> bool:
    """Whether `name` (e.g. bytegrad.rules.registry) is a module or package in the source tree."""
    rel = Path(*name.split("."))
    root = PACKAGE_DIR.parent
    return (root / rel).with_suffix(".py").is_file() or (root / rel).is_dir()


def resolve_relative(module: str, package: bool, level: int, target: str | None) -> str:
    """The absolute name of `from <level dots><target> import ...` written in `module`."""
    base = module.split(".") if package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def iter_imports(path: Path) -> Iterator[tuple[str, int, bool]]:
    """Yields (imported module, line, at module level) for every import in the file at `path`."""
    source = path.read_text(encoding="utf-8")
    yield from imports_in_source(source, module_name(path), is_package(path), str(path))


def imports_in_source(source: str, module: str, package: bool,
                      filename: str = "<source>") -> Iterator[tuple[str, int, bool]]:
    """Yields (imported module, line, at module level) for every import in `source`.

    `from pkg import name` yields `pkg.name` when that is a module of the source tree, else `pkg`;
    `importlib.import_module("...")` and `__import__("...")` with a constant name count too.
    """
    tree = ast.parse(source, filename=filename)
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node

    def top_level(node: ast.AST) -> bool:
        while node in parents:
            node = parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return False
        return True

    def typing_only(node: ast.AST) -> bool:  # under `if TYPE_CHECKING:`: read by type checkers only
        while node in parents:
            node = parents[node]
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                return True
        return False

    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and typing_only(node):
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno, top_level(node)
        elif isinstance(node, ast.ImportFrom):
            base = (resolve_relative(module, package, node.level, node.module) if node.level
                    else node.module or "")
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield (full if is_submodule(full) else base), node.lineno, top_level(node)
        elif isinstance(node, ast.Call) and node.args:
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
            first = node.args[0]
            if name in ("import_module", "__import__") and isinstance(first, ast.Constant) \
                    and isinstance(first.value, str):
                yield first.value, node.lineno, top_level(node)


def package_files(package: str) -> list[Path]:
    rel = Path(*package.split(".")[1:])
    target = PACKAGE_DIR / rel
    if target.with_suffix(".py").is_file():
        return [target.with_suffix(".py")]
    return sorted(target.rglob("*.py")) if target.is_dir() else []


def within(target: str, prefixes: tuple[str, ...]) -> bool:
    return any(target == p or target.startswith(p + ".") for p in prefixes)


def test_package_found() -> None:
    assert (PACKAGE_DIR / "errors.py").is_file(), PACKAGE_DIR


@pytest.mark.parametrize("package", LOWER_LAYERS)
def test_no_upward_imports(package: str) -> None:
    offences = []
    for path in package_files(package):
        for target, line, _ in iter_imports(path):
            # the bare package runs bytegrad/__init__.py, which imports the top layer
            if within(target, BANNED[package]) or target == "bytegrad":
                offences.append(f"{path.relative_to(PACKAGE_DIR.parent)}:{line} imports {target}")
    assert not offences, f"{package} must not import {', '.join(BANNED[package])}:\n" + "\n".join(offences)


def test_only_kernels_imports_numba() -> None:
    offences = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        module = module_name(path)
        for target, line, at_top in iter_imports(path):
            if not within(target, ("numba", "llvmlite")):
                continue
            where = f"{path.relative_to(PACKAGE_DIR.parent)}:{line}"
            if module != NUMBA_ONLY_IN:
                offences.append(f"{where} imports {target}: only {NUMBA_ONLY_IN} may import numba")
            elif at_top:
                offences.append(f"{where} imports {target} at module level: import it inside the "
                                "function that needs it, so `import bytegrad` never loads numba")
    assert not offences, "\n".join(offences)


def test_walker_sees_relative_and_dynamic_imports() -> None:
    # The checker itself: relative imports resolve against the package, dynamic and nested ones are seen.
    source = (
        "from .. import errors\n"
        "from ..runtime import abi\n"
        "from . import registry, not_a_module\n"
        "import importlib\n"
        "def f():\n"
        "    import numba.core\n"
        "    importlib.import_module('bytegrad.transform')\n"
    )
    found = {(target, top) for target, _, top in imports_in_source(source, "bytegrad.rules", package=True)}
    assert found == {
        ("bytegrad.errors", True),
        ("bytegrad.runtime.abi", True) if is_submodule("bytegrad.runtime.abi") else ("bytegrad.runtime", True),
        ("bytegrad.rules.registry", True),
        ("bytegrad.rules", True),
        ("importlib", True),
        ("numba.core", False),
        ("bytegrad.transform", False),
    }
    assert resolve_relative("bytegrad.rules.numpy.ufuncs", False, 1, "_x") == "bytegrad.rules.numpy._x"
    assert resolve_relative("bytegrad.rules.numpy.ufuncs", False, 2, None) == "bytegrad.rules"


# ---- private names stay in their module ------------------------------------------------------------


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_reads(source: str, module: str, package: bool, filename: str = "<source>") -> Iterator[tuple[str, int]]:
    """Yields (what, line) for each private name of another bytegrad module that `source` reads:
    `from bytegrad.x import _name` and `x._name` where `x` was imported as a bytegrad module.
    Private modules (`rules/_shape.py`) are the package's own and may be imported within it."""
    tree = ast.parse(source, filename=filename)
    modules: dict[str, str] = {}  # local name -> bytegrad module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("bytegrad"):
                    modules[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else "bytegrad"
        elif isinstance(node, ast.ImportFrom):
            base = (resolve_relative(module, package, node.level, node.module) if node.level
                    else node.module or "")
            if not base.startswith("bytegrad"):
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if is_submodule(full):
                    modules[alias.asname or alias.name] = full
                elif _private(alias.name) and base != module:
                    yield f"from {base} import {alias.name}", node.lineno
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr):
            target = modules.get(node.value.id)
            if target is not None and target != module and not is_submodule(f"{target}.{node.attr}"):
                yield f"{node.value.id}.{node.attr} ({target})", node.lineno


def test_no_private_names_across_modules() -> None:
    offences = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        for what, line in private_reads(source, module_name(path), is_package(path), str(path)):
            offences.append(f"{path.relative_to(PACKAGE_DIR.parent)}:{line} reads {what}")
    assert not offences, "a module's private names are its own (make the name public, or add a " \
                         "function that says what the caller needs):\n" + "\n".join(offences)


def test_private_reads_are_seen() -> None:
    source = (
        "from bytegrad.runtime import tape as _tape\n"
        "from bytegrad.runtime.backward import _bw_identity, singular_partial\n"
        "from bytegrad.rules import registry, _shape\n"
        "from bytegrad.rules._shape import unbroadcast\n"
        "x = registry._version, _tape._tls, registry.lookup, _shape.stand_in, _tape.__name__\n"
    )
    found = [what for what, _ in private_reads(source, "bytegrad.runtime.abi", False)]
    assert found == ["from bytegrad.runtime.backward import _bw_identity",
                     "registry._version (bytegrad.rules.registry)", "_tape._tls (bytegrad.runtime.tape)"]


# ---- no import cycles ------------------------------------------------------------------------------


def _import_graph() -> dict[str, set[str]]:
    """Module -> the bytegrad modules it imports (at module level or inside functions)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        graph[module_name(path)] = {t for t, _, _ in iter_imports(path) if t.startswith("bytegrad")}
    modules = set(graph)

    def owner(target: str) -> str:
        while target not in modules and "." in target:
            target = target.rsplit(".", 1)[0]
        return target

    return {m: {owner(t) for t in targets} - {m} for m, targets in graph.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    """No module of bytegrad imports, directly or through others, a module that imports it back,
    counting imports inside functions: each layer's modules form a tree that reads top to bottom."""
    cycles = _cycles(_import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


# ---- sizes -------------------------------------------------------------------------------------------

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def test_modules_and_functions_stay_small() -> None:
    """No module of bytegrad over 600 lines and no function over 80 (CONTRIBUTING.md, rule 3):
    past that, split by topic."""
    offences = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        where = path.relative_to(PACKAGE_DIR.parent)
        if source.count("\n") > MAX_MODULE_LINES:
            offences.append(f"{where}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    offences.append(f"{where}:{node.lineno} {node.name}: {length} lines")
    assert not offences, "\n".join(offences)
