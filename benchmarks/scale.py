"""The read side at 8,192 ranks and the write side at 1,024 producers: counts, bytes and projections.

Each row of the scale tables (docs/benchmarks.md, *Scale*) is measured twice in
one run, side by side: on this checkout and on a base revision (``--base``,
default the commit before round 4), extracted next to it with this
checkout's ``testing/counting.py`` as the common measuring instrument. Each
measurement runs in its own child process (``_scale_run.py``), so the
two trees never share a process or a cache.

Scale is never read off this 2-core box's clock: request and byte counts are
exact (a ``CountingStore``), times come from a ``LatencyStore`` model (20 ms
first byte, 100 MB/s per stream), and projections to R = 1,024 and 8,192
reader processes (8 per node) or N = 1,024 producers say how they were made:
measured per rank, per node or per commit, multiplied out, and compared with
S3's published per-prefix rates (5,500 GET/HEAD and 3,500 PUT per second).

    python benchmarks/scale.py [--quick] [--base REV] [--sections startup,footer,...]

A tiny variant runs in the suite (``--tiny``: tests/benchmarks/test_scale_bench.py); discovery (one node's
requests per second with and without the node share) is ``_scale_discovery.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, results_dir, save

ROOT = Path(__file__).resolve().parent.parent
SECTIONS_SCRIPT = Path(__file__).parent / "_scale_run.py"
#: the last commit before round 4's scale work: what "before" means unless --base says otherwise
DEFAULT_BASE = "1a105af"
S3_GET_PER_PREFIX = 5500.0

#: (section, parameters) of a full run and of --quick
PLAN: dict[str, list[dict[str, Any]]] = {
    "startup": [{"producers": 1000, "state_bytes": 30720}, {"producers": 10000, "state_bytes": 30720}],
    "footer": [{"dp": 64, "cp": 1}, {"dp": 1024, "cp": 1}, {"dp": 1024, "cp": 8}, {"dp": 1024, "cp": 16}],
    "fold": [{"shards": 10000}, {"shards": 65536}],
    "versions_memory": [{"steps": 500_000, "per_version": 1024}],
    "shuffled_manifest": [{"steps": 200_000, "per_version": 1024, "blocks": 1500}],
    "bytes_at_rest": [{"dp": 64, "batch": 64, "seq": 2048}, {"dp": 2, "batch": 16, "seq": 512}],
    "encode": [{"dp": 64, "cp": 1}, {"dp": 1024, "cp": 1}, {"dp": 1024, "cp": 8}],
    "state_bytes": [{"producers": 1024, "state_bytes": 30720}],
    "reclaim": [{"live": 100_000, "reclaim": 1000}],
    "tp_broadcast": [{"dp": 2, "tp": 2, "steps": 32}],
    "commit_requests": [{"producers": 8, "seconds": 150, "warmup_s": 60, "period_s": 0.5, "policy": "dac"},
                        {"producers": 64, "seconds": 240, "warmup_s": 90, "period_s": 0.5, "policy": "dac"}],
}
QUICK: dict[str, list[dict[str, Any]]] = {
    "startup": [{"producers": 200, "state_bytes": 30720, "versions": 20}],
    "footer": [{"dp": 64, "cp": 1}, {"dp": 256, "cp": 4}],
    "fold": [{"shards": 4096}],
    "versions_memory": [{"steps": 40_000, "per_version": 1024}],
    "shuffled_manifest": [{"steps": 40_000, "per_version": 1024, "blocks": 200}],
    "bytes_at_rest": [{"dp": 2, "batch": 16, "seq": 512}],
    "encode": [{"dp": 256, "cp": 4, "runs": 1}],
    "state_bytes": [{"producers": 32, "state_bytes": 30720}],
    "reclaim": [{"live": 300, "reclaim": 50}],
    "tp_broadcast": [{"dp": 2, "tp": 2, "steps": 8}],
    "commit_requests": [{"producers": 4, "seconds": 3, "period_s": 0.3, "policy": "dac"}],
}
#: what the suite runs (tests/test_scale_bench.py): one small row per section, seconds in all
TINY: dict[str, list[dict[str, Any]]] = {
    "startup": [{"producers": 20, "state_bytes": 8192, "versions": 4}],
    "footer": [{"dp": 16, "cp": 2}],
    "fold": [{"shards": 256}],
    "versions_memory": [{"steps": 2000, "per_version": 64}],
    "shuffled_manifest": [{"steps": 2000, "per_version": 64, "blocks": 20}],
    "bytes_at_rest": [{"dp": 2, "batch": 16, "seq": 512, "steps": 2}],
    "encode": [{"dp": 16, "cp": 2, "runs": 1}],
    "state_bytes": [{"producers": 8, "state_bytes": 8192}],
    "reclaim": [{"live": 200, "reclaim": 100}],
    "commit_requests": [{"producers": 2, "seconds": 1, "period_s": 0.2, "policy": "naive"}],
}


def extract_base(rev: str, into: Path) -> Path:
    """``torch_tgb`` of ``rev`` under ``into``, with this checkout's measuring instrument (testing/counting.py)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "torch_tgb"], check=True, capture_output=True)
    with tarfile.open(fileobj=__import__("io").BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    (into / "torch_tgb" / "testing" / "counting.py").write_bytes((ROOT / "torch_tgb/testing/counting.py").read_bytes())
    return into


def run_section(tree: Path, name: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One measurement in a child process whose torch_tgb is ``tree``'s."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, str(SECTIONS_SCRIPT), name, json.dumps(params)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"section {name} {params} on {tree} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def projections(name: str, result: dict[str, Any]) -> dict[str, Any]:
    """Fleet-wide figures from one measurement, labelled as projections."""
    out: dict[str, Any] = {}
    if name == "startup":
        for ranks in (1024, 8192):
            out[f"burst_bytes_at_R={ranks}"] = result["counts"]["bytes"] * ranks
            out[f"startup_requests_at_R={ranks}_over_prefix_limit_s"] = (
                result["counts"]["manifest_requests"] * ranks / S3_GET_PER_PREFIX)
    if name == "footer":
        out["footer_bytes_per_step_all_ranks"] = result["footer_bytes_per_rank_step"] * result["dp"] * result["cp"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (minutes)")
    parser.add_argument("--tiny", action="store_true", help="one tiny row per section (seconds): what the suite runs")
    parser.add_argument("--base", default=DEFAULT_BASE, help="revision measured as 'before' (none: skip it)")
    parser.add_argument("--sections", default=None, help="comma-separated subset of " + ",".join(PLAN))
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds one measurement may take")
    add_results_arg(parser)
    args = parser.parse_args()
    plan = TINY if args.tiny else QUICK if args.quick else PLAN
    names = args.sections.split(",") if args.sections else list(plan)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tgb-scale-base-") as tmp:
        trees = {"after": ROOT}
        if args.base and args.base != "none":
            trees = {"before": extract_base(args.base, Path(tmp)), **trees}
        for name in names:
            for params in plan[name]:
                row: dict[str, Any] = {"section": name, "params": params}
                for label, tree in trees.items():
                    result = run_section(tree, name, params, args.timeout)
                    row[label] = {**result, "projected": projections(name, result)}
                rows.append(row)
                print(json.dumps(_brief(row)), flush=True)
    save(results_dir(args), "scale_tiny" if args.tiny else "scale_quick" if args.quick else "scale",
         {"base": args.base, "model": "LatencyStore rtt=20 ms, 100 MB/s per stream; counts exact", "rows": rows})


def _brief(row: dict[str, Any]) -> dict[str, Any]:
    """A row without its full request breakdowns, for the console."""
    def strip(r: dict[str, Any]) -> dict[str, Any]:
        return {k: (v["requests"], v["bytes"]) if k == "counts" else v for k, v in r.items()}
    return {k: strip(v) if isinstance(v, dict) and k in ("before", "after") else v for k, v in row.items()}


if __name__ == "__main__":
    main()
