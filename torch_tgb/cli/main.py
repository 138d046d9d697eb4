"""The ``tgb`` command: one subcommand per module of :mod:`torch_tgb.cli`.

Exit codes: 0 success; 1 a :class:`~torch_tgb.errors.TGBError`, an
``OSError`` (missing file, permission), a ``ValueError`` (bad input the library
refused) or a problem the command found (e.g. ``verify``); 2 usage errors (argparse) and unexpected exceptions; 130 interrupted. Failures print exactly one line,
``tgb: error: <reason>``, on stderr (``--debug`` adds the traceback).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import traceback
from collections.abc import Sequence

from torch_tgb.errors import TGBError

__all__ = ["SUBCOMMANDS", "build_parser", "main"]

#: subcommand name → module under torch_tgb.cli that implements it
SUBCOMMANDS = {
    "demo": "torch_tgb.cli.demo",
    "inspect": "torch_tgb.cli.inspect",
    "peek": "torch_tgb.cli.peek",
    "report": "torch_tgb.cli.report",
    "verify": "torch_tgb.cli.verify",
    "reclaim": "torch_tgb.cli.reclaim",
    "prewarm": "torch_tgb.cli.prewarm",
    "seal": "torch_tgb.cli.seal",
    "produce": "torch_tgb.cli.produce",
    "convert": "torch_tgb.cli.convert",
    "bench": "torch_tgb.cli.bench",
    "lineage": "torch_tgb.cli.lineage",
    "provenance": "torch_tgb.cli.provenance",
    "excise": "torch_tgb.cli.excise",
    "card": "torch_tgb.cli.card",
}


def build_parser() -> argparse.ArgumentParser:
    from torch_tgb import __version__

    parser = argparse.ArgumentParser(
        prog="tgb",
        description="Transactional Global Batches: produce, inspect, verify and reclaim TGB namespaces.",
        epilog="Run `tgb COMMAND --help` for the options of one command. Start with `tgb demo`.",
    )
    parser.add_argument("--version", action="version", version=f"tgb (torch_tgb) {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="log more (-v: info, -vv: debug) to stderr"
    )
    parser.add_argument("--debug", action="store_true", help="print the traceback of a failure")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in SUBCOMMANDS.values():
        importlib.import_module(module_name).add_parser(sub)
    for command in sub.choices.values():
        command.formatter_class = DefaultsHelpFormatter
    return parser


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Shows every option's default in ``--help``, unless its help text already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            action.option_strings
            and "default" not in text
            and not (default is None or default is False or default == [] or default is argparse.SUPPRESS)
        ):
            text += " (default: %(default)s)"
        return text


def _one_line(message: object) -> str:
    return " ".join(str(message).split()) or "(no message)"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tgb`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return int(args.run(args) or 0)
    except BrokenPipeError:  # `tgb inspect ... | head`: the reader went away, nothing to report
        return 0
    except (TGBError, OSError, ValueError) as e:
        # TGBError: the library's own; OSError: missing file, permission denied, disk full (the
        # environment); ValueError: bad input the library refused. None of them is a bug of ours.
        if args.debug:
            traceback.print_exc()
        print(f"tgb: error: {_one_line(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("tgb: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the top level reports anything, in one line
        if args.debug:
            traceback.print_exc()
        print(f"tgb: error: unexpected {type(e).__name__}: {_one_line(e)} (rerun with --debug)", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
