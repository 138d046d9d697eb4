"""Helpers shared by the ``tgb`` subcommands: storage options, errors, output.

Every subcommand module exposes ``add_parser(subparsers)`` (registers itself
with its own ``--help``) and ``run(args) -> int``. Heavy imports (torch, the
manifest, the producer) happen inside ``run`` so that ``tgb --help`` is fast.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from torch_tgb.errors import TGBError
from torch_tgb.storage._secrets import option_names

if TYPE_CHECKING:
    from torch_tgb.storage import ObjectStore

__all__ = [
    "CommandError",
    "RegistryChoices",
    "add_json_flag",
    "add_storage_option_flag",
    "argument_errors",
    "parse_storage_options",
    "plural",
    "print_json",
    "require_namespace",
    "storage_options",
]


class CommandError(TGBError):
    """A command-line usage or precondition failure (bad option, missing module, ...)."""


@contextlib.contextmanager
def argument_errors() -> Iterator[None]:
    """A ``ValueError``/``TypeError`` the library raises for a bad option value, as a :class:`CommandError`.

    TGB errors (some subclass ``ValueError``) pass through as they are.
    """
    try:
        yield
    except (ValueError, TypeError) as e:
        if isinstance(e, TGBError):
            raise
        raise CommandError(str(e)) from e


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


def _decode_value(text: str) -> object:
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
        # with -v the user sees which options were understood: names only, never a value
        # (secrets, but also endpoints: the docs promise no option value is printed)
        logging.getLogger("torch_tgb.cli").info("storage options: %s", ", ".join(option_names(options)))
    return options or None


def require_namespace(store: ObjectStore) -> None:
    """:class:`CommandError` (exit 1) unless ``store`` holds a TGB namespace, in inspect's and verify's words."""
    from torch_tgb.manifest import DATASET_KEY, Manifest

    store.check_root()  # a missing bucket is named as such, not taken for an empty namespace
    manifest = Manifest(store)
    if manifest.dataset() is None and manifest.latest_version() == 0:
        raise CommandError(f"{store.url}: no TGB namespace here (no {DATASET_KEY}, no log versions)")


def print_json(value: object) -> None:
    json.dump(value, sys.stdout, indent=2, sort_keys=True, default=_json_default)
    sys.stdout.write("\n")


def _json_default(value: object) -> object:
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    item = getattr(value, "item", None)  # numpy / torch scalars
    if callable(item):
        return item()
    return str(value)


class RegistryChoices:
    """argparse ``choices`` that are the names of a registry (``module:NAME``), imported only when asked.

    argparse asks ``in`` when the flag is given and iterates only for help,
    usage and errors: building the parser imports nothing (``tgb --help`` stays
    fast), and a plugin's name is a choice like a built-in one.
    """

    def __init__(self, where: str) -> None:
        self.where = where

    def _registry(self) -> Any:
        import importlib

        module, _, name = self.where.partition(":")
        return getattr(importlib.import_module(module), name)

    def __contains__(self, name: object) -> bool:
        return name in self._registry()

    def __iter__(self) -> Iterator[str]:
        return iter(self._registry().names())


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1, "object"`` -> ``'1 object'``; ``2, "object"`` -> ``'2 objects'`` (``many``: an irregular plural)."""
    return f"{n} {word if n == 1 else many or word + 's'}"


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
