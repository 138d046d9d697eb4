"""``tgb reclaim NS``: run the Reclaimer once and report what it deleted.

Deletes TGB objects and log versions strictly below the safe boundary (the
smallest cursor over live checkpoints) and orphan objects older than the
grace period. Idempotent; safe to interrupt.
"""

from __future__ import annotations

import argparse
import dataclasses

from torch_tgb.cli._common import add_json_flag, add_storage_option_flag, format_table, print_json, require, storage_options

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
        help="age before an uncommitted (orphan) object may be deleted (default: the Reclaimer's)",
    )
    add_json_flag(p)
    add_storage_option_flag(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    checkpoint = require("torch_tgb.checkpoint", command="reclaim")
    kwargs = {"storage_options": storage_options(args)}
    if args.grace_period is not None:
        kwargs["grace_period"] = args.grace_period
    reclaimer = checkpoint.Reclaimer(args.ns, **kwargs)
    report = reclaimer.run_once()
    fields = (
        dataclasses.asdict(report)
        if dataclasses.is_dataclass(report) and not isinstance(report, type)
        else dict(vars(report))
    )
    if args.json:
        print_json(fields)
    else:
        print(format_table(sorted(fields.items()), title=f"reclaimed {args.ns}"))
    return 0
