"""A namespace on Google Cloud Storage: ``gs://bucket/prefix`` (also ``gcs://``).

Atomicity
---------
* ``put_if_absent``: an upload with ``ifGenerationMatch=0``. Generation 0
  means "no live object of this name": GCS decides atomically and answers
  ``412 Precondition Failed`` to every writer but the first.
* ``put``: one upload (a multipart request up to 8 MiB, a resumable upload
  above); a GCS object becomes visible only once its upload is complete.

Built on the ``google-cloud-storage`` client rather than gcsfs: the
precondition is an explicit argument there, and every call takes
``retry=None`` (gcsfs retries 5xx and timeouts six times inside, including a
conditional create whose reply was lost, which would turn our own win into
a 412). Retries belong to :class:`~torch_tgb.storage.RetryingStore`.

``storage_options`` use gcsfs's names where they overlap: ``project``,
``token`` (``None``: Google's default credentials; ``"anon"``; a path to a
service-account or user credentials JSON; that JSON as a dict; a
``google.auth`` credentials object), ``endpoint_url`` (an emulator or a
private endpoint; ``STORAGE_EMULATOR_HOST`` works too) and ``timeout``
(seconds per request, default 60). Whole-object reads are checked against
the CRC32C GCS keeps for every object.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from torch_tgb.storage._client_store import ClientStore, require_extra
from torch_tgb.storage.fsspec_store import redact_url

if TYPE_CHECKING:
    from google.cloud.storage import Bucket

__all__ = ["GCS_SCHEMES", "GCSStore"]

GCS_SCHEMES = frozenset({"gs", "gcs"})
_OPTIONS = frozenset({"project", "token", "endpoint_url", "timeout"})


class GCSStore(ClientStore["Bucket"]):
    """Objects under ``gs://bucket/prefix``."""

    container_word = "bucket"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None, *, max_in_flight: int = 32) -> None:
        clean = redact_url(url).rstrip("/")
        require_extra(clean, "a GCS namespace", "gcs", ["google.cloud.storage"])
        parts = urlsplit(url)
        if parts.scheme not in GCS_SCHEMES or not parts.hostname:
            raise ValueError(f"{clean}: a GCS namespace is gs://BUCKET/PREFIX")
        options = dict(storage_options or {})
        unknown = sorted(set(options) - _OPTIONS)
        if unknown:
            raise ValueError(f"{clean}: storage_options {unknown} do not apply to GCS (known: {sorted(_OPTIONS)})")
        bucket = parts.netloc.rsplit("@", 1)[-1]
        super().__init__(clean, bucket, parts.path, options, max_in_flight=max_in_flight)
        self.timeout = float(options.get("timeout", 60.0))

    def _connect(self) -> Bucket:
        import requests.adapters
        from google.auth.transport.requests import AuthorizedSession
        from google.cloud import storage

        credentials, project = _credentials(self._options)
        session = AuthorizedSession(credentials)
        # one pooled connection per request in flight (requests keeps 10 by default)
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=max(10, self.max_in_flight))
        session.mount("https://", adapter)
        session.mount("http://", adapter)
        client_options = {"api_endpoint": self._options["endpoint_url"]} if self._options.get("endpoint_url") else None
        client = storage.Client(project=project, credentials=credentials, _http=session, client_options=client_options)
        return client.bucket(self.container)

    def _read(self, name: str, start: int | None, end: int | None) -> bytes:
        blob = self.client.blob(name)
        if start is None or end is None:
            return bytes(blob.download_as_bytes(checksum="auto", retry=None, timeout=self.timeout))
        # GCS ranges are inclusive; a range read has no checksum to compare (the TGB footer's CRCs do)
        return bytes(blob.download_as_bytes(start=start, end=end - 1, checksum=None, retry=None, timeout=self.timeout))

    def _stat(self, name: str) -> tuple[int, float]:
        from google.api_core.exceptions import NotFound

        blob = self.client.get_blob(name, retry=None, timeout=self.timeout)
        if blob is None:
            raise NotFound(f"no such object: {name}")
        updated = blob.updated
        return int(blob.size or 0), updated.timestamp() if updated is not None else 0.0

    def _names(self, prefix: str) -> Iterator[str]:
        bucket = self.client
        for blob in bucket.client.list_blobs(bucket, prefix=prefix, retry=None, timeout=self.timeout):
            yield blob.name

    def _upload(self, name: str, data: bytes, *, if_absent: bool) -> bool:
        from google.api_core.exceptions import PreconditionFailed

        try:
            self.client.blob(name).upload_from_string(
                data,
                content_type="application/octet-stream",
                if_generation_match=0 if if_absent else None,  # 0: only if no live object has this name
                checksum=None,
                retry=None,
                timeout=self.timeout,
            )
        except PreconditionFailed:
            return False
        return True

    def _remove(self, name: str) -> None:
        self.client.delete_blob(name, retry=None, timeout=self.timeout)

    def _check_container(self) -> bool:
        from google.api_core.exceptions import NotFound

        bucket = self.client
        try:  # a LIST needs only the permission every reader has (a bucket GET needs more)
            list(bucket.client.list_blobs(bucket, prefix=self.prefix, max_results=1, retry=None, timeout=self.timeout))
        except NotFound:
            return False
        return True


def _credentials(options: Mapping[str, Any]) -> tuple[Any, str | None]:
    """``(credentials, project)`` from gcsfs-style ``token`` and ``project`` options."""
    import os

    import google.auth
    from google.auth.credentials import AnonymousCredentials

    token = options.get("token")
    project = options.get("project")
    emulated = options.get("endpoint_url") or os.environ.get("STORAGE_EMULATOR_HOST")
    if token == "anon" or (token is None and emulated):
        return AnonymousCredentials(), project or "anonymous"
    if token is None or token == "google_default":
        credentials, found = google.auth.default()
        return credentials, project or found
    if isinstance(token, str):
        credentials, found = google.auth.load_credentials_from_file(token)
        return credentials, project or found
    if isinstance(token, Mapping):
        credentials, found = google.auth.load_credentials_from_dict(dict(token))
        return credentials, project or found
    return token, project  # a google.auth credentials object
