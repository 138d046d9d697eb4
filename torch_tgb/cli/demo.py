"""``tgb demo [DIR]``: the whole data plane on a local directory, no server.

Two producer processes write a small synthetic tokenised stream with DAC, a
2-rank consumer reads it with dp=2, restarts from a saved state mid-way, the
reclaimer runs, and a summary table of measured figures is printed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from torch_tgb.cli._common import CommandError, add_json_flag, add_storage_option_flag

__all__ = ["add_parser", "run"]

def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="run producers, a 2-rank consumer, a restart and the reclaimer on a local directory",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("dir", nargs="?", metavar="DIR", help="directory to use (default: a fresh temp dir, kept)")
    p.add_argument("--producers", type=int, default=2, help="producer processes (default 2)")
    p.add_argument("--ranks", type=int, default=2, help="consumer ranks, dp size (default 2)")
    p.add_argument("--steps", type=int, default=64, help="global batches produced in total (default 64)")
    p.add_argument("--global-batch", type=int, default=8, help="sequences per global batch (default 8)")
    p.add_argument("--seq-len", type=int, default=256, help="tokens per sequence (default 256)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic token stream")
    p.add_argument(
        "--compute-ms",
        type=float,
        default=20.0,
        help="simulated training time per step on each rank, a sleep (default 20; 0 = read as fast as possible)",
    )
    add_json_flag(p)
    add_storage_option_flag(p)
    p.set_defaults(run=run)


def _directory(arg: str | None) -> Path:
    if arg is None:
        return Path(tempfile.mkdtemp(prefix="tgb-demo-"))
    path = Path(arg).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def run(args: argparse.Namespace) -> int:
    for name in ("producers", "ranks", "steps", "global_batch", "seq_len"):
        if getattr(args, name) < 1:
            raise CommandError(f"--{name.replace('_', '-')} must be at least 1")
    if args.storage_option:
        print("tgb demo: runs on a local directory; --storage-option is ignored", file=sys.stderr)
    root = _directory(args.dir)
    ns_dir = root / "ns"
    if ns_dir.exists() and any(ns_dir.iterdir()):
        raise CommandError(f"{ns_dir} is not empty: give `tgb demo` a new directory")
    from torch_tgb.cli._demo_run import run_demo

    return run_demo(args, root)
