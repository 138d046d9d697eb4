"""Shared helpers for the benchmark scripts: where results go, the machine description, statistics.

Every script takes ``--results-dir`` (default ``$TGB_BENCH_RESULTS``, else
``./tgb-bench-results`` in the working directory) and writes ``NAME.json``
there with a ``machine`` block, printing the path. The committed
``benchmarks/results/`` is written only when named explicitly.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

COMMITTED = Path(__file__).parent / "results"
DEFAULT_DIRNAME = "tgb-bench-results"


def default_results_dir() -> Path:
    return Path(os.environ.get("TGB_BENCH_RESULTS") or Path.cwd() / DEFAULT_DIRNAME)


def add_results_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--results-dir", type=Path, default=None,
        help=f"where NAME.json (and plots) go (default $TGB_BENCH_RESULTS, else ./{DEFAULT_DIRNAME}; "
        "the committed benchmarks/results/ only when named here)",
    )


def results_dir(args: argparse.Namespace) -> Path:
    path = Path(args.results_dir) if getattr(args, "results_dir", None) else default_results_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path


def _proc_field(path: str, prefix: str, *, sep: str | None = None) -> str | None:
    """The rest of the first line of ``path`` that starts with ``prefix`` (Linux /proc files)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(prefix):
                return line.split(sep, 1)[1].strip() if sep else line[len(prefix):].strip()
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    return _proc_field("/proc/cpuinfo", "model name", sep=":") or platform.processor() or "unknown"


def _ram_bytes() -> int | None:
    value = _proc_field("/proc/meminfo", "MemTotal:")
    return int(value.split()[0]) * 1024 if value else None


def machine() -> dict[str, Any]:
    """Cores, RAM, CPU model, GPUs, Python, torch, numpy, platform and the UTC date of this run."""
    import numpy
    import torch

    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "cores": os.cpu_count(),
        "ram_bytes": _ram_bytes(),
        "cpu_model": _cpu_model(),
        "gpus": gpu_names(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        "loadavg_at_end": load,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def gpu_names() -> list[str]:
    """The GPUs nvidia-smi names (without initialising CUDA in this process); [] where there is none."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return []
    query = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                           text=True, check=False, timeout=30)
    return [line.strip() for line in query.stdout.splitlines() if line.strip()] if query.returncode == 0 else []


def save(directory: Path, name: str, payload: dict[str, Any]) -> Path:
    """Write ``directory/name.json`` with the machine block and print where it went."""
    payload = {"benchmark": name, "machine": machine(), **payload}
    path = directory / f"{name}.json"
    path.write_text(json.dumps(payload, indent=1, default=str))
    print(f"wrote {path}", flush=True)
    return path


def peak_rss_bytes() -> int:
    """Peak resident set of this process: VmHWM (ru_maxrss survives exec, so a child would report its parent's)."""
    value = _proc_field("/proc/self/status", "VmHWM:")
    if value:
        return int(value.split()[0]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def pct(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def spread(values: Sequence[float]) -> dict[str, float]:
    """min / median / max of repeated measurements (rounds of an interleaved run)."""
    if not values:
        return {"min": float("nan"), "median": float("nan"), "max": float("nan"), "n": 0}
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "n": len(values)}


def interleave(runs: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list[Any]]:
    """Run every callable once per round in A B A B order so that load drifts hit all of them alike."""
    out: dict[str, list[Any]] = {name: [] for name in runs}
    for r in range(rounds):
        names = list(runs) if r % 2 == 0 else list(reversed(runs))
        for name in names:
            out[name].append(runs[name]())
    return out
