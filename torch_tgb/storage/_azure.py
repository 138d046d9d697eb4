"""A namespace on Azure Blob Storage: ``az://container/prefix`` (also ``abfs://``, ``abfss://``).

Atomicity
---------
* ``put_if_absent``: an upload with ``If-None-Match: *``; the service
  decides atomically and answers ``409 BlobAlreadyExists`` (or ``412``) to
  every writer but the first. Uploads above 64 MiB stage blocks and commit
  the block list under the same condition, so the rule holds for any size.
* ``put``: one upload; a block blob becomes visible whole, on commit.

Built on the ``azure-storage-blob`` client (adlfs wraps the same client and
adds a cache we would have to switch off): the condition is the client's
``overwrite=False``, and the client is built with ``retry_total=0`` so that
:class:`~torch_tgb.storage.RetryingStore` is the one retry layer.

``storage_options`` use adlfs's names: ``connection_string`` (what Azurite
prints), or ``account_name`` with one of ``account_key``, ``sas_token``,
``credential`` (an ``azure.core`` credential), ``client_id`` +
``client_secret`` + ``tenant_id`` (a service principal), ``anon=True``; with
none of these, ``azure.identity.DefaultAzureCredential``. ``account_host``
replaces ``<account_name>.blob.core.windows.net``; ``timeout`` is seconds per
request (default 60). ``abfs://container@account.dfs.core.windows.net/prefix``
names the account in the URL. The ``AZURE_STORAGE_CONNECTION_STRING``,
``AZURE_STORAGE_ACCOUNT_NAME`` and ``AZURE_STORAGE_ACCOUNT_KEY`` variables
are read as adlfs reads them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from torch_tgb.storage._client_store import ClientStore, require_extra
from torch_tgb.storage.fsspec_store import redact_url

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential
    from azure.storage.blob import ContainerClient

__all__ = ["AZURE_SCHEMES", "AzureBlobStore"]

AZURE_SCHEMES = frozenset({"az", "abfs", "abfss"})
_OPTIONS = frozenset(
    {
        "connection_string", "account_name", "account_key", "sas_token", "credential", "anon",
        "client_id", "client_secret", "tenant_id", "account_host", "timeout",
    }
)


class AzureBlobStore(ClientStore["ContainerClient"]):
    """Objects under ``az://container/prefix``."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None, *, max_in_flight: int = 32) -> None:
        clean = redact_url(url).rstrip("/")
        require_extra(clean, "an Azure Blob namespace", "azure", ["azure.storage.blob"])
        parts = urlsplit(url)
        netloc = parts.netloc.rsplit("@", 1)[-1] if parts.scheme == "az" else parts.netloc
        container, _, host = netloc.partition("@")  # abfs://container@account.dfs.core.windows.net/...
        if parts.scheme not in AZURE_SCHEMES or not container:
            raise ValueError(f"{clean}: an Azure Blob namespace is az://CONTAINER/PREFIX")
        options = dict(storage_options or {})
        unknown = sorted(set(options) - _OPTIONS)
        if unknown:
            raise ValueError(f"{clean}: storage_options {unknown} do not apply to Azure Blob (known: {sorted(_OPTIONS)})")
        if host and "account_name" not in options:
            options["account_name"] = host.split(".", 1)[0]
        super().__init__(clean, container, parts.path, options, max_in_flight=max_in_flight)
        self.timeout = float(options.get("timeout", 60.0))

    def _connect(self) -> ContainerClient:
        import requests
        import requests.adapters
        from azure.core.pipeline.transport import RequestsTransport
        from azure.storage.blob import ContainerClient

        session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=max(10, self.max_in_flight))
        session.mount("https://", adapter)
        session.mount("http://", adapter)
        settings: dict[str, Any] = {
            "retry_total": 0,  # one retry layer: RetryingStore
            "transport": RequestsTransport(session=session, session_owner=True),
            "connection_timeout": self.timeout,
            "read_timeout": self.timeout,
        }
        options = self._options
        connection_string = options.get("connection_string") or os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
        if connection_string:
            return ContainerClient.from_connection_string(
                connection_string, self.container, credential=options.get("credential"), **settings
            )
        account = options.get("account_name") or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
        if not account:
            raise ValueError(
                f"{self.url}: Azure Blob needs storage_options connection_string or account_name "
                "(or AZURE_STORAGE_CONNECTION_STRING / AZURE_STORAGE_ACCOUNT_NAME)"
            )
        host = options.get("account_host") or f"{account}.blob.core.windows.net"
        return ContainerClient(f"https://{host}", self.container, credential=_credential(options, account), **settings)

    def _read(self, name: str, start: int | None, end: int | None) -> bytes:
        if start is None or end is None:
            return bytes(self.client.download_blob(name, max_concurrency=1).readall())
        return bytes(self.client.download_blob(name, offset=start, length=end - start, max_concurrency=1).readall())

    def _stat(self, name: str) -> tuple[int, float]:
        props = self.client.get_blob_client(name).get_blob_properties()
        modified = props.last_modified
        return int(props.size), modified.timestamp() if modified is not None else 0.0

    def _names(self, prefix: str) -> Iterator[str]:
        yield from self.client.list_blob_names(name_starts_with=prefix or None)

    def _upload(self, name: str, data: bytes, *, if_absent: bool) -> bool:
        from azure.core.exceptions import ResourceExistsError

        try:
            # overwrite=False is the client's If-None-Match: * (also on the block-list commit of large blobs)
            self.client.upload_blob(name, data, overwrite=not if_absent, max_concurrency=1)
        except ResourceExistsError:
            if not if_absent:
                raise
            return False
        return True

    def _remove(self, name: str) -> None:
        self.client.delete_blob(name)

    def _check_container(self) -> bool:
        return bool(self.client.exists())


def _credential(options: Mapping[str, Any], account: str) -> str | dict[str, str] | TokenCredential | None:
    """The credential adlfs would use for these options (``None``: anonymous)."""
    if options.get("anon"):
        return None
    key = options.get("account_key") or os.environ.get("AZURE_STORAGE_ACCOUNT_KEY")
    if key:
        return {"account_name": account, "account_key": key}
    if options.get("sas_token"):
        token: str = options["sas_token"]
        return token
    if options.get("credential") is not None:
        credential: str | dict[str, str] | TokenCredential = options["credential"]
        return credential
    require_extra(f"az://{account}", "Azure AD credentials", "azure", ["azure.identity"])
    from azure import identity

    if options.get("client_id") and options.get("client_secret") and options.get("tenant_id"):
        return identity.ClientSecretCredential(options["tenant_id"], options["client_id"], options["client_secret"])
    return identity.DefaultAzureCredential()
