"""Source kinds: ``KIND:WHERE`` (``tgb produce --source``) to a document node, one registration per kind.

:data:`SOURCE_KINDS` maps a kind to ``factory(where, args) -> node``:
``where`` is the text after ``KIND:`` (a path, a URL, a comma-separated list),
``args`` the job's reading options (:class:`SourceArgs`: shard, seed,
``on_error``, column, tokenizer, ...). Built in: ``token-file``,
``webdataset``, ``lance``, ``parquet``. A new kind is
``SOURCE_KINDS.register("mykind", factory)``, or an entry point in group
``torch_tgb.sources`` of its own package; ``tgb produce --source mykind:...``
then reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch_tgb._on_error import OnError, check_on_error
from torch_tgb._registry import Registry

if TYPE_CHECKING:
    from torchdata.nodes import BaseNode

    from torch_tgb.sources._inputs import Tokenizer

__all__ = ["SOURCE_KINDS", "SourceArgs", "SourceFactory", "open_kind", "split_spec"]


@dataclass(frozen=True)
class SourceArgs:
    """What a source kind's factory gets besides ``WHERE``: the job's reading options.

    ``column``: the token (or text) column / tar member, ``None`` for the
    kind's default; ``text_field``: a text member to tokenize; ``offsets``
    and ``dtype``: a token file's document offsets and a raw file's dtype.
    """

    shard: tuple[int, int] = (0, 1)
    seed: int = 0
    on_error: OnError = "raise"
    column: str | None = None
    text_field: str | None = None
    tokenizer: Tokenizer | None = None
    offsets: str | None = None
    dtype: str = "uint16"

    def __post_init__(self) -> None:
        check_on_error(self.on_error, where="SourceArgs")

    def common(self) -> dict[str, Any]:
        """The keywords every source takes (``sources.ReadOptions``) from these."""
        return {"shard": self.shard, "seed": self.seed, "on_error": self.on_error}


#: ``factory(where, args) -> a document node`` (a ``sources.UnitSource`` or any resumable node of documents)
SourceFactory = Callable[[str, SourceArgs], "BaseNode[Any]"]

#: source kinds by name (``tgb produce --source KIND:WHERE``)
SOURCE_KINDS: Registry[SourceFactory] = Registry("source kind", group="torch_tgb.sources")


def split_spec(spec: str) -> tuple[str, str]:
    """``"KIND:WHERE"`` -> ``(KIND, WHERE)``; a spec without both is a ``ValueError`` naming the kinds."""
    kind, sep, where = spec.partition(":")
    if not sep or not kind or not where:
        raise ValueError(f"a source is KIND:WHERE with KIND one of {', '.join(SOURCE_KINDS.names())}, got {spec!r}")
    return kind, where


def open_kind(spec: str, args: SourceArgs) -> BaseNode[Any]:
    """The node of ``"KIND:WHERE"``: the factory registered as ``KIND`` over ``WHERE`` (unknown kinds are refused)."""
    kind, where = split_spec(spec)
    return SOURCE_KINDS[kind](where, args)


def _paths(where: str) -> str | list[str]:
    return where.split(",") if "," in where else where


@SOURCE_KINDS.register("token-file")
def _token_file(where: str, args: SourceArgs) -> BaseNode[Any]:
    from torch_tgb.sources.token_file import TokenFile

    dtype = None if where.endswith(".npy") else args.dtype
    return TokenFile(where, offsets=args.offsets, dtype=dtype, **args.common())


@SOURCE_KINDS.register("webdataset")
def _webdataset(where: str, args: SourceArgs) -> BaseNode[Any]:
    from torch_tgb.sources.webdataset import WebDataset

    return WebDataset(_paths(where), field=args.column or "tokens.npy", text_field=args.text_field,
                      tokenizer=args.tokenizer, **args.common())


@SOURCE_KINDS.register("lance")
def _lance(where: str, args: SourceArgs) -> BaseNode[Any]:
    from torch_tgb.sources.lance import Lance

    return Lance(where, column=args.column or "tokens", tokenizer=args.tokenizer, **args.common())


@SOURCE_KINDS.register("parquet")
def _parquet(where: str, args: SourceArgs) -> BaseNode[Any]:
    from torch_tgb.sources.parquet import Parquet

    return Parquet(_paths(where), column=args.column or "input_ids", tokenizer=args.tokenizer, **args.common())
