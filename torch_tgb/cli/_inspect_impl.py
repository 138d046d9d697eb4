"""The body of ``tgb inspect``: gather a namespace's state into one JSON-able dict.

Reads only metadata (dataset.json, the newest log versions through the
manifest's snapshots, watermarks, the GC boundary) plus, unless disabled, one
listing of the namespace to count bytes. Cost does not grow with the number
of committed steps, except the listing.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from torch_tgb import manifest as manifest_mod
from torch_tgb import storage
from torch_tgb.cli._common import CommandError, format_table, human_bytes, plural

if TYPE_CHECKING:
    from torch_tgb.manifest import ManifestState
    from torch_tgb.storage import ObjectStore

__all__ = ["inspect_namespace", "partial_writes", "partial_writes_text", "render_text", "storage_usage"]


def storage_usage(store: ObjectStore) -> dict[str, dict[str, int]]:
    """Bytes and object counts per top-level area (``data/``, ``_tgb/log/``, ...), by listing."""
    from torch_tgb._progress import progress

    usage: dict[str, dict[str, int]] = {}
    keys = store.list("")
    for key in progress(keys, desc="sizing", unit="obj"):
        parts = key.split("/")
        area = f"{parts[0]}/{parts[1]}/" if parts[0] == "_tgb" and len(parts) > 2 else (
            f"{parts[0]}/" if len(parts) > 1 else parts[0]
        )
        try:
            size = store.size(key)
        except Exception:  # noqa: BLE001 - deleted between list and stat (a concurrent reclaim)
            continue
        slot = usage.setdefault(area, {"bytes": 0, "objects": 0})
        slot["bytes"] += size
        slot["objects"] += 1
    return dict(sorted(usage.items()))


def partial_writes(store: ObjectStore, head: ManifestState | None) -> dict[str, Any]:
    """Writes started and never finished (temp files, open multipart uploads): counts, bytes, and whose they are.

    ``dead``: nobody will finish them (their producer was fenced, closed or
    the namespace sealed; or their owner cannot be told): ``tgb reclaim``
    removes them once past its grace period. ``live``: a producer that may
    still be running owns them, kept until it finishes them or is fenced.
    ``head`` ``None`` (an unreadable log): all counted as live, none judged.
    """
    from torch_tgb.checkpoint._orphans import partial_is_live

    partials = store.list_partial()
    live = [p for p in partials if head is None or partial_is_live(head, p)]
    owners = sorted({p.key.split("/")[1] for p in live if p.key is not None and p.key.count("/") >= 2})
    return {
        "count": len(partials),
        "bytes": sum(p.size or 0 for p in partials),
        "dead": len(partials) - len(live),
        "dead_bytes": sum(p.size or 0 for p in partials) - sum(p.size or 0 for p in live),
        "live": len(live),
        "live_producers": owners,
    }


def partial_writes_text(ns: str, w: dict[str, Any]) -> str:
    """One line on partial writes and how to reclaim them ('' when there are none)."""
    if not w["count"]:
        return ""
    parts = [f"{w['count']} ({human_bytes(w['bytes'])}) left by writers killed mid-write"]
    if w["dead"]:
        parts.append(f"{w['dead']} ({human_bytes(w['dead_bytes'])}) nobody will finish: `tgb reclaim {ns}` removes "
                     "them once past its grace period (`--grace-period 0`: now)")
    if w["live"]:
        who = ", ".join(w["live_producers"][:4]) + (" ..." if len(w["live_producers"]) > 4 else "")
        who = f" ({who})" if who else ""
        parts.append(f"{w['live']} owned by producers still open{who}, kept while they may finish them: a rerun "
                     f"of the producer removes them, `tgb reclaim {ns} --fence ID` for one gone for good")
    return "; ".join(parts)


def inspect_namespace(ns: str, *, storage_options: dict[str, Any] | None = None, sizes: bool = True) -> dict[str, Any]:
    """Everything ``tgb inspect`` shows, as a JSON-able dict. Raises if NS holds no namespace."""
    from torch_tgb.manifest.watermarks import read_watermarks, retired_ids

    now = time.time()
    store = storage.open_store(ns, storage_options)
    try:
        store.check_root()  # a missing bucket is named as such, not taken for an empty namespace
        manifest = manifest_mod.Manifest(store)
        dataset = manifest.dataset()
        latest = manifest.latest_version()
        marks = read_watermarks(store)
        if dataset is None and latest == 0 and not marks:
            raise CommandError(f"{store.url}: no TGB namespace here (no {manifest_mod.DATASET_KEY}, no log versions)")
        head = manifest.head()
        boundary = manifest.gc_boundary()
        newest = manifest.read_version(latest) if latest > 0 else None
        snapshot_keys = store.list(manifest_mod.SNAPSHOT_PREFIX)
        keys = manifest.key_layout()
        snapshot_versions = sorted(  # a snapshot's parts (<v>.part<k>.json) are not snapshots of their own
            s[0] for k in snapshot_keys if (s := keys.snapshot_of(k)) is not None and s[1] is None
        )
        log_keys = store.list(manifest_mod.LOG_PREFIX)
        retired = retired_ids(store)
        live = [m for m in marks if m.checkpoint_id not in retired]
        safe = min((m.step for m in live), default=0)
        newest_ckpt = max((m.step for m in live), default=None)
        producers = [
            {
                "id": pid,
                "epoch": state.epoch,
                "next_offset": state.next_offset,
                "status": state.status,
                "last_commit_time": state.committed_at or None,
                "last_commit_age_s": round(now - state.committed_at, 3) if state.committed_at else None,
                "skipped": dict(state.skipped or {}),
                "pipeline_state": {"out_of_line": state.state_ref} if state.state_ref is not None
                else None if state.state is None else dict(state.state),
            }
            for pid, state in sorted(head.producers.items())
        ]
        report: dict[str, Any] = {
            "namespace": store.url,
            "skipped_steps": skipped_report(store),
            "fleet_plans": fleet_plans(store),
            "job": _job_report(head),
            "dataset": None
            if dataset is None
            else {
                "layout": dict(dataset.layout),
                "schema": dict(dataset.schema),
                "metadata": dict(dataset.metadata),
                "fingerprint": dataset.fingerprint,
                "created_at": dataset.created_at or None,
            },
            "versions": {
                "latest": latest,
                "oldest_kept": max(1, boundary.version) if latest else 0,
                "log_objects": len(log_keys),
                "latest_commit_time": newest.time if newest is not None and newest.time else None,
                "latest_commit_age_s": round(now - newest.time, 3) if newest is not None and newest.time else None,
            },
            "steps": head.num_steps,
            "sealed": head.sealed,
            "producers": producers,
            "snapshots": {
                "count": len(snapshot_versions),
                "newest": snapshot_versions[-1] if snapshot_versions else None,
                "versions_since_newest": latest - snapshot_versions[-1] if snapshot_versions else latest,
            },
            "gc_boundary": {"version": boundary.version, "step": boundary.step},
            "watermarks": [
                {
                    "checkpoint_id": m.checkpoint_id,
                    "step": m.step,
                    "version": m.version,
                    "time": m.time,
                    "live": m.checkpoint_id not in retired,
                }
                for m in marks
            ],
            "live_checkpoints": len(live),
            "safe_boundary": safe,
            "lag": {
                # what max_lag bounds: committed steps not yet behind every live checkpoint
                "steps_ahead_of_safe_boundary": head.num_steps - safe,
                "steps_ahead_of_newest_checkpoint": None if newest_ckpt is None else head.num_steps - newest_ckpt,
                "stored_steps_below_safe_boundary": max(0, safe - boundary.step),
            },
        }
        if sizes:
            usage = storage_usage(store)
            partial = partial_writes(store, head)
            report["storage"] = {
                "total_bytes": sum(u["bytes"] for u in usage.values()) + partial["bytes"],
                "total_objects": sum(u["objects"] for u in usage.values()),
                "by_area": usage,
                "partial_writes": partial,
            }
        return report
    finally:
        store.close()


def fleet_plans(store: ObjectStore) -> dict[str, Any]:
    """The source plans Ray fleets recorded (job prefix -> groups, their sources, workers and shards)."""
    from torch_tgb.integrations._plan_record import read_plans

    out: dict[str, Any] = {}
    for prefix, plan in read_plans(store).items():
        first = 0
        groups = []
        for j, (g, n) in enumerate(zip(plan.groups, plan.shards)):
            groups.append({"group": plan.group_name(j), "memory_bytes": g.memory_bytes, "latency_s": g.latency_s,
                           "workers": g.workers, "shards": [first, first + n - 1]})
            first += n
        out[prefix] = {"summary": plan.summary(), "num_shards": plan.num_shards, "workers": plan.workers,
                       "weights": dict(plan.weights), "groups": groups}
    return out


def _job_report(head: ManifestState) -> dict[str, Any] | None:
    """The declared job and each shard's progress (done, running, stopped, not started); None without one."""
    from torch_tgb.manifest.jobs import shard_status

    job = head.job
    if job is None:
        return None
    status = shard_status(job, head.producers)
    shards = []
    for index, pid in enumerate(job.producer_ids()):
        state = head.producers.get(pid)
        shards.append({"shard": index, "id": pid, "label": job.label(pid), "status": status[pid],
                       "next_offset": None if state is None else state.next_offset})
    counts = {k: sum(1 for v in status.values() if v == k) for k in ("done", "running", "stopped", "not started")}
    return {"description": job.describe(), **job.to_json(), "counts": counts, "shards": shards}


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    if seconds < 120:
        return f"{seconds:.1f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.1f}min ago"
    return f"{seconds / 3600:.1f}h ago"


def _sealed_text(r: dict[str, Any]) -> str:
    """Sealed or not, and for an unsealed stream whether anyone may still commit."""
    job = r.get("job")
    unfinished = [s for s in job["shards"] if s["status"] != "done"] if job else []
    if r["sealed"]:
        if unfinished:
            return (f"yes, by force: {', '.join(s['label'] for s in unfinished[:8])} did not finish "
                    "(the stream ends without the rest of their data)")
        return "yes (end of stream)" + (f": every shard of {job['description']} is done" if job else "")
    if job:
        waiting = ", ".join(f"{s['label']} ({s['status']})" for s in unfinished[:8])
        more = f" and {len(unfinished) - 8} more" if len(unfinished) > 8 else ""
        return f"no: sealed when every declared shard is done; waiting for {waiting}{more}"
    marks = [p["status"] for p in r["producers"]]
    if not marks:
        return "no (no producer yet)"
    still = marks.count("open")
    if still:
        return f"no ({still} of {len(marks)} producers open: still being written)"
    return (f"no, but every producer is closed ({marks.count('closed')} without seal): nothing more will come "
            "until one restarts; `tgb seal` ends the stream")


def _schema_text(schema: dict[str, Any]) -> str:
    """``name:dtype`` per key, ``[n, ...]`` items per row for a ragged key (values + offsets)."""
    parts = []
    for name, spec in schema.items():
        if not isinstance(spec, dict):
            parts.append(name)
            continue
        dims = ",".join(str(d) for d in spec.get("shape", []))
        item = f"[n{',' if dims else ''}{dims}] per row, ragged" if spec.get("ragged") else f"[{dims}]" if dims else ""
        parts.append(f"{name}:{spec.get('dtype', '?')}{' ' + item if item else ''}")
    return ", ".join(parts) or "-"


def contract_text(metadata: dict[str, Any]) -> str:
    """The namespace's data contract (``dataset.json`` metadata), as a reader's ``expect=`` compares it."""
    import json

    return ", ".join(f"{k}={json.dumps(v, sort_keys=True)}" for k, v in sorted(metadata.items())) or "-"


def skipped_report(store: Any) -> dict[str, str]:
    """TGB steps readers marked skipped (on_corrupt="skip_step"), by step, with why."""
    from torch_tgb.manifest.skips import skipped_steps

    return {str(step): record.reason for step, record in sorted(skipped_steps(store).items())}


def skipped_text(skipped: dict[str, str]) -> str:
    steps = list(skipped)
    shown = ", ".join(steps[:10]) + (f" and {len(steps) - 10} more" if len(steps) > 10 else "")
    return f"{len(steps)} (steps {shown}; readers skip them with on_corrupt='skip_step'; `tgb verify` says why)"


def skipped_by_reason(records: list[dict[str, Any]]) -> dict[str, int] | None:
    """Skipped samples by reason, summed over the records that carry a ``skipped`` table; None where none does."""
    found: dict[str, int] | None = None
    for record in records:
        skipped = record.get("skipped")
        if isinstance(skipped, dict):
            found = {} if found is None else found
            for reason, n in skipped.items():
                found[str(reason)] = found.get(str(reason), 0) + int(n)
    return found


def skipped_samples_text(producers: list[dict[str, Any]]) -> str:
    """The samples the producers' pipelines dropped, by reason, as their committed records say."""
    total = skipped_by_reason(producers) or {}
    if not total:
        return "0"
    return f"{sum(total.values())} ({', '.join(f'{k} {v}' for k, v in sorted(total.items()))})"


def render_text(r: dict[str, Any]) -> str:
    """The human-readable form of :func:`inspect_namespace`'s report."""
    v = r["versions"]
    layout = (r["dataset"] or {}).get("layout") or {}
    rows: list[tuple[str, Any]] = [
        ("namespace", r["namespace"]),
        ("layout", ", ".join(f"{k}={val}" for k, val in layout.items()) or "(no dataset.json yet)"),
        ("schema", _schema_text((r["dataset"] or {}).get("schema") or {})),
        ("versions", f"latest {v['latest']}, oldest kept {v['oldest_kept']}, {v['log_objects']} log objects"),
        ("last commit", _age(v["latest_commit_age_s"])),
        ("steps", r["steps"]),
        ("sealed", _sealed_text(r)),
        (
            "snapshots",
            f"{r['snapshots']['count']}, newest at version {r['snapshots']['newest']} "
            f"({r['snapshots']['versions_since_newest']} versions since)"
            if r["snapshots"]["count"]
            else "none",
        ),
        ("GC boundary", f"version {r['gc_boundary']['version']}, step {r['gc_boundary']['step']}"),
        ("live checkpoints", r["live_checkpoints"]),
        ("safe boundary", f"step {r['safe_boundary']}"),
        ("lag", f"{r['lag']['steps_ahead_of_safe_boundary']} steps ahead of the safe boundary, "
                f"{r['lag']['stored_steps_below_safe_boundary']} steps below it still stored"),
    ]
    job = r.get("job")
    if job:
        counts = ", ".join(f"{n} {k}" for k, n in job["counts"].items() if n)
        rows.insert(6, ("job", f"{job['description']}: {counts}"))
    rows.insert(3, ("contract", contract_text((r["dataset"] or {}).get("metadata") or {})))
    rows.append(("samples skipped", skipped_samples_text(r["producers"])))
    if r.get("skipped_steps"):
        rows.append(("skipped steps", skipped_text(r["skipped_steps"])))
    if "storage" in r:
        partial = r["storage"]["partial_writes"]
        more = f" and {plural(partial['count'], 'partial write')}" if partial["count"] else ""
        rows.append(("bytes stored", f"{human_bytes(r['storage']['total_bytes'])} in "
                     f"{plural(r['storage']['total_objects'], 'object')}{more}"))
        if partial["count"]:
            rows.append(("partial writes", partial_writes_text(r["namespace"], partial)))
    out = [format_table(rows, title="namespace")]
    if job:
        out.append("shards")
        width = max(len(s["label"]) for s in job["shards"])
        for sh in job["shards"]:
            offsets = "" if not sh["next_offset"] else f"  offsets 0..{sh['next_offset'] - 1}"
            out.append(f"  {sh['label']:<{width}}  {sh['status']:<11}  {sh['id']}{offsets}")
    for prefix, plan in (r.get("fleet_plans") or {}).items():
        out.append(f"fleet plan {prefix!r} (source groups; shards bound to them)")
        out += [f"  {line.strip()}" for line in plan["summary"].splitlines()]
    if r["producers"]:
        out.append("producers")
        width = max(len(p["id"]) for p in r["producers"])
        for p in r["producers"]:
            dropped = sum(p.get("skipped", {}).values())
            out.append(
                f"  {p['id']:<{width}}  {p['status']:<6}  epoch {p['epoch']}  next offset {p['next_offset']}  "
                f"last commit {_age(p['last_commit_age_s'])}" + (f"  skipped {dropped}" if dropped else "")
            )
    if r["watermarks"]:
        out.append("watermarks")
        width = max(len(m["checkpoint_id"]) for m in r["watermarks"])
        for m in r["watermarks"]:
            out.append(
                f"  {m['checkpoint_id']:<{width}}  step {m['step']}  version {m['version']}  "
                f"{'live' if m['live'] else 'retired'}"
            )
    if "storage" in r:
        out.append("storage by area")
        for area, u in r["storage"]["by_area"].items():
            out.append(f"  {area:<20}  {human_bytes(u['bytes']):>10}  {plural(u['objects'], 'object')}")
    return "\n".join(out)
