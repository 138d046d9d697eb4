"""A namespace's history as series: what ``tgb report`` draws and ``tgb inspect --watch`` rates.

Everything comes from what the namespace already records: each kept log
version's commit ``time``, its entries (per TGB: producer, offset, bytes,
``tokens``, ``samples``) and its producers' offsets; the watermarks
(checkpoint ``step`` and ``time``: what the trainer consumed); the GC
boundary (what was reclaimed). Versions below the GC boundary were deleted
by the Reclaimer, so a reclaimed namespace's history starts there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch_tgb.manifest import Manifest
    from torch_tgb.storage import ObjectStore

__all__ = ["Timeline", "read_timeline", "series"]


@dataclass
class Timeline:
    """The kept versions and the watermarks of a namespace, in commit order."""

    namespace: str
    first_version: int = 0
    #: per version: number, time, first_step, stop_step, tgbs, tokens, samples, bytes, producers {id: next_offset}
    versions: list[dict[str, Any]] = field(default_factory=list)
    #: per committed TGB: step, producer, tokens, samples, bytes
    steps: list[dict[str, Any]] = field(default_factory=list)
    #: per watermark: checkpoint_id, step, time, live
    watermarks: list[dict[str, Any]] = field(default_factory=list)
    gc_step: int = 0
    sealed: bool = False


def read_versions(manifest: Manifest, first: int, last: int, timeline: Timeline) -> None:
    """Append versions ``first..last`` (inclusive) to ``timeline``; a version deleted meanwhile is skipped."""
    from torch_tgb.errors import TGBError

    for number in range(max(1, first), last + 1):
        try:
            version = manifest.read_version(number)
        except TGBError:
            continue  # reclaimed between the boundary read and this one
        entries = version.entries
        timeline.versions.append({
            "version": number, "time": version.time, "first_step": version.first_step,
            "stop_step": version.first_step + len(entries), "tgbs": len(entries),
            "tokens": sum(e.tokens for e in entries), "samples": sum(e.samples for e in entries),
            "bytes": sum(e.length for e in entries),
            "producers": {pid: s.next_offset for pid, s in version.producers.items()},
        })
        timeline.steps += [{"step": version.first_step + i, "producer": e.producer, "tokens": e.tokens,
                            "samples": e.samples, "bytes": e.length} for i, e in enumerate(entries)]
        timeline.sealed = timeline.sealed or version.sealed


def read_timeline(store: ObjectStore) -> Timeline:
    """Every kept version's figures and the watermarks of the namespace in ``store`` (one read per version)."""
    from torch_tgb.manifest import Manifest
    from torch_tgb.manifest.watermarks import read_watermarks, retired_ids

    manifest = Manifest(store)
    boundary = manifest.gc_boundary()
    latest = manifest.latest_version()
    timeline = Timeline(namespace=store.url, first_version=max(1, boundary.version), gc_step=boundary.step)
    read_versions(manifest, boundary.version, latest, timeline)
    retired = retired_ids(store)
    timeline.watermarks = sorted(
        ({"checkpoint_id": m.checkpoint_id, "step": m.step, "time": m.time, "live": m.checkpoint_id not in retired}
         for m in read_watermarks(store)), key=lambda m: (m["time"], m["step"]))
    return timeline


def series(timeline: Timeline, *, max_lag: int | None = None) -> dict[str, Any]:
    """The report's series, times in seconds since the first kept version: plain lists, JSON-able.

    ``committed`` (t, steps committed), ``consumed`` (t, checkpoint step),
    ``lead`` (t, steps committed ahead of the newest checkpoint at that time,
    what a trainer has to spare; ``max_lag`` bounds the same distance to the
    oldest live one), ``bytes_committed`` (t, cumulative bytes of the TGBs
    committed), ``producers`` (id -> (t, next offset)), ``commit_rate`` (t,
    TGBs per second between versions), per step ``tokens`` / ``samples``, and
    the per-step ``imbalance`` (a step's tokens over the mean).
    """
    versions = [v for v in timeline.versions if v["time"]]
    t0 = min((v["time"] for v in versions), default=0.0)
    marks = [m for m in timeline.watermarks if m["time"]]
    if marks and versions:
        t0 = min(t0, marks[0]["time"])

    def rel(t: float) -> float:
        return round(t - t0, 3)

    committed = [[rel(v["time"]), v["stop_step"]] for v in versions]
    consumed = [[rel(m["time"]), m["step"]] for m in marks]
    lead = []  # at every commit and every checkpoint: steps committed by then minus the newest checkpoint's step
    for t in sorted({v["time"] for v in versions} | {m["time"] for m in marks}):
        done = max((v["stop_step"] for v in versions if v["time"] <= t), default=0)
        newest = max((m["step"] for m in marks if m["time"] <= t), default=0)
        lead.append([rel(t), done - newest])
    total = 0
    written = []
    for v in versions:
        total += v["bytes"]
        written.append([rel(v["time"]), total])
    producers: dict[str, list[list[float]]] = {}
    for v in versions:
        for pid, offset in v["producers"].items():
            producers.setdefault(pid, []).append([rel(v["time"]), offset])
    rate = []
    for a, b in zip(versions, versions[1:]):
        dt = b["time"] - a["time"]
        if dt > 0:
            rate.append([rel(b["time"]), round(b["tgbs"] / dt, 3)])
    tokens = [s["tokens"] for s in timeline.steps]
    mean = sum(tokens) / len(tokens) if tokens else 0.0
    return {
        "committed": committed, "consumed": consumed, "lead": lead, "max_lag": max_lag,
        "bytes_committed": written, "producers": producers, "commit_rate": rate,
        "steps": [s["step"] for s in timeline.steps], "tokens": tokens,
        "samples": [s["samples"] for s in timeline.steps],
        "imbalance": [round(t / mean, 4) if mean else 1.0 for t in tokens],
        "gc_step": timeline.gc_step, "t0": t0,
    }

