"""BucketBatches: global batches of same-shape samples, one bucket per batch, resumable from positions.

Samples (dicts of tensors, as the media stages yield them) are put into
buckets by a key (``transforms.bucketing``: ``"aspect_ratio"``,
``"resolution"``, ``"duration"``, ``"frames"`` or any ``sample -> float``)
and bucket edges (given, or learned from the first ``learn_from`` samples:
``buckets=8``). A bucket that holds ``global_batch_size`` samples becomes the
next global batch (``transforms.bucketing.next_bucket``), so every row of a
TGB is from one bucket and each bucket's share of the steps follows its share
of the data (no bucket saved for the end). When the source ends, the partial
buckets are flushed in bucket order, each as one batch **padded** to
``global_batch_size``: a TGB always has ``global_batch_size`` rows, cut into
equal dp slices, and a trainer compiled for one batch shape keeps it. A
padding row is a copy of the batch's first row with ``row_valid`` False (so
it has the bucket's shape: a rank's rows still view as one ``[R, h, w, 3]``
tensor); mask the loss with ``row_valid``.

A batch holds each row field stacked (dense: the same shape in every row of
the namespace) or, for fields named in ``ragged``, as
:class:`~torch_tgb.layout.RaggedRows` (a row's tensor of any length along
dim 0, e.g. a bucket's pixels ``[h·w, 3]`` or a clip's ``[samples, 1]``),
plus two dense fields:

- ``bucket_id`` int64 ``[B]``: the bucket, in every row. A dense key rather
  than manifest entry metadata: it travels in each rank's slice (one read,
  checked by the slice's CRC, kept through step shuffles and excisions), a
  trainer picks its compiled shape from the batch itself, and neither the
  format nor the manifest changes. 8 bytes a row.
- ``row_valid`` bool ``[B]``: False for the padding rows of a flushed batch.

``prepare(row, bucket, step)`` (optional) turns a sample into its row when its
batch is made, with the step of that batch (this stage's batch count, in its
state): ``transforms.BucketResize`` resizes a row's image to its bucket's
shape at the resolution of that step, so a resolution schedule moves every
bucket at exactly its boundary and a batch never mixes resolutions.

**State** (JSON; positions, not tensors): the source's state just before the
oldest sample still buffered (``source``), the samples pulled since then
(``read``), the buffered ones' arrival numbers per bucket (``buffered``:
at most ``buckets × (global_batch_size - 1)`` ints once a batch has been
made), the edges (learned ones included), ``ended``, the counters and
``info``. A restore resets the source there and pulls ``read`` samples
again, keeping the buffered ones: a resumed producer re-reads (and re-decodes)
the samples since the oldest buffered one, about ``global_batch_size / p``
samples for the rarest bucket's share ``p``, and yields exactly the batches
an uninterrupted run would. Memory: the buffered samples, about
``buckets × global_batch_size`` of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torchdata.nodes import BaseNode

from torch_tgb.errors import LayoutError, SourceError
from torch_tgb.layout import RaggedRows
from torch_tgb.transforms.bucketing import BUCKET_KEYS, BucketKey, bucket_of, check_edges, learn_edges, next_bucket

if TYPE_CHECKING:
    from torch_tgb.layout import Layout

__all__ = ["BucketBatches", "BucketStats"]

Sample = dict[str, Any]
#: ``(sample, bucket, step) -> row``, applied as the batch is made
Prepare = Callable[[Sample, int, int], Mapping[str, Any]]
#: the dense fields every bucketed batch carries
BUCKET_ID, ROW_VALID = "bucket_id", "row_valid"


@dataclass(frozen=True)
class BucketStats:
    """Batches made so far, by bucket (restored with the state)."""

    batches: int = 0
    rows: int = 0
    padding_rows: int = 0
    #: batches of each bucket, in bucket order
    bucket_batches: list[int] = field(default_factory=list)
    #: real rows of each bucket
    bucket_rows: list[int] = field(default_factory=list)
    #: samples waiting in the buckets now
    buffered: int = 0
    #: the bucket edges in use (learned ones once learned)
    edges: list[float] = field(default_factory=list)


@dataclass
class _Held:
    """A buffered sample, the source's state just before it and its arrival number."""

    arrival: int
    before: Any
    sample: Sample


class BucketBatches(BaseNode[dict[str, Any]]):
    """Global batches of one bucket each; see the module docstring."""

    SOURCE_KEY = "source"
    READ_KEY = "read"
    BUFFERED_KEY = "buffered"
    EDGES_KEY = "edges"
    ENDED_KEY = "ended"
    COUNTS_KEY = "counts"
    INFO_KEY = "info"

    def __init__(
        self,
        samples: BaseNode[Sample],
        *,
        key: str | BucketKey,
        buckets: Sequence[float] | int,
        global_batch_size: int,
        layout: Layout,
        learn_from: int = 1024,
        ragged: Sequence[str] = (),
        keys: Sequence[str] | None = None,
        prepare: Prepare | None = None,
        info: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(global_batch_size, int) or global_batch_size < 1 or global_batch_size % layout.dp:
            raise LayoutError(f"global_batch_size={global_batch_size!r} must be an int >= 1 divisible by "
                              f"dp={layout.dp}: every dp slice gets the same number of rows")
        if isinstance(key, str) and key not in BUCKET_KEYS:
            raise ValueError(f"unknown bucket key {key!r}; choose from {sorted(BUCKET_KEYS)} or pass a callable")
        if isinstance(buckets, int):
            if isinstance(buckets, bool) or buckets < 1 or learn_from < 1:
                raise ValueError(f"buckets=int learns that many buckets: need >= 1 and learn_from >= 1, got "
                                 f"{buckets=} {learn_from=}")
            self._given: tuple[float, ...] | None = None
        else:
            self._given = check_edges(buckets)
        reserved = {BUCKET_ID, ROW_VALID} & set(keys or ()) | {BUCKET_ID, ROW_VALID} & set(ragged)
        if reserved:
            raise ValueError(f"{sorted(reserved)} are the fields BucketBatches adds; rename the samples' fields")
        self.source = samples
        self.key: BucketKey = BUCKET_KEYS[key] if isinstance(key, str) else key
        self.buckets = buckets
        self.global_batch_size = global_batch_size
        self.layout = layout
        self.learn_from = learn_from
        self.ragged = tuple(ragged)
        self.keys = None if keys is None else tuple(keys)
        self.prepare = prepare
        self.info = dict(info or {})
        self._clear()

    def _clear(self) -> None:
        self._edges: tuple[float, ...] | None = self._given
        self._held: dict[int, list[_Held]] = {}
        self._arrivals: dict[int, list[int]] = {}  # the held samples' arrival numbers, per bucket (next_bucket's view)
        self._pulled = 0
        self._ended = False
        self._counts: dict[str, Any] = {"batches": 0, "rows": 0, "padding_rows": 0, "bucket_batches": {},
                                        "bucket_rows": {}}

    # --- state -------------------------------------------------------------------------

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(initial_state)
        self._clear()
        if not initial_state:
            self.source.reset(None)
            return
        state = initial_state
        edges = state.get(self.EDGES_KEY)
        if edges is not None:
            edges = check_edges(edges)
            if self._given is not None and edges != self._given:
                raise SourceError(f"BucketBatches: the state was saved with bucket edges {list(edges)}, this stage "
                                  f"has {list(self._given)}; the buckets changed since")
        self._edges = edges
        counts = state.get(self.COUNTS_KEY, {})
        self._counts = {k: int(counts.get(k, 0)) for k in ("batches", "rows", "padding_rows")}
        for name in ("bucket_batches", "bucket_rows"):
            self._counts[name] = {int(b): int(n) for b, n in counts.get(name, {}).items()}
        self._ended = bool(state.get(self.ENDED_KEY, False))
        buffered = {int(b): [int(a) for a in arrivals] for b, arrivals in state.get(self.BUFFERED_KEY, {}).items()}
        wanted = {a: b for b, arrivals in buffered.items() for a in arrivals}
        if self._ended and not wanted:
            return  # a finished source is not reset again: nothing is left to read
        self.source.reset(state[self.SOURCE_KEY])
        read = int(state[self.READ_KEY])
        for arrival in range(read):  # the samples since the oldest buffered one, again: keep the buffered
            before = self.source.state_dict() if arrival in wanted else None
            try:
                sample = next(self.source)
            except StopIteration:
                raise SourceError(f"BucketBatches: the source ended after {arrival} of the {read} samples the state "
                                  "says it had read since the oldest buffered one; it changed since") from None
            if arrival in wanted:
                self._hold(wanted[arrival], arrival, before, sample)
        self._pulled = read

    def get_state(self) -> dict[str, Any]:
        oldest = min(((h[0].arrival, b) for b, h in self._held.items() if h), default=None)
        if oldest is None:
            anchor, source = self._pulled, self.source.state_dict()
        else:
            anchor, source = oldest[0], self._held[oldest[1]][0].before
        counts = {**self._counts, **{name: {str(b): n for b, n in sorted(self._counts[name].items())}
                                     for name in ("bucket_batches", "bucket_rows")}}
        return {
            self.SOURCE_KEY: source,
            self.READ_KEY: self._pulled - anchor,
            self.BUFFERED_KEY: {str(b): [a - anchor for a in arrivals] for b, arrivals in sorted(self._arrivals.items())
                                if arrivals},
            self.EDGES_KEY: None if self._edges is None else list(self._edges),
            self.ENDED_KEY: self._ended,
            self.COUNTS_KEY: counts,
            self.INFO_KEY: self.info,
        }

    def stats(self) -> BucketStats:
        n = len(self._edges) + 1 if self._edges is not None else 0
        c = self._counts
        return BucketStats(batches=c["batches"], rows=c["rows"], padding_rows=c["padding_rows"],
                           bucket_batches=[c["bucket_batches"].get(b, 0) for b in range(n)],
                           bucket_rows=[c["bucket_rows"].get(b, 0) for b in range(n)],
                           buffered=sum(len(h) for h in self._held.values()), edges=list(self._edges or ()))

    @property
    def step(self) -> int:
        """The step of the next batch (batches made so far)."""
        return int(self._counts["batches"])

    # --- batches -----------------------------------------------------------------------

    def next(self) -> dict[str, Any]:
        if self._edges is None:
            self._learn()
        while (bucket := next_bucket(self._arrivals, self.global_batch_size, ended=self._ended)) is None:
            if self._ended:
                raise StopIteration
            self._pull()
        return self._batch(bucket)

    def _pull(self) -> tuple[Any, Sample] | None:
        """The next sample with the source's state before it, held in its bucket once edges are known."""
        before = self.source.state_dict()
        try:
            sample = next(self.source)
        except StopIteration:
            self._ended = True
            return None
        if self._edges is not None:
            self._hold(self._bucket(sample), self._pulled, before, sample)
        self._pulled += 1
        return before, sample

    def _learn(self) -> None:
        """Edges from the key values of the first ``learn_from`` samples, which then go to their buckets."""
        assert isinstance(self.buckets, int)  # edges are None only when they are to be learned
        pulled: list[tuple[int, Any, Sample]] = []
        while len(pulled) < self.learn_from and (got := self._pull()) is not None:
            pulled.append((self._pulled - 1, *got))
        self._edges = learn_edges([self._value(s) for _, _, s in pulled], self.buckets)
        for arrival, before, sample in pulled:
            self._hold(self._bucket(sample), arrival, before, sample)

    def _value(self, sample: Sample) -> float:
        value = float(self.key(sample))
        if value != value or value in (float("inf"), float("-inf")):
            raise SourceError(f"BucketBatches: bucket key of sample {sample.get('__key__')!r} is {value}")
        return value

    def _bucket(self, sample: Sample) -> int:
        assert self._edges is not None
        return int(bucket_of(self._value(sample), self._edges))

    def _hold(self, bucket: int, arrival: int, before: Any, sample: Sample) -> None:
        self._held.setdefault(bucket, []).append(_Held(arrival, before, sample))
        self._arrivals.setdefault(bucket, []).append(arrival)

    def _batch(self, bucket: int) -> dict[str, Any]:
        size = self.global_batch_size
        held = self._held[bucket][:size]
        del self._held[bucket][:size], self._arrivals[bucket][:size]
        step = self.step
        rows = [dict(self.prepare(h.sample, bucket, step)) if self.prepare else h.sample for h in held]
        names = self._names(rows[0])
        real = len(rows)
        rows += [rows[0]] * (size - real)  # padding: the bucket's shape, masked by row_valid
        batch: dict[str, Any] = {}
        for name in names:
            try:
                values = [row[name] for row in rows]
                batch[name] = RaggedRows.from_rows(name, values) if name in self.ragged else torch.stack(values)
            except (KeyError, RuntimeError) as e:
                raise LayoutError(f"BucketBatches: field {name!r} of bucket {bucket} at {step=}: the rows do not "
                                  f"stack ({e}); name fields whose length differs by row in ragged=") from e
        batch[BUCKET_ID] = torch.full((size,), bucket, dtype=torch.int64)
        batch[ROW_VALID] = torch.arange(size) < real
        c = self._counts
        c["batches"] += 1
        c["rows"] += real
        c["padding_rows"] += size - real
        c["bucket_batches"][bucket] = c["bucket_batches"].get(bucket, 0) + 1
        c["bucket_rows"][bucket] = c["bucket_rows"].get(bucket, 0) + real
        return batch

    def _names(self, row: Mapping[str, Any]) -> list[str]:
        """The fields batched: ``keys``, default the row's tensor fields (not ``__key__``-style metadata)."""
        if self.keys is not None:
            missing = [k for k in self.keys if not isinstance(row.get(k), torch.Tensor)]
            if missing:
                raise LayoutError(f"BucketBatches(keys=): rows have no tensor field {missing} "
                                  f"(they have {sorted(row)})")
            return list(self.keys)
        names = [k for k, v in row.items() if isinstance(v, torch.Tensor) and not k.startswith("__")]
        clash = {BUCKET_ID, ROW_VALID} & set(names)
        if clash:
            raise LayoutError(f"BucketBatches: rows already have {sorted(clash)}, the fields it adds")
        return names
