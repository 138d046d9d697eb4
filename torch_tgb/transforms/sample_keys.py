"""Sample keys carried to the trainer: each row's samples' ``__key__`` as one ragged uint8 field.

A row of packed samples holds several samples; ``PackSamples(sample_keys=True)``
stores their keys in the ragged key ``sample_keys``: per row, each key's
UTF-8 bytes followed by a NUL byte, in the row's sample order (the order of
its documents, ``seq_lens`` / ``document_ids``). NUL cannot occur in a tar
member name, so it separates keys unambiguously; a sample without a key
stores just the NUL. A reader gets ``batch["sample_keys"]`` (uint8, this
rank's rows joined) and ``batch["sample_keys_offsets"]`` (int64 ``[rows + 1]``),
and :func:`decode_sample_keys` turns them into one list of keys per row.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from torch_tgb.errors import TGBError

__all__ = ["SAMPLE_KEYS", "decode_sample_keys", "encode_sample_keys"]

#: the name of the ragged field (and of the TGB key) that carries the sample keys
SAMPLE_KEYS = "sample_keys"

_SEPARATOR = b"\0"


def encode_sample_keys(keys: Sequence[str | None]) -> torch.Tensor:
    """One row's keys as uint8 ``[n]``: each key's UTF-8 bytes and a NUL (``None`` stores only the NUL).

    A key holding NUL is refused (a TGBError naming it): it would read back as two keys.
    """
    parts = []
    for key in keys:
        data = b"" if key is None else str(key).encode("utf-8")
        if _SEPARATOR in data:
            raise TGBError(f"sample key {key!r} contains a NUL byte; it cannot be carried in {SAMPLE_KEYS!r}")
        parts.append(data + _SEPARATOR)
    joined = b"".join(parts)
    return torch.frombuffer(bytearray(joined), dtype=torch.uint8) if joined else torch.zeros(0, dtype=torch.uint8)


def decode_sample_keys(values: torch.Tensor, offsets: torch.Tensor | None = None) -> list[list[str]]:
    """The keys of each row from ``batch["sample_keys"]`` and ``batch["sample_keys_offsets"]``.

    Without ``offsets`` the values are one row's. A row whose bytes do not end
    with a NUL is refused: the field was not written by :func:`encode_sample_keys`.
    """
    data = bytes(values.to(torch.uint8).contiguous().numpy().tobytes())
    bounds = [0, len(data)] if offsets is None else [int(o) for o in offsets.tolist()]
    rows = []
    for r, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:])):
        chunk = data[start:stop]
        if chunk and not chunk.endswith(_SEPARATOR):
            raise TGBError(f"{SAMPLE_KEYS} of row {r} does not end with a NUL byte: not sample keys")
        rows.append([k.decode("utf-8", errors="replace") for k in chunk.split(_SEPARATOR)[:-1]])
    return rows
