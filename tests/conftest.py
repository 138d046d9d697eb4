"""Fixtures shared by every test area (keep this small and generic)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from torch_tgb.testing.s3server import MotoS3Server, moto_s3_server


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
    name = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:40].strip("-").lower()
    return s3_server.namespace(name or "ns")
