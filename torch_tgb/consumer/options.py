"""ReaderOptions: how a TGBDataset reads (verify policy, read mode, caches, polling, error budget)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from torch_tgb.datapipes.batch_fetch import ErrorBudget
from torch_tgb.datapipes.poller import PollPolicy
from torch_tgb.format import READ_MODES, READ_WHOLE_BELOW, verify_policy

__all__ = ["DP_SPLITS", "ReaderOptions"]

#: how a reader with fewer DP ranks than the layout uses a TGB (see layout.plan_reads)
DP_SPLITS = ("merge", "spread")


@dataclass(frozen=True)
class ReaderOptions:
    """Tuning of the read pipeline; the defaults suit local disks and S3 alike.

    ``verify``: ``"first"`` checks each byte range's CRC32C the first time it
    is read and never again, ``"always"`` on every read, ``"never"`` not at
    all (``True``/``False`` mean always/never). ``read_mode``: ``"mmap"``
    maps local objects (zero-copy; a file truncated in place under a live
    mapping kills the process with SIGBUS, see docs/operations.md) or
    ``"copy"`` (reads into private buffers: a truncation is a CorruptObject).
    ``dtype``: cast every integer tensor to this dtype (e.g. ``torch.int64``
    for an embedding lookup); ``None`` delivers the stored dtype as views of
    the read bytes, with no copy. ``cache_dir``: a node-local directory for
    the hot tier of a remote namespace (:class:`torch_tgb.storage.HotTierStore`,
    shared by the reader processes of a node), bounded by ``cache_bytes``
    (``None``: 80% of the free space there).
    """

    footer_cache: int = 256
    #: upcoming steps whose footers are fetched in one batched call
    footer_lookahead: int = 32
    verify: bool | str = "first"
    #: read a local (mmap-able) namespace in the consumer's thread; prefetch then only serves remote stores
    inline_local: bool = True
    poll: PollPolicy = PollPolicy()
    #: stop before this TGB step (exclusive); None: at the seal
    stop_step: int | None = None
    read_mode: str = "mmap"
    dtype: torch.dtype | None = None
    #: soft read failures (missing object, timeout, 5xx) absorbed per batched remote read
    errors: ErrorBudget = ErrorBudget()
    #: open objects (mappings) kept per reader; a segment object counts once
    open_objects: int = 64
    #: local objects smaller than this are read whole at open (cheaper than a mapping); larger ones mapped
    small_object_bytes: int = READ_WHOLE_BELOW
    #: read consecutive steps of one mapped local object as a run (datapipes.local_runs) where the plan
    #: allows it; False: every step through the step-by-step pipeline (same tensors, same positions)
    runs: bool = True
    #: node-local hot tier of a remote namespace's TGB objects (None: no cache)
    cache_dir: str | None = None
    #: bound of the hot tier in bytes (None: 80% of the free space on cache_dir)
    cache_bytes: int | None = None

    def __post_init__(self) -> None:
        verify_policy(self.verify)  # raises ValueError on an unknown policy
        if self.read_mode not in READ_MODES:
            raise ValueError(f"read_mode must be one of {READ_MODES}, got {self.read_mode!r}")
        if self.dtype is not None and not isinstance(self.dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype or None, got {self.dtype!r}")
        if self.cache_bytes is not None and self.cache_bytes <= 0:
            raise ValueError(f"cache_bytes must be positive or None, got {self.cache_bytes}")
