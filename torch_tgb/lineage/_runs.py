"""The lineage index's objects: sorted runs of ``(record hash, step, row)`` and their summaries.

Byte layout of a run (a delta or a merged run; little-endian)::

    0   magic "TGBLIN01"                     8 bytes
    8   count                                u64
    16  summary length                       u32
    20  CRC32 of bytes [24, end)             u32
    24  entries: count x 16 bytes, sorted by (hash, step, row):
            hash u64 (transforms.provenance.record_hash of unit key and record)
            step u32
            row  u32 (dp slice << 16 | the row's place in that slice, of the written layout)
    ..  summary: canonical JSON (what the dataset card adds up)

Entry ``i`` is at ``24 + 16 i``: a reader that knows a run's fences (the
hash of every :data:`BLOCK`-th entry, kept in the catalog) reads one block
with one range read; the CRC covers a whole read (deltas, merges).

A summary: ``{"lo", "hi"}`` (manifest versions covered), ``"steps": [first,
stop]``, ``"tgbs"`` and ``"rows"`` (padding rows too), ``"sources": {source id hex: {"spans", "tokens", "documents"}}``
(documents: spans that start a record) and ``"mix": {step block:
{source id hex: tokens}}`` (blocks of :data:`MIX_STEPS` steps). Summaries add
up (:func:`merge_summaries`).
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from torch_tgb.errors import CorruptObject
from torch_tgb.transforms.provenance import record_hash, split_unit_key, unpack_extent

__all__ = [
    "BLOCK",
    "ENTRY",
    "HEADER",
    "MIX_STEPS",
    "check_header",
    "decode_block",
    "decode_run",
    "empty_summary",
    "encode_run",
    "entries_of",
    "merge_entries",
    "merge_summaries",
    "split_row",
    "summary_of",
]

ENTRY = np.dtype([("h", "<u8"), ("step", "<u4"), ("row", "<u4")])
MAGIC = b"TGBLIN01"
HEADER = 24
#: entries per block of a run (128 KiB): one range read finds a record in a run of any size
BLOCK = 8192
#: steps per block of the mixture a summary records
MIX_STEPS = 1024
_MAX_STEP = (1 << 32) - 1
ROW_MASK = 0xFFFF


def entries_of(step: int, values: np.ndarray, offsets: np.ndarray, dp: int) -> np.ndarray:
    """The index entries of one step's rows: provenance ``values [spans, 3]`` with row ``offsets [rows + 1]``,
    the rows cut into ``dp`` equal slices."""
    rows = len(offsets) - 1
    per = rows // dp if dp else 0
    if not 0 <= step <= _MAX_STEP or per * dp != rows or per > ROW_MASK + 1 or dp > ROW_MASK + 1:
        raise ValueError(f"step={step}, {rows} rows in dp={dp} slices: the lineage index holds steps below 2**32 "
                         "and up to 65536 slices of up to 65536 rows")
    out = np.empty(len(values), dtype=ENTRY)
    if len(values):
        row = np.repeat(np.arange(rows, dtype=np.uint32), np.diff(offsets))
        out["h"] = record_hash(values[:, 0], values[:, 1])
        out["step"] = step
        out["row"] = ((row // per) << 16) | (row % per)
    return out


def split_row(row: int) -> tuple[int, int]:
    """``(dp slice, row in the slice)`` of an entry's row field."""
    return row >> 16, row & ROW_MASK


def empty_summary(lo: int, hi: int) -> dict[str, Any]:
    return {"lo": lo, "hi": hi, "steps": [0, 0], "sources": {}, "mix": {}, "rows": 0, "tgbs": 0}


def summary_of(lo: int, hi: int, steps: Iterable[tuple[int, np.ndarray, np.ndarray]]) -> dict[str, Any]:
    """The summary of the provenance ``(step, values, row offsets)`` of versions ``lo .. hi``."""
    out = empty_summary(lo, hi)
    first, stop = None, 0
    for step, values, offsets in steps:
        first = step if first is None else min(first, step)
        stop = max(stop, step + 1)
        out["rows"] += len(offsets) - 1
        out["tgbs"] += 1
        if not len(values):
            continue
        sources, _ = split_unit_key(values[:, 0])
        starts, lengths = unpack_extent(values[:, 2])
        mix = out["mix"].setdefault(str(step // MIX_STEPS), {})
        for sid in np.unique(sources).tolist():
            mine = sources == sid
            name = f"{sid:08x}"
            tokens = int(lengths[mine].sum())
            counts = out["sources"].setdefault(name, {"spans": 0, "tokens": 0, "documents": 0})
            counts["spans"] += int(mine.sum())
            counts["tokens"] += tokens
            counts["documents"] += int((starts[mine] == 0).sum())
            mix[name] = mix.get(name, 0) + tokens
    out["steps"] = [first or 0, stop]
    return out


def merge_summaries(summaries: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The sum of several summaries (their versions and steps joined)."""
    items = list(summaries)
    out = empty_summary(min((s["lo"] for s in items), default=0), max((s["hi"] for s in items), default=0))
    spans = [s["steps"] for s in items if s["steps"][1] > s["steps"][0]]
    out["steps"] = [min((a for a, _ in spans), default=0), max((b for _, b in spans), default=0)]
    for s in items:
        out["rows"] += int(s.get("rows", 0))
        out["tgbs"] += int(s.get("tgbs", 0))
        for sid, counts in s["sources"].items():
            into = out["sources"].setdefault(sid, {"spans": 0, "tokens": 0, "documents": 0})
            for k in into:
                into[k] += int(counts[k])
        for block, by_source in s["mix"].items():
            into = out["mix"].setdefault(block, {})
            for sid, tokens in by_source.items():
                into[sid] = into.get(sid, 0) + int(tokens)
    return out


def merge_entries(parts: Iterable[np.ndarray]) -> np.ndarray:
    """Entries of several runs as one sorted run."""
    joined = np.concatenate([np.asarray(p, dtype=ENTRY) for p in parts]) if parts else np.zeros(0, ENTRY)
    if not len(joined):
        return joined
    order = np.lexsort((joined["row"], joined["step"], joined["h"]))
    return joined[order]


def encode_run(entries: np.ndarray, summary: Mapping[str, Any]) -> bytes:
    """The bytes of a run of ``entries`` (sorted here) with ``summary``."""
    entries = merge_entries([entries])
    meta = json.dumps(summary, sort_keys=True, separators=(",", ":")).encode()
    body = entries.tobytes() + meta
    return MAGIC + struct.pack("<QII", len(entries), len(meta), zlib.crc32(body)) + body


def decode_run(data: bytes, *, what: str) -> tuple[np.ndarray, dict[str, Any]]:
    """``(entries, summary)`` of a whole run; :class:`CorruptObject` naming ``what`` if it is not one."""
    count, meta_len = check_header(data[:HEADER], what=what)
    if len(data) != HEADER + count * ENTRY.itemsize + meta_len:
        raise CorruptObject(f"{what}: {len(data)} bytes, not a run of {count} entries and {meta_len} bytes of summary")
    if zlib.crc32(memoryview(data)[HEADER:]) != struct.unpack_from("<I", data, 20)[0]:
        raise CorruptObject(f"{what}: CRC mismatch")
    entries = np.frombuffer(data, dtype=ENTRY, count=count, offset=HEADER)
    try:
        summary = json.loads(bytes(data[HEADER + count * ENTRY.itemsize :]))
    except ValueError as e:
        raise CorruptObject(f"{what}: summary is not JSON: {e}") from e
    if not isinstance(summary, dict) or not {"lo", "hi", "steps", "sources", "mix"} <= set(summary):
        raise CorruptObject(f"{what}: malformed summary")
    return entries, summary


def check_header(head: bytes, *, what: str) -> tuple[int, int]:
    """``(count, summary length)`` of a run's header."""
    if len(head) < HEADER or head[:8] != MAGIC:
        raise CorruptObject(f"{what}: not a lineage run (no {MAGIC!r} header)")
    count, meta_len, _ = struct.unpack_from("<QII", head, 8)
    return int(count), int(meta_len)


def decode_block(data: bytes, *, first: int, expect: int, what: str) -> np.ndarray:
    """Entries read by a range read starting at entry ``first``, whose hash must be the fence ``expect``."""
    if len(data) % ENTRY.itemsize:
        raise CorruptObject(f"{what}: a block read of {len(data)} bytes is not whole entries")
    entries = np.frombuffer(data, dtype=ENTRY)
    if len(entries) and int(entries["h"][0]) != expect:
        raise CorruptObject(f"{what}: entry {first} does not hold its fence (the catalog and the run disagree)")
    if len(entries) > 1 and bool((entries["h"][1:] < entries["h"][:-1]).any()):
        raise CorruptObject(f"{what}: entries from {first} are not sorted")
    return entries
