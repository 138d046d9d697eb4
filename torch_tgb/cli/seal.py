"""``tgb seal NS``: end the stream of a namespace whose producers have all closed.

For producers that ran one after another, each closed without ``--seal``
(or some with it): the seal is committed now, and readers' loops end at the
last committed step. Refused, naming them, while any producer is still open
(running, or crashed without closing). Idempotent on a sealed namespace.
With many producers running at once, ``--seal`` on each of them seals when
the last one is done, without this command.
"""

from __future__ import annotations

import argparse

from torch_tgb.cli._common import add_json_flag, add_storage_option_flag, print_json, require_namespace, storage_options

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "seal",
        help="end the stream: seal a namespace whose producers have all closed",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("ns", metavar="NS", help="namespace URL or local directory")
    add_json_flag(p)
    add_storage_option_flag(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from torch_tgb.manifest import Manifest, seal_namespace
    from torch_tgb.storage import open_store

    with open_store(args.ns, storage_options(args)) as store:
        require_namespace(store)
        manifest = Manifest(store)
        version = seal_namespace(manifest)
        steps = manifest.head().num_steps
        if args.json:
            print_json({"ns": store.url, "sealed_at_version": version, "steps": steps})
        else:
            print(f"{store.url}: sealed at version {version} ({steps} steps)")
    return 0
