"""A store wrapper that counts requests (for tests and benchmarks).

Request counts are the currency of the protocol's cost claims (O(1) commits,
O(log n) cold starts, one range read per step, a node's polling independent
of its ranks); this is how they are measured. Besides the calls per method
(``calls``), each request is counted as the S3 request it would be, by the
class of key it touches, with the bytes it returned: :meth:`CountingStore.report`.
A request that fails (a 404) is counted too: the store served it.
"""

from __future__ import annotations

import builtins
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from torch_tgb.manifest import keys
from torch_tgb.manifest.watermarks import RETIRED_PREFIX, WATERMARK_PREFIX
from torch_tgb.storage import ObjectInfo, ObjectStore
from torch_tgb.storage._base import Buffer
from torch_tgb.storage._wrapper import ForwardingStore

__all__ = [
    "KEY_CLASSES", "MANIFEST_CLASSES", "REQUEST_TYPES", "CountingStore", "key_class", "merge_reports", "prefix_of",
]

#: classes of keys, as :meth:`CountingStore.report` names them
KEY_CLASSES = ("log", "snapshot", "hint", "boundary", "dataset", "table", "state", "epochs", "data", "watermark",
               "other")
#: the classes that make up the manifest's requests (what discovery costs)
MANIFEST_CLASSES = ("log", "snapshot", "hint", "boundary", "dataset", "table", "state", "epochs")
#: S3 requests: a LIST page holds up to 1,000 keys, a DELETE (DeleteObjects) up to 1,000 keys
REQUEST_TYPES = ("GET", "range GET", "HEAD", "LIST", "PUT", "DELETE")
_PAGE = 1000
#: ``keys.EPOCH_PREFIX``, spelt out: benchmarks/scale.py measures older trees with this module
_EPOCHS = "_tgb/epochs/"


def key_class(key: str) -> str:
    """The class of ``key`` (or of a LIST's prefix): one of :data:`KEY_CLASSES`."""
    if key.startswith(keys.LOG_PREFIX):
        return "log"
    if key.startswith(keys.SNAPSHOT_PREFIX):
        return "snapshot"
    if key == keys.SNAPSHOT_HINT_KEY:
        return "hint"
    if key.startswith(keys.GC_BOUNDARY_PREFIX) or key == keys.GC_BOUNDARY_KEY:
        return "boundary"
    if key == keys.DATASET_KEY:
        return "dataset"
    if key.startswith("_tgb/producers/"):  # format 2: the producers' table's buckets (read by committers only)
        return "table"
    if key.startswith("_tgb/state/"):  # format 2: pipeline states kept out of line (read by their producer only)
        return "state"
    if key.startswith(_EPOCHS):  # registrations of producer incarnations (docs/protocol.md, *Registering*)
        return "epochs"
    if key.startswith("data/"):
        return "data"
    if key.startswith((WATERMARK_PREFIX, RETIRED_PREFIX)):
        return "watermark"
    return "other"


def prefix_of(key: str) -> str:
    """The prefix S3 may partition ``key``'s requests under: everything up to its last ``/`` (a LIST: its prefix)."""
    return key[: key.rfind("/") + 1]


def _pages(n: int) -> int:
    return max(1, -(-n // _PAGE))


class CountingStore(ForwardingStore):
    """Counts calls per operation (``calls``), S3 requests and bytes per key class; passes everything to ``inner``."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.calls: Counter[str] = Counter()
        #: range reads per key (``get_ranges`` and ``get_range_into`` arrive here as ranges too)
        self.range_keys: Counter[str] = Counter()
        #: S3 requests per (key class, request type)
        self.requests: Counter[tuple[str, str]] = Counter()
        #: bytes returned per key class
        self.bytes: Counter[str] = Counter()
        #: bytes written (put, put_if_absent) per key class
        self.written: Counter[str] = Counter()
        #: the manifest's requests per prefix (:func:`prefix_of`): how many prefixes S3 could spread them over
        self.prefixes: Counter[str] = Counter()

    def _count(self, op: str) -> None:
        with self._lock:
            self.calls[op] += 1

    def _request(self, key: str, kind: str, n: int = 1) -> None:
        cls = key_class(key)
        with self._lock:
            self.requests[cls, kind] += n
            if cls in MANIFEST_CLASSES:
                self.prefixes[prefix_of(key)] += n

    def _returned(self, key: str, nbytes: int) -> None:
        with self._lock:
            self.bytes[key_class(key)] += nbytes

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
            self.range_keys.clear()
            self.requests.clear()
            self.bytes.clear()
            self.written.clear()
            self.prefixes.clear()

    def range_reads(self, prefix: str = "") -> int:
        """Range reads of keys under ``prefix`` (``"data/"``: the TGB objects) so far."""
        with self._lock:
            return sum(n for key, n in self.range_keys.items() if key.startswith(prefix))

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    def report(self) -> dict[str, Any]:
        """The S3 requests and bytes so far as plain dicts (JSON-ready; sum several with :func:`merge_reports`).

        ``{"requests": n, "manifest_requests": n, "bytes": n, "written": n, "by_type": {type: n},
        "by_class": {class: {"requests": n, "bytes": n, "written": n, "by_type": {type: n}}}}``
        (``bytes``: returned by reads; ``written``: sent by puts),
        every class of :data:`KEY_CLASSES` and type of :data:`REQUEST_TYPES` present; ``manifest_by_prefix``:
        the manifest's requests per :func:`prefix_of` their key.
        """
        with self._lock:
            requests, nbytes, written = Counter(self.requests), Counter(self.bytes), Counter(self.written)
            prefixes = dict(self.prefixes)
        by_class = {
            c: {"requests": sum(requests[c, t] for t in REQUEST_TYPES), "bytes": nbytes[c], "written": written[c],
                "by_type": {t: requests[c, t] for t in REQUEST_TYPES}}
            for c in KEY_CLASSES
        }
        return {
            "requests": sum(requests.values()),
            "manifest_requests": sum(by_class[c]["requests"] for c in MANIFEST_CLASSES),
            "bytes": sum(nbytes.values()),
            "written": sum(written.values()),
            "by_type": {t: sum(requests[c, t] for c in KEY_CLASSES) for t in REQUEST_TYPES},
            "by_class": by_class,
            "manifest_by_prefix": prefixes,
        }

    def get(self, key: str) -> bytes:
        self._count("get")
        self._request(key, "GET")
        data = self.inner.get(key)
        self._returned(key, len(data))
        return data

    def get_range(self, key: str, start: int, end: int) -> bytes:
        self._count("get_range")
        self._request(key, "range GET")
        with self._lock:
            self.range_keys[key] += 1
        data = self.inner.get_range(key, start, end)
        self._returned(key, len(data))
        return data

    def stat(self, key: str) -> ObjectInfo:
        self._count("stat")
        self._request(key, "HEAD")
        return self.inner.stat(key)

    def exists(self, key: str) -> bool:
        self._count("exists")
        self._request(key, "HEAD")
        return self.inner.exists(key)

    def list(self, prefix: str = "") -> builtins.list[str]:
        self._count("list")
        try:
            keys = self.inner.list(prefix)
        except BaseException:
            self._request(prefix, "LIST")
            raise
        self._request(prefix, "LIST", _pages(len(keys)))
        self._returned(prefix, sum(len(k) for k in keys))
        return keys

    def _wrote(self, key: str, data: Buffer) -> None:
        with self._lock:
            self.written[key_class(key)] += memoryview(data).nbytes

    def put(self, key: str, data: Buffer) -> None:
        self._count("put")
        self._request(key, "PUT")
        self._wrote(key, data)
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: Buffer) -> bool:
        self._count("put_if_absent")
        self._request(key, "PUT")
        self._wrote(key, data)
        return self.inner.put_if_absent(key, data)

    def delete(self, keys: str | Iterable[str]) -> None:
        self._count("delete")
        names = [keys] if isinstance(keys, str) else builtins.list(keys)
        for cls, n in Counter(key_class(k) for k in names).items():
            with self._lock:
                self.requests[cls, "DELETE"] += _pages(n)
        for prefix, n in Counter(prefix_of(k) for k in names if key_class(k) in MANIFEST_CLASSES).items():
            with self._lock:
                self.prefixes[prefix] += _pages(n)
        self.inner.delete(names)


def merge_reports(reports: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The sum of several :meth:`CountingStore.report` dicts (one per process of a node, say)."""
    total: dict[str, Any] = {}
    for report in reports:
        _add(total, report)
    return total


def _add(into: dict[str, Any], other: Mapping[str, Any]) -> None:
    for key, value in other.items():
        if isinstance(value, Mapping):
            _add(into.setdefault(key, {}), value)
        else:
            into[key] = into.get(key, 0) + value
