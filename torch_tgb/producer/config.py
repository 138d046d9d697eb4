"""``ProducerConfig``: the tuning knobs of a :class:`~torch_tgb.producer.Producer`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ProducerConfig"]


@dataclass(frozen=True)
class ProducerConfig:
    """Tuning of a :class:`Producer`.

    ``max_pending``: entries written but not yet committed before ``append``
    blocks. ``lag_poll_s``: how often a producer paused by ``max_lag`` polls
    the watermarks. ``snapshot_every``: K, a snapshot every K versions.
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
    """

    max_pending: int = 256
    lag_poll_s: float = 0.5
    snapshot_every: int = 16
    crash_hook: Callable[[str], None] | None = None
    max_commit_delay_s: float = 300.0
    verify_after_s: float = 600.0
