"""A loopback Azure Blob emulator (Azurite) for tests and benchmarks.

Azurite is an npm package, so pip cannot install it. :func:`azurite_binary`
finds ``azurite-blob`` (``$TGB_AZURITE``, then ``PATH``, then the torch_tgb
cache ``$TGB_CACHE_DIR`` or ``~/.cache/torch_tgb``); :func:`install_azurite`
puts it into that cache with ``npm install`` (what ``.ci/run`` does, and
what the ``azurite_server`` test fixture does on first use when npm is
there). ``python -m torch_tgb.testing.azurite`` installs and prints the path.

Azurite enforces ``If-None-Match: *`` (a second create gets 409). The account
is Azurite's documented development account; its key is public, not a secret.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from torch_tgb.testing._emulator import LoopbackServer

__all__ = ["AZURITE_VERSION", "AzuriteServer", "azurite_binary", "install_azurite"]

AZURITE_VERSION = "3.37.0"
_ACCOUNT = "devstoreaccount1"
# Azurite's well-known development key (published in its README), not a credential
_DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def cache_dir() -> Path:
    return Path(os.environ.get("TGB_CACHE_DIR") or Path.home() / ".cache" / "torch_tgb") / "azurite"


def azurite_binary() -> Path | None:
    """``azurite-blob`` from ``$TGB_AZURITE``, ``PATH`` or the cache; None if there is none."""
    explicit = os.environ.get("TGB_AZURITE")
    if explicit:
        return Path(explicit) if Path(explicit).exists() else None
    found = shutil.which("azurite-blob")
    if found:
        return Path(found)
    cached = cache_dir() / "node_modules" / ".bin" / "azurite-blob"
    return cached if cached.exists() else None


def install_azurite() -> Path:
    """Install Azurite into the cache with npm (once); the path of ``azurite-blob``."""
    found = azurite_binary()
    if found is not None:
        return found
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("Azurite needs node and npm (https://nodejs.org) to be installed")
    target = cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [npm, "install", "--prefix", str(target), "--no-audit", "--no-fund", "--silent", f"azurite@{AZURITE_VERSION}"],
        check=True, stdout=subprocess.DEVNULL,
    )
    binary = azurite_binary()
    if binary is None:
        raise RuntimeError(f"npm installed azurite into {target}, but no azurite-blob is there")
    return binary


class AzuriteServer(LoopbackServer):
    """Azurite's blob service with one container, in memory, on a free loopback port."""

    scheme = "az"

    def __init__(self, container: str = "tgb-test", *, binary: Path | None = None) -> None:
        super().__init__(container, "azurite")
        self.binary = binary

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self._process.port}/{_ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={_ACCOUNT};AccountKey={_DEV_KEY};"
            f"BlobEndpoint={self.endpoint_url};"
        )

    def start(self) -> AzuriteServer:
        binary = self.binary or azurite_binary()
        if binary is None:
            raise RuntimeError("azurite is not installed: python -m torch_tgb.testing.azurite")

        def command(port: int) -> list[str]:
            return [
                str(binary), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence",
                "--silent", "--skipApiVersionCheck", "--disableTelemetry", "--loose",
            ]

        self._process.start(command, f"/{_ACCOUNT}?comp=list")
        from azure.storage.blob import BlobServiceClient

        with BlobServiceClient.from_connection_string(self.connection_string) as service:
            service.create_container(self.container)
        return self

    @property
    def storage_options(self) -> dict[str, Any]:
        return {"connection_string": self.connection_string}


if __name__ == "__main__":
    print(install_azurite())
    sys.exit(0)
