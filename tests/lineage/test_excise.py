"""``excise``: the records leave every step that held them, in one new manifest version; nothing else changes;
the audit trail records it; old objects go only when nobody can read them any more."""

from __future__ import annotations

import numpy as np
import pytest

import torch_tgb as tgb
from tests.lineage._corpus import corpus, pieces, produce, read_all, record, same
from torch_tgb.lineage import Lineage, excise, verify_deny
from torch_tgb.manifest import Manifest
from torch_tgb.storage import open_store


@pytest.mark.parametrize(("segment_tgbs", "rows", "dp"), [(1, "tokens", 2), (4, "tokens", 2), (1, "arrays", 1)])
def test_excised_records_leave_every_step_and_nothing_else_changes(tmp_path, segment_tgbs, rows, dp) -> None:
    path, idx, _ = corpus(tmp_path)
    ns = str(tmp_path / "ns")
    produce(ns, path, idx, segment_tgbs=segment_tgbs, rows=rows, dp=dp)
    keys = ("input_ids", "seq_lens", "provenance") if rows == "tokens" else ("input_ids", "labels", "provenance")
    before = read_all(ns, dp, keys)
    denied = [3, 50, 51, 120]
    report = excise(ns, [record(path, d) for d in denied], who="legal@example", reason="ticket 1")
    assert report.version is not None and report.spans >= len(denied) and not report.not_found
    assert verify_deny(ns, [record(path, d) for d in denied]).rows == 0
    after = read_all(ns, dp, keys)
    changed = set()
    for rank in range(dp):
        assert len(after[rank]) == len(before[rank])  # the same steps
        for step, (a, b) in enumerate(zip(before[rank], after[rank])):
            if same(a, b):
                continue
            changed.add(step)
            assert b["input_ids"].shape == a["input_ids"].shape
            for r in range(a["input_ids"].shape[0]):
                kept = [p for p in pieces(a, r) if p[0] not in denied] if rows == "tokens" else None
                if rows == "tokens":
                    assert pieces(b, r) == kept  # every other span intact, in order, same row
    assert changed == set(report.steps)  # exactly the steps that held them
    hits = Lineage(ns).lookup([record(path, d) for d in denied])
    assert all(h.excised for v in hits.hits.values() for h in v) and hits.hits
    if segment_tgbs > 1:
        assert report.replaced_steps > len(report.steps)  # whole segments superseded


def test_the_audit_trail_chains_every_excision(tmp_path) -> None:
    path, idx, _ = corpus(tmp_path)
    ns = str(tmp_path / "ns")
    produce(ns, path, idx)
    first = excise(ns, [record(path, 5)], who="a", reason="one")
    second = excise(ns, [record(path, 9), record(path, 5)], who="b")  # 5 is gone already
    assert second.version > first.version
    trail = Lineage(ns).excisions()
    assert [(e.version, e.who, e.reason) for e in trail] == [(first.version, "a", "one"), (second.version, "b", "")]
    assert trail[1].previous.endswith(".json") and trail[0].previous == ""
    assert trail[1].records == sorted([record(path, 5), record(path, 9)])
    assert verify_deny(ns, [record(path, 5), record(path, 9)]).rows == 0


def test_a_dry_run_and_an_absent_record_commit_nothing(tmp_path) -> None:
    path, idx, _ = corpus(tmp_path)
    ns = str(tmp_path / "ns")
    produce(ns, path, idx)
    head = Manifest(open_store(ns)).latest_version()
    assert excise(ns, [record(path, 3)], dry_run=True).steps
    report = excise(ns, [record(path, 100_000)])
    assert report.version is None and report.not_found == [record(path, 100_000)]
    assert Manifest(open_store(ns)).latest_version() == head


def test_an_excision_racing_another_rewrites_again_and_loses_nothing(tmp_path, monkeypatch) -> None:
    """Another excision replaces a step between our rewrite and our commit: ours is made again from theirs."""
    import torch_tgb.lineage._excise as ex

    path, idx, _ = corpus(tmp_path, docs=60)
    ns = str(tmp_path / "ns")
    produce(ns, path, idx, segment_tgbs=100)  # one segment: both excisions supersede the same object
    real = ex.commit_replacements
    calls = []

    def racing(manifest, replacements, superseded, **kw):
        if not calls:
            calls.append(1)
            excise(ns, [record(path, 20)], who="other")  # lands first
        return real(manifest, replacements, superseded, **kw)

    monkeypatch.setattr(ex, "commit_replacements", racing)
    report = excise(ns, [record(path, 10)], who="me")
    assert report.version is not None
    assert verify_deny(ns, [record(path, 10), record(path, 20)]).rows == 0


def test_a_reader_opened_before_reads_its_view_to_the_end_and_the_next_iteration_reads_the_new(tmp_path) -> None:
    path, idx, _ = corpus(tmp_path)
    ns = str(tmp_path / "ns")
    produce(ns, path, idx)
    ds = tgb.TGBDataset(ns, mesh=tgb.Mesh(0, 1), keys=("input_ids", "provenance"))
    it = iter(ds)
    first = next(it)
    report = excise(ns, [record(path, d) for d in range(0, 160, 7)])
    old = [first] + list(it)  # the iteration goes on under the view it opened with: all old, none new
    assert any(np.isin(b["provenance"][:, 1].numpy(), range(0, 160, 7)).any() for b in old)
    state = ds.state_dict()["tgb_source"]
    assert state["replaced"] < report.version
    ds.load_state_dict({"tgb_cursor": {"step": 0, "version": 0, "sub_step": 0, "sub_steps": 1}})
    new = list(ds)
    assert not any(np.isin(b["provenance"][:, 1].numpy(), range(0, 160, 7)).any() for b in new)
    assert ds.state_dict()["tgb_source"]["replaced"] >= report.version
    assert len(new) == len(old)


def test_the_reclaimer_keeps_superseded_objects_while_a_reader_may_need_them(tmp_path) -> None:
    path, idx, _ = corpus(tmp_path)
    ns = str(tmp_path / "ns")
    produce(ns, path, idx)
    store = open_store(ns)
    running = tgb.DataLoader(ns, mesh=tgb.Mesh(0, 1))
    next(iter(running))
    tgb.checkpoint.record_watermark(ns, "old-view", running.state_dict())  # a running reader's view: before
    report = excise(ns, [record(path, 1)])
    when = Lineage(ns).excisions()[-1].when
    gone = report.objects
    now = [when + 10.0]  # inside the grace period
    reclaim = tgb.Reclaimer(ns, grace_period=100.0, sweep_interval=0.0, clock=lambda: now[0])
    assert reclaim.run_once().superseded == 0 and all(store.exists(k) for k in gone)
    now[0] = when + 1000.0  # past it, but the old-view checkpoint's run may still read them
    assert reclaim.run_once().superseded == 0 and all(store.exists(k) for k in gone)
    resumed = tgb.DataLoader(ns, mesh=tgb.Mesh(0, 1))
    resumed.load_state_dict(running.state_dict())
    next(iter(resumed))  # a resume opens with the newest view: it needs the old objects no more
    tgb.checkpoint.record_watermark(ns, "new-view", resumed.state_dict())
    tgb.checkpoint.retire(ns, "old-view")
    assert reclaim.run_once().superseded == len(gone) and not any(store.exists(k) for k in gone)
    assert verify_deny(ns, [record(path, 1)]).rows == 0
    assert sum(1 for _ in resumed) > 0  # every step left still reads


def test_an_excision_whose_new_objects_were_swept_commits_nothing(tmp_path, monkeypatch) -> None:
    """A Reclaimer sweep deleted the objects an excision wrote before it committed (it ran past the grace
    period): the excision refuses to publish them, and the namespace reads as before."""
    import torch_tgb.lineage._excise as ex
    from torch_tgb.errors import ProvenanceError

    path, idx, _ = corpus(tmp_path)
    ns = str(tmp_path / "ns")
    produce(ns, path, idx)
    store = open_store(ns)
    head = Manifest(store).latest_version()
    real = ex.commit_replacements

    def swept(manifest, replacements, superseded, **kw):
        store.delete(sorted(k for k in store.list(ex.EXCISE_PREFIX)))
        return real(manifest, replacements, superseded, **kw)

    monkeypatch.setattr(ex, "commit_replacements", swept)
    with pytest.raises(ProvenanceError, match="grace period"):
        excise(ns, [record(path, 7)])
    assert Manifest(open_store(ns)).latest_version() == head
    assert verify_deny(ns, [record(path, 7)]).rows > 0  # not excised, and every step still reads
    assert len(read_all(ns, 2)[0]) > 0
