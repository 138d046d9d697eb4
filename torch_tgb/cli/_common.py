"""Helpers shared by the ``tgb`` subcommands: storage options, errors, output.

Every subcommand module exposes ``add_parser(subparsers)`` (registers itself
with its own ``--help``) and ``run(args) -> int``. Heavy imports (torch, the
manifest, the producer) happen inside ``run`` so that ``tgb --help`` is fast.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from torch_tgb.errors import TGBError

__all__ = [
    "CommandError",
    "add_json_flag",
    "add_storage_option_flag",
    "parse_storage_options",
    "print_json",
    "redact",
    "storage_options",
]

# Names of options whose values are secrets: never printed, never logged.
_SECRET = re.compile(r"(secret|password|passwd|token|credential|key|session|auth|signature)", re.IGNORECASE)
# Keys that look secret-ish but are harmless and useful to show.
_NOT_SECRET = frozenset({"endpoint_url", "region_name", "key_prefix"})


class CommandError(TGBError):
    """A command-line usage or precondition failure (bad option, missing module, ...)."""


def add_storage_option_flag(parser: argparse.ArgumentParser) -> None:
    """Add the repeatable ``--storage-option KEY=VALUE`` flag every subcommand takes."""
    parser.add_argument(
        "--storage-option",
        "-o",
        dest="storage_option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=(
            "fsspec storage option, repeatable (e.g. endpoint_url=http://127.0.0.1:9000, anon=true, "
            "client_kwargs.region_name=us-east-1); values true/false/null/numbers/JSON are decoded; "
            "values are never printed"
        ),
    )


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of text")


def _decode_value(text: str) -> Any:
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "on"):
        return True
    if lowered in ("false", "no", "off"):
        return False
    if lowered in ("null", "none"):
        return None
    if text[:1] in "{[\"" or re.fullmatch(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", text.strip()):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text
    return text


def parse_storage_options(items: Iterable[str]) -> dict[str, Any]:
    """Turn ``["a=1", "client_kwargs.region_name=x"]`` into ``{"a": 1, "client_kwargs": {"region_name": "x"}}``.

    A dotted key builds a nested dict (fsspec's ``client_kwargs`` and
    ``config_kwargs`` need it). Error messages name the key, never the value.
    """
    options: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            # the item may contain a secret: show only what precedes '='
            raise CommandError(f"--storage-option expects KEY=VALUE, got {key or '(empty)'!r} without '='")
        parts = key.split(".")
        if any(not p for p in parts):
            raise CommandError(f"--storage-option key {key!r} has an empty component")
        node = options
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise CommandError(f"--storage-option key {key!r} conflicts with an earlier scalar {part!r}")
            node = child
        if isinstance(node.get(parts[-1]), dict):
            raise CommandError(f"--storage-option key {key!r} conflicts with earlier nested keys")
        node[parts[-1]] = _decode_value(value)
    return options


def storage_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """The parsed ``--storage-option`` values of ``args``, or ``None`` when there are none."""
    options = parse_storage_options(getattr(args, "storage_option", None) or [])
    if options:
        # with -v the user sees which options were understood, secrets masked
        logging.getLogger("torch_tgb.cli").info("storage options: %s", redact(options))
    return options or None


def redact(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of ``options`` safe to print: secret-looking values become ``"***"``."""
    out: dict[str, Any] = {}
    for key, value in (options or {}).items():
        if isinstance(value, Mapping):
            out[key] = redact(value)
        elif key not in _NOT_SECRET and _SECRET.search(key):
            out[key] = "***"
        else:
            out[key] = value
    return out


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, sort_keys=True, default=_json_default)
    sys.stdout.write("\n")


def _json_default(value: Any) -> Any:
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    item = getattr(value, "item", None)  # numpy / torch scalars
    if callable(item):
        return item()
    return str(value)


def human_bytes(n: float) -> str:
    """``1536`` → ``'1.5 KiB'``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover - loop always returns


def format_table(rows: Iterable[tuple[str, Any]], *, title: str | None = None) -> str:
    """Two aligned columns, for human-readable summaries."""
    rows = [(str(k), str(v)) for k, v in rows]
    width = max((len(k) for k, _ in rows), default=0)
    lines = [title] if title else []
    lines += [f"  {k:<{width}}  {v}" for k, v in rows]
    return "\n".join(lines)
