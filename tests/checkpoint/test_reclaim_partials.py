"""Partial writes (a segment's temp file that a killed producer never published) are reclaimed, safely.

Issue 40 ("Storage that leaks"): the temp file of a SIGKILLed producer's
open segment survived its rerun, ``tgb reclaim --grace-period 0`` and the
seal. Now the producer's next incarnation removes its predecessors' partial
writes once its epoch bump fenced them, and the Reclaimer removes those of
producers that are fenced, closed or sealed, never one a live writer may
still finish. The subprocess version (a real SIGKILL) is
``tests/cli/test_partial_writes_cli.py``.
"""

from __future__ import annotations

import time

import pytest
import torch

import torch_tgb as tgb
from torch_tgb.checkpoint.reclaimer import METADATA_PARTIAL_AGE
from torch_tgb.manifest import Manifest
from torch_tgb.manifest.seal import seal_namespace
from torch_tgb.manifest.keys import object_name
from torch_tgb.producer import ProducerConfig
from torch_tgb.storage import LocalStore

pytestmark = pytest.mark.timeout(120)

LAYOUT = tgb.Layout(dp=1)
SEGMENTS = ProducerConfig(segment_tgbs=1000, segment_bytes=1 << 30)


def batch(offset: int) -> dict[str, torch.Tensor]:
    return {"x": torch.full((2, 3), float(offset))}


def killed_segment(store: LocalStore, producer_id: str, offset: int = 0, size: int = 9000) -> None:
    """What a producer killed mid-segment leaves: its open segment's temp file (its writer never ends)."""
    epoch = Manifest(store).head().producers[producer_id].epoch
    writer = store.open_writer(object_name(producer_id, epoch, offset, "deadbeef"))
    writer.write_at(0, [b"t" * size])
    writer._fd = -1  # noqa: SLF001 - the process "died": no abort, no unlink when the writer is dropped


def start(store: LocalStore, producer_id: str, **kwargs: object) -> tgb.Producer:
    return tgb.Producer(store, producer_id=producer_id, layout=LAYOUT, commit_policy="naive", **kwargs)


def test_a_rerun_removes_the_partial_writes_of_its_fenced_incarnations(tmp_path) -> None:
    store = LocalStore(tmp_path / "ns", fsync=False)
    with start(store, "a") as a:  # epoch 1 commits offset 0, then its next segment dies with it
        a.append(batch(0), offset=0)
    start(store, "b").close()
    killed_segment(store, "a", offset=1)
    killed_segment(store, "b", offset=0)
    assert len(store.list_partial()) == 2
    rerun = start(store, "a", config=SEGMENTS)  # epoch 2: fences epoch 1, removes what it left
    assert [p.key.split("/")[1] for p in store.list_partial()] == ["b"]  # another producer's: not its to judge
    rerun.append(batch(1), offset=1)
    assert [p.key.split("/")[1] for p in store.list_partial()] == ["a", "b"]  # its own open segment
    rerun.close()
    assert [p.key.split("/")[1] for p in store.list_partial()] == ["b"]


def test_the_reclaimer_keeps_a_live_writers_segment_whatever_its_age(tmp_path) -> None:
    store = LocalStore(tmp_path / "ns", fsync=False)
    p = start(store, "p0", config=SEGMENTS)
    p.append(batch(0), offset=0)
    p.append(batch(1), offset=1)  # both in the open segment: a temp file of the live incarnation
    [partial] = store.list_partial()
    for rec in (tgb.Reclaimer(store, grace_period=0), tgb.Reclaimer(store, clock=lambda: time.time() + 1e6)):
        report = rec.run_once()
        assert (report.partials, report.live_partials) == (0, 1)
    assert store.list_partial() == [partial]
    p.close(seal=True)
    assert [float(b["x"][0, 0]) for b in tgb.TGBDataset(store, mesh=tgb.Mesh(0, 1), timeout=30)] == [0.0, 1.0]


@pytest.mark.parametrize("end", ["fenced", "closed", "sealed"])
def test_the_reclaimer_removes_partial_writes_nobody_will_finish(tmp_path, end: str) -> None:
    store = LocalStore(tmp_path / "ns", fsync=False)
    p = start(store, "p0")
    p.append(batch(0), offset=0)
    p.flush()
    killed_segment(store, "p0", offset=1)  # its incarnation then ends one way or another
    if end == "closed":
        p.close()  # a producer publishes everything before its end mark and writes nothing after it
    else:
        p.abort()  # gone without a mark: open in the log, until fenced or sealed over
        if end == "fenced":
            tgb.Reclaimer(store).fence_producer("p0")
        else:
            seal_namespace(Manifest(store), force=True)
    kept = tgb.Reclaimer(store).run_once()  # the default grace period: too young yet
    assert (kept.partials, kept.live_partials) == (0, 0) and len(store.list_partial()) == 1
    report = tgb.Reclaimer(store, clock=lambda: time.time() + 4000).run_once()
    assert report.partials == 1 and report.bytes >= 9000
    assert store.list_partial() == []
    assert [float(b["x"][0, 0]) for b in tgb.TGBDataset(store, mesh=tgb.Mesh(0, 1), timeout=5, stop_step=1)] == [0.0]


def test_partial_writes_whose_owner_cannot_be_told_go_by_age(tmp_path) -> None:
    store = LocalStore(tmp_path / "ns", fsync=False)
    start(store, "p0").close()
    (tmp_path / "ns" / "data" / "p0").mkdir(parents=True)
    (tmp_path / "ns" / "data" / "p0" / ".tgb-tmp.c41edb3b793e17e5").write_bytes(b"old" * 100)  # an older version's
    meta = store.open_writer("_tgb/log/00000000000000000099.json")  # a commit killed in its put
    meta.write_at(0, [b"{}"])
    meta._fd = -1  # noqa: SLF001
    report = tgb.Reclaimer(store, grace_period=0).run_once()
    assert report.partials == 1 and [p.name.split("/")[1] for p in store.list_partial()] == ["log"]
    report = tgb.Reclaimer(store, grace_period=0, clock=lambda: time.time() + METADATA_PARTIAL_AGE + 1).run_once()
    assert report.partials == 1 and store.list_partial() == []


def open_upload(store: object, key: str) -> None:
    """What s3fs leaves of a large segment's upload killed between its parts: an open multipart upload."""
    inner = store.inner  # the FsspecStore under the RetryingStore
    bucket, _, path = inner.fs._strip_protocol(inner.root).partition("/")
    upload = inner.fs.call_s3("create_multipart_upload", Bucket=bucket, Key=f"{path}/{key}")
    inner.fs.call_s3("upload_part", Bucket=bucket, Key=f"{path}/{key}", UploadId=upload["UploadId"], PartNumber=1,
                     Body=b"s" * 2000)


def test_open_s3_multipart_uploads_of_fenced_incarnations_are_aborted(s3_namespace) -> None:
    from torch_tgb.storage import open_store

    url, options = s3_namespace
    store = open_store(url, options)
    a = start(store, "a")
    a.append(batch(0), offset=0)
    a.flush()
    a.abort()  # killed: still open in the log
    start(store, "b").abort()
    open_upload(store, object_name("a", 1, 1, "0000aaaa"))
    open_upload(store, object_name("b", 1, 0, "0000bbbb"))
    assert len(store.list_partial()) == 2
    assert (tgb.Reclaimer(store, grace_period=0).run_once().live_partials) == 2  # both incarnations may be alive
    start(store, "a").close()  # the rerun of a aborts its killed incarnation's upload
    assert [p.key.split("/")[1] for p in store.list_partial()] == ["b"]
    rec = tgb.Reclaimer(store, grace_period=0)
    rec.fence_producer("b")
    report = rec.run_once()
    assert (report.partials, report.live_partials) == (1, 0) and report.bytes >= 2000
    assert store.list_partial() == []
