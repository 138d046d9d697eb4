"""Samples in a local tar shard, counted from its headers only: the total of a WebDataset's progress bar.

A tar opened for random access (``tarfile`` mode ``"r:"``) reads each
member's 512-byte header and seeks over its data, so counting a shard costs
one small read per member, not a read of the shard. Samples are the runs of
members sharing a key, as ``webdataset``'s ``group_by_keys`` makes them (its
``base_plus_ext`` key). Compressed or remote shards are not counted (None):
they cannot be walked without reading them whole.
"""

from __future__ import annotations

import os
import re
import tarfile

__all__ = ["count_samples", "is_empty_tar"]

#: webdataset's key of a member name: everything up to the first dot of the last path part
_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")

#: magic bytes of the compressions a tar shard may come in
_COMPRESSED = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00")


def is_empty_tar(head: bytes) -> bool:
    """True for the first block of a valid tar with no members: the end-of-archive block (512 zero bytes)."""
    return len(head) == tarfile.BLOCKSIZE and not any(head)


def count_samples(path: str) -> int | None:
    """Samples in the local uncompressed tar ``path`` (an empty tar counts 1: its one bad record); None if unknown."""
    if "://" in path or not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(tarfile.BLOCKSIZE)
        if head.startswith(_COMPRESSED):
            return None
        if is_empty_tar(head):
            return 1
        count, key = 0, None
        with tarfile.open(path, "r:") as tar:
            for info in tar:
                match = _KEY.match(info.name) if info.isreg() and not info.name.startswith("__") else None
                if match is not None and match.group(1) != key:
                    count, key = count + 1, match.group(1)
                tar.members = []  # type: ignore[attr-defined]  # keep no headers: a shard may hold millions
        return count
    except (OSError, tarfile.TarError):
        return None  # the walk itself reports what is wrong with the shard
