"""Writing TGB objects: slices in (dp, cp) order, each aligned to 64 bytes, or to 4096 when large.

The writer lays the tensors of each slice back to back (each at a 64-byte
aligned offset so every dtype can be viewed in place), pads the slice to the
next 64-byte boundary (a page when the TGB's slices are large:
:func:`slice_alignment`), and ends the object with the version-3 footer and
trailer (``_footer.py``, ``_records.py``). An object is written with one ``put``: a reader never sees a
partial object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from torch_tgb.errors import LayoutError, SchemaMismatch
from torch_tgb.format._codecs import Codec, parse_codec
from torch_tgb.format._crc import crc32c_of
from torch_tgb.format._dtypes import DType, dtype_of_tensor
from torch_tgb.format._footer import SLICE_ALIGN, TENSOR_ALIGN, TRAILER_SIZE, encode_footer
from torch_tgb.format._footer_view import TensorInfo
from torch_tgb.format._grid import encode_grid
from torch_tgb.format._grid_ragged import encode_ragged_grid
from torch_tgb.format._records import record_width
from torch_tgb.format._spec import FORMAT_VERSION, FORMAT_VERSIONS, PAGE_ALIGN_FROM, V3_SLICE_ALIGN
from torch_tgb.layout import Layout, SliceData, offsets_key

if TYPE_CHECKING:
    from torch_tgb.storage import ObjectStore

__all__ = ["SliceData", "TGBObject", "check_codecs", "encode_batch", "encode_tgb", "write_tgb"]


@dataclass(frozen=True)
class TGBObject:
    """Where a written object's footer is: what a manifest entry records.

    ``footer_length`` excludes the fixed-size trailer, so
    ``footer_offset + footer_length + TRAILER_SIZE == size``. A TGB inside a
    segment object occupies ``[start, size)`` of it (offsets are absolute in
    the object); a one-TGB object has ``start == 0``.
    """

    key: str | None
    size: int
    footer_offset: int
    footer_length: int
    start: int = 0
    #: width of its version-3 slice records (0: an older footer, read whole)
    slice_record: int = 0


def _pad(n: int, align: int) -> int:
    return -n % align


def _tensor_bytes(t: torch.Tensor) -> memoryview:
    """The little-endian bytes of ``t`` as a view (one copy only if not contiguous/CPU)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    flat = t.contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().data  # the array's buffer: a memoryview, no copy


def _dtype(t: torch.Tensor) -> DType:
    dt = dtype_of_tensor(t.dtype)
    if dt is None:
        raise SchemaMismatch(f"dtype {t.dtype} is not supported by the TGB format")
    return dt


def _check_slices(slices: Sequence[SliceData]) -> tuple[int, int]:
    """The (dp, cp) grid of ``slices``; every slice has the same tensor names and dtypes."""
    if not slices:
        raise LayoutError("a TGB object needs at least one slice")
    dp = max(s.dp for s in slices) + 1
    cp = max(s.cp for s in slices) + 1
    if dp * cp != len(slices) or any(
        (s.dp, s.cp) != (i // cp, i % cp) for i, s in enumerate(slices)
    ):
        got = [(s.dp, s.cp) for s in slices]
        raise LayoutError(f"slices must be the full (dp, cp) grid in dp-major order, got {got}")
    first = slices[0].tensors
    if not first:
        raise SchemaMismatch("slice (dp=0, cp=0) has no tensors")
    for s in slices:
        for name, t in s.tensors.items():
            if not isinstance(name, str) or not name:
                raise SchemaMismatch(f"slice (dp={s.dp}, cp={s.cp}): tensor names must be non-empty strings")
            if not isinstance(t, torch.Tensor):
                raise SchemaMismatch(
                    f"slice (dp={s.dp}, cp={s.cp}), tensor {name!r}: expected a torch.Tensor, got {type(t).__name__}"
                )
            if dtype_of_tensor(t.dtype) is None:
                raise SchemaMismatch(f"slice (dp={s.dp}, cp={s.cp}), tensor {name!r}: dtype {t.dtype} not supported")
        if s.tensors.keys() != first.keys():
            raise SchemaMismatch(
                f"slice (dp={s.dp}, cp={s.cp}) has tensors {sorted(s.tensors)}, slice (0, 0) has {sorted(first)}"
            )
        for name, t in s.tensors.items():
            ref = first[name]
            if t.dtype != ref.dtype or t.dim() != ref.dim():
                raise SchemaMismatch(
                    f"slice (dp={s.dp}, cp={s.cp}), tensor {name!r}: {t.dtype} with {t.dim()} dims, "
                    f"slice (0, 0) has {ref.dtype} with {ref.dim()} dims"
                )
    return dp, cp


def encode_tgb(
    slices: Sequence[SliceData],
    *,
    layout: Layout | Mapping[str, Any] | None = None,
    schema: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
    base: int = 0,
    format_version: int = FORMAT_VERSION,
    key: str = "",
    codecs: Mapping[str, Codec | str] | None = None,
) -> tuple[list[memoryview | bytes], TGBObject]:
    """Encode ``slices`` into the buffers of one object (concatenate them to write).

    Returns the buffers and a :class:`TGBObject` with ``key=None``. ``layout``
    and ``schema`` are recorded in the footer so readers can check them; the
    default schema lists each tensor's dtype. ``base`` (a multiple of 4096)
    places the TGB at that offset of a segment object: the buffers are its
    bytes ``[base, size)`` and every recorded offset is absolute.
    ``format_version`` 1 or 2 writes what older readers read (slices on
    pages, the whole footer one table; 2 when there are ragged keys).
    ``key``: the object's key in its namespace, which version 3's slice
    records are bound to (a reader checks them against the key it reads).
    ``codecs``: tensor name -> codec (a :class:`~torch_tgb.format._codecs.Codec`
    or its spec, e.g. ``"zstd+delta:3x14x14"``): those tensors are stored
    compressed where that saves bytes (else as they are), and the object is
    marked version 4 (``CODEC_VERSION``), which older readers refuse.
    """
    legacy = format_version in (1, 2)
    if not legacy and format_version != FORMAT_VERSION:
        raise ValueError(f"format_version={format_version} must be one of {FORMAT_VERSIONS}")
    if base < 0 or base % (SLICE_ALIGN if legacy else V3_SLICE_ALIGN):
        raise ValueError(f"base={base} must be a non-negative multiple of {SLICE_ALIGN if legacy else V3_SLICE_ALIGN}")
    dp, cp = _check_slices(slices)
    layout_json: dict[str, Any] | None
    if layout is None:
        layout_json = None
    elif hasattr(layout, "to_json"):
        layout_json = layout.to_json()
    else:
        layout_json = dict(layout)
    if layout_json is not None and (layout_json.get("dp"), layout_json.get("cp", 1)) != (dp, cp):
        raise LayoutError(f"layout {layout_json} does not match the slices' grid dp={dp}, cp={cp}")
    ragged = slices[0].ragged
    if any(s.ragged != ragged for s in slices):
        raise SchemaMismatch(f"slices disagree on the ragged keys: {sorted({s.ragged for s in slices})}")
    offsets = {offsets_key(k) for k in ragged}
    if not all(k in slices[0].tensors and o in slices[0].tensors for k, o in zip(ragged, map(offsets_key, ragged))):
        raise SchemaMismatch(f"ragged keys {list(ragged)} need their values and offsets in every slice")
    if schema is None:
        schema = {n: {"dtype": _dtype(t).name, **({"ragged": True} if n in ragged else {})}
                  for n, t in slices[0].tensors.items() if n not in offsets}

    coded = check_codecs(slices[0], codecs or {}, legacy)
    buffers: list[memoryview | bytes] = []
    table = []
    pos = base
    align = SLICE_ALIGN if legacy else slice_alignment(slices)
    for s in slices:
        if pos % align:
            buffers.append(bytes(_pad(pos, align)))
            pos += _pad(pos, align)
        start = pos
        entries = []
        for name, t in s.tensors.items():
            if pos % TENSOR_ALIGN:
                buffers.append(bytes(_pad(pos, TENSOR_ALIGN)))
                pos += _pad(pos, TENSOR_ALIGN)
            data: memoryview | bytes = _tensor_bytes(t)
            dt = _dtype(t)
            codec = coded.get(name)
            if codec is not None:
                stored = codec.encode(np.frombuffer(data, dtype=dt.numpy_dtype).reshape(tuple(t.shape)))
                # stored as it is where the codec saves nothing (noise, tiny tensors): never more bytes at rest
                codec = codec if len(stored) < len(data) else None
                data = stored if codec is not None else data
            entries.append(TensorInfo(name, dt.name, tuple(t.shape), pos, len(data), crc32c_of(data), dt, codec))
            buffers.append(data)
            pos += len(data)
        table.append((s.dp, s.cp, start, pos, entries))
    if pos % TENSOR_ALIGN:
        buffers.append(bytes(_pad(pos, TENSOR_ALIGN)))
        pos += _pad(pos, TENSOR_ALIGN)
    footer = encode_footer(
        dp=dp, cp=cp, slices=table, layout=layout_json, schema=dict(schema), metadata=dict(metadata or {}),
        ragged=ragged, footer_offset=None if legacy else pos, key=key,
        codecs=sorted({c.spec for c in coded.values()}),
    )
    buffers.append(footer)
    size = pos + len(footer)
    width = 0 if legacy else record_width(len(table[0][4]), sum(len(t.shape) for t in table[0][4]))
    return buffers, TGBObject(None, size, pos, len(footer) - TRAILER_SIZE, base, width)




def encode_batch(
    batch: Mapping[str, torch.Tensor | Sequence[torch.Tensor]],
    layout: Layout,
    *,
    base: int = 0,
    key: str = "",
    metadata: Mapping[str, Any] | None = None,
    codecs: Mapping[str, Codec] | None = None,
) -> tuple[list[memoryview | bytes], TGBObject]:
    """``encode_tgb(layout.cut(batch), base=base, key=key, metadata=metadata)``, without a Python object per slice
    when every tensor is dense (``_grid.py``: producer CPU per TGB nearly independent of dp x cp), nor per (slice,
    tensor) when it has ragged keys and ``cp == 1`` (``_grid_ragged.py``: packed rows' ``seq_lens``, provenance). Unlike
    :func:`encode_tgb` the payload is copied: ``batch`` may change once this returns. With ``codecs`` (format
    version 4) the slices are cut and encoded by :func:`encode_tgb`, which copies what it compresses only."""
    if codecs:
        return encode_tgb(layout.cut(batch), base=base, key=key, metadata=metadata, codecs=codecs)
    dense = {k: t for k, t in batch.items() if isinstance(t, torch.Tensor)}
    grid = encode_grid(dense, layout, base=base, key=key, metadata=metadata, dtype_of=_dtype) \
        if len(dense) == len(batch) else None
    if grid is None:  # ragged keys: without a Python object per (slice, tensor) where cp is 1 (_grid_ragged.py)
        grid = encode_ragged_grid(batch, layout, base=base, key=key, metadata=metadata, dtype_of=_dtype)
    if grid is None:
        return encode_tgb(layout.cut(batch), base=base, key=key, metadata=metadata)
    buffers, width = grid
    footer = len(buffers[-1])
    size = base + sum(len(b) for b in buffers)
    return buffers, TGBObject(None, size, size - footer, footer - TRAILER_SIZE, base, width)


def check_codecs(first: SliceData, codecs: Mapping[str, Codec | str], legacy: bool = False) -> dict[str, Codec]:
    """``codecs`` (tensor name -> codec or spec) parsed and checked against the tensors of a slice.

    :class:`SchemaMismatch` naming the key: a spec that does not parse, a name the slice does not hold, a
    tensor the codec cannot store (a delta block of another size, a float under a delta filter).
    """
    out = {}
    for name, codec in codecs.items():
        try:
            parsed = codec if isinstance(codec, Codec) else parse_codec(codec)
        except ValueError as e:
            raise SchemaMismatch(f"tensor {name!r}: {e}") from e
        t = first.tensors.get(name)
        if t is None:
            raise SchemaMismatch(f"codec {parsed.spec!r} is given for {name!r}, which the batch does not hold "
                                 f"(it holds {sorted(first.tensors)})")
        if legacy:
            raise ValueError(f"tensor {name!r}: codecs need format version {FORMAT_VERSION} (format version 4 objects)")
        problem = "a tensor needs a dim 0 to be coded" if t.dim() < 1 else parsed.problem(
            np.dtype(_dtype(t).numpy_dtype), tuple(t.shape[1:]))
        if parsed.delta and (t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool):
            problem = f"the delta filter needs an integer dtype, not {t.dtype}"
        if problem is not None:
            raise SchemaMismatch(f"tensor {name!r} ({parsed.spec}): {problem}")
        out[name] = parsed
    return out


def slice_alignment(slices: Sequence[SliceData]) -> int:
    """Where each slice of a TGB starts: on a page when its largest slice is large (``PAGE_ALIGN_FROM``, where a
    page-aligned mapping or direct I/O pays and the padding is a small share), else on 64 bytes (the padding
    of a 4 KiB slice padded to a page doubled the bytes at rest)."""
    largest = max(sum(t.numel() * t.element_size() for t in s.tensors.values()) for s in slices)
    return SLICE_ALIGN if largest >= PAGE_ALIGN_FROM else V3_SLICE_ALIGN


def write_tgb(
    store: ObjectStore,
    key: str,
    slices: Sequence[SliceData],
    *,
    layout: Layout | Mapping[str, Any] | None = None,
    schema: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
    format_version: int = FORMAT_VERSION,
    codecs: Mapping[str, Codec | str] | None = None,
) -> TGBObject:
    """Encode ``slices`` and write them as object ``key`` with one ``put`` (``codecs``: see :func:`encode_tgb`)."""
    buffers, obj = encode_tgb(slices, layout=layout, schema=schema, metadata=metadata, format_version=format_version,
                              key=key, codecs=codecs)
    store.put(key, b"".join(buffers))
    return TGBObject(key, obj.size, obj.footer_offset, obj.footer_length, slice_record=obj.slice_record)
