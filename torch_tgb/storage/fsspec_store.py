"""A namespace on any fsspec file system (S3 first of all).

Atomicity
---------
* ``put``: one ``PUT`` of the whole object (S3 objects appear whole or not at
  all; objects above 5 GiB would need multipart uploads, which also become
  visible only on completion).
* ``put_if_absent``: ``pipe_file(..., mode="create")``, which s3fs sends as
  ``PUT`` with ``If-None-Match: *``; the store itself decides, atomically,
  and answers ``412 Precondition Failed`` (s3fs: ``FileExistsError``) to every
  writer but the first. Only protocols known to implement ``mode="create"``
  server-side are trusted (:data:`CONDITIONAL_PROTOCOLS`); on others
  ``put_if_absent`` raises :class:`ConditionalWriteUnsupported` rather than
  fall back to fsspec's check-then-write. S3 clones that ignore the header are
  caught by :func:`torch_tgb.storage.ensure_conditional_writes`.

S3 listings are not cached (``use_listings_cache=False``), so every store
sees other writers' creates and deletes at once; with that off, sharing
fsspec's cached file system instance between stores with equal options is
safe and saves ~0.25 s of client set-up per store. ``get_ranges`` uses the async ``_cat_ranges`` of async
file systems (one event loop, ``max_in_flight`` requests in flight) instead
of a thread per request.

Retries belong to :class:`RetryingStore` alone: for S3, botocore's retries
(``config_kwargs["retries"]``) and s3fs's retry loop are turned off by default,
because a hidden retry of a conditional ``PUT`` whose reply was lost would
report our own win as a loss; surfaced as :class:`AmbiguousWriteError`, the
retry layer can read the object back instead.
"""

from __future__ import annotations

import builtins
import copy
import os
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import fsspec
from fsspec.asyn import AsyncFileSystem, sync

from torch_tgb.errors import ConditionalWriteUnsupported, ObjectNotFound, TGBError
from torch_tgb.storage._base import Buffer, PartialObject, RangeFailure, RangeRequest
from torch_tgb.storage._client_store import ClientStore
from torch_tgb.storage._errors import translate
from torch_tgb.storage._keys import validate_key, validate_prefix
from torch_tgb.storage._s3_uploads import abort_uploads, open_uploads
from torch_tgb.storage._secrets import secret_values

__all__ = ["CONDITIONAL_PROTOCOLS", "FsspecStore", "redact_url"]

#: protocols whose ``pipe_file(mode="create")`` is a server-side conditional create
CONDITIONAL_PROTOCOLS = frozenset({"s3", "s3a"})
# Defaults that make a store see its own writes and other stores' writes at once.
_PROTOCOL_DEFAULTS: dict[str, dict[str, Any]] = {
    "s3": {"use_listings_cache": False},
    "s3a": {"use_listings_cache": False},
}


def redact_url(url: str) -> str:
    """``url`` without user info, query or fragment (they may hold credentials)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class FsspecStore(ClientStore[fsspec.AbstractFileSystem]):
    """Objects under ``url`` on the fsspec file system its protocol names.

    The file system is the client of a :class:`ClientStore` (built lazily, rebuilt after a fork or unpickling,
    errors translated with secrets redacted, the empty-range rule); what fsspec does better than one request
    per call stays here: async range batches, S3's ``DeleteObjects``, multipart-upload leftovers.
    """

    container_word = "bucket"

    def __init__(
        self,
        url: str,
        storage_options: dict[str, Any] | None = None,
        *,
        max_in_flight: int = 32,
    ) -> None:
        clean = redact_url(url).rstrip("/")
        protocol = urlsplit(url).scheme or "file"
        # a deep copy: botocore writes into nested option dicts it is given
        options = copy.deepcopy({**_PROTOCOL_DEFAULTS.get(protocol, {}), **(storage_options or {})})
        if protocol in ("s3", "s3a"):
            if options["use_listings_cache"]:
                # the GC boundary and the Reclaimer's decisions are LISTs: a cached listing could show an old one
                raise ValueError(
                    f"{clean}: storage option use_listings_cache=True is not supported: the manifest's "
                    "GC boundary is read by LIST and must see other writers at once"
                )
            config = options.setdefault("config_kwargs", {})
            # botocore allows 10 connections by default: too few for max_in_flight reads
            config.setdefault("max_pool_connections", max(10, max_in_flight))
            # One retry layer (RetryingStore). A hidden botocore retry of a
            # conditional PUT whose reply was lost would get 412 and turn our
            # own win into "someone else won" with no AmbiguousWriteError.
            config.setdefault("retries", {"total_max_attempts": 1})
        self.protocol = protocol
        # the options are kept (never printed) to rebuild the file system in a forked or unpickled process
        super().__init__(clean, urlsplit(url).hostname or "", "", options, max_in_flight=max_in_flight)
        self._url = url  # with its user info, for url_to_fs; never printed
        self._redact = secret_values(url, options)  # the user info's secrets too
        fs, root = self._url_to_fs()
        self.root = root.rstrip("/")
        self.prefix = fs._strip_protocol(self.root).rstrip("/")  # object names are <prefix>/<key>
        self._client, self._pid = fs, os.getpid()

    def _url_to_fs(self) -> tuple[fsspec.AbstractFileSystem, str]:
        try:
            fs, root = fsspec.core.url_to_fs(self._url, **copy.deepcopy(self._options))
        except Exception as e:  # unknown protocol, missing driver, bad option
            raise translate(e, url=self.url, op="open", key=None, redact=self._redact) from None
        if self.protocol in ("s3", "s3a") and isinstance(getattr(fs, "retries", None), int):
            fs.retries = 1  # s3fs's own retry loop (timeouts, SlowDown): same reason as above
        return fs, root

    def _connect(self) -> fsspec.AbstractFileSystem:
        return self._url_to_fs()[0]

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """The fsspec file system (the store's client); rebuilt after a fork (async ones are not fork-safe)."""
        return self.client

    def _name(self, key: str) -> str:
        return f"{self.prefix}/{validate_key(key, namespace=self.url)}"

    # --- the ClientStore primitives on fsspec --------------------------------------

    def _read(self, name: str, start: int | None, end: int | None) -> bytes:
        return bytes(self.fs.cat_file(name, start=start, end=end))

    def _stat(self, name: str) -> tuple[int, float]:
        if self.protocol in ("s3", "s3a"):
            # One HEAD: fs.info() follows a 404 with a LIST to look for a
            # "directory", doubling the cost of every probe of a missing version.
            bucket, object_key, _ = self.fs.split_path(name)
            head = self.fs.call_s3("head_object", Bucket=bucket, Key=object_key)
            return int(head["ContentLength"]), _mtime(head)
        info = self.fs.info(name)
        if info.get("type") != "file":
            raise FileNotFoundError(f"{name}: a prefix, not an object")
        return int(info["size"]), _mtime(info)

    def _names(self, prefix: str) -> Iterator[str]:
        """Objects under the directory of ``prefix`` (``find``: recursive, no directories) that start with it."""
        head = prefix.rsplit("/", 1)[0]
        try:
            found = self.fs.find(head, withdirs=False)
        except FileNotFoundError:
            return
        for path in found:
            path = self.fs._strip_protocol(path)
            if path.startswith(prefix):
                yield path

    def _upload(self, name: str, data: bytes, *, if_absent: bool) -> bool:
        if not if_absent:
            self.fs.pipe_file(name, data)
            return True
        try:
            self.fs.pipe_file(name, data, mode="create")
        except FileExistsError:
            return False
        return True

    def _remove(self, name: str) -> None:
        self.fs.rm_file(name)

    def _check_container(self) -> bool:
        """S3: one ``HEAD`` of the bucket; other file systems: always there (directories appear on write)."""
        if self.protocol not in ("s3", "s3a"):
            return True
        try:
            self.fs.call_s3("head_bucket", Bucket=self.fs.split_path(self.root)[0])
        except Exception as e:
            if isinstance(self._fail(e, "HEAD bucket", None), ObjectNotFound):
                return False
            raise
        return True

    def list_partial(self, prefix: str = "") -> builtins.list[PartialObject]:
        """S3: the multipart uploads under ``prefix`` left open (``_s3_uploads``); other file systems: none."""
        prefix = validate_prefix(prefix, namespace=self.url)
        if self.protocol not in CONDITIONAL_PROTOCOLS:
            return []
        try:
            return open_uploads(self.fs, self.prefix, prefix)
        except Exception as e:
            raise self._fail(e, "list_partial", prefix)

    def delete_partial(self, partials: Iterable[PartialObject]) -> None:
        partials = builtins.list(partials)
        if self.protocol not in CONDITIONAL_PROTOCOLS or not partials:
            return
        try:
            abort_uploads(self.fs, self.prefix, partials)
        except Exception as e:
            raise self._fail(e, "delete_partial", partials[0].key)

    def get_ranges(
        self, requests: Sequence[RangeRequest], *, continue_on_error: bool = False
    ) -> builtins.list[bytes | RangeFailure]:
        """One async batch on async file systems; the thread pool otherwise."""
        if not isinstance(self.fs, AsyncFileSystem) or len(requests) <= 1:
            return super().get_ranges(requests, continue_on_error=continue_on_error)
        results: list[bytes | RangeFailure | None] = [None] * len(requests)
        batch: list[int] = []
        for i, r in enumerate(requests):
            try:
                validate_key(r.key, namespace=self.url)
            except TGBError as e:
                results[i] = RangeFailure(r, e)
                continue
            if r.start == r.end:
                results[i] = self._read_one(r, True)  # needs an existence check, not a read
            else:
                batch.append(i)
        if batch:
            raw = sync(
                self.fs.loop,
                self.fs._cat_ranges,
                [self._name(requests[i].key) for i in batch],
                [requests[i].start for i in batch],
                [requests[i].end for i in batch],
                batch_size=self.max_in_flight,
                on_error="return",
            )
            for i, value in zip(batch, raw):
                results[i] = self._settle(requests[i], value)
        out: list[bytes | RangeFailure] = []
        for result in results:
            if result is None:
                raise AssertionError("every request has a result")  # internal invariant
            if isinstance(result, RangeFailure) and not continue_on_error:
                raise result.error
            out.append(result)
        return out

    def _past_end(self, key: str, start: int, error: TGBError) -> bytes:
        """S3 answers a range starting at or past the end with 416; ours is ``b""`` (as in ``get_range``)."""
        if isinstance(error, ObjectNotFound) or start < self.size(key):
            raise error
        return b""

    def _settle(self, request: RangeRequest, value: object) -> bytes | RangeFailure:
        """Turn one ``_cat_ranges`` result (bytes or an exception) into ours."""
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        if not isinstance(value, BaseException):
            value = TypeError(f"unexpected range result of type {type(value).__name__}")
        error = self._fail(value, "get_range", request.key)
        try:
            return self._past_end(request.key, request.start, error)
        except TGBError as e:
            return RangeFailure(request, e)

    # --- writes ----------------------------------------------------------------

    def put_if_absent(self, key: str, data: Buffer) -> bool:
        if self.protocol not in CONDITIONAL_PROTOCOLS:
            raise ConditionalWriteUnsupported(
                f"{self.url}: put_if_absent {key!r}: protocol {self.protocol!r} has no server-side "
                f"create-if-absent known to torch_tgb (supported: {sorted(CONDITIONAL_PROTOCOLS)})"
            )
        return super().put_if_absent(key, data)

    def delete(self, keys: str | Iterable[str]) -> None:
        """s3fs: ``DeleteObjects``, 1000 keys a request; other file systems: one removal per key."""
        if not (hasattr(self.fs, "_call_s3") and isinstance(self.fs, AsyncFileSystem)):
            super().delete(keys)
            return
        keys = [keys] if isinstance(keys, str) else list(keys)
        paths = [self._name(k) for k in keys]  # every key validated before anything is deleted
        try:
            for i in range(0, len(paths), 1000):
                failed = sync(self.fs.loop, _delete_objects, self.fs, paths[i : i + 1000])
                if failed:
                    raise _DeleteFailed(failed)
        except Exception as e:
            raise self._fail(e, "delete", keys[0] if len(keys) == 1 else f"{len(keys)} keys")

    def close(self) -> None:
        """Nothing to release eagerly: s3fs closes its session with the file system."""


class _DeleteFailed(Exception):
    """Keys DeleteObjects answered with an error (HTTP 200 and an ``Errors`` list): ``response`` as botocore's."""

    def __init__(self, failed: list[dict[str, Any]]) -> None:
        first = failed[0]
        super().__init__(f"{len(failed)} key(s) not deleted, the first {first.get('Key')!r}: "
                         f"{first.get('Code')} {first.get('Message', '')}".rstrip())
        self.response = {"Error": {"Code": first.get("Code")}}  # what translate() reads: SlowDown is transient


async def _delete_objects(fs: Any, paths: list[str]) -> list[dict[str, Any]]:
    """DeleteObjects of ``paths`` (one bucket, <= 1000); the per-key errors it answered with.

    s3fs's ``_bulk_delete`` sends ``Quiet`` and returns without looking at
    ``Errors``: a key refused with ``SlowDown`` or ``AccessDenied`` inside a
    200 reply would count as deleted. (A missing key is no error.)
    """
    bucket = fs.split_path(paths[0])[0]
    objects = [{"Key": fs.split_path(path)[1]} for path in paths]
    for path in paths:
        fs.invalidate_cache(fs._parent(path))
    out = await fs._call_s3("delete_objects", Bucket=bucket, Delete={"Objects": objects, "Quiet": True})
    return [e for e in out.get("Errors") or [] if e.get("Code") != "NoSuchKey"]  # deleting nothing is no error


def _mtime(info: dict[str, Any]) -> float:
    for name in ("mtime", "LastModified", "last_modified", "created"):
        value = info.get(name)
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, (int, float)):
            return float(value)
    return 0.0
