"""``tgb verify NS --deny FILE``: the rows a reader would read that still hold a denied record (exit 1 if any)."""

from __future__ import annotations

import argparse

from torch_tgb.cli._common import print_json, storage_options

__all__ = ["run_deny"]


def run_deny(args: argparse.Namespace) -> int:
    from torch_tgb.lineage import read_records, verify_deny

    report = verify_deny(args.ns, read_records(args.deny), storage_options=storage_options(args))
    if args.json:
        print_json({"ns": args.ns, **report.to_json()})
    else:
        print(f"{args.ns}: {report.steps} step(s) checked at version {report.version}: {report.rows} row(s) hold a "
              f"denied record" + (f"; {report.without_provenance} step(s) carry no provenance" if
                                  report.without_provenance else ""))
        for record, step, dp, row in report.found[: args.max_problems]:
            print(f"  {record}: step {step} dp {dp} row {row}")
    return 0 if not report.found and not report.without_provenance else 1
