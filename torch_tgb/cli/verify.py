"""``tgb verify NS``: check a namespace end to end; exit 1 if anything is wrong.

Every object a version references exists, has the recorded size, its footer
parses, every tensor's CRC32C matches (unless --no-crc), keys stay inside
the namespace, and the step sequence is consistent (versions contiguous,
first_step adding up, producer offsets increasing). Problems are reported
by version and step; the exit code is 1 if there is any. ``--deny FILE``
checks instead that no row a reader would read holds a listed record
(``SOURCE:UNIT:RECORD``, one a line): after ``tgb excise``, 0 rows.
"""

from __future__ import annotations

import argparse

from torch_tgb.cli._common import add_json_flag, add_storage_option_flag

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify",
        help="check objects, sizes, CRCs and the step sequence of a namespace",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("ns", metavar="NS", help="namespace URL or local directory")
    p.add_argument("--no-crc", action="store_true", help="check sizes and footers only, do not read payloads")
    p.add_argument("--max-problems", type=int, default=100, help="stop after this many problems (default 100)")
    p.add_argument("--deny", metavar="FILE", help="instead: rows still holding a listed record (exit 1 if any)")
    add_json_flag(p)
    add_storage_option_flag(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from torch_tgb.cli._common import print_json, storage_options
    from torch_tgb.cli._verify_impl import verify_namespace

    if args.deny:
        from torch_tgb.cli._verify_deny import run_deny

        return run_deny(args)
    report = verify_namespace(
        args.ns, storage_options=storage_options(args), crc=not args.no_crc, max_problems=args.max_problems
    )
    if args.json:
        print_json(report.to_json())
    else:
        print(report.render_text())
    return 0 if report.ok else 1
