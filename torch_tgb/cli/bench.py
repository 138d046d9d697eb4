"""``tgb bench [NAME] [ARGS...]``: list or run the benchmark scripts under ``benchmarks/``.

Without NAME, lists the scripts (``benchmarks/<name>.py``, excluding
pytest-benchmark files) and the suites. With NAME, runs that script with the
current Python and passes every following argument through; the exit code is
the script's. ``quick`` and ``all`` run a suite of scripts into one results
directory (``--results-dir``, default ``./tgb-bench-results``); ``report``
writes docs/benchmarks.md from a results directory.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from torch_tgb.cli._common import CommandError, add_storage_option_flag

__all__ = ["ALIASES", "SUITES", "add_parser", "find_benchmarks", "run"]

#: short names for scripts: ``tgb bench e2e`` runs ``benchmarks/end_to_end.py``
ALIASES = {"e2e": "end_to_end"}

# (script, arguments) in run order. "quick" needs no peer installs and no
# redis-server and finishes in a few minutes on 2 cores (peers' loopback S3
# section uses moto, end_to_end's (c) Ray: each is recorded as missing
# without them); "all" is the report's.
SUITES: dict[str, list[tuple[str, list[str]]]] = {
    "quick": [
        ("commit_cost", ["--quick"]),
        ("consumer_read", ["--quick", "--only", "hot_path", "--rounds", "1", "--processes", "1"]),
        ("lifecycle", ["--small", "--also-policy", ""]),  # "": one policy only
        ("peers", ["--quick", "--peers", "builtin"]),
        ("getbatch", ["--quick"]),
        ("end_to_end", ["--quick"]),
        ("balance", ["--quick"]),
        ("hot_tier", ["--quick"]),
        ("multimodal", ["--quick"]),
        ("ingest", ["--quick"]),
        ("provenance_cost", ["--quick"]),
        ("lineage_lookup", ["--quick"]),
    ],
    "all": [
        ("peers", []),
        ("getbatch", ["--s3"]),
        ("redis_queue", []),
        ("end_to_end", []),
        ("commit_cost", ["--quick"]),
        ("consumer_read", ["--quick", "--s3"]),
        ("lifecycle", []),
        ("balance", []),
        ("hot_tier", ["--s3"]),
        ("multimodal", []),
        ("ingest", ["--rounds", "3"]),
        ("ingest_floor", []),
        ("provenance_cost", []),
        ("lineage_lookup", []),
        # producer_scaling takes 10+ minutes at full size: run it by name (tgb bench producer_scaling)
    ],
}


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
        print("suites: quick (no peer installs, no redis; a few minutes), all (the report's full set); aliases: "
              + ", ".join(f"{a} = {n}" for a, n in ALIASES.items()))
        print("run one with: tgb bench NAME [ARGS...]; tgb bench quick|all [--results-dir DIR]; "
              "tgb bench report [--results-dir DIR]")
        return 0
    name = args.name[:-3] if args.name.endswith(".py") else args.name
    name = ALIASES.get(name, name)
    if name in SUITES:
        return _run_suite(name, scripts, directory, _passthrough(args))
    if name not in scripts:
        known = ", ".join(scripts) or "none"
        raise CommandError(f"no benchmark named {name!r} in {directory} (available: {known})")
    passthrough = _passthrough(args)
    for item in args.storage_option:
        passthrough += ["--storage-option", item]
    completed = subprocess.run([sys.executable, str(scripts[name]), *passthrough], check=False)
    return completed.returncode


def _passthrough(args: argparse.Namespace) -> list[str]:
    passthrough = list(args.args)
    return passthrough[1:] if passthrough[:1] == ["--"] else passthrough


def _run_suite(suite: str, scripts: dict[str, Path], directory: Path, argv: list[str]) -> int:
    """Run every script of ``suite`` into one results directory; exit 1 if any failed."""
    parser = argparse.ArgumentParser(prog=f"tgb bench {suite}")
    parser.add_argument("--results-dir", type=Path, default=Path.cwd() / "tgb-bench-results")
    parser.add_argument("--skip", action="append", default=[], help="script to leave out (repeatable)")
    opts = parser.parse_args(argv)
    from torch_tgb._progress import progress, say

    out = opts.results_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(f"tgb bench {suite}: results go to {out}", flush=True)
    failed = []
    started = time.monotonic()
    runs = [(name, extra) for name, extra in SUITES[suite] if name not in opts.skip]
    for name, _ in runs:
        if name not in scripts:
            raise CommandError(f"suite {suite!r} needs benchmarks/{name}.py, not found in {directory}")
    with progress(total=len(runs), desc=f"tgb bench {suite}", unit="script") as bar:
        for name, extra in runs:
            t0 = time.monotonic()
            bar.set_description_str(f"tgb bench {suite}: {name}")
            say(f"--- {name} {' '.join(extra)}", stream=sys.stdout)
            sys.stdout.flush()
            rc = subprocess.run([sys.executable, str(scripts[name]), *extra, "--results-dir", str(out)],
                                check=False).returncode
            say(f"--- {name}: exit {rc} in {time.monotonic() - t0:.0f} s", stream=sys.stdout)
            sys.stdout.flush()
            bar.update(1)
            if rc:
                failed.append(name)
    print(f"tgb bench {suite}: {len(runs) - len(failed)} ok, failed: {failed or 'none'}; "
          f"{time.monotonic() - started:.0f} s; results in {out}")
    return 1 if failed else 0
