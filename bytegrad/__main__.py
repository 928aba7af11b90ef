"""bytegrad's command-line tools: `cache info`, `cache clear`, `precompile`, `export`, `config`.

Run as the console script `bytegrad` (installed with the package) or as `python -m bytegrad`.

Each command is a subparser with a handler in `set_defaults(run=...)`; to add one, write an
`add_<name>(subparsers)` function and list it in `COMMANDS`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Optional, Sequence

from bytegrad import diskcache


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def cache_info(args: argparse.Namespace) -> int:
    """Print where the cache is, its size against the cap and its entries by kind; with --list,
    the entries per function too."""
    data = diskcache.info()
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
        return 0
    if data["dir"] is None:
        print("disk cache: off (BYTEGRAD_DISABLE_DISK_CACHE is set, or the directory was refused: "
              "see the warning)")
        return 0
    namespaces = data["namespaces"]
    print(f"cache directory: {data['dir']}")
    print(f"size: {_size(data['total_bytes'])} of {_size(data['max_bytes'])} "
          f"(cap: BYTEGRAD_CACHE_MAX_MB, default {diskcache.DEFAULT_MAX_MB})")
    if not namespaces:
        print("empty")
        return 0
    entries = sum(ns["entries"] for ns in namespaces.values())
    files = sum(ns["sources"] + ns["kernel_files"] for ns in namespaces.values())
    print(f"{entries} entries and {files} kernel files, by kind:")
    for name, ns in sorted(namespaces.items()):
        print(f"  {name}: {ns['entries']} entries, {ns['sources']} generated sources, "
              f"{ns['kernel_files']} Numba cache files, {_size(ns['bytes'])}")
        if args.list:
            for label, count in sorted(ns["functions"].items()):
                print(f"    {count:4d}  {label}")
    if not args.list:
        print(f"(`{args.prog} cache info --list` lists them per function)")
    return 0


def cache_clear(args: argparse.Namespace) -> int:
    """Delete every file in the cache directory."""
    root = diskcache.cache_dir()
    if root is None:
        print("disk cache: off; nothing to clear")
        return 0
    removed = diskcache.clear()
    print(f"removed {removed} file{'s' if removed != 1 else ''} from {root}")
    return 0


def add_cache(subparsers: Any) -> None:
    cache = subparsers.add_parser("cache", help="inspect or empty the on-disk cache")
    commands = cache.add_subparsers(dest="cache_command", metavar="{info,clear}", required=True)
    info = commands.add_parser("info", help="where the cache is, its size, entries per function")
    info.add_argument("--list", action="store_true", help="list the entries per function too")
    info.add_argument("--json", action="store_true", help="print the details as JSON")
    info.set_defaults(run=cache_info)
    clear = commands.add_parser("clear", help="delete everything in the cache")
    clear.set_defaults(run=cache_clear)


class UsageError(Exception):
    """A mistake on the command line: printed as one line on stderr, exit code 2."""

    code = 2


class UserCodeError(UsageError):
    """The user's module failed to import: one paragraph naming its file and line, exit code 1."""

    code = 1


def _user_line(exc: BaseException) -> tuple[str, int, str]:
    """(file, line, source) where `exc` left the user's code: a SyntaxError's own position, else the
    innermost frame outside the standard library, NumPy, bytegrad and the import machinery."""
    import linecache
    import traceback

    from bytegrad.errors import library_file

    if isinstance(exc, SyntaxError):
        return exc.filename or "?", exc.lineno or 0, (exc.text or "").strip()
    where = ("?", 0)
    for frame in traceback.extract_tb(exc.__traceback__):
        if not frame.filename.startswith("<frozen") and not library_file(frame.filename):
            where = (frame.filename, frame.lineno or 0)
    return where[0], where[1], linecache.getline(where[0], where[1]).strip()


def _failure(what: str, exc: BaseException, fix: str) -> str:
    """One paragraph: what failed, at which file and line (with its source), the exception, the fix."""
    filename, lineno, source = _user_line(exc)
    detail = str(exc.msg if isinstance(exc, SyntaxError) else exc)
    shown = f"\n    {source}" if source else ""
    return f"{what} at {filename}, line {lineno}:{shown}\n  {type(exc).__name__}: {detail}\n  {fix}"


def run_precompile(args: argparse.Namespace) -> int:
    """Fill the disk caches: a function's rewritten code and kernels, and/or the standard kernels."""
    from bytegrad.errors import DifferentiationError, WrtError

    import bytegrad

    # Through the package's lazy attribute, which keeps `bytegrad.precompile` the function: a first
    # `import bytegrad.precompile` would leave the package attribute bound to the module.
    bytegrad.precompile  # noqa: B018
    pc = sys.modules["bytegrad.precompile"]

    if not args.target and not args.standard:
        raise UsageError("nothing to do: give module:function (with one --example per argument), or --standard")
    if args.target:  # every mistake in the target is reported before anything is compiled
        fn = _import_target(pc, args.target)
        examples = _examples(fn, args.target, args.example)
        wrt = tuple(_wrt_item(w) for w in args.wrt.split(",")) if "," in args.wrt else _wrt_item(args.wrt)
    if args.standard:
        for expr, seconds in pc.precompile_standard().items():
            print(f"standard kernel {expr}: {seconds:.2f} s")
    if args.target:
        try:
            result = pc.precompile(fn, *examples, wrt=wrt)
        except WrtError as exc:
            raise UsageError(f"--wrt {args.wrt}: {exc.problem}") from None
        except DifferentiationError as exc:  # a problem in the function itself: its line, the fix
            print(f"{args.prog} precompile: {args.target} cannot be differentiated:\n{exc}", file=sys.stderr)
            return 1
        except Exception as exc:  # the function failed on the examples (a wrong shape...)
            if _user_line(exc)[0] == "?":
                raise  # nothing of the user's on the way: bytegrad's own failure keeps its traceback
            raise UsageError(_failure(f"{args.target} failed on the --example values", exc,
                                      "Check that each --example has the shape and dtype the function expects "
                                      "(one per positional argument, in order).")) from None
        print(f"precompiled {args.target} in {result['precompile_s']:.2f} s")
        for prog in result.get("compiled", {}).get("programs", []):
            twin = f"; Numba: {prog['numba_kernels']}" if "numba_kernels" in prog else ""
            print(f"  compiled program: {prog['backend']} back end, {prog['operations']} operations{twin}")
        for site in result.get("fused_sites", []):
            print(f"  fused site line {site['line']}: {site['expr']} ({site['state']}, "
                  f"compile {site['compile_s']:.2f} s)")
    return 0


def _wrt_item(text: str) -> Any:
    text = text.strip()
    return int(text) if text.lstrip("-").isdigit() else text


def _import_target(pc: Any, target: str, verb: str = "precompiling") -> Any:
    """`module:function`, imported from the current directory first (as `python -m` would)."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        fn, module = pc.resolve(target)
    except LookupError as exc:
        raise UsageError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - the module's own code failed while it was imported
        name = target.partition(":")[0]
        fix = ("Install the module it imports, or correct the import" if isinstance(exc, ImportError) else
               "Correct that line")
        raise UserCodeError(_failure(f"importing {name} failed", exc,
                                     f"{fix}, and run the command again; `python -c \"import {name}\"` "
                                     f"shows the whole traceback.")) from None
    print(f"{verb} {target} from {getattr(module, '__file__', None) or module.__name__}")
    if not callable(fn):
        raise UsageError(f"{target} is a {type(fn).__name__}, not a function")
    return fn


def _examples(fn: Any, target: str, expressions: list[str]) -> list[Any]:
    """Evaluate each --example (NumPy as `np`) and check that they fit `fn`'s signature."""
    import inspect

    import numpy as np

    namespace = {"np": np, "numpy": np}
    examples = []
    for text in expressions:
        try:
            examples.append(eval(text, namespace))  # noqa: S307 - the user's own command line
        except Exception as exc:  # noqa: BLE001 - any failure of the user's expression is reported
            raise UsageError(f"--example {text!r} does not evaluate (numpy is `np`): "
                             f"{type(exc).__name__}: {exc}") from None
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return examples
    try:
        signature.bind(*examples)
    except TypeError as exc:
        raise UsageError(f"{target}{signature} got {len(examples)} --example (one per positional "
                         f"argument): {exc}") from None
    return examples


def add_precompile(subparsers: Any) -> None:
    p = subparsers.add_parser("precompile", help="rewrite and compile ahead of time into the disk cache",
                              description="Take one gradient of module:function on the example arguments, "
                              "compiling its fused kernels at once, so that later processes load them from the "
                              "disk cache. The module is imported from the current directory first, then from "
                              "the installed packages.")
    p.add_argument("target", nargs="?", help="module:function (or module:Class.method) to precompile")
    p.add_argument("--example", action="append", default=[],
                   help="a Python expression (numpy as np) for each positional example argument")
    p.add_argument("--wrt", default="0", help="position(s) or name(s) to differentiate, comma separated")
    p.add_argument("--standard", action="store_true",
                   help="compile the standard dense kernels (tanh, sigmoid, relu, softplus; float32/64)")
    p.set_defaults(run=run_precompile)


def run_export(args: argparse.Namespace) -> int:
    """Write module:function's gradient for the example's signature as a standalone NumPy module."""
    import contextlib

    from bytegrad.errors import DifferentiationError, WrtError

    import bytegrad

    bytegrad.precompile  # noqa: B018  (see run_precompile: the package attribute stays the function)
    bytegrad.export  # noqa: B018
    pc = sys.modules["bytegrad.precompile"]
    with contextlib.redirect_stdout(sys.stderr):  # (stdout may be the module itself)
        fn = _import_target(pc, args.target, "exporting")
    examples = _examples(fn, args.target, args.example)
    wrt = tuple(_wrt_item(w) for w in args.wrt.split(",")) if "," in args.wrt else _wrt_item(args.wrt)
    try:
        source = bytegrad.export(fn, *examples, wrt=wrt)
    except WrtError as exc:
        raise UsageError(f"--wrt {args.wrt}: {exc.problem}") from None
    except DifferentiationError as exc:
        print(f"{args.prog} export: {args.target} cannot be exported:\n{exc}", file=sys.stderr)
        return 1
    if args.output in (None, "-"):
        sys.stdout.write(source)
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(source)
        print(f"wrote {args.output}: value_and_grad of {args.target}, NumPy only", file=sys.stderr)
    return 0


def add_export(subparsers: Any) -> None:
    p = subparsers.add_parser("export", help="write a function's gradient as a standalone NumPy module",
                              description="Write the value and gradient of module:function, for the signature "
                              "of the example arguments, as a Python module that needs NumPy only "
                              "(docs/export.md). The module is imported as for precompile.")
    p.add_argument("target", help="module:function to export")
    p.add_argument("--example", action="append", default=[],
                   help="a Python expression (numpy as np) for each positional example argument")
    p.add_argument("--wrt", default="0", help="position(s) or name(s) to differentiate, comma separated")
    p.add_argument("-o", "--output", default=None, help="the file to write (default: standard output)")
    p.set_defaults(run=run_export)


def run_config(args: argparse.Namespace) -> int:
    """Print each switch of `bytegrad.config`, its value and where it came from; with --markdown, the
    table of every switch that docs/usage.md shows."""
    from bytegrad import _config

    print(_config.markdown_table() if args.markdown else _config.describe(_config.config), end="")
    return 0


def add_config(subparsers: Any) -> None:
    p = subparsers.add_parser("config", help="the switches of bytegrad.config (BYTEGRAD_* variables) and their values")
    p.add_argument("--markdown", action="store_true", help="print the table of every switch (docs/usage.md)")
    p.set_defaults(run=run_config)


COMMANDS: list[Callable[[Any], None]] = [add_cache, add_precompile, add_export, add_config]


def build_parser() -> argparse.ArgumentParser:
    # The console script `bytegrad` and `python -m bytegrad` (argv[0] is this file) run the same main.
    prog = "python -m bytegrad" if os.path.basename(sys.argv[0]) == "__main__.py" else "bytegrad"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    from bytegrad import __version__
    parser.add_argument("--version", action="version", version=f"bytegrad {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run one command; returns the exit code (2: a mistake on the command line, said in one line;
    1: the user's module or function failed, said in one paragraph)."""
    try:
        return _main(argv)
    except BrokenPipeError:  # `bytegrad cache info | head`: the reader has gone; stop quietly, as Unix tools do
        try:  # (the interpreter's flush of stdout at exit would fail again, with a message)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 128 + 13  # what a shell reports for a tool that SIGPIPE stopped


def _main(argv: Optional[Sequence[str]]) -> int:
    import warnings

    parser = build_parser()
    args = parser.parse_args(argv)
    args.prog = parser.prog
    formatwarning = warnings.formatwarning  # a warning (the cache refused) is one line too
    warnings.formatwarning = lambda message, category, *_, **__: f"{parser.prog}: {category.__name__}: {message}\n"
    try:
        code = int(args.run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, while BrokenPipeError is handled
        return code
    except UsageError as exc:
        print(f"{parser.prog} {args.command}: error: {exc}", file=sys.stderr)
        return exc.code
    finally:
        warnings.formatwarning = formatwarning


if __name__ == "__main__":
    sys.exit(main())
