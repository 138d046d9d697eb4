"""``tgb lineage NS --record SOURCE:UNIT:RECORD``: which steps hold a record (and which held it before an excision).

Answers from the namespace's lineage index, made complete up to the newest
manifest version (versions the index lacks are read from their TGBs and
added to it). ``--from-file IDS`` looks up every record of a file (one
``SOURCE:UNIT:RECORD`` a line) in one pass. Each hit names the step, the dp
slice and the row of the written layout; ``excised`` marks a step an
excision took the record out of. ``--compact`` merges the index's deltas
first (what producers do as they commit).
"""

from __future__ import annotations

import argparse

from torch_tgb.cli._common import CommandError, add_json_flag, add_storage_option_flag, print_json, storage_options

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lineage", help="which steps hold a record (SOURCE:UNIT:RECORD)",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    p.add_argument("ns", metavar="NS", help="namespace URL or local directory")
    p.add_argument("--record", action="append", default=[], metavar="SOURCE:UNIT:RECORD",
                   help="a record to look up (repeatable)")
    p.add_argument("--from-file", metavar="IDS", help="a file of records, one SOURCE:UNIT:RECORD a line")
    p.add_argument("--compact", action="store_true", help="merge the index's deltas into its runs first")
    add_json_flag(p)
    add_storage_option_flag(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from torch_tgb.lineage import Lineage, compact, read_records
    from torch_tgb.transforms.provenance import RecordId

    records = [RecordId.parse(r) for r in args.record]
    if args.from_file:
        records += read_records(args.from_file)
    if not records and not args.compact:
        raise CommandError("give --record SOURCE:UNIT:RECORD or --from-file IDS")
    with Lineage(args.ns, storage_options=storage_options(args)) as lineage:
        if args.compact:
            done = compact(lineage.index, min_deltas=1)
            if not args.json:
                print(f"{lineage.store.url}: lineage index " + (
                    f"compacted up to version {done.covers} ({len(done.runs)} run(s))" if done else "already compact"))
        if not records:
            return 0
        result = lineage.lookup(records)
        if args.json:
            print_json({"ns": lineage.store.url, **result.to_json()})
            return 0
        for record in records:
            hits = result.hits[record]
            live = [h for h in hits if not h.excised]
            print(f"{record}: {len(live)} step(s)" + (f", {len(hits) - len(live)} excised" if len(hits) > len(live)
                                                      else ""))
            for h in hits:
                print(f"  step {h.step}  dp {h.dp}  row {h.row}" + ("  (excised)" if h.excised else ""))
        print(f"(complete up to manifest version {result.version})")
    return 0
