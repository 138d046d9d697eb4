"""``NodeSharedStore``: the reader processes of a node share what one of them read of the manifest.

Every reader process (each rank, each DataLoader worker) polls the manifest:
an existence probe of the next version, a LIST of the GC boundary, a GET of
each new version. At 8 ranks per node that is 8 times what the node needs.
This wrapper answers those requests from a node-local directory
(:mod:`torch_tgb.storage._node_dir`, ``/dev/shm`` by default) filled by
whichever process of the node asked the store first:

- **immutable objects** (everything under ``_tgb/log/`` and ``_tgb/snapshots/``,
  flat or spread over prefixes: ``_tgb/log/<p>/<v>.json``): fetched
  once per node, single-flight (a per-key ``flock``; the others wait and read
  the answer). An existence probe of a version is a GET: a version found is
  a version read next;
- **answers that change**: an absent version (the probe for the next one),
  ``_tgb/snapshot_hint.json`` and dataset.json's absence are shared for
  ``ttl`` seconds; the LIST of ``_tgb/gc_boundary/`` (and the pre-generation
  ``_tgb/gc_boundary.json``) for ``boundary_ttl`` seconds, *and* only while it
  is newer than every version or snapshot the node fetched (see below);
- **everything else** (TGB data, footers, watermarks, writes, other LISTs)
  passes straight through.

Why the boundary follows fetches: a reader checks what it read against a GC
boundary read *after* it (a slot below the boundary may hold a version a
stalled committer re-created). So a boundary answer is used only if its LIST
was sent after the node's last fetch of a log or snapshot object (the
*fence*, raised before such an answer is published, and by a read that finds
one gone). Answers live under the hash of the namespace's ``dataset.json``
(its incarnation): a namespace recreated under one URL never sees the old
ones. The reasoning and the measured bounds: docs/protocol.md, *Discovery at
scale*. Producers must not use it (they need fresh reads). A directory that
is not ours alone, or fails, costs the sharing, never a read (a warning).
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from torch_tgb.errors import ObjectNotFound
from torch_tgb.storage._base import Buffer, ObjectStore, RangeFailure, RangeRequest
from torch_tgb.storage._keys import validate_key
from torch_tgb.storage._node_dir import Answer, NodeDir, UnsafeDirectory, default_base
from torch_tgb.storage._wrapper import ForwardingStore

__all__ = ["NodeSharedStore", "with_node_share"]

log = logging.getLogger(__name__)

# The manifest's keys (torch_tgb/manifest/keys.py, a floor above: a test keeps these equal to its own).
LOG_PREFIX = "_tgb/log/"
SNAPSHOT_PREFIX = "_tgb/snapshots/"
DATASET_KEY = "_tgb/dataset.json"
HINT_KEY = "_tgb/snapshot_hint.json"
BOUNDARY_PREFIX = "_tgb/gc_boundary/"
LEGACY_BOUNDARY_KEY = "_tgb/gc_boundary.json"
#: the largest answer shared: the manifest's metadata limit (manifest/_json.py MAX_METADATA_BYTES)
MAX_ANSWER_BYTES = 8 * 1024 * 1024

#: seconds an absent version, the hint and dataset.json's absence are shared: at most one probe per node per ttl
DEFAULT_TTL = 2.0
#: seconds a LIST of the GC boundary is shared while no fetch has fenced it
DEFAULT_BOUNDARY_TTL = 60.0
#: bound of everything under the node directory (all namespaces)
DEFAULT_MAX_BYTES = 64 << 20
_WARN_EVERY = 60.0

_IMMUTABLE, _MUTABLE, _BOUNDARY, _DATASET = "immutable", "mutable", "boundary", "dataset"
_PASS = object()  # "not shared: ask the store with the caller's own request"


def _kind(key: object) -> str | None:
    """How ``key`` is shared (None: it passes through)."""
    if not isinstance(key, str):
        return None
    if key.startswith((LOG_PREFIX, SNAPSHOT_PREFIX)):
        return _IMMUTABLE
    return {HINT_KEY: _MUTABLE, LEGACY_BOUNDARY_KEY: _BOUNDARY, DATASET_KEY: _DATASET}.get(key)


def _name(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:32]


class NodeSharedStore(ForwardingStore):
    """Answers a reader's manifest requests from a node-local directory shared by the node's processes.

    ``directory``: where the node's answers live (``None``: ``/dev/shm``, else
    the temp dir); under it ``torch_tgb-<uid>/<hash of the URL>``. ``ttl``,
    ``boundary_ttl``: how long changing answers are shared (see the module
    docstring); ``max_bytes`` bounds the whole directory; ``lock_timeout``:
    how long a process waits for another's fetch of the same key before it
    asks the store itself. ``counters``: this process's ``hits`` (answers from
    the directory), ``fetches`` (requests it sent for the node), ``absent``
    (of those, answered "no such object"), ``lock_timeouts`` and ``unshared``
    (requests passed through: no namespace yet, an answer over the limit).
    """

    def __init__(
        self, inner: ObjectStore, directory: str | os.PathLike[str] | None = None, *, ttl: float = DEFAULT_TTL,
        boundary_ttl: float = DEFAULT_BOUNDARY_TTL, max_bytes: int = DEFAULT_MAX_BYTES, lock_timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(inner)
        if ttl <= 0 or boundary_ttl <= 0 or lock_timeout < 0:
            raise ValueError(f"NodeSharedStore needs ttl > 0, boundary_ttl > 0, lock_timeout >= 0, got {ttl=}, "
                             f"{boundary_ttl=}, {lock_timeout=}")
        self.directory = os.path.abspath(os.fspath(directory)) if directory is not None else default_base()
        self.ttl, self.boundary_ttl, self.lock_timeout = float(ttl), float(boundary_ttl), float(lock_timeout)
        self.node_dir = NodeDir(self.directory, self.url, max_bytes=max_bytes, max_answer=MAX_ANSWER_BYTES)
        self._clock = clock
        self._dataset: bytes | None = None  # this process's dataset.json, read once: it names the incarnation
        self._incarnation: str | None = None
        self._broken = False  # the directory is not ours alone: nothing is shared
        self._warned_at = float("-inf")
        self.counters = dict.fromkeys(("hits", "fetches", "absent", "lock_timeouts", "unshared"), 0)

    def _count(self, name: str) -> None:
        with self._lock:
            self.counters[name] += 1

    # --- the shared answers ------------------------------------------------------------

    def _fresh(self, answer: Answer, ttl: float) -> bool:
        return 0.0 <= self._clock() - answer.stamp < ttl

    def _local(self, op: Callable[[], Answer | bool | None]) -> Answer | bool | None:
        """A node-directory operation; its failure costs the sharing of this request, never the request."""
        try:
            return op()
        except OSError as e:
            self._trouble(e)
            return None

    def _trouble(self, error: OSError) -> None:
        if isinstance(error, UnsafeDirectory):
            self._broken = True
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY:
            self._warned_at = now
            log.warning("%s: the node share at %s failed (%s); %s", self.url, self.node_dir.path, error,
                        "requests go to the store unshared" if self._broken else "this request went to the store")

    @contextlib.contextmanager
    def _locked(self, name: str, *, own: bool = False) -> Iterator[bool]:
        with contextlib.ExitStack() as stack:
            try:
                held = stack.enter_context(self.node_dir.lock(name, timeout=self.lock_timeout, own=own))
            except OSError as e:
                self._trouble(e)
                yield False
                return
            if not held:
                self._count("lock_timeouts")
            yield held

    def _shared(self, sub: str, name: str, usable: Callable[[Answer], bool], ask: Callable[[], Answer]) -> Answer:
        """The node's answer ``sub/name`` if ``usable``, else asked once for the node (single-flight) and stored."""
        found = self._local(lambda: self.node_dir.read(sub, name))
        if isinstance(found, Answer) and usable(found):
            self._count("hits")
            return found
        with self._locked(f"{sub}/{name}") as held:
            if held:  # another process may have asked while we waited
                found = self._local(lambda: self.node_dir.read(sub, name))
                if isinstance(found, Answer) and usable(found):
                    self._count("hits")
                    return found
            answer = ask()  # a store error propagates, and nothing is stored
            self._local(lambda: self.node_dir.write(sub, name, answer))
            return answer

    def _ask(self, key: str, *, fence: bool, fence_absent: bool) -> Answer:
        """One bounded GET of ``key`` for the node; raises the fence before a log/snapshot answer is published."""
        sent = self._clock()
        self._count("fetches")
        try:
            data = self.inner.get_range(key, 0, MAX_ANSWER_BYTES + 1)
        except ObjectNotFound:
            self._count("absent")
            if fence_absent:  # an object expected to exist is gone: a reclamation passed, list the boundary again
                self._raise_fence()
            return Answer(None, sent)
        if fence:
            self._raise_fence()
        return Answer(data, sent)

    def _raise_fence(self) -> None:
        """Boundary answers listed before now are no longer used (the node just read something they must check)."""
        sub, now = self._incarnation, self._clock()
        if sub is None:
            return

        def raise_it() -> None:
            with self._locked(f"{sub}/fence", own=True):  # its own lock file: raised while a stripe is held
                current = self.node_dir.read(sub, "fence")
                if current is None or current.stamp < now:
                    self.node_dir.write(sub, "fence", Answer(b"", now))

        self._local(raise_it)

    def _fence(self, sub: str) -> float:
        found = self._local(lambda: self.node_dir.read(sub, "fence"))
        if isinstance(found, Answer):
            return found.stamp
        self._raise_fence()  # none yet (or pruned): assume a fetch just now, so the boundary is listed once more
        return self._clock()

    def _boundary_usable(self, sub: str) -> Callable[[Answer], bool]:
        return lambda a: self._fresh(a, self.boundary_ttl) and a.stamp >= self._fence(sub)

    def _dataset_answer(self) -> Answer:
        """dataset.json: this process's copy, else the node's answer if younger than ``ttl``, else asked."""
        if self._dataset is not None:
            return Answer(self._dataset, 0.0)
        answer = self._shared("", "dataset", lambda a: self._fresh(a, self.ttl),
                              lambda: self._ask(DATASET_KEY, fence=False, fence_absent=False))
        if answer.payload is not None and len(answer.payload) <= MAX_ANSWER_BYTES:
            self._dataset = answer.payload
            self._incarnation = hashlib.sha256(answer.payload).hexdigest()[:24]
        return answer

    def _object(self, key: str, *, probe: bool) -> bytes | None | object:
        """``key``'s bytes, None if absent, or ``_PASS``; ``probe``: an existence check (may use a fresh absence)."""
        kind = _kind(key)
        if kind is None or self._broken:
            return _PASS
        validate_key(key, namespace=self.url)
        if kind == _DATASET:
            answer = self._dataset_answer()
        else:
            if self._incarnation is None:
                self._dataset_answer()
            sub = self._incarnation
            if sub is None or self._broken:  # no namespace yet: only its absence is shared
                self._count("unshared")
                return _PASS
            started = self._clock()
            if kind == _IMMUTABLE:
                # a probe takes an absence younger than ttl; a read only one asked after it began
                usable = (lambda a: a.payload is not None or self._fresh(a, self.ttl)) if probe else (
                    lambda a: a.payload is not None or a.stamp > started)
                answer = self._shared(sub, _name(key), usable,
                                      lambda: self._ask(key, fence=True, fence_absent=not probe))
            elif kind == _MUTABLE:
                answer = self._shared(sub, _name(key), lambda a: self._fresh(a, self.ttl),
                                      lambda: self._ask(key, fence=False, fence_absent=False))
            else:
                answer = self._shared(sub, _name(key), self._boundary_usable(sub),
                                      lambda: self._ask(key, fence=False, fence_absent=False))
        if answer.payload is not None and len(answer.payload) > MAX_ANSWER_BYTES:
            self._count("unshared")
            return _PASS  # over the limit: the caller's own request gets what the store says
        return answer.payload

    def answer_path(self, key: str) -> str | None:
        """Where the node's answer about ``key`` lives (there or not); None before the namespace is known."""
        if _kind(key) == _DATASET:
            return os.path.join(self.node_dir.path, "dataset")
        if self._incarnation is None:
            return None
        return os.path.join(self.node_dir.path, self._incarnation, _name(key))

    def _missing(self, key: str) -> ObjectNotFound:
        return ObjectNotFound(f"{self.url}: no object {key!r} (answered by the node share at {self.node_dir.path})")

    # --- reads ------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        data = self._object(key, probe=False)
        if data is _PASS:
            return self.inner.get(key)
        if data is None:
            raise self._missing(key)
        assert isinstance(data, bytes)
        return data

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if _kind(key) is None or not (0 <= start <= end):  # an invalid range: the store's own error
            return self.inner.get_range(key, start, end)
        data = self._object(key, probe=False)
        if data is _PASS:
            return self.inner.get_range(key, start, end)
        if data is None:
            raise self._missing(key)
        assert isinstance(data, bytes)
        return data[start:end]

    def get_range_into(self, key: str, start: int, out: memoryview) -> int:
        if _kind(key) is None:
            return self.inner.get_range_into(key, start, out)
        data = self.get_range(key, start, start + len(out))
        out[: len(data)] = data
        return len(data)

    def get_ranges(
        self, requests: Sequence[RangeRequest], *, continue_on_error: bool = False
    ) -> builtins.list[bytes | RangeFailure]:
        """Manifest ranges from the node's answers, the others in one batch from the store; request order kept."""
        mine = [_kind(r.key) is not None for r in requests]
        if not any(mine):
            return self.inner.get_ranges(requests, continue_on_error=continue_on_error)
        shared = iter(ObjectStore.get_ranges(self, [r for r, m in zip(requests, mine) if m], continue_on_error=True))
        passed = [r for r, m in zip(requests, mine) if not m]
        others = iter(self.inner.get_ranges(passed, continue_on_error=True) if passed else [])
        out = [next(shared) if m else next(others) for m in mine]
        failure = next((r for r in out if isinstance(r, RangeFailure)), None)
        if failure is not None and not continue_on_error:
            raise failure.error
        return out

    def exists(self, key: str) -> bool:
        data = self._object(key, probe=True)
        if data is _PASS:
            return self.inner.exists(key)
        return data is not None

    def list(self, prefix: str = "") -> builtins.list[str]:
        if prefix != BOUNDARY_PREFIX or self._broken:
            return self.inner.list(prefix)
        if self._incarnation is None:
            self._dataset_answer()
        sub = self._incarnation
        if sub is None or self._broken:
            return self.inner.list(prefix)

        def ask() -> Answer:
            sent = self._clock()
            self._count("fetches")
            return Answer("\n".join(self.inner.list(prefix)).encode(), sent)  # keys hold no newline (validate_key)

        answer = self._shared(sub, "list-" + _name(prefix), self._boundary_usable(sub), ask)
        return answer.payload.decode().split("\n") if answer.payload else []

    # --- writes pass through, and this node forgets what it knew of the key ---------------

    def _forget(self, keys: Iterable[str]) -> None:
        sub = self._incarnation
        if sub is None or self._broken:
            return
        for key in keys:
            if _kind(key) in (_IMMUTABLE, _MUTABLE, _BOUNDARY):
                self._local(functools.partial(self.node_dir.drop, sub, _name(key)))

    def put(self, key: str, data: Buffer) -> None:
        self.inner.put(key, data)
        self._forget([key])

    def put_if_absent(self, key: str, data: Buffer) -> bool:
        created = self.inner.put_if_absent(key, data)
        self._forget([key])
        return created

    def delete(self, keys: str | Iterable[str]) -> None:
        keys = [keys] if isinstance(keys, str) else builtins.list(keys)
        self.inner.delete(keys)
        self._forget(keys)

    def close(self) -> None:
        self.node_dir.close()
        super().close()

    def __repr__(self) -> str:
        return (f"NodeSharedStore({self.inner!r}, directory={self.node_dir.path!r}, ttl={self.ttl}, "
                f"boundary_ttl={self.boundary_ttl})")


def with_node_share(
    store: ObjectStore, node_cache: str | os.PathLike[str] | bool | None = True, *, handed_in: bool = False
) -> ObjectStore:
    """``store`` behind a :class:`NodeSharedStore` where sharing helps; else ``store`` as it is.

    ``node_cache``: ``True`` shares in the default directory, a path there,
    ``None``/``False`` turns it off. ``handed_in``: the caller was given
    ``store`` configured (not a URL it opened): then only an explicit
    directory wraps it. A namespace on a local disk (its objects have a local
    path: the page cache already serves the node) or in this process's memory
    (``memory://``: nothing to share between processes) is never wrapped.
    """
    if node_cache is None or node_cache is False:
        return store
    if node_cache is not True and not isinstance(node_cache, (str, os.PathLike)):
        raise TypeError(f"node_cache must be True, False, None or a directory, got {node_cache!r}")
    if (node_cache is True and handed_in) or store.local_path(DATASET_KEY) is not None:
        return store
    if store.url.startswith("memory://"):
        return store
    return NodeSharedStore(store, None if node_cache is True else node_cache)

