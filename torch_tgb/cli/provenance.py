"""``tgb provenance NS --step S [--rank R]``: what a step holds, row by row.

Reads the step's TGB in effect (after any excision) and prints, per dp
slice (``--rank R``: that slice only) and row, the records its spans come
from (``SOURCE:UNIT:RECORD``), where each span starts in its record and its
length in tokens.
"""

from __future__ import annotations

import argparse

from torch_tgb.cli._common import CommandError, add_json_flag, add_storage_option_flag, print_json, storage_options

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("provenance", help="what a step holds: the records of each row",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    p.add_argument("ns", metavar="NS", help="namespace URL or local directory")
    p.add_argument("--step", type=int, metavar="S", help="the step (required)")
    p.add_argument("--rank", type=int, metavar="R", help="only dp slice R of the written layout")
    add_json_flag(p)
    add_storage_option_flag(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from torch_tgb.lineage import Lineage

    if args.step is None:
        raise CommandError("give the step: --step S")
    with Lineage(args.ns, storage_options=storage_options(args), repair=False) as lineage:
        found = lineage.provenance(args.step, rank=args.rank)
        if args.json:
            print_json({"ns": lineage.store.url, **found.to_json()})
            return 0
        print(f"{lineage.store.url}: step {found.step} ({found.key})")
        for dp, rows in sorted(found.slices.items()):
            for r, spans in enumerate(rows):
                text = ", ".join(f"{s.record} [{s.start}:{s.start + s.length}]" for s in spans) or "(padding)"
                print(f"  dp {dp} row {r}: {text}")
    return 0
