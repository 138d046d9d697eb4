"""``tgb excise NS --records FILE``: take records out of every step that holds them, in one manifest version.

Every TGB holding a listed record (``SOURCE:UNIT:RECORD``, one a line) is
rewritten as a new object without it (its row re-packed in place: the other
records of the row, the step, the dp slice and the row stay as they were),
together with every other TGB of the same objects, and the replacements are
committed in one new manifest version with an audit record (``--by``,
``--reason``). Checkpoints resume onto the cleaned data; the old objects are
reclaimed once no live checkpoint or reader needs them (docs/provenance.md).
``--dry-run`` says what would be rewritten.
"""

from __future__ import annotations

import argparse

from torch_tgb.cli._common import CommandError, add_json_flag, add_storage_option_flag, print_json, storage_options

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("excise", help="remove records from a namespace (one new manifest version, audited)",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    p.add_argument("ns", metavar="NS", help="namespace URL or local directory")
    p.add_argument("--records", metavar="FILE", help="the records, one SOURCE:UNIT:RECORD a line (required)")
    p.add_argument("--by", metavar="WHO", help="who asks for the excision, for the audit record (default user@host)")
    p.add_argument("--reason", default="", help="why, for the audit record (a ticket, a licence revocation)")
    p.add_argument("--dry-run", action="store_true", help="find and report, write nothing")
    add_json_flag(p)
    add_storage_option_flag(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from torch_tgb.lineage import excise, read_records

    if not args.records:
        raise CommandError("give the records to excise: --records FILE (one SOURCE:UNIT:RECORD a line)")
    records = read_records(args.records)
    report = excise(args.ns, records, who=args.by, reason=args.reason, storage_options=storage_options(args),
                    dry_run=args.dry_run, progress=None if args.json else print)
    if args.json:
        print_json({"ns": args.ns, **report.to_json()})
        return 0
    if report.not_found:
        print(f"not in any step: {', '.join(report.not_found[:10])}" + (" ..." if len(report.not_found) > 10 else ""))
    if report.version is None:
        print("nothing committed" + (" (dry run)" if report.dry_run else ""))
    else:
        print(f"version {report.version}: {report.replaced_steps} step(s) rewritten in {len(report.objects)} "
              f"object(s), {report.spans} span(s) and {report.tokens} token(s) removed; audit {report.audit}")
    return 0
