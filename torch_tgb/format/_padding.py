"""The padding of a TGB object: bytes no tensor and no footer covers, which must be zero.

Tensor bytes are covered by their CRC32C and the footer by its own; the gaps
(alignment padding inside and between slices, and before the footer) carry
no data and are covered by no checksum. ``tgb verify`` checks them as zeros:
cheaper than a CRC over them (no format change, no cost on the read path,
where padding is never read) and just as sound, since padding has exactly
one valid value. A non-zero byte there means damage (bit rot, an overwrite
in place) or data hidden in the object.
"""

from __future__ import annotations

import numpy as np

from torch_tgb.errors import CorruptObject
from torch_tgb.format._footer_view import Footer

__all__ = ["check_padding", "padding_ranges"]


def padding_ranges(footer: Footer, *, start: int = 0) -> list[tuple[int, int]]:
    """The byte ranges ``[start, end)`` of ``[start, footer_offset)`` that no tensor covers, in order.

    ``start``: where the TGB begins in its object (a segment object holds several).
    """
    covered = sorted((t.offset, t.offset + t.length) for s in footer.slices() for t in s.tensors)
    gaps = []
    at = start
    for start, end in covered:
        if start > at:
            gaps.append((at, start))
        at = max(at, end)
    if footer.footer_offset > at:
        gaps.append((at, footer.footer_offset))
    return gaps


def check_padding(data: bytes | memoryview, footer: Footer, *, key: str, base: int = 0) -> int:
    """Raise :class:`CorruptObject` naming ``key`` and the range if a padding byte is not zero; returns bytes checked.

    ``data`` holds the object from offset ``base`` (the TGB's ``start`` in a segment object).
    """
    view = np.frombuffer(data, dtype=np.uint8)
    checked = 0
    for start, end in padding_ranges(footer, start=base):
        nonzero = np.flatnonzero(view[start - base : end - base])
        if nonzero.size:
            first = start + int(nonzero[0])
            raise CorruptObject(
                f"object {key!r}: padding byte at offset {first} (padding [{start}, {end})) is "
                f"{int(view[first - base]):#04x}, not zero"
            )
        checked += end - start
    return checked
