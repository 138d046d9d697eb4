"""LLMBATCH (ZeroBatch v2) files: read and write (``offline.convert_llmbatch`` commits one as a namespace).

Byte layout (seed 002; little-endian)::

    0     8  bytes  magic "LLMBATCH"
    8     4  u32    version (1)
    12    4  u32    batch_size
    16    4  u32    seq_len
    20    8  u64    num_batches
    28    4  u32    dtype (0 = uint32)
    32    4  u32    seed
    36    4  u32    total_records
    40 4056  zeros  reserved
    4096 + i * padded_batch_bytes: batch i, batch_size x seq_len uint32 row-major,
         zero-padded to a multiple of 4096 bytes

``padded_batch_bytes = ceil(batch_size * seq_len * 4 / 4096) * 4096``.
"""

from __future__ import annotations

import mmap
import os
import struct
import tempfile
from dataclasses import dataclass

import numpy as np
import torch

from torch_tgb.errors import CorruptObject
from torch_tgb.format._dtypes import cast_tensor

__all__ = ["HEADER_SIZE", "MAGIC", "LLMBatchHeader", "LLMBatchReader", "write_llmbatch"]

MAGIC = b"LLMBATCH"
VERSION = 1
HEADER_SIZE = 4096
PAGE = 4096
_HEADER = struct.Struct("<8sIIIQIII")  # 40 bytes, then zeros to 4096
_DTYPES = {0: np.dtype("<u4")}
_MAX_U32 = (1 << 32) - 1


@dataclass(frozen=True)
class LLMBatchHeader:
    version: int
    batch_size: int
    seq_len: int
    num_batches: int
    dtype: int
    seed: int
    total_records: int

    @property
    def raw_batch_bytes(self) -> int:
        return self.batch_size * self.seq_len * _DTYPES[self.dtype].itemsize

    @property
    def padded_batch_bytes(self) -> int:
        return -(-self.raw_batch_bytes // PAGE) * PAGE

    @property
    def file_size(self) -> int:
        return HEADER_SIZE + self.num_batches * self.padded_batch_bytes

    def pack(self) -> bytes:
        head = _HEADER.pack(
            MAGIC, self.version, self.batch_size, self.seq_len,
            self.num_batches, self.dtype, self.seed, self.total_records,
        )
        return head + bytes(HEADER_SIZE - len(head))

    @classmethod
    def parse(cls, data: bytes, *, path: str, file_size: int) -> LLMBatchHeader:
        """Parse and validate a header against the file's actual size."""
        if len(data) < HEADER_SIZE or file_size < HEADER_SIZE:
            raise CorruptObject(f"LLMBATCH {path!r}: truncated, {file_size} bytes is smaller than the 4096-byte header")
        magic, version, batch_size, seq_len, num_batches, dtype, seed, total = _HEADER.unpack_from(data, 0)
        if magic != MAGIC:
            raise CorruptObject(f"LLMBATCH {path!r}: bad magic {magic!r}, expected {MAGIC!r}")
        if version != VERSION:
            raise CorruptObject(f"LLMBATCH {path!r}: unknown version {version} (this reader knows {VERSION})")
        if dtype not in _DTYPES:
            raise CorruptObject(f"LLMBATCH {path!r}: unknown token dtype code {dtype}")
        if batch_size < 1 or seq_len < 1:
            raise CorruptObject(f"LLMBATCH {path!r}: {batch_size=} and {seq_len=} must be >= 1")
        header = cls(version, batch_size, seq_len, num_batches, dtype, seed, total)
        # never trust num_batches beyond what the file holds
        if num_batches > (file_size - HEADER_SIZE) // header.padded_batch_bytes:
            raise CorruptObject(
                f"LLMBATCH {path!r}: header says {num_batches} batches of {header.padded_batch_bytes} bytes "
                f"({header.file_size} bytes) but the file has {file_size} bytes (truncated or corrupt header)"
            )
        return header


class LLMBatchReader:
    """Zero-copy reader: ``read_batch(i)`` is a ``[batch_size, seq_len]`` view of the mapped file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(HEADER_SIZE)
            self.header = LLMBatchHeader.parse(head, path=self.path, file_size=size)
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        self._dtype = _DTYPES[self.header.dtype]
        self._count = self.header.batch_size * self.header.seq_len

    @property
    def num_batches(self) -> int:
        return self.header.num_batches

    @property
    def batch_size(self) -> int:
        return self.header.batch_size

    @property
    def seq_len(self) -> int:
        return self.header.seq_len

    def __len__(self) -> int:
        return self.header.num_batches

    def read_batch(self, index: int) -> np.ndarray:
        """Batch ``index`` as a uint32 numpy view (no copy)."""
        if not 0 <= index < self.header.num_batches:
            raise IndexError(f"LLMBATCH {self.path!r}: batch {index} out of range [0, {self.header.num_batches})")
        offset = HEADER_SIZE + index * self.header.padded_batch_bytes
        arr = np.frombuffer(self._mm, dtype=self._dtype, count=self._count, offset=offset)
        return arr.reshape(self.header.batch_size, self.header.seq_len)

    def read_batch_torch(self, index: int, dtype: torch.dtype | None = torch.int64) -> torch.Tensor:
        """Batch ``index`` as a tensor; ``dtype=None`` keeps uint32 (no copy), int64 converts."""
        t = torch.from_numpy(self.read_batch(index))
        return t if dtype is None or dtype == t.dtype else cast_tensor(f"{self.path} batch {index}", t, dtype)

    def close(self) -> None:
        """Drop the mapping (tensors already handed out keep it alive)."""
        self._mm = None  # type: ignore[assignment]

    def __enter__(self) -> LLMBatchReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_llmbatch(
    path: str | os.PathLike[str],
    tokens: np.ndarray,
    *,
    batch_size: int,
    seed: int = 0,
    shuffle: bool = True,
) -> LLMBatchHeader:
    """Write records ``tokens[N, seq_len]`` as an LLMBATCH file (atomically: temp file + rename).

    As in seed 002: records are permuted with ``seed`` (unless ``shuffle=False``),
    grouped into batches of ``batch_size``, and a remainder of fewer than
    ``batch_size`` records is dropped.
    """
    arr = np.asarray(tokens)
    if arr.ndim != 2:
        raise ValueError(f"tokens must be [num_records, seq_len], got shape {arr.shape}")
    if arr.size and (arr.min() < 0 or arr.max() > _MAX_U32):
        raise ValueError("token ids must fit in uint32")
    if batch_size < 1 or not 0 <= seed <= _MAX_U32 or len(arr) > _MAX_U32:
        raise ValueError(f"invalid {batch_size=} or {seed=} (u32) or record count {len(arr)} (u32)")
    records, seq_len = arr.shape
    if seq_len < 1:
        raise ValueError("seq_len must be >= 1")
    order = np.random.default_rng(seed).permutation(records) if shuffle else np.arange(records)
    header = LLMBatchHeader(VERSION, batch_size, seq_len, records // batch_size, 0, seed, records)
    pad = bytes(header.padded_batch_bytes - header.raw_batch_bytes)
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".llmbatch-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(header.pack())
            for b in range(header.num_batches):
                rows = order[b * batch_size : (b + 1) * batch_size]
                f.write(np.ascontiguousarray(arr[rows], dtype="<u4").tobytes())
                f.write(pad)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return header
