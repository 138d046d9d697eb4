"""``tgb inspect NS``: what a namespace holds and how far its readers are behind.

Prints versions, steps, sealed or not, producers (epoch, next offset, last
commit time), snapshot status, watermarks and live checkpoints, the safe
boundary, bytes stored and lag. ``--json`` prints the same as one object.
``--watch [SECONDS]`` keeps a live page of it on screen (rates, lag, skipped,
storage, producers, shards), refreshed every SECONDS (default 2) until Ctrl-C.
"""

from __future__ import annotations

import argparse

from torch_tgb.cli._common import add_json_flag, add_storage_option_flag

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "inspect",
        help="show versions, steps, producers, watermarks and storage of a namespace",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("ns", metavar="NS", help="namespace URL or local directory")
    p.add_argument("--no-sizes", action="store_true", help="skip listing data/ to count bytes stored (faster)")
    p.add_argument("--watch", nargs="?", type=float, const=2.0, default=None, metavar="SECONDS",
                   help="a live status page refreshed every SECONDS (default 2) until Ctrl-C: steps and their rates "
                   "(TGBs, tokens, samples per second), lag, skipped, storage, producers, shards")
    p.add_argument("--count", type=int, default=None, metavar="N", help="--watch: stop after N pages (scripts)")
    add_json_flag(p)
    add_storage_option_flag(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from torch_tgb.cli._inspect_impl import inspect_namespace, render_text
    from torch_tgb.cli._common import print_json, storage_options

    if args.watch is not None:
        from torch_tgb.cli._common import CommandError, require_namespace
        from torch_tgb.cli._watch import watch
        from torch_tgb.storage import open_store

        if not args.watch > 0 or (args.count is not None and args.count < 1) or args.json:
            raise CommandError("--watch SECONDS must be > 0, --count N >= 1, and --watch prints pages, not --json")
        with open_store(args.ns, storage_options(args)) as store:
            require_namespace(store)
        return watch(args.ns, interval=args.watch, storage_options=storage_options(args), sizes=not args.no_sizes,
                     count=args.count)
    report = inspect_namespace(args.ns, storage_options=storage_options(args), sizes=not args.no_sizes)
    if args.json:
        print_json(report)
    else:
        print(render_text(report))
    return 0
