"""Does an emulator enforce the conditional create the commit protocol relies on?

``python -m torch_tgb.testing.precondition_check`` starts each emulator it
finds on 127.0.0.1 and asks it directly, through the vendor's own client
(not through torch_tgb's stores): a first create, a second create of the same
name (must be refused, the first content kept), and 8 threads creating one
new name at once (exactly one may win). Found when torch_tgb added GCS and
Azure (issue 30):

================================  ==================================  ========
emulator                          precondition                        holds
================================  ==================================  ========
fake-gcs-server (pip wheel)       ``ifGenerationMatch=0``             yes
gcp-storage-emulator (pip)        ``ifGenerationMatch=0``             NO: the second create overwrites; 8 of 8 racers win
Azurite 3.37 (npm)                ``If-None-Match: *``                yes
================================  ==================================  ========

The tests use fake-gcs-server and Azurite; the capability probe
(:func:`torch_tgb.storage.ensure_conditional_writes`) refuses
gcp-storage-emulator, as a test shows.
"""

from __future__ import annotations

import sys
import threading
import uuid
from collections.abc import Callable

__all__ = ["check", "check_azure", "check_gcs", "main"]


def check(create: Callable[[str, bytes], bool], read: Callable[[str], bytes], writers: int = 8) -> dict[str, object]:
    """Run the three checks against ``create(name, data) -> created?`` and ``read(name)``."""
    name = f"probe-{uuid.uuid4().hex}"
    first, second = create(name, b"first"), create(name, b"second")
    kept = read(name) == b"first"
    race, barrier, winners = f"race-{uuid.uuid4().hex}", threading.Barrier(writers), []

    def writer(i: int) -> None:
        barrier.wait()
        if create(race, f"writer-{i}".encode()):
            winners.append(i)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    holds = first and not second and kept and len(winners) == 1
    return {"first_create": first, "second_create_refused": not second, "content_kept": kept,
            "race_winners": len(winners), "holds": holds}


def check_gcs(endpoint: str, bucket: str) -> dict[str, object]:
    from google.api_core.exceptions import PreconditionFailed
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project="test", credentials=AnonymousCredentials(), client_options={"api_endpoint": endpoint})
    b = client.bucket(bucket)

    def create(name: str, data: bytes) -> bool:
        try:
            b.blob(name).upload_from_string(data, if_generation_match=0, retry=None)
        except PreconditionFailed:
            return False
        return True

    return check(create, lambda name: b.blob(name).download_as_bytes(retry=None))


def check_azure(connection_string: str, container: str) -> dict[str, object]:
    from azure.core.exceptions import ResourceExistsError
    from azure.storage.blob import ContainerClient

    c = ContainerClient.from_connection_string(connection_string, container)

    def create(name: str, data: bytes) -> bool:
        try:
            c.upload_blob(name, data, overwrite=False)  # If-None-Match: *
        except ResourceExistsError:
            return False
        return True

    return check(create, lambda name: c.download_blob(name).readall())


def main() -> int:
    from torch_tgb.testing._emulator import EmulatorProcess
    from torch_tgb.testing.azurite import AzuriteServer, azurite_binary
    from torch_tgb.testing.gcsserver import FakeGcsServer, fake_gcs_binary

    results: dict[str, object] = {}
    if fake_gcs_binary() is not None:
        with FakeGcsServer() as gcs:
            results["fake-gcs-server"] = check_gcs(gcs.endpoint_url, gcs.container)
    try:
        import gcp_storage_emulator  # noqa: F401

        emulator = EmulatorProcess("gcp-storage-emulator")
        emulator.start(lambda port: [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
                                     "--port", str(port), "--in-memory", "--default-bucket", "tgb-test"], "/")
        try:
            results["gcp-storage-emulator"] = check_gcs(f"http://127.0.0.1:{emulator.port}", "tgb-test")
        finally:
            emulator.stop()
    except ImportError:
        results["gcp-storage-emulator"] = "not installed"
    if azurite_binary() is not None:
        with AzuriteServer() as azure:
            results["azurite"] = check_azure(azure.connection_string, azure.container)
    for name, result in results.items():
        print(f"{name}: {result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
