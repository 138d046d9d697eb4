"""FooterIndex: attaches the parsed footer of every TGB a task reads.

Footers are kept in an LRU cache keyed by TGB address (object key, footer
offset: a segment object holds several TGBs; objects are immutable, so a
cached footer never goes stale). A local namespace read through a mapping
``SliceReader`` takes footer bytes from the object's mapping (opened and
containment-checked once per object) instead of one open per footer. On a miss the index looks ahead: it
takes up to ``lookahead`` further tasks that its source can produce without
waiting (``source.available()``, when the source offers it) and fetches every
missing footer among them in one ``store.get_ranges`` call (a local namespace
reads them one after the other: no round trip to save), using the footer
location recorded in the manifest entry, so a reader pays one round trip per
``lookahead`` steps for footers instead of one per step. If an object of
that window is missing, the tasks before it are served one by one and the
missing object's own task raises :class:`ObjectNotFound`: no step before
it is lost; a footer of that window that fails its checks is served the same
way (its own step raises :class:`CorruptObject`, naming the step). The
entry's numbers are checked before anything is read (a hostile ``size`` must
not decide an allocation), and every footer, read in place or taken from a
segment index, is judged by the namespace's ``contract`` at parse.

State: the source's state as it was right after the last task handed out,
so tasks buffered ahead are fetched again after a reset, never skipped.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import Any, cast

from torchdata.nodes import BaseNode

from torch_tgb.datapipes.read._types import Lookahead, ReadTask, StepEntry
from torch_tgb.datapipes.read.batch_fetch import ErrorBudget, fetch_ranges, refetch_if_cached
from torch_tgb.datapipes.read.stats import ReadStats
from torch_tgb.errors import CorruptObject, ManifestError, ObjectNotFound
from torch_tgb.format import (
    INDEX_TAIL_READ,
    MAX_FOOTER_BYTES,
    TRAILER_SIZE,
    Contract,
    Footer,
    SegmentIndex,
    SliceReader,
    footer_from_records,
    meta_range,
    parse_footer,
    parse_index_trailer,
    record_range,
)
from torch_tgb.manifest import TGBEntry
from torch_tgb.storage import ObjectStore, RangeRequest

__all__ = ["FooterIndex", "check_footer_location", "footer_location_ok"]

#: bytes read from a segment's end to find its index (a module attribute: tests shorten it)
_TAIL_READ = INDEX_TAIL_READ
#: segment indexes kept (a reader streams through one segment at a time)
_INDEXES_KEPT = 4
#: footer metas kept (their CRC32C -> bytes): the TGBs of one stream share one
_METAS_KEPT = 16
#: a version-3 footer larger than this is read as the slice records a rank needs (O(1) bytes a slice, one
#: request a TGB); a smaller one whole (or from its segment's index: one request for many TGBs), so a rank
#: never reads more than this much footer per step (a module attribute: tests lower it)
RECORDS_FROM = 4096


def _runs(indices: list[int]) -> list[list[int]]:
    """``indices`` (sorted) as runs of consecutive numbers: one range read each."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and runs[-1][-1] + 1 == i:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _meta_crc(record: bytes | memoryview) -> int:
    """The meta CRC32C a slice record names (its last 4 bytes; the record's own CRC checks it later)."""
    return int.from_bytes(bytes(record[-4:]), "little")


def footer_location_ok(entry: TGBEntry) -> bool:
    """Whether ``entry``'s footer ends its TGB and has a sane length (checked before any read or allocation)."""
    end = entry.footer_offset + entry.footer_length + TRAILER_SIZE
    return entry.footer_offset >= 0 and end == entry.size and 0 < entry.footer_length <= MAX_FOOTER_BYTES


def check_footer_location(entry: TGBEntry, step: int, namespace: str) -> None:
    """Raise ManifestError unless :func:`footer_location_ok`."""
    if not footer_location_ok(entry):
        raise ManifestError(
            f"{namespace}: manifest entry for {step=} of object "
            f"{entry.key!r}: footer at {entry.footer_offset} of length {entry.footer_length} does not end "
            f"an object of {entry.size} bytes (or exceeds {MAX_FOOTER_BYTES} bytes)"
        )


class FooterIndex(BaseNode[ReadTask]):
    """Adds ``footers`` (object key -> Footer) to each ReadTask."""

    SOURCE_KEY = "source"

    def __init__(
        self,
        source: BaseNode[ReadTask],
        store: ObjectStore,
        *,
        cache_size: int = 256,
        lookahead: int = 32,
        slices: SliceReader | None = None,
        errors: ErrorBudget = ErrorBudget(),
        contract: Contract | None = None,
        skip_errors: bool = False,
    ) -> None:
        """``contract``: the namespace's layout and schema, that every footer is judged by (None: not judged).
        ``skip_errors``: a task whose footer is corrupt or whose object is missing is handed on carrying its
        error (``ReadTask.error``) instead of raising it (``ReaderOptions(on_corrupt="skip_step")``)."""
        super().__init__()
        if cache_size < 1 or lookahead < 1:
            raise ValueError(f"cache_size and lookahead must be >= 1, got {cache_size=} {lookahead=}")
        self.source = source
        self.store = store
        self.cache_size = cache_size
        self.lookahead = lookahead
        self.stats = ReadStats()  # this node's own counters (the reader merges them)
        self.slices = slices  # shared with the RangeReader: one mapping per object
        self.errors = errors
        self.contract = contract
        self.skip_errors = skip_errors
        self._cache: OrderedDict[tuple[str, int], Footer] = OrderedDict()
        # version 3: the slice records read per TGB (a footer of some slices is rebuilt when more are read),
        # and the footer metas seen, by their CRC32C (one per stream, usually)
        self._records: OrderedDict[tuple[str, int], dict[int, bytes | memoryview]] = OrderedDict()
        self._metas: OrderedDict[int, bytes] = OrderedDict()
        self._pending: deque[tuple[ReadTask, dict[str, Any]]] = deque()
        self._state: dict[str, Any] | None = None
        self._local: bool | None = None
        # segment object -> its index (None: a segment written without one), most recent last
        self._indexes: OrderedDict[str, SegmentIndex | None] = OrderedDict()
        self._narrow = 0  # tasks still fetched one by one after a window with a missing object
        # runtime Protocol checks cost microseconds each: decided once, off the step path
        self._source_lookahead = isinstance(source, Lookahead)

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(initial_state)
        self._pending.clear()
        self._narrow = 0
        if initial_state is not None:
            self.source.reset(initial_state[self.SOURCE_KEY])
        else:
            self.source.reset(None)
        self._state = self.source.state_dict()

    def get_state(self) -> dict[str, Any]:
        return {self.SOURCE_KEY: self._state}

    def available(self, limit: int = 64) -> int:
        """Tasks (about ``limit`` at most) this node can hand out without waiting for new commits."""
        ahead = self.source.available(limit) if self._source_lookahead else 0  # type: ignore[attr-defined]
        return len(self._pending) + ahead

    def next(self) -> ReadTask:
        if not self.skip_errors:
            return self._next()
        try:
            return self._next()
        except (CorruptObject, ObjectNotFound) as error:  # this task's own footer or object: skipped, not read
            if not self._pending:
                raise  # not a task's footer: from upstream
            task, state = self._pending.popleft()
            self._state = state
            return ReadTask(task.index, task.cursor, task.entries, task.pieces, task.assemble, {}, error)

    def _next(self) -> ReadTask:
        if not self._pending:
            self._pull()
        task, state = self._pending[0]
        cache = self._cache
        if not self._holds(task):
            if self._local:
                # no round trip to save: parse this task's footers only, so that a step never pays
                # for the next ``lookahead`` steps' footers (that batching made every 8th step slow)
                try:
                    self._fetch_local(task)
                except CorruptObject as error:
                    raise self._at_step(task, error) from error
            elif self._narrow:  # a window's fetch failed: task by task until past that window
                self._narrow -= 1
                self._fetch_task(task)
            else:
                self._pull_ready()
                try:
                    self._fetch([t for t, _ in self._pending])
                except (ObjectNotFound, CorruptObject):
                    # One object of the window is missing or corrupt: deliver every step before it,
                    # then fail on its own step (this task's fetch raises if the object is its own).
                    self._narrow = len(self._pending) - 1
                    self._fetch_task(task)
        else:
            self.stats.add(footer_cache_hits=len(task.entries))
        self._pending.popleft()
        footers = {}
        for e in task.entries:  # an entry no piece reads (a step of a remapped topology) may have none
            address = e.address
            if address in cache:
                footers[address] = cache[address]
                cache.move_to_end(address)
        self._state = state
        return ReadTask(task.index, task.cursor, task.entries, task.pieces, task.assemble, footers)

    def cached(self, key: str, footer_offset: int | None = None) -> Footer | None:
        """The cached footer of the TGB at ``footer_offset`` of ``key`` (None: any TGB of ``key``)."""
        if footer_offset is not None:
            return self._cache.get((key, footer_offset))
        return next((f for (k, _), f in self._cache.items() if k == key), None)

    # --- internals -------------------------------------------------------------

    def _fetch_task(self, task: ReadTask) -> None:
        """The footers of one task; a corrupt one raises naming the task's step."""
        try:
            self._fetch([task])
        except CorruptObject as error:
            raise self._at_step(task, error) from error

    def _needs(self, tasks: Sequence[ReadTask]) -> dict[tuple[str, int], tuple[StepEntry, set[int]]]:
        """Per TGB the tasks read: its entry and the (dp, cp) indices of the slices read of it."""
        cp = self._written_cp
        out: dict[tuple[str, int], tuple[StepEntry, set[int]]] = {}
        for task in tasks:
            for piece in task.pieces:
                e = task.entries[piece.tgb]
                out.setdefault(e.address, (e, set()))[1].add(piece.dp * cp + piece.cp)
        return out

    def _holds(self, task: ReadTask) -> bool:
        """Whether the cache holds every footer ``task`` needs (a footer of slice records: the slices it reads)."""
        for address, (_, indices) in self._needs([task]).items():
            footer = self._cache.get(address)
            if footer is None or (footer.held is not None and not indices <= footer.held):
                return False
        return True

    def _at_step(self, task: ReadTask, error: CorruptObject) -> CorruptObject:
        """``error`` (the format names object and slice) with the namespace and the task's step, as RangeReader words it."""
        return CorruptObject(f"{self.store.url}: step={task.cursor.step}: {error}")

    def _pull(self) -> None:
        task = next(self.source)  # StopIteration / DataTimeout propagate
        self._pending.append((task, self.source.state_dict()))

    def _pull_ready(self) -> None:
        if not self._source_lookahead:
            return
        source = cast("Lookahead", self.source)
        while len(self._pending) < self.lookahead and source.available(self.lookahead - len(self._pending)) > 0:
            try:
                self._pull()
            except StopIteration:
                return

    def _fetch(self, tasks: Sequence[ReadTask]) -> None:
        todo: dict[tuple[str, int], StepEntry] = {}
        records: dict[tuple[str, int], tuple[StepEntry, set[int]]] = {}
        for address, (e, indices) in self._needs(tasks).items():
            footer = self._cache.get(address)
            if self._by_records(e):
                if footer is None or (footer.held is not None and not indices <= footer.held):
                    records[address] = (e, indices)
            elif footer is None:
                todo[address] = e
        if records:
            self._fetch_records(records)
        if not todo:
            return
        requests = [self._footer_range(e) for e in todo.values()]
        if self._local is None:  # one namespace lives on one backend: ask once
            self._local = self.store.local_path(requests[0].key) is not None
        def parse(blobs: Sequence[bytes | memoryview]) -> list[Footer]:
            return [parse_footer(blob, key=e.key, size=e.entry.size, footer_offset=e.entry.footer_offset,
                                 contract=self.contract) for e, blob in zip(todo.values(), blobs)]

        if self._local:
            # local files: sequential reads beat spinning up reader threads; through the
            # shared mapping when there is one (the object is opened once, not per footer)
            blobs: list[bytes | memoryview] = [self._local_range(r) for r in requests]
            footers = parse(blobs)
        else:
            todo = self._from_segment_indexes(todo)  # a segment's footers: one tail read per object
            requests = [self._footer_range(e) for e in todo.values()]

            def fetch_and_parse() -> tuple[list[bytes | memoryview], list[Footer]]:
                # one batched call; soft failures re-read within the error budget, hard ones raised
                got: list[bytes | memoryview] = []
                if todo:
                    got.extend(fetch_ranges(self.store, requests, budget=self.errors, stats=self.stats))
                return got, parse(got)

            blobs, footers = refetch_if_cached(self.store, {r.key for r in requests}, fetch_and_parse, self.stats)
        self.stats.add(footer_requests=len(requests), bytes_read=sum(len(b) for b in blobs))
        for address, footer in zip(todo, footers):
            self._cache[address] = footer
        if len(self._cache) > self.cache_size:
            self._evict()

    def _from_segment_indexes(self, todo: dict[tuple[str, int], StepEntry]) -> dict[tuple[str, int], StepEntry]:
        """Cache the footers that segment indexes hold; the entries left to read one footer each.

        The index of each segment object not seen yet is fetched with one tail
        read (all of them in one batched call; a second read only for an index
        longer than the tail). A segment without an index (an older writer) is
        remembered as such and read footer by footer.
        """
        keys = {e.key: e.entry.total_size for e in todo.values() if e.entry.object_size is not None}
        self._load_indexes({k: size for k, size in keys.items() if k not in self._indexes})
        left = {}
        for address, e in todo.items():
            index = self._indexes.get(e.key)
            footer = None if index is None else index.footer(e.entry.footer_offset, e.entry.size,
                                                             contract=self.contract)
            if footer is None:
                left[address] = e
            else:
                self._cache[address] = footer
        for key in keys:
            if key in self._indexes:
                self._indexes.move_to_end(key)
        while len(self._indexes) > _INDEXES_KEPT:
            self._indexes.popitem(last=False)
        return left

    def _load_indexes(self, objects: dict[str, int]) -> None:
        if not objects:
            return
        tails = [RangeRequest(key, max(0, size - _TAIL_READ), size) for key, size in objects.items()]
        blobs = list(fetch_ranges(self.store, tails, budget=self.errors, stats=self.stats))
        more = []
        for r, blob in zip(tails, blobs):
            found = parse_index_trailer(blob, key=r.key, object_size=r.end)
            if found is None:
                self._indexes[r.key] = None
            elif found[0] >= r.start:
                self._indexes[r.key] = SegmentIndex(blob[found[0] - r.start :], key=r.key, object_size=r.end)
            else:  # parse_index_trailer bounded the index: the rest is fetched in the second call
                more.append((RangeRequest(r.key, found[0], r.start), blob, r.end))
        rest = list(fetch_ranges(self.store, [m[0] for m in more], budget=self.errors, stats=self.stats)) if more else []
        for (r, tail, size), head in zip(more, rest):
            self._indexes[r.key] = SegmentIndex(bytes(head) + bytes(tail), key=r.key, object_size=size)
        self.stats.add(footer_requests=len(tails) + len(more),
                       bytes_read=sum(len(b) for b in blobs) + sum(len(b) for b in rest))

    def _evict(self) -> None:
        """Drop least recently used footers, never one a buffered task still needs: O(evicted), not O(cache)."""
        over = len(self._cache) - self.cache_size
        needed = {e.address for t, _ in self._pending for e in t.entries}
        victims = []
        for address in self._cache:  # oldest first
            if address not in needed:
                victims.append(address)
                if len(victims) == over:
                    break
        for address in victims:
            del self._cache[address]

    def _footer_range(self, e: StepEntry) -> RangeRequest:
        """Where ``e``'s footer lies; the entry's numbers decide how much is read: checked before any allocation."""
        check_footer_location(e.entry, e.step, self.store.url)
        return RangeRequest(e.key, e.entry.footer_offset, e.entry.size)

    def _fetch_local(self, task: ReadTask) -> None:
        """This task's footers from a local object: its slice records (version 3), else whole footers."""
        needs = self._needs([task])
        if self._records_possible:
            missing = {address: (e, indices) for address, (e, indices) in needs.items() if self._by_records(e)
                       and ((f := self._cache.get(address)) is None or (f.held is not None and not indices <= f.held))}
            if missing:
                self._fetch_records(missing)
        for e, _ in needs.values():
            if e.address not in self._cache:
                self._fetch_one_local(e)

    def _by_records(self, e: StepEntry) -> bool:
        """Whether to read ``e``'s slice records rather than its whole footer: a version-3 TGB whose footer is
        larger than :data:`RECORDS_FROM` (a small one costs as little read whole, and a segment's index then
        brings many TGBs' footers in one request)."""
        return self._records_possible and e.entry.slice_record > 0 and e.entry.footer_length > RECORDS_FROM

    @property
    def _records_possible(self) -> bool:
        """Whether slice records can be read: the namespace's layout (its dp x cp grid) is known."""
        return self.contract is not None and self.contract.layout is not None

    @property
    def _written_cp(self) -> int:
        layout = None if self.contract is None else self.contract.layout
        return 1 if layout is None else layout.cp

    def _fetch_records(self, needs: dict[tuple[str, int], tuple[StepEntry, set[int]]]) -> None:
        """The version-3 slice records ``needs`` names (and each meta not held yet): O(1) bytes a slice.

        One range per run of adjacent records of a TGB, all in one batched call
        (a local object: from its mapping); then one call for the metas not
        seen yet (one per stream, usually). Each TGB's footer is built from the
        records it holds (``format.footer_from_records``: every record checked).
        """
        layout = self.contract.layout if self.contract is not None else None
        assert layout is not None
        nslices = layout.dp * layout.cp
        requests, where = [], []
        for address, (e, indices) in needs.items():
            check_footer_location(e.entry, e.step, self.store.url)
            have = self._records.setdefault(address, {})
            width = e.entry.slice_record
            for run in _runs(sorted(i for i in indices if i not in have)):
                if not 0 <= run[0] and run[-1] < nslices:
                    raise CorruptObject(f"{self.store.url}: step={e.step}: object {e.key!r} has no slice {run[-1]} "
                                        f"(the namespace's layout has {nslices})")
                start, end = record_range(e.entry.footer_offset, run[0], width, len(run))
                requests.append(RangeRequest(e.key, start, end))
                where.append((address, run, width))

        def fetch_and_build() -> list[bytes | memoryview]:
            blobs = self._read_ranges(requests)
            for (address, run, width), blob in zip(where, blobs):
                if len(blob) != width * len(run):
                    raise CorruptObject(f"{self.store.url}: object {address[0]!r}: short read of slice records")
                for k, index in enumerate(run):
                    self._records[address][index] = blob[k * width : (k + 1) * width]
            self._fetch_metas(needs, nslices)
            for address, (e, _) in needs.items():
                held = self._records[address]
                meta = self._metas[_meta_crc(next(iter(held.values())))]
                self._cache[address] = footer_from_records(
                    held, meta, key=e.key, size=e.entry.size, footer_offset=e.entry.footer_offset,
                    width=e.entry.slice_record, dp=layout.dp, cp=layout.cp, contract=self.contract)
            return blobs

        try:
            blobs = refetch_if_cached(self.store, {r.key for r in requests}, fetch_and_build, self.stats)
        except CorruptObject:
            for address in needs:
                self._records.pop(address, None)
            raise
        self.stats.add(footer_requests=len(requests), bytes_read=sum(len(b) for b in blobs))
        while len(self._records) > self.cache_size:
            self._records.popitem(last=False)
        if len(self._cache) > self.cache_size:
            self._evict()

    def _fetch_metas(self, needs: dict[tuple[str, int], tuple[StepEntry, set[int]]], nslices: int) -> None:
        """Read the footer metas the records name that no earlier TGB had (keyed by their CRC32C)."""
        wanted: dict[int, RangeRequest] = {}
        for address, (e, _) in needs.items():
            crc = _meta_crc(next(iter(self._records[address].values())))
            if crc not in self._metas and crc not in wanted:
                start, end = meta_range(e.entry.footer_offset, e.entry.footer_length, nslices, e.entry.slice_record)
                if not 0 <= end - start <= MAX_FOOTER_BYTES:
                    raise CorruptObject(f"{self.store.url}: object {e.key!r}: its slice records leave no room "
                                        "for the footer's meta")
                wanted[crc] = RangeRequest(e.key, start, end)
        if wanted:
            for crc, blob in zip(wanted, self._read_ranges(list(wanted.values()))):
                self._metas[crc] = bytes(blob)
                self.stats.add(footer_requests=1, bytes_read=len(blob))
            while len(self._metas) > _METAS_KEPT:
                self._metas.popitem(last=False)

    def _read_ranges(self, requests: list[RangeRequest]) -> list[bytes | memoryview]:
        if self._local is None and requests:
            self._local = self.store.local_path(requests[0].key) is not None
        if self._local:
            return [self._local_range(r) for r in requests]
        return list(fetch_ranges(self.store, requests, budget=self.errors, stats=self.stats)) if requests else []

    def _fetch_one_local(self, e: StepEntry) -> None:
        """One footer of a local object, through the shared mapping: the step path's share of footer work."""
        r = self._footer_range(e)
        blob = self._local_range(r)
        self.stats.add(footer_requests=1, bytes_read=len(blob))
        self._cache[e.address] = parse_footer(blob, key=e.key, size=r.end, footer_offset=r.start,
                                              contract=self.contract)
        if len(self._cache) > self.cache_size:
            self._evict()

    def _local_range(self, r: RangeRequest) -> bytes | memoryview:
        view = self.slices.view(r.key, r.start, r.end) if self.slices is not None else None
        return view if view is not None else self.store.get_range(r.key, r.start, r.end)
