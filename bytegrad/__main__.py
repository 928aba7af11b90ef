"""bytegrad's command-line tools: `cache info`, `cache clear`, `precompile`.

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

from bytegrad.runtime import diskcache


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def cache_info(args: argparse.Namespace) -> int:
    """Print where the cache is, its size against the cap, and its entries per namespace and function."""
    data = diskcache.info()
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
        return 0
    if data["dir"] is None:
        print("disk cache: off (BYTEGRAD_DISABLE_DISK_CACHE is set, or the directory was refused; "
              "see the warning above)")
        return 0
    print(f"cache directory: {data['dir']}")
    print(f"size: {_size(data['total_bytes'])} of {_size(data['max_bytes'])} "
          f"(cap: BYTEGRAD_CACHE_MAX_MB, default {diskcache.DEFAULT_MAX_MB})")
    if not data["namespaces"]:
        print("empty")
    for name, ns in sorted(data["namespaces"].items()):
        print(f"{name}: {ns['entries']} entries, {ns['sources']} generated sources, "
              f"{ns['kernel_files']} Numba cache files, {_size(ns['bytes'])}")
        for label, count in sorted(ns["functions"].items()):
            print(f"  {count:4d}  {label}")
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
    commands = cache.add_subparsers(dest="cache_command", required=True)
    info = commands.add_parser("info", help="where the cache is, its size, entries per function")
    info.add_argument("--json", action="store_true", help="print the details as JSON")
    info.set_defaults(run=cache_info)
    clear = commands.add_parser("clear", help="delete everything in the cache")
    clear.set_defaults(run=cache_clear)


def run_precompile(args: argparse.Namespace) -> int:
    """Fill the disk caches: a function's rewritten code and kernels, and/or the standard kernels."""
    import numpy as np

    import importlib

    pc = importlib.import_module("bytegrad.precompile")  # `bytegrad.precompile` is also the function

    if not args.target and not args.standard:
        print("nothing to do: give module:function (with --example), or --standard", file=sys.stderr)
        return 2
    if args.standard:
        for expr, seconds in pc.precompile_standard().items():
            print(f"standard kernel {expr}: {seconds:.2f} s")
    if args.target:
        fn = pc.resolve(args.target)
        namespace = {"np": np, "numpy": np}
        examples = [eval(e, namespace) for e in args.example]  # noqa: S307 - the user's own command line
        wrt: Any = args.wrt
        wrt = tuple(int(w) if w.isdigit() else w for w in wrt.split(",")) if "," in wrt else (
            int(wrt) if wrt.isdigit() else wrt)
        result = pc.precompile(fn, *examples, wrt=wrt)
        print(f"precompiled {args.target} in {result['precompile_s']:.2f} s")
        for site in result.get("fused_sites", []):
            print(f"  fused site line {site['line']}: {site['expr']} ({site['state']}, "
                  f"compile {site['compile_s']:.2f} s)")
    return 0


def add_precompile(subparsers: Any) -> None:
    p = subparsers.add_parser("precompile", help="rewrite and compile ahead of time into the disk cache")
    p.add_argument("target", nargs="?", help="module:function to precompile")
    p.add_argument("--example", action="append", default=[],
                   help="a Python expression (numpy as np) for each positional example argument")
    p.add_argument("--wrt", default="0", help="position(s) or name(s) to differentiate, comma separated")
    p.add_argument("--standard", action="store_true",
                   help="compile the standard dense kernels (tanh, sigmoid, relu, softplus; float32/64)")
    p.set_defaults(run=run_precompile)


COMMANDS: list[Callable[[Any], None]] = [add_cache, add_precompile]


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
    args = build_parser().parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
