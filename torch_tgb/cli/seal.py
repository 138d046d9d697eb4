"""``tgb seal NS``: end the stream of a namespace whose producers have all closed.

For producers that ran one after another, each closed without ``--seal``
(or some with it): the seal is committed now, and readers' loops end at the
last committed step. Refused, naming them, while any producer is still open
(running, or crashed without closing) -- or, in a namespace of declared
shards (``tgb produce --shard I/N``, fleets), while any declared shard is not
done: such a namespace seals itself when its last shard is done. Idempotent
on a sealed namespace. ``--force`` seals anyway and says which producers or
shards it cuts off (an operator's decision: their data is incomplete).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from torch_tgb.cli._common import add_json_flag, add_storage_option_flag, print_json, require_namespace, storage_options

if TYPE_CHECKING:
    from torch_tgb.manifest import ManifestState

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "seal",
        help="end the stream: seal a namespace whose producers have all closed",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("ns", metavar="NS", help="namespace URL or local directory")
    p.add_argument("--force", action="store_true",
                   help="seal even while producers are open or declared shards are not done (says which); "
                   "a producer still running then fails with NamespaceSealed")
    add_json_flag(p)
    add_storage_option_flag(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from torch_tgb.manifest import Manifest, seal_namespace, unfinished
    from torch_tgb.storage import open_store

    with open_store(args.ns, storage_options(args)) as store:
        require_namespace(store)
        manifest = Manifest(store)
        before = manifest.head()
        cut_off = [] if before.sealed else unfinished(before)
        version = seal_namespace(manifest, force=args.force)
        head = manifest.head()
        missing = _labels(head, cut_off)  # non-empty only with --force: a plain seal refuses them
        if args.json:
            print_json({"ns": store.url, "sealed_at_version": version, "steps": head.num_steps,
                        "forced": bool(missing), "not_finished": missing})
        else:
            print(f"{store.url}: sealed at version {version} ({head.num_steps} steps)")
            if missing:
                print(f"{store.url}: sealed by force: {', '.join(missing)} did not finish; "
                      "the stream ends without the rest of their data")
    return 0


def _labels(head: ManifestState, pids: list[str]) -> list[str]:
    """``shard 1/4 (running)`` for a declared shard, ``producer 'p1' (open)`` otherwise."""
    from torch_tgb.manifest.jobs import shard_status

    if head.job is None:
        return [f"producer {pid!r} ({head.producers[pid].status if pid in head.producers else 'not started'})"
                for pid in pids]
    status = shard_status(head.job, head.producers)
    return [f"{head.job.label(pid)} ({status.get(pid, '?')})" for pid in pids]
