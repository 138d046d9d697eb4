"""The shared half of the stores built on a cloud vendor's own client (GCS, Azure Blob).

A :class:`ClientStore` turns the eight primitives into a handful of
backend calls on object *names* (the namespace prefix joined with the key):
``_read``, ``_stat``, ``_names``, ``_upload``, ``_remove``. Everything the
backends would otherwise each repeat lives here once:

* keys are validated before any request, and names are stripped back to keys;
* the client is built lazily and rebuilt in a forked or unpickled process
  (HTTP connection pools are not fork-safe, and clients do not pickle);
* errors become torch_tgb errors through :func:`translate_hidden`, with the
  values of secret options and URL user info redacted, and the cause dropped
  where it would print one;
* a range that starts at or past the end is ``b""`` (the stores answer 416);
* deletes of many keys run ``max_in_flight`` at a time, a missing key ignored.

Retries belong to :class:`~torch_tgb.storage.RetryingStore` alone: backends
build their clients with retries off, so that a conditional create whose
reply was lost surfaces as :class:`AmbiguousWriteError` instead of being
resent blind and reported as someone else's win.
"""

from __future__ import annotations

import abc
import concurrent.futures
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from torch_tgb.errors import MissingExtra, NamespaceNotFound, ObjectNotFound, TGBError
from torch_tgb.storage._base import Buffer, ObjectInfo, ObjectStore
from torch_tgb.storage._errors import translate_hidden
from torch_tgb.storage._keys import validate_key, validate_prefix
from torch_tgb.storage._secrets import secret_values

__all__ = ["ClientStore", "require_extra"]


def require_extra(url: str, what: str, extra: str, modules: Iterable[str]) -> None:
    """Import ``modules`` or raise :class:`MissingExtra`: one line naming the extra that installs them."""
    import importlib

    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise MissingExtra(f'{url}: {what} needs {module}: pip install "torch-tgb[{extra}]"') from e


#: the vendor client a backend talks through (an Azure ContainerClient, a GCS Bucket)
ClientT = TypeVar("ClientT")

class ClientStore(ObjectStore, Generic[ClientT]):
    """Objects named ``<prefix>/<key>`` in one bucket or container, through a vendor client.

    Subclasses set :attr:`url` (credential-free), :attr:`container`,
    :attr:`prefix` and the secrets to redact, then implement the
    ``_connect`` / ``_read`` / ``_stat`` / ``_names`` / ``_upload`` /
    ``_remove`` / ``_check_container`` calls on names.
    """

    #: what the container is called in messages ("bucket", "container")
    container_word = "container"

    def __init__(self, url: str, container: str, prefix: str, options: Mapping[str, Any], *, max_in_flight: int) -> None:
        self.url = url
        self.container = container
        self.prefix = prefix.strip("/")
        self.max_in_flight = max_in_flight
        self._options = dict(options)  # kept (never printed) to rebuild the client after a fork
        self._redact = secret_values(url, options)
        self._lock = threading.Lock()
        self._client: ClientT | None = None
        self._pid = -1

    # --- what a backend implements ---------------------------------------------

    @abc.abstractmethod
    def _connect(self) -> ClientT:
        """A new client for :attr:`container` (built from ``self._options``)."""

    @abc.abstractmethod
    def _read(self, name: str, start: int | None, end: int | None) -> bytes:
        """Bytes ``[start, end)`` of ``name`` (the whole object when both are None)."""

    @abc.abstractmethod
    def _stat(self, name: str) -> tuple[int, float]:
        """``(size, mtime)`` of ``name``; raises the client's not-found error if missing."""

    @abc.abstractmethod
    def _names(self, prefix: str) -> Iterator[str]:
        """Names of the objects that start with ``prefix``."""

    @abc.abstractmethod
    def _upload(self, name: str, data: bytes, *, if_absent: bool) -> bool:
        """Write ``name``; with ``if_absent`` atomically only if it does not exist (False: it did)."""

    @abc.abstractmethod
    def _remove(self, name: str) -> None:
        """Delete ``name``; the client's not-found error if it is missing."""

    @abc.abstractmethod
    def _check_container(self) -> bool:
        """True if the bucket/container exists."""

    # --- client lifetime ----------------------------------------------------------

    @property
    def client(self) -> ClientT:
        """The vendor client; rebuilt after a fork (connection pools must not be shared)."""
        client = self._client
        if client is None or self._pid != os.getpid():
            client = self._reconnect()
        return client

    def _reconnect(self) -> ClientT:
        with self._lock:  # one thread connects; the others take its client
            client = self._client
            if client is None or self._pid != os.getpid():
                try:
                    client = self._connect()
                except TGBError:
                    raise
                except Exception as e:  # a bad option, a credential file that does not parse
                    raise self._fail(e, "open", None) from None
                self._client, self._pid = client, os.getpid()
            return client

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_lock"]
        state["_client"], state["_pid"] = None, -1  # connect lazily on first use
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _name(self, key: str) -> str:
        key = validate_key(key, namespace=self.url)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _fail(self, e: BaseException, op: str, key: str | None, *, write: bool = False) -> TGBError:
        return translate_hidden(e, url=self.url, op=op, key=key, write_sent=write, redact=self._redact)

    def check_root(self) -> None:
        """One request: a missing bucket/container fails here, naming it, instead of looking empty."""
        try:
            found = self._check_container()
        except Exception as e:
            raise self._fail(e, f"HEAD {self.container_word}", None)
        if not found:
            raise NamespaceNotFound(f"{self.url}: {self.container_word} {self.container!r} does not exist")

    # --- reads -----------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        name = self._name(key)
        try:
            return self._read(name, None, None)
        except Exception as e:
            raise self._fail(e, "get", key)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if not (0 <= start <= end):
            raise ValueError(f"{self.url}: invalid byte range [{start}, {end}) for key {key!r}")
        name = self._name(key)
        if start == end:
            self.stat(key)  # an empty range of a missing object is still an error
            return b""
        try:
            return self._read(name, start, end)
        except Exception as e:
            error = self._fail(e, "get_range", key)
        # the stores answer 416 to a range that starts at or past the end; ours is b""
        if isinstance(error, ObjectNotFound) or start < self.size(key):
            raise error
        return b""

    def stat(self, key: str) -> ObjectInfo:
        name = self._name(key)
        try:
            size, mtime = self._stat(name)
        except Exception as e:
            raise self._fail(e, "stat", key)
        return ObjectInfo(key, size, mtime)

    def exists(self, key: str) -> bool:
        try:
            self.stat(key)
        except ObjectNotFound:
            return False
        return True

    def list(self, prefix: str = "") -> list[str]:
        prefix = validate_prefix(prefix, namespace=self.url)
        root = f"{self.prefix}/" if self.prefix else ""
        try:
            names = list(self._names(root + prefix))
        except Exception as e:
            raise self._fail(e, "list", prefix)
        return sorted(n[len(root) :] for n in names if n.startswith(root) and not n.endswith("/"))

    # --- writes ------------------------------------------------------------------------

    def put(self, key: str, data: Buffer) -> None:
        name = self._name(key)
        try:
            self._upload(name, bytes(data), if_absent=False)
        except Exception as e:
            raise self._fail(e, "put", key, write=True)

    def put_if_absent(self, key: str, data: Buffer) -> bool:
        name = self._name(key)
        try:
            return self._upload(name, bytes(data), if_absent=True)
        except Exception as e:
            raise self._fail(e, "put_if_absent", key, write=True)

    def delete(self, keys: str | Iterable[str]) -> None:
        keys = [keys] if isinstance(keys, str) else list(keys)
        names = [self._name(k) for k in keys]  # every key validated before anything is deleted
        if len(names) <= 1 or self.max_in_flight <= 1:
            for key, name in zip(keys, names):
                self._delete_one(key, name)
            return
        workers = min(self.max_in_flight, len(names))
        with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="tgb-delete") as pool:
            list(pool.map(self._delete_one, keys, names))

    def _delete_one(self, key: str, name: str) -> None:
        try:
            self._remove(name)
        except Exception as e:
            error = self._fail(e, "delete", key)
            if not isinstance(error, ObjectNotFound):  # deleting a missing key is a no-op
                raise error

    def close(self) -> None:
        """Drop the client (its connection pool closes with it)."""
        with self._lock:
            client, self._client, self._pid = self._client, None, -1
        closer = getattr(client, "close", None)
        if callable(closer):
            closer()
