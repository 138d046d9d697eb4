"""Issue 14 (2): a defined end of stream with many producers.

Each producer's ``close(seal=True)`` marks it ``done``; the namespace is
sealed by the commit that makes the last registered producer done, so an
early finisher never cuts the others off. A producer that starts after the
seal is refused at start with ``NamespaceSealed``.
"""

from __future__ import annotations

import threading

import pytest
import torch

import torch_tgb as tgb
from torch_tgb.errors import NamespaceSealed
from torch_tgb.manifest import Manifest
from torch_tgb.storage import open_store

LAYOUT = tgb.Layout(dp=1, seq_keys=("input_ids",))


def batch(producer: int, offset: int) -> dict[str, torch.Tensor]:
    return {"input_ids": torch.full((2, 4), producer * 1000 + offset, dtype=torch.int64)}


def head(ns: str):
    store = open_store(ns)
    try:
        return Manifest(store).head()
    finally:
        store.close()


def test_first_seal_waits_for_the_other_producers(tmp_path):
    ns = str(tmp_path / "ns")
    p0 = tgb.Producer(ns, producer_id="p0", layout=LAYOUT, commit_policy="naive")
    p1 = tgb.Producer(ns, producer_id="p1", layout=LAYOUT, commit_policy="naive")
    for k in range(5):
        p0.append(batch(0, k), offset=k)
    p0.close(seal=True)  # p0 is done; p1 registered (not in the log yet: no commit) and holds the seal back
    assert not p0.sealed
    state = head(ns)
    assert not state.sealed and state.producers["p0"].status == "done" and "p1" not in state.producers
    for k in range(25):  # before issue 14 this died with "namespace is sealed" at the first commit
        p1.append(batch(1, k), offset=k)
    p1.close(seal=True)
    assert p1.sealed
    state = head(ns)
    assert state.sealed and state.num_steps == 30
    ds = tgb.TGBDataset(ns, mesh=tgb.Mesh(0, 1), timeout=5)
    seen = sorted(int(b["input_ids"][0, 0]) for b in ds)  # the loop ends: the stream is sealed
    assert seen == sorted([k for k in range(5)] + [1000 + k for k in range(25)])


def test_concurrent_producers_all_land_and_the_last_one_seals(tmp_path):
    ns = str(tmp_path / "ns")
    producers = [tgb.Producer(ns, producer_id=f"p{i}", layout=LAYOUT, commit_policy="naive") for i in range(3)]
    errors: list[BaseException] = []

    def run(i: int, n: int) -> None:
        try:
            for k in range(n):
                producers[i].append(batch(i, k), offset=k)
            producers[i].close(seal=True)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i, 3 + 4 * i)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    state = head(ns)
    assert state.sealed and state.num_steps == 3 + 7 + 11
    assert {s.status for s in state.producers.values()} == {"done"}


def test_a_crashed_producer_holds_the_seal_back_a_closed_one_does_not(tmp_path):
    ns = str(tmp_path / "ns")
    with tgb.Producer(ns, producer_id="p0", layout=LAYOUT, commit_policy="naive") as p0:
        p0.append(batch(0, 0), offset=0)
    assert head(ns).producers["p0"].status == "closed" and not head(ns).sealed
    crashed = tgb.Producer(ns, producer_id="p1", layout=LAYOUT, commit_policy="naive")
    crashed.append(batch(1, 0), offset=0)
    crashed.flush()
    crashed.abort()  # as a killed process: no mark, p1 stays open
    with tgb.Producer(ns, producer_id="p2", layout=LAYOUT, commit_policy="naive") as p2:
        p2.append(batch(2, 0), offset=0)
        p2.close(seal=True)
    state = head(ns)
    assert state.producers["p1"].status == "open" and not state.sealed  # p1 may still commit
    with tgb.Producer(ns, producer_id="p1", layout=LAYOUT, commit_policy="naive") as p1:  # restarted
        assert head(ns).producers["p1"].status == "open"
        p1.append(batch(1, 1), offset=1)
        p1.close(seal=True)  # p0 closed and p2 done: nobody runs any more
    state = head(ns)
    assert state.sealed and state.num_steps == 4


def test_a_producer_starting_after_the_seal_is_refused_at_start(tmp_path):
    ns = str(tmp_path / "ns")
    with tgb.Producer(ns, producer_id="p0", layout=LAYOUT, commit_policy="naive") as p0:
        p0.append(batch(0, 0), offset=0)
        p0.close(seal=True)
    with pytest.raises(NamespaceSealed, match="p0 done.*'late' cannot start"):
        tgb.Producer(ns, producer_id="late", layout=LAYOUT)


def test_closing_again_with_seal_after_a_plain_close_is_an_error(tmp_path):
    ns = str(tmp_path / "ns")
    p0 = tgb.Producer(ns, producer_id="p0", layout=LAYOUT, commit_policy="naive")
    p0.close()
    with pytest.raises(tgb.TGBError, match="cannot mark it done"):
        p0.close(seal=True)


def test_fencing_a_vanished_producer_closes_it_so_the_stream_can_end(tmp_path):
    from torch_tgb.checkpoint import Reclaimer

    ns = str(tmp_path / "ns")
    gone = tgb.Producer(ns, producer_id="gone", layout=LAYOUT, commit_policy="naive")
    gone.append(batch(0, 0), offset=0)
    gone.flush()
    gone.abort()  # its process died: it stays open
    with Reclaimer(ns) as reclaimer:
        reclaimer.fence_producer("gone")
    assert head(ns).producers["gone"].status == "closed"
    with tgb.Producer(ns, producer_id="p1", layout=LAYOUT, commit_policy="naive") as p1:
        p1.append(batch(1, 0), offset=0)
        p1.close(seal=True)
    assert head(ns).sealed


def test_force_seal_for_a_coordinator_that_knows_everyone_finished(tmp_path):
    from torch_tgb.errors import ManifestError
    from torch_tgb.manifest import seal_namespace

    ns = str(tmp_path / "ns")
    died = tgb.Producer(ns, producer_id="p0", layout=LAYOUT, commit_policy="naive")
    died.append(batch(0, 0), offset=0)
    died.flush()
    died.abort()  # died after its last commit: still marked open
    store = open_store(ns)
    try:
        with pytest.raises(ManifestError, match=r"\['p0'\] are still open"):
            seal_namespace(Manifest(store))
        assert not head(ns).sealed
        seal_namespace(Manifest(store), force=True)
        assert head(ns).sealed and head(ns).num_steps == 1
    finally:
        store.close()
