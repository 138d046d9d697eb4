"""``ProducerConfig``: the tuning knobs of a :class:`~torch_tgb.producer.Producer`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["BULK_SEGMENT_TGBS", "RUN_SEGMENT_BYTES", "ProducerConfig", "run_config"]


@dataclass(frozen=True)
class ProducerConfig:
    """Tuning of a :class:`Producer`.

    ``max_pending``: entries written but not yet committed before ``append``
    blocks. ``lag_poll_s``: how soon a producer paused by ``max_lag`` first
    looks at the watermarks again, doubling up to ``lag_poll_max_s`` while
    the pause lasts (it lasts until the next checkpoint: a store is not asked
    twice a second for minutes); ``lag_warn_s``: how often it logs a warning while paused
    (``None``: never), naming the safe boundary and the live checkpoints
    holding it. ``snapshot_every``: K, a snapshot every K versions.
    ``crash_hook``: called with a point name (``after_object_write``,
    ``before_commit``, ``after_version_put``, ``after_commit``); tests use it
    to kill the process at exact points.

    The Reclaimer never deletes an uncommitted object this incarnation may
    still commit (docs/protocol.md, *Reclaiming uncommitted objects*), so no
    write-to-commit delay can lose data. ``max_commit_delay_s`` bounds how long
    an entry waits anyway (the committer attempts at once, whatever the
    policy's gap, when the oldest pending entry has waited that long); and, as
    defence in depth, before committing an entry older than ``verify_after_s``
    the committer checks that its object still exists, failing loud
    (``ObjectNotFound``) instead of committing a dangling key.

    ``segment_tgbs`` / ``segment_bytes``: how many consecutive TGBs (at most)
    share one immutable *segment* object, closed early once it reaches
    ``segment_bytes``. The default (1) writes one object per TGB at once, as
    a streaming producer wants; bulk writers (``write_dataset``, ``tgb
    produce``/``convert``) use :meth:`ProducerConfig.bulk` (about 64 MiB per
    object). TGBs of an open segment become visible only after the segment
    is written and their entries committed (``flush``/``close`` write it).

    ``write_behind``: a full segment of several TGBs is published by a
    background thread while the next one fills, so packing and the store's
    write overlap (at most one publish in flight: up to two segments open);
    False publishes it inside ``append``. Each TGB's bytes go to the
    segment's ``ObjectStore.open_writer`` as it is appended: a local
    directory takes them straight into the segment's temporary file (the
    publish is an fsync and a rename), other stores hold the open segment
    in memory and upload it on publish.
    """

    max_pending: int = 256
    lag_poll_s: float = 0.5
    lag_poll_max_s: float = 10.0
    lag_warn_s: float | None = 60.0
    snapshot_every: int = 16
    crash_hook: Callable[[str], None] | None = None
    max_commit_delay_s: float = 300.0
    verify_after_s: float = 600.0
    segment_tgbs: int = 1
    segment_bytes: int = 256 << 20
    write_behind: bool = True

    def __post_init__(self) -> None:
        if self.segment_tgbs < 1 or self.segment_bytes < 1:
            raise ValueError(f"segment_tgbs and segment_bytes must be >= 1, got {self.segment_tgbs}, {self.segment_bytes}")

    @classmethod
    def bulk(cls, segment_bytes: int = 64 << 20) -> ProducerConfig:
        """What bulk writers use: segments closed at ``segment_bytes`` (~64 MiB), whatever the TGB count."""
        return cls(segment_tgbs=BULK_SEGMENT_TGBS, segment_bytes=segment_bytes)


#: a bulk writer's segment holds at most this many TGBs (its byte bound closes it first)
BULK_SEGMENT_TGBS = 1 << 20


#: segment bytes of a pipeline run's default config (``tgb.produce`` without ``rate``, ``tgb produce``)
RUN_SEGMENT_BYTES = 64 << 20


def run_config(config: ProducerConfig | None, *, rate: float | None) -> ProducerConfig:
    """The config of a ``tgb.produce`` run: ``config`` if given, else what its pace calls for.

    A run as fast as its pipeline goes writes ~64 MiB segments (:meth:`ProducerConfig.bulk`):
    one object per TGB paid an object's create, ``fsync`` and rename per batch, about 2-3x
    the run's time at the README's shape (64 x 2048 tokens, ``benchmarks/ingest.py``);
    a segment's TGBs become visible together once it is written (at most ~64 MiB later, or at
    the run's end). A paced stream (``rate=``) writes one object per batch, visible at once,
    as the ``tgb produce`` command does with ``--rate``.
    """
    if config is not None:
        return config
    return ProducerConfig() if rate is not None else ProducerConfig.bulk(RUN_SEGMENT_BYTES)
