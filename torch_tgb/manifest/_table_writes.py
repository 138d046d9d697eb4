"""What a format-2 commit writes before its version: its pipeline state (when large) and its bucket.

A :class:`TableWriter` belongs to one committer. Everything it writes is
written before the version that names it (the order of writes of
docs/protocol.md) under names that no other attempt uses: a bucket carries
the slot and the attempt's token, a state object the slot and its digest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from torch_tgb.manifest._json import dump_json
from torch_tgb.manifest._producers import encode_bucket
from torch_tgb.manifest._table import BUCKETS, TableRef, bucket_key, bucket_of, bucket_ref, state_key, state_ref
from torch_tgb.manifest.jobs import JobSpec
from torch_tgb.manifest.records import INLINE_STATE_BYTES, ProducerState
from torch_tgb.storage import ObjectStore

__all__ = ["TableWriter"]


class TableWriter:
    """Writes one producer's pipeline states and buckets of the producers' table."""

    def __init__(self, store: ObjectStore, producer_id: str) -> None:
        self.store = store
        self.producer_id = producer_id
        self._written: tuple[str, str] | None = None  # (digest, ref) of the state object written last

    def pipeline_state(
        self, pipeline: ProducerState | Mapping[str, Any] | None, number: int, committed: ProducerState | None,
    ) -> tuple[Mapping[str, Any] | None, str | None]:
        """``(inline state, state_ref)`` to commit in slot ``number``; a large state is written as its own object.

        ``pipeline``: the state to commit (a mapping), or a committed state whose
        pipeline state is kept as it is. ``committed``: this producer's state
        in the view (its object is reused when the same state was committed).
        """
        if isinstance(pipeline, ProducerState):
            return pipeline.state, pipeline.state_ref
        if pipeline is None:
            return None, None
        data = dump_json(pipeline)
        if len(data) <= INLINE_STATE_BYTES:
            return pipeline, None
        digest = hashlib.sha256(data).hexdigest()
        if (self._written is not None and self._written[0] == digest and committed is not None
                and committed.state_ref == self._written[1]):
            return None, self._written[1]  # the state we committed last: its object is named by our bucket
        # Written for this slot, even when an earlier attempt wrote the same bytes for an older one: the
        # Reclaimer deletes a state object whose slot is below the GC boundary unless the table names it.
        ref = state_ref(number, digest)
        self.store.put(state_key(self.producer_id, ref), data)
        self._written = (digest, ref)
        return None, ref

    def bucket(self, index: int, buckets: int, producers: Mapping[str, ProducerState], number: int,
               token: str) -> str:
        """Write bucket ``index`` of ``buckets`` holding ``producers`` for slot ``number``; its reference."""
        ref = bucket_ref(number, token)
        self.store.put(bucket_key(index, ref), encode_bucket(index, buckets, producers))
        return ref

    def table(self, producers: Mapping[str, ProducerState], number: int, token: str,
              job: JobSpec | None) -> tuple[TableRef, dict[str, ProducerState]]:
        """Write every bucket of ``producers`` (a namespace's first format-2 commit): the table, and our bucket.

        A format-1 state over :data:`INLINE_STATE_BYTES` moves into its own object.
        """
        table = TableRef.empty(BUCKETS)
        grouped: dict[int, dict[str, ProducerState]] = {}
        for pid, s in producers.items():
            if s.state is not None and len(data := dump_json(s.state)) > INLINE_STATE_BYTES:
                ref = state_ref(number, hashlib.sha256(data).hexdigest())
                self.store.put(state_key(pid, ref), data)
                s = replace(s, state=None, state_ref=ref)
            grouped.setdefault(bucket_of(pid, BUCKETS), {})[pid] = s
        for index, members in sorted(grouped.items()):
            ref = self.bucket(index, BUCKETS, members, number, token)
            for pid, s in members.items():
                table = table.with_bucket(index, ref, before=None, after=s.status,
                                          declared=job is not None and pid in job)
        return table, grouped.get(bucket_of(self.producer_id, BUCKETS), {})
