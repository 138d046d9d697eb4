"""``tgb produce --source KIND:WHERE``: a corpus source, packed into global batches, run by ``tgb.produce``."""

from __future__ import annotations

import argparse
from typing import Any

from torch_tgb.cli._common import CommandError, print_json, storage_options
from torch_tgb.errors import TGBError

__all__ = ["SOURCE_KINDS", "open_source", "parse_shard", "produce_source", "source_layout", "source_metadata", "source_pipeline"]

SOURCE_KINDS = ("token-file", "webdataset", "lance", "parquet")


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` -> ``(I, N)`` with ``0 <= I < N``."""
    index, sep, count = text.partition("/")
    try:
        shard = (int(index), int(count))
    except ValueError:
        shard = (-1, 0)
    if not sep or not 0 <= shard[0] < shard[1]:
        raise CommandError(f"--shard {text!r} must be I/N with 0 <= I < N, e.g. 0/2")
    return shard


def _tokenizer(path: str | None) -> Any:
    if path is None:
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise CommandError("--tokenizer needs the 'tokenizers' package (pip install tokenizers)") from e
    try:
        tok = Tokenizer.from_file(path)
    except Exception as e:
        raise CommandError(f"cannot load tokenizer {path!r}: {e}") from e
    return lambda texts: [enc.ids for enc in tok.encode_batch(texts)]


def _paths(where: str) -> str | list[str]:
    return where.split(",") if "," in where else where


def open_source(args: argparse.Namespace, shard: tuple[int, int]) -> Any:
    """The source node that ``--source`` names, reading shard ``shard``."""
    from torch_tgb import sources

    kind, sep, where = args.source.partition(":")
    if not sep or not where or kind not in SOURCE_KINDS:
        raise CommandError(f"--source {args.source!r} must be KIND:WHERE with KIND one of {', '.join(SOURCE_KINDS)}")
    tokenizer = _tokenizer(args.tokenizer)
    common: dict[str, Any] = {"shard": shard, "seed": args.seed}
    if kind == "token-file":
        dtype = None if where.endswith(".npy") else args.dtype
        return sources.TokenFile(where, offsets=args.offsets, dtype=dtype, **common)
    if kind == "webdataset":
        return sources.WebDataset(_paths(where), field=args.column or "tokens.npy", text_field=args.text_field,
                                  tokenizer=tokenizer, **common)
    if kind == "lance":
        return sources.Lance(where, column=args.column or "tokens", tokenizer=tokenizer, **common)
    return sources.Parquet(_paths(where), column=args.column or "input_ids", tokenizer=tokenizer, **common)


def source_layout(args: argparse.Namespace) -> Any:
    """The layout of ``--source`` batches: ``--dp``/``--cp`` over the packed tensors."""
    from torch_tgb.layout import Layout

    keys = ("input_ids", "labels", "document_ids", "position_ids") if args.packing == "bfd" else ("input_ids", "labels")
    return Layout(dp=args.dp, cp=args.cp, seq_keys=keys)


def source_metadata(args: argparse.Namespace) -> dict[str, Any]:
    """What ``dataset.json`` records of ``--source`` batches (every producer of a namespace passes the same)."""
    return {"packing": args.packing, "seq_len": args.seq_len}


def source_pipeline(args: argparse.Namespace, shard_index: int, shard_count: int) -> Any:
    """Shard ``shard_index`` of ``shard_count`` of ``--source``, packed into global batches.

    A module-level function of picklable arguments, so that ``tgb produce
    --ray`` can build it inside each Ray actor.
    """
    import torch

    from torch_tgb.offline import document_batches

    shard = (shard_index, shard_count)
    try:
        docs = open_source(args, shard)
    except (ValueError, TypeError, ImportError) as e:
        if isinstance(e, TGBError):
            raise
        raise CommandError(f"--source {args.source!r}: {e}") from e
    return document_batches(
        docs, seq_len=args.seq_len, global_batch_size=args.global_batch, packing=args.packing,
        token_dtype=torch.int32, info={"source": args.source, "shard": list(shard)},
    )


def produce_source(args: argparse.Namespace) -> int:
    """Pack ``--source`` into global batches and append them with ``tgb.produce``; print a summary."""
    from torch_tgb.producer import produce

    shard = parse_shard(args.shard)
    layout = source_layout(args)
    pipeline = source_pipeline(args, *shard)
    try:
        report = produce(
            args.ns, pipeline, producer_id=args.producer_id, layout=layout, storage_options=storage_options(args),
            commit_policy=args.commit_policy, max_lag=args.max_lag, max_steps=args.steps, seal=args.seal,
            metadata=source_metadata(args),
        )
    except (ValueError, TypeError) as e:  # a bad --producer-id, --commit-policy or --max-lag
        if isinstance(e, TGBError):
            raise
        raise CommandError(str(e)) from e
    counts = pipeline.state_dict()
    summary = {
        "ns": args.ns,
        "producer_id": args.producer_id,
        "source": args.source,
        "shard": f"{shard[0]}/{shard[1]}",
        "resumed_at": report.start_offset,
        "written": report.batches,
        "next_offset": report.end_offset,
        "exhausted": report.exhausted,
        "sealed": report.sealed,
        "rows": counts["rows"],
        "tokens": counts["tokens"],
        "seconds": round(report.seconds, 3),
        "stats": report.stats,
    }
    if args.json:
        print_json(summary)
    else:
        how = "to the end of the source" if report.exhausted else f"up to --steps {args.steps}"
        print(
            f"producer {args.producer_id}: wrote offsets {report.start_offset}..{report.end_offset - 1} "
            f"({report.batches} batches, {how}) in {report.seconds:.2f}s{' and sealed' if report.sealed else ''}"
        )
    return 0
