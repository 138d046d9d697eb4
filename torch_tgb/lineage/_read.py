"""Reading a committed TGB's provenance rows: its footer, then only the provenance bytes of each dp slice.

A TGB's rows' provenance is the ragged key ``provenance`` of every dp slice
(cp slices repeat it): one footer read (the entry gives its place) and one
batched range read of each dp slice's two provenance tensors, CRC-checked.
"""

from __future__ import annotations

import numpy as np

from torch_tgb.errors import CorruptObject
from torch_tgb.format import Footer, decode_slice, read_footer, writable
from torch_tgb.layout import offsets_key
from torch_tgb.manifest import TGBEntry
from torch_tgb.storage import ObjectStore, RangeRequest
from torch_tgb.transforms.provenance import PROVENANCE_KEY

__all__ = ["PROVENANCE_NAMES", "footer_of", "has_provenance", "tgb_provenance"]

PROVENANCE_NAMES = frozenset({PROVENANCE_KEY, offsets_key(PROVENANCE_KEY)})


def footer_of(store: ObjectStore, entry: TGBEntry) -> Footer:
    return read_footer(store, entry.key, size=entry.size, footer_offset=entry.footer_offset,
                       footer_length=entry.footer_length)


def has_provenance(footer: Footer) -> bool:
    return PROVENANCE_KEY in footer.names


def tgb_provenance(store: ObjectStore, entry: TGBEntry, *, footer: Footer | None = None,
                   dps: list[int] | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """``(values [spans, 3], row offsets [rows + 1])`` of the TGB's rows (of dp slices ``dps``, default all),
    in global row order; None if the TGB carries no provenance."""
    footer = footer if footer is not None else footer_of(store, entry)
    if not has_provenance(footer):
        return None
    parts = list(range(footer.dp)) if dps is None else dps
    infos = [footer.slice(dp, 0, PROVENANCE_NAMES) for dp in parts]
    datas = store.get_ranges([RangeRequest(entry.key, i.start, i.end) for i in infos])
    values, counts = [], []
    for info, data in zip(infos, datas):
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise CorruptObject(f"object {entry.key!r}: slice (dp={info.dp}) could not be read")
        tensors = decode_slice(writable(data), info, base_offset=info.start, key=entry.key)
        values.append(tensors[PROVENANCE_KEY].numpy().reshape(-1, 3))
        counts.append(np.diff(tensors[offsets_key(PROVENANCE_KEY)].numpy()))
    joined = np.concatenate(values).astype(np.int64) if values else np.zeros((0, 3), np.int64)
    lengths = np.concatenate(counts) if counts else np.zeros(0, np.int64)
    return joined, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
