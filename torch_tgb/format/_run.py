"""Footers of a run of TGBs in one segment object, parsed as one table.

Consecutive TGBs of one producer usually differ only where they lie: their
footers are byte-for-byte the same except the slice and tensor offsets
(shifted by where the TGB starts) and the tensor CRCs. :func:`parse_footer_run`
parses the first footer of a run in full (:func:`parse_footer`, every check)
and accepts each following footer as a *shifted copy* of it after checking,
vectorised over the whole run, that

- its trailer is the first's except the CRC field, and its footer CRC32C
  (computed here) is that field: the footer bytes are intact;
- its header, meta JSON and padding are the first's byte for byte;
- every table word is the first's, except the slice ``start``/``end`` and
  tensor ``offset`` words, which are the first's plus the shift ``d``, and
  the tensor CRC fields, which are free;
- ``d`` (its footer offset minus the first's) is positive and a multiple of
  ``SLICE_ALIGN`` (version 3: ``V3_SLICE_ALIGN``), and a version-3 record's
  own CRC is free too (the footer CRC covers it).

Every bound :func:`parse_footer` checks is invariant under such a shift (the
data region ends at the footer, which moves by ``d`` too), so an accepted
footer is exactly what :func:`parse_footer` would return for it, shifted: the
run parse never accepts bytes the full parse refuses. The run stops at the
first footer that is not such a copy (another shape, another meta, a corrupt
byte); the caller parses that one in full as the start of the next run, so a
corrupt footer fails with :func:`parse_footer`'s own message.

One run costs one full parse, a few vectorised comparisons and one CRC call
per footer: about 1 us per TGB instead of ~12 (``benchmarks/consumer_read.py``).
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence

import google_crc32c
import numpy as np

from torch_tgb.format._contract import Contract
from torch_tgb.format._decode import ByteSource
from torch_tgb.format._footer import parse_footer
from torch_tgb.format._footer_view import Footer, SliceInfo, TensorInfo
from torch_tgb.format._spec import _DIM, _SLICE_ROW, _TENSOR_ROW, SLICE_ALIGN, V3_SLICE_ALIGN

__all__ = ["FooterRun", "parse_footer_run"]

# 8-byte words of one table row: which move with the TGB (offsets) and which hold a CRC
_SLICE_WORDS = _SLICE_ROW.itemsize // 8  # dp|cp, start, end, first|count
_TENSOR_WORDS = _TENSOR_ROW.itemsize // 8  # name|dtype|ndim|pad, dims|crc, offset, length
_SLICE_SHIFTED = (1, 2)
_TENSOR_SHIFTED = (2,)
_TENSOR_CRC_WORD = 1  # the CRC is its upper 32 bits
_LOW32 = np.uint64(0xFFFFFFFF)


class FooterRun:
    """The footers of ``len(self)`` consecutive TGBs of object ``key``: the first's, shifted.

    ``shifts[i]`` is TGB ``i``'s footer offset minus TGB 0's; ``crcs[i]`` its
    tensor CRC32Cs in tensor-table order.
    """

    def __init__(self, first: Footer, shifts: list[int], crcs: np.ndarray) -> None:
        self.first = first
        self.key = first.key
        self.shifts = shifts
        self.crcs = crcs

    def __len__(self) -> int:
        return len(self.shifts)

    def footer(self, i: int) -> Footer:
        """TGB ``i``'s footer as a :class:`Footer` (what :func:`parse_footer` returns for it)."""
        f, d = self.first, self.shifts[i]
        if d == 0:
            return f
        slices = f._slices.copy()
        slices["start"] += np.uint64(d)
        slices["end"] += np.uint64(d)
        tensors = f._tensors.copy()
        tensors["offset"] += np.uint64(d)
        tensors["crc"] = self.crcs[i]
        return Footer(
            key=f.key, size=f.size + d, footer_offset=f.footer_offset + d, footer_length=f.footer_length,
            dp=f.dp, cp=f.cp, names=f.names, layout=f.layout, schema=f.schema, metadata=f.metadata,
            slices=slices, tensors=tensors, dims=f._dims, ragged=f.ragged, contract=f.contract, version=f.version,
            codecs=f.codecs,
        )

    def slice_run(
        self, dp: int, cp: int = 0, names: frozenset[str] | None = None
    ) -> tuple[SliceInfo, list[tuple[int, ...]]]:
        """Slice ``(dp, cp)`` of TGB 0 (``names``: only those tensors), and per TGB the CRC32Cs of its tensors."""
        whole = self.first.slice(dp, cp)  # validates the slice (shape/length agreement)
        info = whole if names is None else self.first.slice(dp, cp, names)
        row = self.first._slices[dp * self.first.cp + cp]
        first = int(row["first"])
        columns = [first + i for i, t in enumerate(whole.tensors) if names is None or t.name in names]
        return info, [tuple(r) for r in self.crcs[:, columns].tolist()]

    def slice(self, i: int, dp: int, cp: int = 0) -> SliceInfo:
        """Slice ``(dp, cp)`` of TGB ``i`` (for tools and tests; the hot path uses :meth:`slice_run`)."""
        info, crcs = self.slice_run(dp, cp)
        d = self.shifts[i]
        tensors = tuple(
            TensorInfo(t.name, t.dtype, t.shape, t.offset + d, t.length, crc, t._dt, t.codec)
            for t, crc in zip(info.tensors, crcs[i])
        )
        return SliceInfo(info.dp, info.cp, info.start + d, info.end + d, tensors, info.ragged)


def parse_footer_run(
    buffer: ByteSource, tgbs: Sequence[tuple[int, int]], *, key: str, contract: Contract | None = None
) -> FooterRun:
    """The footers of the longest leading run of ``tgbs`` that are shifted copies of the first.

    ``buffer`` holds the whole object (a mapping); ``tgbs`` are ``(footer_offset,
    size)`` of consecutive TGBs of it, as their manifest entries say. The first
    is parsed in full (and raises :class:`CorruptObject` as :func:`parse_footer`
    does, judged by ``contract`` too); the run is at least that one. The others
    are byte-exact shifted copies of it: the same header, meta and shapes,
    hence the same verdict.
    """
    view = memoryview(buffer)
    fo0, size0 = tgbs[0]
    if size0 > len(view) or fo0 < 0 or fo0 > size0:
        # parse_footer words the truncation; a short view keeps the message
        first = parse_footer(view[max(0, min(fo0, len(view))) : min(size0, len(view))], key=key, size=size0,
                             footer_offset=fo0, contract=contract)
    else:
        first = parse_footer(view[fo0:size0], key=key, size=size0, footer_offset=fo0, contract=contract)
    span = size0 - fo0
    crc0 = first._tensors["crc"].astype(np.uint32)[None, :]
    if len(tgbs) == 1:
        return FooterRun(first, [0], crc0)
    # candidates: the same footer length, a positive shift that keeps slices aligned, inside the buffer
    table = np.asarray(tgbs[1:], dtype=np.int64)
    d = table[:, 0] - fo0
    align = V3_SLICE_ALIGN if first.version >= 3 else SLICE_ALIGN
    fits = (d > 0) & (d % align == 0) & (table[:, 1] - table[:, 0] == span) & (table[:, 1] <= len(view))
    count = int(np.argmin(fits)) if not fits.all() else len(fits)
    if count == 0:
        return FooterRun(first, [0], crc0)
    shifts = [0, *d[:count].tolist()]
    accepted = _shifted_copies(buffer, first, fo0, span, shifts)
    return FooterRun(first, shifts[: 1 + len(accepted)], np.concatenate([crc0, accepted]))


def _table_words(first: Footer, body: int) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray]:
    """Where the footer's table words lie and how a shifted copy's may differ: ``(start, end, shifted, keep,
    crc_words)`` in bytes of the footer and in 8-byte words of ``[start, end)``.

    ``shifted``: 1 where a word moves with the TGB (slice start/end, tensor
    offset); ``keep``: the bits that must match (a tensor CRC and a version-3
    record CRC are free); ``crc_words``: per tensor row, in table order, the
    word whose upper half is its CRC. Versions 1-2: the tables end the body;
    version 3: the records follow the 32-byte header (``_records.py``).
    """
    nslice, ntensor, ndim = len(first._slices), len(first._tensors), len(first._dims)
    if first.version >= 3:
        per_t, per_d = ntensor // nslice, ndim // nslice
        row = _SLICE_WORDS + per_t * _TENSOR_WORDS + per_d + 1  # + the tail word: crc | meta_crc
        start, end = 32, 32 + nslice * row * 8
        shifted = np.zeros(nslice * row, dtype=np.uint64)
        keep = np.full(nslice * row, np.uint64(0xFFFFFFFFFFFFFFFF), dtype=np.uint64)
        bases = np.arange(nslice) * row
        for w in _SLICE_SHIFTED:
            shifted[bases + w] = 1
        tensor_bases = (bases[:, None] + _SLICE_WORDS + np.arange(per_t)[None, :] * _TENSOR_WORDS).reshape(-1)
        for w in _TENSOR_SHIFTED:
            shifted[tensor_bases + w] = 1
        keep[tensor_bases + _TENSOR_CRC_WORD] = _LOW32
        keep[bases + row - 1] = ~_LOW32  # the record CRC (low half) binds the record to its place: free
        return start, end, shifted, keep, tensor_bases + _TENSOR_CRC_WORD
    end = body
    start = end - (nslice * _SLICE_ROW.itemsize + ntensor * _TENSOR_ROW.itemsize + ndim * _DIM.itemsize)
    words = (end - start) // 8
    shifted = np.zeros(words, dtype=np.uint64)
    keep = np.full(words, np.uint64(0xFFFFFFFFFFFFFFFF), dtype=np.uint64)
    for r in range(nslice):
        for w in _SLICE_SHIFTED:
            shifted[r * _SLICE_WORDS + w] = 1
    base = nslice * _SLICE_WORDS
    tensor_bases = base + np.arange(ntensor) * _TENSOR_WORDS
    for w in _TENSOR_SHIFTED:
        shifted[tensor_bases + w] = 1
    keep[tensor_bases + _TENSOR_CRC_WORD] = _LOW32
    return start, end, shifted, keep, tensor_bases + _TENSOR_CRC_WORD


def _shifted_copies(buffer: ByteSource, first: Footer, fo0: int, span: int, shifts: list[int]) -> np.ndarray:
    """Tensor CRC rows of TGBs 1.. that are shifted copies of ``first``, stopping at the first that is not."""
    raw = np.frombuffer(buffer, dtype=np.uint8)
    body = first.footer_length
    d = np.asarray(shifts, dtype=np.int64)
    starts = fo0 + d
    stride = shifts[1]
    if (np.diff(d) == stride).all():
        # evenly spaced (uniform TGBs): a strided view, no copy
        rows = np.lib.stride_tricks.as_strided(raw[fo0:], shape=(len(shifts), span), strides=(stride, 1),
                                               writeable=False)
    else:
        rows = raw[starts[:, None] + np.arange(span)]
    ref = rows[0]
    tables_at, tables_end, shifted, keep, crc_words = _table_words(first, body)
    ok = (rows[:, :tables_at] == ref[:tables_at]).all(axis=1)  # the header (and, versions 1-2, the meta)
    ok &= (rows[:, tables_end:body] == ref[tables_end:body]).all(axis=1)  # version 3: the meta
    trailer = rows[:, body:span]  # footer_length u64 | footer crc u32 | format_version u32 | magic 8 B
    ok &= (trailer[:, :8] == ref[body : body + 8]).all(axis=1)
    ok &= (trailer[:, 12:] == ref[body + 12 : span]).all(axis=1)
    # table words: the first's, plus d where an offset lies, with the CRCs free
    words = np.ascontiguousarray(rows[:, tables_at:tables_end]).view("<u8")
    expected = words[0] + d.astype(np.uint64)[:, None] * shifted
    ok &= ((words & keep) == (expected & keep)).all(axis=1)
    crc_fields = trailer[:, 8:12].copy().view("<u4")[:, 0].tolist()
    # a mapping's slice is bytes (what google_crc32c takes); a bytearray's is copied to bytes
    as_bytes = (lambda b: b) if isinstance(buffer, (bytes, mmap.mmap)) else bytes
    count = 1
    for good, at, crc in zip(ok[1:].tolist(), starts[1:].tolist(), crc_fields[1:]):
        # the footer bytes themselves: one CRC call per TGB
        if not good or google_crc32c.value(as_bytes(buffer[at : at + body])) != crc:
            break
        count += 1
    crcs: np.ndarray = (words[1:count][:, crc_words] >> np.uint64(32)).astype(np.uint32)
    return crcs
