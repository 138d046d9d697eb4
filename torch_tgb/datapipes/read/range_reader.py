"""RangeReader: reads this rank's slices, ``prefetch`` steps ahead.

For each task it reads the byte ranges of its pieces (one slice each) with
one ordered ``store.get_ranges`` call into writable buffers, checks tensor
CRC32Cs as the verify policy says (default: once per byte range) and
assembles the rank's batch with the plan. A namespace on the local
filesystem (``store.local_path(key)`` is not None) takes the zero-copy path
of ``format.SliceReader``: each object (a segment holds many TGBs) is
mapped once, and a step costs a slice view of the copy-on-write mapping.
Local reads run inline by default: a page-cache read costs less than the
thread hand-offs of prefetching; but a namespace whose first TGB holds
tensors stored compressed (format version 4) is read ahead on the reader
threads like a remote one, so decoding (``format.decode_slice``, which
releases the GIL) runs beside the consumer instead of inside its step.

With ``prefetch > 0`` (and a remote namespace, or ``inline_local=False``) a
feeder thread pulls tasks from the source and hands them to a pool of
``prefetch`` reader threads. A window of ``prefetch`` slots bounds the steps
fetched or fetched-but-undelivered (the memory a reader holds ahead); each
delivered step frees a slot at once, so reads stay continuously in flight
(``prefetch`` streams: what ``benchmarks/consumer_read.py``'s remote model
assumes). Results are delivered strictly in step order. Upcoming steps the
source already has (``available()``, up to ``prefetch``) are read together:
their ranges go out as one ordered batched ``get_ranges`` call
(:func:`~torch_tgb.datapipes.read.batch_fetch.fetch_ranges`; a local namespace,
which has no batched call, reads each step on a thread of its own, so the
steps of a compressed one decode in parallel, and the slices of one step on
a pool of decoding threads), whose soft failures
(missing object, timeout, 5xx) are re-read within the ``errors`` budget and
whose hard failures are raised. Errors (a timeout, a corrupt object) are
delivered in order too, at the first step of the read they happened in; a
corrupt object in a read of several steps is read again step by step, so the
steps before it are delivered and it fails at its own step.

State: the source's state right after the task of the last delivered batch,
so that steps fetched ahead but not delivered are fetched again after a
restore. The source is only ever touched by the feeder thread while it runs.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any

from torchdata.nodes import BaseNode

from torch_tgb._queues import POLL_S, put_unless
from torch_tgb.datapipes.read._types import Interruptible, Lookahead, ReadTask, StepBatch
from torch_tgb.datapipes.read.batch_fetch import ErrorBudget, fetch_ranges, refetch_if_cached
from torch_tgb.datapipes.read.stats import ReadStats
from torch_tgb.errors import CorruptObject, ObjectNotFound, TGBError
from torch_tgb.format import SliceReader
from torch_tgb.storage import ObjectStore, RangeRequest

__all__ = ["RangeReader"]


class _End:
    """Marks the end of the feeder's stream: StopIteration or an error to re-raise."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class _Failed:
    """A step of a group read that failed (and the steps after it): its error, raised when it is delivered."""

    def __init__(self, error: CorruptObject) -> None:
        self.error = error


class RangeReader(BaseNode[StepBatch]):
    """Fetches, verifies and assembles the slices of each ReadTask."""

    SOURCE_KEY = "source"

    def __init__(
        self,
        source: BaseNode[ReadTask],
        store: ObjectStore,
        *,
        prefetch: int = 4,
        verify: bool | str = True,
        inline_local: bool = True,
        slices: SliceReader | None = None,
        errors: ErrorBudget = ErrorBudget(),
        names: frozenset[str] | None = None,
        skip_errors: bool = False,
    ) -> None:
        """``names``: read only these tensors of each slice (one range spanning them); None: all.
        ``skip_errors``: a step that cannot be read (corrupt, its object missing), or that arrives with an
        error (``ReadTask.error``), is delivered as a :class:`StepBatch` carrying the error, not raised."""
        super().__init__()
        if prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {prefetch}")
        self.source = source
        self.store = store
        self.prefetch = prefetch
        self.verify = verify
        self.inline_local = inline_local
        self.stats = ReadStats()  # this node's own counters (the reader merges them)
        self._state: dict[str, Any] | None = None
        self._queue: queue.Queue[tuple[concurrent.futures.Future[list[StepBatch | _Failed]], int, dict] | _End] | None = None
        self._feeder: threading.Thread | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._stop = threading.Event()
        self._slots: threading.Semaphore | None = None  # one per step fetched but not yet delivered
        self._ended: _End | None = None
        # keeps local objects mapped; shared with FooterIndex when the caller passes one
        self._slices = slices if slices is not None else SliceReader(store, verify=verify)
        self._local: bool | None = None
        #: local reads inline (decided with ``_local`` at the first task: not when its TGB is stored compressed)
        self._inline = inline_local
        #: whether the namespace's slices are stored compressed (decided with ``_local``), and the pool that
        #: decodes the slices of one such step side by side (made when a step first has several)
        self._coded = False
        self._decoders: concurrent.futures.ThreadPoolExecutor | None = None
        self.errors = errors
        self.names = names
        self.skip_errors = skip_errors
        self._source_lookahead = isinstance(source, Lookahead)  # decided once, not per step

    # --- BaseNode --------------------------------------------------------------

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(initial_state)
        self.close()
        self.source.reset(None if initial_state is None else initial_state[self.SOURCE_KEY])
        self._state = self.source.state_dict()
        self._ended = None

    def get_state(self) -> dict[str, Any]:
        return {self.SOURCE_KEY: self._state}

    def next(self) -> StepBatch:
        if self._ended is not None:
            raise StopIteration
        if self._feeder is None and (self.prefetch == 0 or self._local is None or (self._local and self._inline)):
            # Inline: no prefetch asked, or the first task (which tells whether the namespace is
            # local), or a local namespace, where a page-cache read costs less than the thread
            # hand-offs of prefetching (the kernel's readahead does the prefetching there), unless
            # its slices are stored compressed (decoding is work worth a thread).
            task = next(self.source)
            state = self.source.state_dict()
            batch = self.read_group([task])[0] if self.skip_errors else (
                self._read_local(task) if self._local else self.read(task))
            assert isinstance(batch, StepBatch)  # one task: read_group answers or raises
            self._state = state
            return batch
        if self._feeder is None:
            self._start()
        assert self._queue is not None  # started above
        item = self._queue.get()
        if isinstance(item, _End):
            self._ended = item
            self.close()
            if item.error is not None:
                raise item.error
            raise StopIteration
        future, index, state = item
        assert self._slots is not None
        self._slots.release()  # this step leaves the window: the feeder may start another
        try:
            got = future.result()[index]
            if isinstance(got, _Failed):
                raise got.error
        except BaseException:
            self._ended = _End(None)
            self.close()
            raise
        self._state = state
        return got

    # --- reading ---------------------------------------------------------------

    def read(self, task: ReadTask) -> StepBatch:
        """Fetch and assemble one task's pieces."""
        batch = self.read_group([task])[0]
        if isinstance(batch, _Failed):  # one task: read_group raises instead
            raise batch.error
        return batch

    def _skipped(self, task: ReadTask, error: TGBError) -> StepBatch:
        return StepBatch(task, {}, error)

    def _read_local(self, task: ReadTask) -> StepBatch:
        """One task of a mapped local namespace: a slice view per piece, no request objects, one stats update."""
        started = time.perf_counter()
        nbytes = useful = 0
        try:
            reads = []
            for piece in task.pieces:
                entry = task.entries[piece.tgb]
                footer = task.footers[entry.address]
                info = footer.slice(piece.dp, piece.cp, self.names)
                reads.append((entry.key, footer, info))
                nbytes += info.end - info.start
                for tensor in info.tensors:
                    useful += tensor.length
            if len(reads) > 1 and self._coded and self.prefetch > 1:  # the step's slices decode side by side
                if self._decoders is None:
                    self._decoders = concurrent.futures.ThreadPoolExecutor(self.prefetch,
                                                                           thread_name_prefix="tgb-decode")
                parts = list(self._decoders.map(lambda read: self._slices.read(*read), reads))
            else:
                parts = [self._slices.read(*read) for read in reads]
        except CorruptObject as e:  # the format names object/slice/tensor; add the step
            raise CorruptObject(f"{self.store.url}: step={task.cursor.step}: {e}") from e
        self.stats.fetch_latency(time.perf_counter() - started)
        self.stats.add(data_requests=len(parts), bytes_read=nbytes, useful_bytes=useful)
        return StepBatch(task, task.assemble(parts))

    def read_group(self, tasks: Sequence[ReadTask]) -> list[StepBatch | _Failed]:
        """Fetch the pieces of several upcoming steps at once (a reader thread), assemble each.

        A corrupt object fails only its own step: the group is read again task
        by task, the steps before it delivered, it and the steps after it
        :class:`_Failed` (one task: raised).
        """
        if self._local is None:  # one namespace lives on one backend: ask once
            key = next((t.entries[p.tgb].key for t in tasks for p in t.pieces), None)
            self._local = key is not None and self.store.local_path(key) is not None
            self._coded = any(f.codecs for t in tasks for f in t.footers.values())
            self._inline = self.inline_local and not self._coded
        if self.skip_errors:
            return self._read_group_skipping(tasks)
        if not self._local:
            try:
                parts = self._read_remote(tasks)
                return [StepBatch(task, task.assemble(p)) for task, p in zip(tasks, parts)]
            except CorruptObject:
                if len(tasks) == 1:
                    raise
        read_one = self._read_local if self._local else self.read
        out: list[StepBatch | _Failed] = []
        for task in tasks:
            try:
                out.append(read_one(task))
            except CorruptObject as e:
                if len(tasks) == 1:
                    raise
                out.extend([_Failed(e)] * (len(tasks) - len(out)))
                break
        return out

    def _read_group_skipping(self, tasks: Sequence[ReadTask]) -> list[StepBatch | _Failed]:
        """:meth:`read_group` for a reader that skips what it cannot read: every task answered, none raised."""
        todo = [t for t in tasks if t.error is None]
        if not self._local and len(todo) > 1:
            try:
                parts = self._read_remote(todo)
                done = {t.index: StepBatch(t, t.assemble(p)) for t, p in zip(todo, parts)}
                return [done[t.index] if t.error is None else self._skipped(t, t.error) for t in tasks]
            except (CorruptObject, ObjectNotFound):
                pass  # one of them: read them one by one
        def read_one(task: ReadTask) -> StepBatch:
            if self._local:
                return self._read_local(task)
            return StepBatch(task, task.assemble(self._read_remote([task])[0]))

        out: list[StepBatch | _Failed] = []
        for task in tasks:
            if task.error is not None:
                out.append(self._skipped(task, task.error))
                continue
            try:
                out.append(read_one(task))
            except (CorruptObject, ObjectNotFound) as e:
                out.append(self._skipped(task, e))
        return out

    def _read_remote(self, tasks: Sequence[ReadTask]) -> list[list[dict]]:
        """Each task's slices, in piece order; the ranges of all tasks in one batched call."""
        infos = []
        owner = []
        for t, task in enumerate(tasks):
            for piece in task.pieces:
                entry = task.entries[piece.tgb]
                footer = task.footers[entry.address]
                try:  # a slice is judged (shapes, the namespace's contract) when first asked for
                    infos.append((entry.key, footer, footer.slice(piece.dp, piece.cp, self.names)))
                except CorruptObject as e:
                    raise CorruptObject(f"{self.store.url}: step={task.cursor.step}: {e}") from e
                owner.append(t)
        started = time.perf_counter()
        parts: list[dict] = []
        i = 0

        def fetch_and_check() -> None:
            nonlocal i
            parts.clear()
            requests = [RangeRequest(key, info.start, info.end) for key, _, info in infos]
            blobs = fetch_ranges(self.store, requests, budget=self.errors, stats=self.stats)
            # into writable buffers: tensors never view an immutable bytes object
            for i, ((key, _, info), blob) in enumerate(zip(infos, blobs)):
                parts.append(self._slices.read_fetched(key, blob, info))

        try:
            if infos:
                refetch_if_cached(self.store, {key for key, _, _ in infos}, fetch_and_check, self.stats)
        except CorruptObject as e:  # the format names object/slice/tensor; add the step
            c = tasks[owner[i]].cursor
            # no version number: the reader knows only the newest version it has seen, which is not the
            # version that committed this step (the one `tgb verify` names); step and object identify it
            raise CorruptObject(f"{self.store.url}: step={c.step}: {e}") from e
        self.stats.fetch_latency(time.perf_counter() - started)
        self.stats.add(
            data_requests=len(infos),
            bytes_read=sum(info.end - info.start for _, _, info in infos),
            useful_bytes=sum(t.length for _, _, info in infos for t in info.tensors),
        )
        out: list[list[dict]] = [[] for _ in tasks]
        for t, part in zip(owner, parts):
            out[t].append(part)
        return out

    # --- prefetch machinery ----------------------------------------------------

    def _start(self) -> None:
        self._stop.clear()
        self._queue = queue.Queue()  # bounded by the slots: at most ``prefetch`` steps fetched ahead
        self._slots = threading.Semaphore(self.prefetch)
        self._pool = concurrent.futures.ThreadPoolExecutor(self.prefetch, thread_name_prefix="tgb-read")
        self._feeder = threading.Thread(target=self._feed, name="tgb-feeder", daemon=True)
        self._feeder.start()

    def _put(self, item: Any) -> bool:
        assert self._queue is not None
        return put_unless(self._queue, item, self._stop.is_set)

    def _take_slot(self) -> bool:
        """Wait for room in the window of ``prefetch`` steps; False once stopping."""
        assert self._slots is not None
        while not self._stop.is_set():
            if self._slots.acquire(timeout=POLL_S):
                return True
        return False

    def _feed(self) -> None:
        assert self._pool is not None and self._slots is not None
        while not self._stop.is_set():
            group: list[tuple[ReadTask, dict]] = []
            end: _End | None = None
            if not self._take_slot():
                return
            try:
                task = next(self.source)
                group.append((task, self.source.state_dict()))
                # upcoming steps already committed join this step's batched read (one call), as far as
                # the window has room: a step delivered frees a slot, so reads stay continuously in flight.
                # Not on a local namespace (read ahead: its slices stored compressed): it has no batched
                # call to share, and steps read one per thread decode side by side, not one after another
                while self._source_lookahead and not self._local and self._slots.acquire(blocking=False):
                    if self.source.available(1) <= 0:  # type: ignore[attr-defined]
                        self._slots.release()
                        break
                    task = next(self.source)
                    group.append((task, self.source.state_dict()))
            except StopIteration:
                end = _End(None)
            except BaseException as e:  # delivered in order after the group, re-raised by next()
                end = _End(e)
            if group:
                future = self._pool.submit(self.read_group, [t for t, _ in group])
                for index, (_, state) in enumerate(group):
                    if not self._put((future, index, state)):
                        future.cancel()
                        return
            if end is not None:
                self._put(end)
                return

    def close(self) -> None:
        """Stop the feeder and reader threads; safe to call more than once."""
        if self._feeder is not None:
            self._stop.set()
            node: object = self.source
            while isinstance(node, BaseNode):  # wake a poller that waits for new versions
                if isinstance(node, Interruptible):
                    node.interrupt()
                node = getattr(node, "source", None)  # every stage keeps its upstream as .source
            self._feeder.join()
            self._feeder = None
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._decoders is not None:
            self._decoders.shutdown(wait=True, cancel_futures=True)
            self._decoders = None
        self._queue = None
