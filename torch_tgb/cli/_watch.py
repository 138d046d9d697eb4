"""``tgb inspect NS --watch [SECONDS]``: a live status page, refreshed in place, like ``nvidia-smi -l``.

Each refresh gathers what ``tgb inspect`` shows (one head read, the
watermarks, a listing for storage unless ``--no-sizes``), reads the log
versions committed since the last refresh for their TGBs' tokens and
samples, and prints one page: steps and their rates (TGBs, tokens and
samples per second), the seal, lag, samples skipped by reason (where the
producers record them), storage and its growth, then one line per producer
(mark, epoch, next offset, its own rate, last commit) and per declared
shard. On a terminal the page is redrawn in place; otherwise pages follow
each other. Ctrl-C ends it with exit code 0.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from torch_tgb._progress import rate_text
from torch_tgb.cli._common import human_bytes

__all__ = ["Rates", "render_page", "watch"]

#: clears the terminal and homes the cursor: the page is redrawn in place
_CLEAR = "\x1b[H\x1b[2J"


@dataclass
class Rates:
    """What changed between two refreshes, per second (None on the first page)."""

    steps: float | None = None
    tokens: float | None = None
    samples: float | None = None
    bytes: float | None = None
    producers: dict[str, float] = field(default_factory=dict)


@dataclass
class _Last:
    at: float
    steps: int
    bytes: int | None
    offsets: dict[str, int]


def render_page(report: dict[str, Any], rates: Rates, *, interval: float, now: float) -> str:
    """One page of the watch from an ``inspect`` report and the rates since the last page."""
    from torch_tgb.cli._inspect_impl import _age, _sealed_text, skipped_by_reason

    def per_s(value: float | None, unit: str) -> str:
        return "" if value is None else f" ({rate_text(value, unit)})"

    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    lines = [f"tgb inspect --watch {report['namespace']}   every {interval:g}s   {stamp}   (Ctrl-C to stop)"]
    tokens = "" if rates.tokens is None else f"   {rate_text(rates.tokens, 'token')}"
    samples = "" if not rates.samples else f"   {rate_text(rates.samples, 'sample')}"
    lines.append(f"steps     {report['steps']}{per_s(rates.steps, 'TGB')}{tokens}{samples}")
    lines.append(f"sealed    {_sealed_text(report)}")
    lag = report["lag"]
    lines.append(f"lag       {lag['steps_ahead_of_safe_boundary']} steps ahead of the safe boundary (step "
                 f"{report['safe_boundary']}, {report['live_checkpoints']} live checkpoints); GC boundary step "
                 f"{report['gc_boundary']['step']}")
    skipped = skipped_by_reason([report, *report.get("producers", [])])
    if skipped is None:
        lines.append("skipped   not recorded in this namespace (the producers' reports and --json have them)")
    else:
        total = sum(skipped.values())
        lines.append(f"skipped   {total} samples" + (f" ({', '.join(f'{k} {v}' for k, v in skipped.items())})"
                                                     if total else ""))
    if "storage" in report:
        st = report["storage"]
        growth = "" if rates.bytes is None else f" ({human_bytes(rates.bytes)}/s)"
        objects = st["total_objects"]
        lines.append(f"storage   {human_bytes(st['total_bytes'])} in {objects} object{'s' if objects != 1 else ''}"
                     f"{growth}")
    if report["producers"]:
        width = max(len(p["id"]) for p in report["producers"])
        lines.append(f"producers ({len(report['producers'])})")
        lines.append(f"  {'id':<{width}}  mark    epoch  next offset  rate           last commit")
        for p in report["producers"]:
            rate = rates.producers.get(p["id"])
            rate_s = "" if rate is None else rate_text(rate, "TGB")
            lines.append(f"  {p['id']:<{width}}  {p['status']:<6}  {p['epoch']:<5}  {p['next_offset']:<11}  "
                         f"{rate_s:<13}  {_age(p['last_commit_age_s'])}")
    job = report.get("job")
    if job:
        lines.append(f"shards ({job['description']})")
        width = max(len(s["label"]) for s in job["shards"])
        for sh in job["shards"]:
            lines.append(f"  {sh['label']:<{width}}  {sh['status']:<11}  next offset {sh['next_offset'] or 0}")
    return "\n".join(lines)


def watch(
    ns: str,
    *,
    interval: float,
    storage_options: dict[str, Any] | None = None,
    sizes: bool = True,
    count: int | None = None,
    out: IO[str] | None = None,
    clock: Callable[[], float] = time.time,
) -> int:
    """Refresh a status page every ``interval`` seconds until Ctrl-C (or ``count`` pages); returns 0."""
    from torch_tgb.cli._inspect_impl import inspect_namespace
    from torch_tgb.cli._timeline import Timeline, read_versions
    from torch_tgb.manifest import Manifest
    from torch_tgb.storage import open_store

    out = sys.stdout if out is None else out
    redraw = bool(getattr(out, "isatty", lambda: False)())
    last: _Last | None = None
    pages = 0
    try:
        with open_store(ns, storage_options) as store:
            manifest = Manifest(store)
            seen = manifest.latest_version()  # history is tgb report's: the watch starts from now
            while True:
                report = inspect_namespace(ns, storage_options=storage_options, sizes=sizes)
                now = clock()
                latest = report["versions"]["latest"]
                fresh = Timeline(namespace=report["namespace"])
                read_versions(manifest, seen + 1, latest, fresh)
                seen = max(seen, latest)
                stored = report["storage"]["total_bytes"] if "storage" in report else None
                offsets = {p["id"]: p["next_offset"] for p in report["producers"]}
                rates = Rates()
                if last is not None and now > last.at:
                    dt = now - last.at
                    rates = Rates(
                        steps=(report["steps"] - last.steps) / dt,
                        tokens=sum(v["tokens"] for v in fresh.versions) / dt,
                        samples=sum(v["samples"] for v in fresh.versions) / dt,
                        bytes=None if stored is None or last.bytes is None else (stored - last.bytes) / dt,
                        producers={pid: (off - last.offsets.get(pid, off)) / dt for pid, off in offsets.items()},
                    )
                last = _Last(now, report["steps"], stored, offsets)
                page = render_page(report, rates, interval=interval, now=now)
                out.write((_CLEAR if redraw else ("\n" if pages else "")) + page + "\n")
                out.flush()
                pages += 1
                if count is not None and pages >= count:
                    return 0
                time.sleep(interval)
    except KeyboardInterrupt:
        out.write("\nstopped watching\n")
        out.flush()
        return 0

