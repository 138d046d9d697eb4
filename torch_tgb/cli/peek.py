"""``tgb peek NS --step S``: what one TGB step holds, as a rank receives it.

Prints the batch's keys with their shapes and dtypes, one row's tokens
(``--row``; decoded per document with ``--tokenizer FILE``) and its document
boundaries (from ``seq_lens``, ``cu_seqlens`` or ``document_ids``), the
samples' keys where the producer stored them (``sample_keys``), and its
images and video frames: ``--png FILE`` writes them, reassembled from their
patches, unscaled on one contact sheet. The step is read through
``TGBDataset`` for rank ``--rank`` of the written dp, exactly as a trainer
would get it (CRC-checked, labels derived).
"""

from __future__ import annotations

import argparse
from typing import Any

from torch_tgb.cli._common import CommandError, add_json_flag, add_storage_option_flag

__all__ = ["add_parser", "document_spans", "read_step", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "peek",
        help="show one step's keys, shapes, a row's tokens and documents, and its images (--png)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("ns", metavar="NS", help="namespace URL or local directory")
    p.add_argument("--step", type=int, default=None, help="the TGB step to read (default: the newest committed)")
    p.add_argument("--rank", type=int, default=0, help="dp rank of the written layout whose slice to read (default 0)")
    p.add_argument("--row", type=int, default=0, help="the row (of the rank's slice) whose tokens to show (default 0)")
    p.add_argument("--tokens", type=int, default=48, metavar="N", help="tokens of the row to show (default 48)")
    p.add_argument("--tokenizer", default=None, metavar="FILE",
                   help="a Hugging Face tokenizers JSON file: show the row's documents as text")
    p.add_argument("--png", default=None, metavar="FILE",
                   help="write the step's images and video frames, reassembled from patches, to this PNG")
    p.add_argument("--max-images", type=int, default=64, help="images and frames on the sheet at most (default 64)")
    p.add_argument("--patch", type=int, default=None, help="patch side (default: from the values per patch)")
    p.add_argument("--temporal-patch", type=int, default=None, help="frames per patch (default: inferred)")
    p.add_argument("--merge", type=int, default=None,
                   help="patches merged per token side (default: inferred, the merge that reassembles smoothly)")
    add_json_flag(p)
    add_storage_option_flag(p)
    p.set_defaults(run=run)


def read_step(
    ns: str, step: int | None, rank: int, storage_options: dict[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(batch, info) of ``step`` (None: the newest committed) as dp rank ``rank`` of the written layout reads it."""
    import torch_tgb as tgb
    from torch_tgb.cli._common import require_namespace
    from torch_tgb.consumer.options import ReaderOptions
    from torch_tgb.cursor import CURSOR_KEY, Cursor
    from torch_tgb.manifest import Manifest
    from torch_tgb.storage import open_store

    store = open_store(ns, storage_options)
    try:
        require_namespace(store)
        manifest = Manifest(store)
        dataset, head, boundary = manifest.dataset(), manifest.head(), manifest.gc_boundary()
        if dataset is None:
            raise CommandError(f"{store.url}: no dataset.json yet: nothing committed to peek at")
        dp = int(dataset.layout.get("dp", 1))
        if not 0 <= rank < dp:
            raise CommandError(f"--rank {rank} is not a dp rank of {store.url} (dp={dp}: ranks 0..{dp - 1})")
        if head.num_steps == 0:
            raise CommandError(f"{store.url}: no step committed yet: nothing to peek at")
        if step is None:
            step = head.num_steps - 1
        if not 0 <= step < head.num_steps:
            raise CommandError(f"{store.url}: step {step} is not committed (steps 0..{head.num_steps - 1})")
        if step < boundary.step:
            raise CommandError(f"{store.url}: step {step} was reclaimed (steps below {boundary.step} are gone)")
        ds = tgb.TGBDataset(store, mesh=tgb.Mesh(dp_rank=rank, dp_size=dp), options=ReaderOptions(stop_step=step + 1))
        ds.load_state_dict({CURSOR_KEY: Cursor(step).to_json()})
        batch = next(iter(ds))
        info = {"namespace": store.url, "step": step, "rank": rank, "dp": dp, "steps": head.num_steps,
                "metadata": dict(dataset.metadata)}
        return dict(batch), info
    finally:
        store.close()


def _rows(batch: dict[str, Any]) -> int:
    for name, value in batch.items():
        if not name.endswith("_offsets") and f"{name}_offsets" not in batch and value.dim() >= 1:
            return int(value.shape[0])
    offsets = next((v for k, v in batch.items() if k.endswith("_offsets")), None)
    return 0 if offsets is None else int(offsets.shape[0]) - 1


def document_spans(batch: dict[str, Any], row: int) -> list[tuple[int, int]] | None:
    """The ``[start, end)`` of each document of ``row`` (from seq_lens, document_ids or cu_seqlens); None if unknown."""
    import torch

    if "seq_lens" in batch:
        lens = batch["seq_lens"]
        offs = batch.get("seq_lens_offsets")
        if offs is not None:
            lens = lens[int(offs[row]) : int(offs[row + 1])]
        ends = torch.cumsum(lens.to(torch.int64), 0).tolist()
        return [(int(a), int(b)) for a, b in zip([0, *ends[:-1]], ends) if b > a]
    if "document_ids" in batch:
        ids = batch["document_ids"][row].tolist()
        spans, start = [], 0
        for i in range(1, len(ids) + 1):
            if i == len(ids) or ids[i] != ids[start]:
                if ids[start] >= 0:
                    spans.append((start, i))
                start = i
        return spans
    if "cu_seqlens" in batch:
        cu = batch["cu_seqlens"][row].to(torch.int64).tolist()
        return [(a, b) for a, b in zip(cu[:-1], cu[1:]) if b > a]
    return None


def _tokenizer(path: str | None) -> Any:
    if path is None:
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise CommandError("--tokenizer needs the 'tokenizers' package (pip install -e '.[bench]')") from e
    try:
        return Tokenizer.from_file(path)
    except Exception as e:
        raise CommandError(f"cannot load tokenizer {path!r}: {e}") from e


def describe(batch: dict[str, Any], info: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The JSON-able report of a peek (keys, the row's tokens and documents, sample keys)."""
    import torch

    from torch_tgb.transforms import SAMPLE_KEYS, decode_sample_keys

    rows = _rows(batch)
    if not 0 <= args.row < max(rows, 1):
        raise CommandError(f"--row {args.row}: the slice has {rows} rows (0..{rows - 1})")
    out: dict[str, Any] = {**info, "rows": rows,
                           "keys": {k: {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")}
                                    for k, v in batch.items()}}
    row: dict[str, Any] = {"row": args.row}
    ids = batch.get("input_ids")
    if ids is not None and ids.dim() == 2:
        tokens = ids[args.row].to(torch.int64).tolist()
        spans = document_spans(batch, args.row)
        row.update(length=len(tokens), tokens=tokens[: args.tokens], documents=spans)
        tok = _tokenizer(args.tokenizer)
        if tok is not None:
            row["text"] = [tok.decode(tokens[a:b]) for a, b in (spans or [(0, len(tokens))])]
    if SAMPLE_KEYS in batch:
        keys = decode_sample_keys(batch[SAMPLE_KEYS], batch.get(f"{SAMPLE_KEYS}_offsets"))
        out["sample_keys"] = keys
        row["sample_keys"] = keys[args.row] if args.row < len(keys) else []
    out["row"] = row
    return out


def render_text(report: dict[str, Any]) -> str:
    """The human-readable peek."""
    lines = [f"step {report['step']} of {report['namespace']}: rank {report['rank']} of dp={report['dp']}, "
             f"{report['rows']} rows"]
    width = max(len(k) for k in report["keys"])
    for name, spec in report["keys"].items():
        lines.append(f"  {name:<{width}}  {str(spec['shape']):<16}  {spec['dtype']}")
    row = report["row"]
    if "tokens" in row:
        docs = row.get("documents")
        where = "" if docs is None else f" in {len(docs)} document{'s' if len(docs) != 1 else ''}"
        lines.append(f"row {row['row']}: {row['length']} token positions{where}")
        if docs is not None:
            shown = ", ".join(f"[{a}, {b})" for a, b in docs[:12]) + (" ..." if len(docs) > 12 else "")
            lines.append(f"  documents: {shown}")
        more = " ..." if row["length"] > len(row["tokens"]) else ""
        lines.append(f"  tokens: {' '.join(str(t) for t in row['tokens'])}{more}")
        for i, text in enumerate(row.get("text", [])):
            lines.append(f"  document {i}: {text[:200]!r}")
    if "sample_keys" in row:
        lines.append(f"  sample keys: {', '.join(row['sample_keys']) or '(none)'}")
    media = report.get("media")
    if media:
        how = ", ".join(f"{kind}: patch {g['patch']}, temporal {g['temporal_patch']}, merge {g['merge']}"
                        for kind, g in media["geometry"].items())
        where = f" -> {media['png']}" if media.get("png") else " (--png FILE draws them)"
        lines.append(f"images and frames: {media['frames']} ({how}){where}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from torch_tgb.cli._common import print_json, storage_options
    from torch_tgb.cli._peek_media import batch_media, contact_sheet, geometry_json

    if (args.step is not None and args.step < 0) or args.max_images < 1 or args.tokens < 0:
        raise CommandError("--step and --tokens must be >= 0, --max-images >= 1")
    batch, info = read_step(args.ns, args.step, args.rank, storage_options(args))
    report = describe(batch, info, args)
    geometry = {"patch": args.patch, "temporal_patch": args.temporal_patch, "merge": args.merge}
    try:
        frames, used = batch_media(batch, rows=report["rows"], geometry=geometry, limit=args.max_images)
    except ValueError as e:
        raise CommandError(f"cannot reassemble the step's images: {e}") from e
    if frames or used:
        report["media"] = {"frames": len(frames), "geometry": geometry_json(used), "png": args.png}
    if args.png:
        if not frames:
            raise CommandError(f"step {info['step']} has no images or video frames to draw (keys: {', '.join(batch)})")
        try:
            sheet, boxes = contact_sheet(frames)
        except ImportError as e:
            raise CommandError("--png needs Pillow: pip install -e '.[images]'") from e
        sheet.save(args.png, format="PNG")
        report["media"]["boxes"] = boxes
    if args.json:
        print_json(report)
    else:
        print(render_text(report))
    return 0
