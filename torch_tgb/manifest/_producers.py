"""The producers of a format-2 table: its buckets' objects and a mapping that reads them when asked.

A bucket object (``_tgb/producers/<b>/<v>-<tok>.json``, named by
:func:`~torch_tgb.manifest._table.bucket_key`) holds the full state of the
producers of one bucket, pipeline states inline when small and by
reference when large. :class:`ProducerTable` is the ``Mapping[str,
ProducerState]`` of a :class:`ManifestState` at a format-2 version: it
knows its size from the table's counts and reads buckets only when a
producer is looked up (one bucket) or the producers are listed (all of
them, concurrently): readers never do either on their hot path.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from torch_tgb.errors import ManifestError
from torch_tgb.manifest._json import Fields, dump_json, load_json
from torch_tgb.manifest._table import TableRef, bucket_of
from torch_tgb.manifest._checks import validate_producer_id
from torch_tgb.manifest._producer_state import FORMAT2, ProducerState

__all__ = ["BucketLoader", "ProducerTable", "decode_bucket", "encode_bucket"]

#: reads the producers of each ``(bucket, ref)`` asked for, concurrently where it can (the store's half of a
#: :class:`ProducerTable`)
BucketLoader = Callable[[int, list[tuple[int, str]]], list[dict[str, ProducerState]]]


def encode_bucket(bucket: int, buckets: int, producers: Mapping[str, ProducerState]) -> bytes:
    """The bytes of one bucket object."""
    return dump_json({
        "format": FORMAT2, "bucket": bucket, "of": buckets,
        "producers": {pid: s.to_json() for pid, s in sorted(producers.items())},
    })


def decode_bucket(data: bytes, *, bucket: int, buckets: int, what: str) -> dict[str, ProducerState]:
    """Parse a bucket object: every producer in it must belong to ``bucket`` of ``buckets``."""
    f = Fields(load_json(data, what=what), what=what)
    if f.string("format") != FORMAT2:
        raise ManifestError(f"{what}: not a format-2 bucket")
    if f.integer("bucket") != bucket or f.integer("of", minimum=1) != buckets:
        raise ManifestError(f"{what}: is not bucket {bucket} of {buckets}")
    out = {}
    for pid, value in f.mapping("producers").items():
        try:
            validate_producer_id(pid)
        except ValueError as e:
            raise ManifestError(f"{what}: {e}") from e
        if bucket_of(pid, buckets) != bucket:
            raise ManifestError(f"{what}: producer {pid!r} does not belong in bucket {bucket}")
        out[pid] = ProducerState.from_json(value, what=f"{what} producer {pid!r}")
    f.done()
    return out


class ProducerTable(Mapping[str, ProducerState]):
    """Every producer of a format-2 table, read from its buckets on first use. Thread-safe.

    ``loader`` reads one bucket; a table without one (a state parsed
    outside a :class:`~torch_tgb.manifest.Manifest`) knows only its counts,
    and looking a producer up raises :class:`ManifestError`. Equality is
    the table's: two tables with the same references hold the same producers.
    """

    def __init__(self, table: TableRef, loader: BucketLoader | None = None,
                 known: Mapping[int, Mapping[str, ProducerState]] | None = None) -> None:
        self.table = table
        self._loader = loader
        self._lock = threading.Lock()
        self._buckets: dict[int, Mapping[str, ProducerState]] = dict(known or {})

    def with_loader(self, loader: BucketLoader) -> ProducerTable:
        """This table, reading through ``loader`` (buckets already read are kept)."""
        return ProducerTable(self.table, loader, self._buckets)

    def bucket(self, index: int) -> Mapping[str, ProducerState]:
        """The producers of bucket ``index`` (one read, then kept)."""
        return self._load([index])[index]

    def _load(self, indices: list[int]) -> dict[int, Mapping[str, ProducerState]]:
        with self._lock:
            out = {i: self._buckets[i] for i in indices if i in self._buckets}
        todo = [(i, self.table.buckets[i]) for i in indices if i not in out and self.table.buckets[i]]
        out.update((i, {}) for i in indices if not self.table.buckets[i])
        if todo:
            if self._loader is None:
                raise ManifestError(f"producers' table buckets {[i for i, _ in todo][:8]} cannot be read: "
                                    "no store attached")
            out.update(zip((i for i, _ in todo), self._loader(len(self.table.buckets), todo)))
        with self._lock:
            self._buckets.update(out)
        return out

    def _all(self) -> dict[str, ProducerState]:
        out: dict[str, ProducerState] = {}
        for producers in self._load(list(range(len(self.table.buckets)))).values():
            out.update(producers)
        return out

    # --- the Mapping ------------------------------------------------------------

    def __getitem__(self, producer_id: str) -> ProducerState:
        if not isinstance(producer_id, str):
            raise KeyError(producer_id)
        return self.bucket(bucket_of(producer_id, len(self.table.buckets)))[producer_id]

    def __len__(self) -> int:
        return self.table.producers

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._all()))

    def items(self) -> Any:
        return self._all().items()

    def values(self) -> Any:
        return self._all().values()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ProducerTable):
            return self.table == other.table
        if isinstance(other, Mapping):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.table)

    def __repr__(self) -> str:
        t = self.table
        return f"ProducerTable({t.producers} producers: {t.open} open, {t.closed} closed, {t.done} done)"
