"""ReaderOptions: everything a reader takes beyond its namespace and its mesh, as one frozen value.

``TGBDataset`` and ``tgb.DataLoader`` take ``options=ReaderOptions(...)`` and,
for convenience, the same fields as keyword arguments (``prefetch=8``,
``shuffle=True``, ...), typed through :class:`ReadSettings` and folded into the
options by :meth:`ReaderOptions.with_settings`: one spelling per option, one
place that checks it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import torch

from torch_tgb._options import with_fields
from torch_tgb.consumer._contract import normalise_expect
from torch_tgb.consumer._schedule import BatchSchedule
from torch_tgb.datapipes.read.batch_fetch import ErrorBudget
from torch_tgb.datapipes.read.poller import PollPolicy
from torch_tgb.datapipes.read.stall import StallPolicy
from torch_tgb.format import READ_MODES, READ_WHOLE_BELOW, verify_policy
from torch_tgb.layout import DP_SPLITS

__all__ = ["DP_SPLITS", "ReadSettings", "ReaderOptions", "StallPolicy"]


@dataclass(frozen=True)
class ReaderOptions:
    """How a reader reads; the defaults suit local disks and S3 alike.

    What is read: ``dp_split`` (with fewer dp ranks than the written layout,
    ``"merge"`` several slices per step or ``"spread"`` one per step),
    ``stop_step`` (end a stream before this TGB step), ``shuffle``/``block_size``/
    ``seed``/``epochs`` (read a sealed namespace in block-shuffled epochs;
    ``epochs=None`` repeats forever; ``shuffle=False, epochs=1`` reads the
    namespace as a stream, sealed or not), ``dtype`` (cast every integer tensor
    to it, e.g. ``torch.int64`` for an embedding lookup; ``None`` delivers the
    stored dtype as views of the read bytes).

    Waiting: ``timeout`` (seconds one wait for a new commit may last before
    ``DataTimeout``; ``None``: no limit, with a warning every
    ``poll.warn_every`` seconds), ``poll``.

    The read path: ``prefetch`` (steps read ahead on a background thread, remote
    stores), ``verify`` (``"first"`` checks each byte range's CRC32C the first
    time it is read, ``"always"`` on every read, ``"never"`` not at all;
    ``True``/``False`` mean always/never), ``read_mode`` (``"mmap"`` maps local
    objects, zero-copy; a file truncated in place under a live mapping kills the
    process with SIGBUS, see docs/operations.md; ``"copy"`` reads into private
    buffers: a truncation is a CorruptObject), ``check_consistency``
    (all-gather (step, keys) every step and raise ``ConsistencyError`` when ranks
    disagree), and the caches and budgets below.

    The hot tier: ``cache_dir``, a node-local directory caching a remote
    namespace's TGB byte ranges (:class:`torch_tgb.storage.HotTierStore`,
    shared by the reader processes of a node), bounded by ``cache_bytes``
    (``None``: 80% of the free space there). ``node_cache``: the reader processes of a node share their
    manifest reads (:class:`torch_tgb.storage.NodeSharedStore`): ``True`` in ``/dev/shm`` for a remote URL,
    a directory for any remote store, ``None``/``False`` off.

    The data contract: ``expect``, metadata keys and the values this trainer
    was built for (``{"tokenizer": ..., "vocab_size": ..., "seq_len": ...}``),
    compared with the namespace's metadata before the first step; any key
    missing or different raises ``SchemaMismatch`` naming each one
    (``consumer/_contract.py``). It rides in the reader's state.
    """

    prefetch: int = 4
    timeout: float | None = None
    dp_split: str = "merge"
    check_consistency: bool = False
    shuffle: bool = False
    block_size: int = 64
    seed: int = 0
    epochs: int | None = 1
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
    #: read consecutive steps of one mapped local object as a run (datapipes.read.local_runs) where the plan
    #: allows it; False: every step through the step-by-step pipeline (same tensors, same positions)
    runs: bool = True
    #: deliver only these keys, reading and checksumming only the stored tensors they need (None: all)
    keys: tuple[str, ...] | None = None
    #: what to derive from a token-efficient namespace's seq_lens (consumer/_keys.py): "labels" masks the
    #: one-token shift with -100 at sequence ends and padding; "position_ids", "document_ids", "cu_seqlens"
    derive: tuple[str, ...] = ("labels",)
    #: node-local hot tier of a remote namespace's TGB objects (None: no cache)
    cache_dir: str | None = None
    #: bound of the hot tier in bytes (None: 80% of the free space on cache_dir)
    cache_bytes: int | None = None
    #: share manifest reads between the reader processes of a node (True: default dir; a path; None/False: off)
    node_cache: str | bool | None = True
    #: the data contract: metadata keys and the values they must have in the namespace (None: no check)
    expect: Mapping[str, Any] | None = None
    #: a step that cannot be read (corrupt, its object missing): "raise" (stop), or "skip_step" -- skipped on
    #: every rank by agreement and marked in the namespace for restarts (consumer/_skips.py), up to max_skipped
    on_corrupt: str = "raise"
    max_skipped: int = 8
    # --- batch_schedule (issue 46; consumer/_schedule.py, consumer/_grouping.py) ---
    #: global batch size by training step, ``[(step, rows), ...]`` from step 0: each training step joins
    #: consecutive TGBs (rows per TGB dividing every size); None: one reader step per TGB step as written
    batch_schedule: BatchSchedule | tuple[tuple[int, int], ...] | None = None
    #: reuse what earlier readers in this process learnt of a local namespace (consumer/_open_cache.py): its
    #: dataset.json, its sealed head, committed entries, parsed footers, CRC-checked ranges; False: read all again
    #: (set it for a namespace that untrusted parties can write: the cache trusts committed files never to change)
    open_cache: bool = True
    #: when the training thread's wait for data is worth a warning (datapipes/read/stall.py): more than 10% of
    #: the step time over 50 steps, at most once a minute; StallPolicy(share=None) never warns
    stall: StallPolicy = StallPolicy()

    def __post_init__(self) -> None:
        verify_policy(self.verify)  # raises ValueError on an unknown policy
        if self.read_mode not in READ_MODES:
            raise ValueError(f"read_mode must be one of {READ_MODES}, got {self.read_mode!r}")
        if self.dtype is not None and not isinstance(self.dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype or None, got {self.dtype!r}")
        if self.dp_split not in DP_SPLITS:
            from torch_tgb.errors import LayoutError

            raise LayoutError(f"dp_split must be one of {DP_SPLITS}, got {self.dp_split!r}")
        if self.prefetch < 0 or (self.timeout is not None and self.timeout < 0):
            raise ValueError(f"prefetch and timeout must be >= 0, got prefetch={self.prefetch} timeout={self.timeout}")
        for name in ("keys", "derive"):
            value = getattr(self, name)
            if isinstance(value, str) or (value is not None and not all(isinstance(k, str) for k in value)):
                raise TypeError(f"ReaderOptions.{name} must be a tuple of key names, got {value!r}")
            if value is not None:
                object.__setattr__(self, name, tuple(value))
        if self.cache_bytes is not None and self.cache_bytes <= 0:
            raise ValueError(f"cache_bytes must be positive or None, got {self.cache_bytes}")
        if not isinstance(self.node_cache, (str, bool, type(None))):
            raise TypeError(f"node_cache must be True, False, None or a directory, got {self.node_cache!r}")
        object.__setattr__(self, "expect", normalise_expect(self.expect))  # TypeError for non-JSON values
        if self.on_corrupt not in ("raise", "skip_step"):
            raise ValueError(f"on_corrupt must be 'raise' or 'skip_step', got {self.on_corrupt!r}")
        if isinstance(self.max_skipped, bool) or not isinstance(self.max_skipped, int) or self.max_skipped < 0:
            raise ValueError(f"max_skipped must be an int >= 0, got {self.max_skipped!r}")
        if self.epochs_read and self.stop_step is not None:
            raise ValueError("stop_step bounds a stream read; an epochs read ends after `epochs` epochs")
        # --- batch_schedule ---
        if self.batch_schedule is not None:
            object.__setattr__(self, "batch_schedule", BatchSchedule.parse(self.batch_schedule))
            refused = [what for what, on in (("shuffle/epochs", self.epochs_read), ("dp_split='spread'",
                       self.dp_split == "spread"), ("on_corrupt='skip_step'", self.on_corrupt != "raise")) if on]
            if refused:
                raise ValueError(f"batch_schedule reads a stream in whole TGBs; it does not combine with "
                                 f"{', '.join(refused)}")

    @property
    def epochs_read(self) -> bool:
        """Whether this reads a sealed namespace in epochs (shuffled, or more or fewer than one) instead of a stream."""
        return self.shuffle or self.epochs != 1

    def with_settings(self, settings: Mapping[str, object]) -> ReaderOptions:
        """These options with ``settings`` (field name -> value) replacing fields; unknown names are a TypeError."""
        return with_fields(self, settings, "reader")


class ReadSettings(TypedDict, total=False):
    """The fields of :class:`ReaderOptions` as keyword arguments of ``TGBDataset`` and ``tgb.DataLoader``."""

    prefetch: int
    timeout: float | None
    dp_split: str
    check_consistency: bool
    shuffle: bool
    block_size: int
    seed: int
    epochs: int | None
    footer_cache: int
    footer_lookahead: int
    verify: bool | str
    inline_local: bool
    poll: PollPolicy
    stop_step: int | None
    read_mode: str
    dtype: torch.dtype | None
    errors: ErrorBudget
    open_objects: int
    small_object_bytes: int
    runs: bool
    keys: tuple[str, ...] | None
    derive: tuple[str, ...]
    cache_dir: str | None
    cache_bytes: int | None
    node_cache: str | bool | None
    expect: Mapping[str, Any] | None
    on_corrupt: str
    max_skipped: int
    batch_schedule: BatchSchedule | tuple[tuple[int, int], ...] | None
    open_cache: bool
    stall: StallPolicy
