"""The abstract object store every backend implements.

A store is bound to one namespace (a URL prefix); keys are relative paths
inside it. The surface is deliberately small (zarr's ``Store`` is the model):

=================  ===========================================================
``get``            whole object
``get_range``      bytes ``[start, end)``; a range past the end is cut short
``stat``           size and modification time
``exists``         cheap existence check
``list``           keys under a prefix, sorted
``put``            write or replace; readers never see a partial object
``put_if_absent``  atomic create-if-absent, ``True`` iff this call created it
``delete``         idempotent removal of one or many keys
=================  ===========================================================

``get_ranges`` (many range reads, bounded concurrency, results in request
order) and ``get_range_into`` (a range read into a caller's writable buffer)
are built on ``get_range`` here, ``open_writer`` (an object written in parts,
published on commit) on ``put``; backends may override them. ``list_partial``
and ``delete_partial`` see and remove the writes a killed writer left
unfinished (none by default: a store that buffers and ``put``s leaves none).
"""

from __future__ import annotations

import abc
import builtins
import concurrent.futures
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from torch_tgb.errors import StorageError, TGBError
from torch_tgb.storage._writer import Buffer, BufferedWriter, ObjectWriter, PartialObject

__all__ = ["Buffer", "CachingStore", "ObjectInfo", "ObjectStore", "PartialObject", "RangeFailure", "RangeRequest"]


@dataclass(frozen=True)
class RangeRequest:
    """A read of bytes ``[start, end)`` of ``key``."""

    key: str
    start: int
    end: int

    def __post_init__(self) -> None:
        if not (0 <= self.start <= self.end):
            raise ValueError(f"invalid byte range [{self.start}, {self.end}) for key {self.key!r}")

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class RangeFailure:
    """Placeholder for a failed read in ``get_ranges(..., continue_on_error=True)``."""

    request: RangeRequest
    error: TGBError

    def __bool__(self) -> bool:  # lets callers write ``if not result:``
        return False


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    mtime: float  # seconds since the epoch, as the backend reports it


class ObjectStore(abc.ABC):
    """An object store bound to one namespace. Thread-safe."""

    #: the namespace URL, with any credentials removed (safe to log)
    url: str
    #: upper bound of concurrent requests ``get_ranges`` issues
    max_in_flight: int = 16

    # --- primitives every backend implements --------------------------------

    @abc.abstractmethod
    def get(self, key: str) -> bytes: ...

    @abc.abstractmethod
    def get_range(self, key: str, start: int, end: int) -> bytes: ...

    @abc.abstractmethod
    def stat(self, key: str) -> ObjectInfo: ...

    @abc.abstractmethod
    def exists(self, key: str) -> bool: ...

    @abc.abstractmethod
    def list(self, prefix: str = "") -> list[str]: ...

    @abc.abstractmethod
    def put(self, key: str, data: Buffer) -> None: ...

    @abc.abstractmethod
    def put_if_absent(self, key: str, data: Buffer) -> bool: ...

    @abc.abstractmethod
    def delete(self, keys: str | Iterable[str]) -> None: ...

    # --- derived operations ---------------------------------------------------

    def size(self, key: str) -> int:
        return self.stat(key).size

    def get_range_into(self, key: str, start: int, out: memoryview) -> int:
        """Read bytes ``[start, start + len(out))`` of ``key`` into ``out``; returns how many.

        Fewer than ``len(out)`` only at the end of the object. Lets readers
        land data in writable buffers they own; backends that can read in
        place may override (the default copies one ``get_range``).
        """
        data = self.get_range(key, start, start + len(out))
        out[: len(data)] = data
        return len(data)

    def local_path(self, key: str) -> str | None:
        """Absolute path of ``key`` if it is a local file that may be memory-mapped."""
        return None

    #: whether :meth:`open_writer` writes in place (not through ``put``): wrappers that must see every
    #: ``put`` leave it False, so writers they open buffer and put
    writes_in_place: bool = False

    def open_writer(self, key: str, *, size_hint: int = 0) -> ObjectWriter:
        """A writer of object ``key`` in parts, published on commit with ``put``'s guarantee (``storage._writer``).

        Default: the parts gathered in memory (``size_hint`` bytes reserved),
        one ``put`` on commit. A backend that can write in place overrides it.
        """
        return BufferedWriter(self, key, size_hint=size_hint)

    def list_partial(self, prefix: str = "") -> builtins.list[PartialObject]:
        """Writes started under ``prefix`` and never finished (a killed writer's temp file or upload).

        Default: none (a store whose writers gather the bytes in memory and
        ``put`` them leaves nothing behind). A partial write is never an
        object: ``list`` does not show it, ``get`` does not find it.
        """
        return []

    def delete_partial(self, partials: Iterable[PartialObject]) -> None:
        """Remove these partial writes (idempotent). Only what ``list_partial`` returned, never an object."""

    def get_ranges(
        self, requests: Sequence[RangeRequest], *, continue_on_error: bool = False
    ) -> builtins.list[bytes | RangeFailure]:
        """Read many ranges concurrently; results come back in request order.

        At most ``max_in_flight`` requests run at once. Without
        ``continue_on_error`` the first failure (in request order) is raised;
        with it, each failed read is a :class:`RangeFailure` at its position.
        """
        if not requests:
            return []
        if len(requests) == 1 or self.max_in_flight <= 1:
            return [self._read_one(r, continue_on_error) for r in requests]
        workers = min(self.max_in_flight, len(requests))
        with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="tgb-get") as pool:
            return list(pool.map(lambda r: self._read_one(r, continue_on_error), requests))

    def _read_one(self, request: RangeRequest, continue_on_error: bool) -> bytes | RangeFailure:
        try:
            return self.get_range(request.key, request.start, request.end)
        except TGBError as e:
            if not continue_on_error:
                raise
            return RangeFailure(request, e)
        except Exception as e:  # a backend bug must not vanish into a placeholder untyped
            error = StorageError(f"{self.url}: reading {request.key!r} failed: {e!r}")
            error.__cause__ = e
            if not continue_on_error:
                raise error from e
            return RangeFailure(request, error)

    def check_root(self) -> None:
        """Raise :class:`NamespaceNotFound` if the container the namespace lives in (an S3 bucket) is missing.

        One cheap request, so that a mistyped bucket fails at open instead of
        looking like an empty namespace. Default: nothing to check (a local
        directory or an in-memory namespace is created by its first write).
        """

    def close(self) -> None:
        """Release connections and pools. The store must not be used afterwards."""

    def __enter__(self) -> ObjectStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


@runtime_checkable
class CachingStore(Protocol):
    """A store that keeps copies of what it read (a hot tier): ``forget`` drops this node's copies of ``keys``.

    Readers call it when cached bytes fail their checks, and read the keys
    again from the origin (``datapipes.read.batch_fetch.refetch_if_cached``).
    """

    def forget(self, keys: Iterable[str] | None = None) -> None: ...
