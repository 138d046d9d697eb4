"""``tgb bench [NAME] [ARGS...]``: list or run the benchmark scripts under ``benchmarks/``.

Without NAME, lists the scripts (``benchmarks/<name>.py``, excluding
pytest-benchmark files). With NAME, runs that script with the current Python
and passes every following argument through; the exit code is the script's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from torch_tgb.cli._common import CommandError, add_storage_option_flag

__all__ = ["add_parser", "find_benchmarks", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="list or run the benchmark scripts in benchmarks/",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="benchmark to run (omit to list them)")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="passed to the benchmark script")
    p.add_argument(
        "--dir",
        default=None,
        help="benchmarks directory (default: $TGB_BENCHMARKS, else ./benchmarks, else the source checkout's)",
    )
    add_storage_option_flag(p)
    p.set_defaults(run=run)


def _default_dir(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit)
    env = os.environ.get("TGB_BENCHMARKS")
    if env:
        return Path(env)
    cwd = Path.cwd() / "benchmarks"
    if cwd.is_dir():
        return cwd
    # an editable install: <checkout>/torch_tgb/cli/bench.py → <checkout>/benchmarks
    return Path(__file__).resolve().parents[2] / "benchmarks"


def find_benchmarks(directory: Path) -> dict[str, Path]:
    """Benchmark scripts in ``directory``: ``name → path``, sorted by name."""
    if not directory.is_dir():
        return {}
    found = {}
    for path in sorted(directory.glob("*.py")):
        name = path.stem
        if name.startswith(("_", "test_", "conftest")):
            continue
        found[name] = path
    return found


def _summary(path: Path) -> str:
    """First line of the script's docstring, read as text (the script is not imported)."""
    try:
        import ast

        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return ""
    return (doc or "").strip().splitlines()[0] if doc else ""


def run(args: argparse.Namespace) -> int:
    directory = _default_dir(args.dir)
    scripts = find_benchmarks(directory)
    if args.name is None:
        if not scripts:
            raise CommandError(f"no benchmark scripts found in {directory}")
        width = max(len(n) for n in scripts)
        print(f"benchmarks in {directory}:")
        for name, path in scripts.items():
            print(f"  {name:<{width}}  {_summary(path)}")
        print("run one with: tgb bench NAME [ARGS...]")
        return 0
    name = args.name[:-3] if args.name.endswith(".py") else args.name
    if name not in scripts:
        known = ", ".join(scripts) or "none"
        raise CommandError(f"no benchmark named {name!r} in {directory} (available: {known})")
    passthrough = list(args.args)
    if passthrough[:1] == ["--"]:
        passthrough = passthrough[1:]
    for item in args.storage_option:
        passthrough += ["--storage-option", item]
    completed = subprocess.run([sys.executable, str(scripts[name]), *passthrough], check=False)
    return completed.returncode
