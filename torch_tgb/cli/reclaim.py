"""``tgb reclaim NS``: run the Reclaimer once and report what it deleted.

Deletes TGB objects and log versions strictly below the safe boundary (the
smallest cursor over live checkpoints), uncommitted objects the manifest
proves can never be committed, and partial writes (temp files, open
multipart uploads) of writers killed mid-segment whose producer was fenced
or closed, once older than the grace period. Idempotent; safe to interrupt.
``--fence ID`` first registers and closes a new incarnation of a producer that is gone for
good, so its uncommitted objects and partial writes become deletable.
"""

from __future__ import annotations

import argparse
import dataclasses

from torch_tgb.cli._common import (
    add_json_flag,
    add_storage_option_flag,
    format_table,
    print_json,
    require_namespace,
    storage_options,
)

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "reclaim",
        help="delete storage no live checkpoint can roll back to",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("ns", metavar="NS", help="namespace URL or local directory")
    p.add_argument(
        "--grace-period",
        type=float,
        default=None,
        metavar="SECONDS",
        help="age before an uncommitted (orphan) object or a dead partial write may be deleted "
        "(default: the Reclaimer's)",
    )
    p.add_argument(
        "--fence",
        action="append",
        default=[],
        metavar="PRODUCER_ID",
        help="register and close a new incarnation of this vanished producer first (repeatable); a running one is fenced",
    )
    add_json_flag(p)
    add_storage_option_flag(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from torch_tgb._progress import progress
    from torch_tgb.checkpoint import Reclaimer
    from torch_tgb.cli._reclaim_progress import CountingDeletes
    from torch_tgb.storage import open_store

    store = open_store(args.ns, storage_options(args))
    try:
        require_namespace(store)  # like inspect/verify: refuse a non-namespace
        with progress(desc="reclaim: objects deleted", unit="object") as bar:
            counted = CountingDeletes(store, bar)
            reclaimer = Reclaimer(counted, **({} if args.grace_period is None else {"grace_period": args.grace_period}))
            for producer_id in args.fence:
                epoch = reclaimer.fence_producer(producer_id)
                if not args.json:
                    print(f"fenced producer {producer_id!r}: epoch {epoch}")
            report = reclaimer.run_once()
    finally:
        store.close()
    fields = (
        dataclasses.asdict(report)
        if dataclasses.is_dataclass(report) and not isinstance(report, type)
        else dict(vars(report))
    )
    if args.json:
        print_json(fields)
    else:
        print(render_text(reclaimer_url(reclaimer, args.ns), fields))
    return 0


def reclaimer_url(reclaimer: object, ns: str) -> str:
    store = getattr(reclaimer, "store", None)
    url = getattr(store, "url", None)
    return url if isinstance(url, str) else ns


_KNOWN = ("safe_step", "live_checkpoints", "boundary_version", "boundary_step", "objects", "orphans", "versions",
          "snapshots", "bytes", "seconds")


def render_text(url: str, f: dict) -> str:
    """The report as a few readable lines; fields this code does not know are listed as they are."""
    from torch_tgb.cli._common import human_bytes, plural

    if not all(k in f for k in _KNOWN):
        return format_table(sorted(f.items()), title=f"reclaimed {url}")
    rows = [
        ("safe step", f"{f['safe_step']} (smallest cursor of {f['live_checkpoints']} live checkpoints)"
         if f["live_checkpoints"] else "0 (no live checkpoint: only orphans can be reclaimed)"),
        ("GC boundary", f"version {f['boundary_version']}, step {f['boundary_step']}"),
        ("deleted", f"{plural(f['objects'], 'TGB object')}, {plural(f['orphans'], 'orphan')}, "
                    f"{plural(f.get('partials', 0), 'partial write')}, "
                    f"{plural(f['versions'], 'log version')}, {plural(f['snapshots'], 'snapshot')}"),
        ("bytes freed", human_bytes(f["bytes"])),
    ]
    rows += [(k.replace("_", " "), v) for k, v in sorted(f.items()) if k not in _KNOWN and k != "partials"]
    return format_table(rows, title=f"reclaimed {url} in {f['seconds']:.2f}s")

