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
from collections.abc import Iterable, Mapping, Sequence
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
    "steps_entries",
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
    return steps_entries([(step, values, offsets)], dp)


def steps_entries(steps: Sequence[tuple[int, np.ndarray, np.ndarray]], dp: int) -> np.ndarray:
    """The index entries of several steps ``(step, values, row offsets)``, in their order: one pass of numpy over
    all their spans (what a committer does for each version it commits), not a pass per step."""
    spans, rows = [], []
    for step, values, offsets in steps:
        n = len(offsets) - 1
        per = n // dp if dp else 0
        if not 0 <= step <= _MAX_STEP or per * dp != n or per > ROW_MASK + 1 or dp > ROW_MASK + 1:
            raise ValueError(f"step={step}, {n} rows in dp={dp} slices: the lineage index holds steps below 2**32 "
                             "and up to 65536 slices of up to 65536 rows")
        spans.append(len(values))
        rows.append(n)
    out = np.empty(sum(spans), dtype=ENTRY)
    if not len(out):
        return out
    values = np.concatenate([np.asarray(v, dtype=np.int64).reshape(-1, 3) for _, v, _ in steps])
    counts = np.concatenate([np.diff(np.asarray(o, dtype=np.int64)) for _, _, o in steps])
    first_row = np.repeat(np.cumsum([0, *rows[:-1]]), rows)  # each row's first row of its step
    per_slice = np.repeat(np.array(rows, dtype=np.int64) // dp, rows)
    in_step = np.arange(len(counts), dtype=np.int64) - first_row
    row = np.repeat(((in_step // per_slice) << 16) | (in_step % per_slice), counts)
    out["h"] = record_hash(values[:, 0], values[:, 1])
    out["step"] = np.repeat(np.array([step for step, _, _ in steps], dtype=np.int64), spans)
    out["row"] = row
    return out


def split_row(row: int) -> tuple[int, int]:
    """``(dp slice, row in the slice)`` of an entry's row field."""
    return row >> 16, row & ROW_MASK


def empty_summary(lo: int, hi: int) -> dict[str, Any]:
    return {"lo": lo, "hi": hi, "steps": [0, 0], "sources": {}, "mix": {}, "rows": 0, "tgbs": 0}


def summary_of(lo: int, hi: int, steps: Iterable[tuple[int, np.ndarray, np.ndarray]]) -> dict[str, Any]:
    """The summary of the provenance ``(step, values, row offsets)`` of versions ``lo .. hi``.

    Computed over all the steps' spans at once (a handful of numpy operations a
    version, not a loop per step and source: the committer writes it on ingest).
    """
    out = empty_summary(lo, hi)
    steps = list(steps)
    if not steps:
        return out
    out["rows"] = sum(len(offsets) - 1 for _, _, offsets in steps)
    out["tgbs"] = len(steps)
    out["steps"] = [min(step for step, _, _ in steps), max(step for step, _, _ in steps) + 1]
    values = np.concatenate([np.asarray(v, dtype=np.int64).reshape(-1, 3) for _, v, _ in steps])
    if not len(values):
        return out
    block = np.repeat(np.array([step // MIX_STEPS for step, _, _ in steps], dtype=np.int64),
                      [len(v) for _, v, _ in steps])
    sources, _ = split_unit_key(values[:, 0])
    starts, lengths = unpack_extent(values[:, 2])
    ids, which = _groups(np.asarray(sources))
    per = [np.bincount(which, weights=w, minlength=len(ids)).astype(np.int64).tolist()  # exact below 2**53 tokens
           for w in (None, lengths, starts == 0)]
    for k, sid in enumerate(ids.tolist()):
        out["sources"][f"{sid:08x}"] = {"spans": per[0][k], "tokens": per[1][k], "documents": per[2][k]}
    keys, at = _groups(block * len(ids) + which)
    tokens = np.bincount(at, weights=lengths).astype(np.int64).tolist()
    for key, n in zip(keys.tolist(), tokens):
        out["mix"].setdefault(str(key // len(ids)), {})[f"{int(ids[key % len(ids)]):08x}"] = n
    return out


def _groups(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)``, without its sort where every key is the same (one source, one
    block of the mixture: a version's usual case)."""
    if bool((keys == keys[0]).all()):
        return keys[:1], np.zeros(len(keys), dtype=np.intp)
    found, which = np.unique(keys, return_inverse=True)
    return found, which.reshape(-1)


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
    if len(joined) < 2 or _sorted(joined):
        return joined
    if _sorted(joined[["step", "row"]]):  # in (step, row) order, as a delta's entries are built: one stable sort
        return joined[np.argsort(joined["h"], kind="stable")]
    order = np.lexsort((joined["row"], joined["step"], joined["h"]))
    return joined[order]


def _sorted(entries: np.ndarray) -> bool:
    """Whether ``entries`` (of ``ENTRY``'s fields, or its ``step`` and ``row``) ascend by their fields in order."""
    names = entries.dtype.names or ()
    ahead = np.zeros(len(entries) - 1, dtype=bool)  # a pair already ordered by an earlier field
    for name in names:
        a, b = entries[name][:-1], entries[name][1:]
        if bool((~ahead & (b < a)).any()):
            return False
        ahead |= b > a
    return True


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
