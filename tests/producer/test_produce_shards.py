"""Issue 25: ``tgb.produce(shard=(i, n))`` -- a sealed namespace is complete by construction.

Every order a scheduler may run the shards in (at once, one after another,
killed and retried, the same shard twice at once) ends with a namespace
sealed exactly when every declared shard is done, holding every batch once.
"""

from __future__ import annotations

import logging
import threading

import pytest
import torch

import torch_tgb as tgb
from tests.producer._pipeline_nodes import CountingNode
from torch_tgb.errors import FencedError, JobMismatch
from torch_tgb.manifest import JobSpec, Manifest
from torch_tgb.storage import open_store

LAYOUT = tgb.Layout(dp=1, seq_keys=("input_ids",))


class ShardNode(CountingNode):
    """Shard ``index``'s batches: batch ``i`` holds ``index * 1000 + i``."""

    def __init__(self, index: int, total: int) -> None:
        super().__init__(total)
        self.index = index

    def next(self) -> dict[str, torch.Tensor]:
        batch = super().next()
        return {"input_ids": batch["input_ids"] + self.index * 1000}


def head(ns: str):
    with open_store(ns) as store:
        return Manifest(store).head()


def values(ns: str) -> list[int]:
    return sorted(int(b["input_ids"][0, 0]) for b in tgb.TGBDataset(ns, mesh=tgb.Mesh(0, 1), timeout=10))


def expected(sizes: dict[int, int]) -> list[int]:
    return sorted(i * 1000 + k for i, n in sizes.items() for k in range(n))


def run(ns: str, index: int, count: int, total: int, **kw):
    return tgb.produce(ns, ShardNode(index, total), layout=LAYOUT, shard=(index, count), commit_policy="naive", **kw)


def test_shards_at_the_same_time_seal_when_the_last_is_done(tmp_path) -> None:
    ns = str(tmp_path / "ns")
    sizes = {0: 7, 1: 3, 2: 5}
    reports, errors = {}, []

    def go(i: int) -> None:
        try:
            reports[i] = run(ns, i, 3, sizes[i])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=go, args=(i,)) for i in sizes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(r.producer_id for r in reports.values()) == list(JobSpec.sharded("job", 3).producer_ids())
    assert all(r.done for r in reports.values()) and any(r.sealed for r in reports.values())
    state = head(ns)
    assert state.sealed and state.job == JobSpec.sharded("job", 3)
    assert values(ns) == expected(sizes)


def test_shards_one_after_another_only_the_last_seals(tmp_path) -> None:
    ns = str(tmp_path / "ns")
    first = run(ns, 1, 2, 4)
    assert first.done and not first.sealed and not head(ns).sealed  # before issue 25 the first one sealed
    second = run(ns, 0, 2, 6)
    assert second.done and second.sealed
    assert values(ns) == expected({0: 6, 1: 4})


def test_rerun_of_a_done_shard_is_a_no_op(tmp_path) -> None:
    ns = str(tmp_path / "ns")
    run(ns, 0, 2, 4)
    version = head(ns).version
    node = ShardNode(0, 4)
    again = tgb.produce(ns, node, layout=LAYOUT, shard=(0, 2))
    assert again.already_complete and (again.start_offset, again.end_offset, again.batches) == (4, 4, 0)
    assert node.reads == [] and head(ns).version == version  # nothing read, nothing written
    run(ns, 1, 2, 2)
    assert run(ns, 1, 2, 2).already_complete and head(ns).sealed  # also once sealed


def started_by_hand(ns: str, total: int, appended: int) -> tuple[tgb.Producer, ShardNode]:
    """Shard 0 of 2 driven by hand: ``appended`` batches committed, the producer still running."""
    spec = JobSpec.sharded("job", 2)
    producer = tgb.Producer(ns, producer_id=spec.producer_id(0), layout=LAYOUT, commit_policy="naive", job=spec)
    node = ShardNode(0, total)
    node.reset(None)
    for k in range(appended):
        producer.append(next(node), offset=k, state=node.state_dict())
    producer.flush()
    return producer, node


def test_a_killed_shard_resumes_and_completes(tmp_path) -> None:
    ns = str(tmp_path / "ns")
    crashed, _ = started_by_hand(ns, 6, 3)
    crashed.abort()  # killed: shard 0 stays open
    run(ns, 1, 2, 2)
    assert not head(ns).sealed
    resumed = run(ns, 0, 2, 6)
    assert resumed.resumed and resumed.start_offset == 3 and resumed.sealed
    assert values(ns) == expected({0: 6, 1: 2})


def test_two_runs_of_one_shard_at_once_one_is_fenced_the_namespace_completes(tmp_path) -> None:
    ns = str(tmp_path / "ns")
    first, node = started_by_hand(ns, 5, 1)
    second = run(ns, 0, 2, 5)  # a scheduler's retry while the first still runs: bumps the epoch, finishes
    assert second.done and second.start_offset == 1
    with pytest.raises(FencedError):
        first.append(next(node), offset=1, state=node.state_dict())
        first.flush()
    first.abort()
    run(ns, 1, 2, 3)
    assert head(ns).sealed and values(ns) == expected({0: 5, 1: 3})


def test_outsiders_and_a_second_job_are_refused_before_writing(tmp_path) -> None:
    ns = str(tmp_path / "ns")
    run(ns, 0, 2, 2, max_steps=1)
    version = head(ns).version
    with pytest.raises(JobMismatch, match="declares job 'job' of 2 shards; 'job-shard00001-of00003' belongs to job "
                                          "'job' of 3 shards"):
        run(ns, 1, 3, 2)
    with pytest.raises(JobMismatch, match="belongs to job 'other' of 2 shards"):
        tgb.produce(ns, ShardNode(1, 2), layout=LAYOUT, shard=(1, 2), job="other")
    with pytest.raises(JobMismatch, match="'p0' is not one of the declared producers of job 'job' of 2 shards"):
        tgb.Producer(ns, producer_id="p0", layout=LAYOUT)
    assert head(ns).version == version


def test_the_stream_continues_with_seal_false(tmp_path) -> None:
    ns = str(tmp_path / "ns")
    run(ns, 0, 2, 2)
    closed = run(ns, 1, 2, 2, seal=False)
    assert closed.exhausted and not closed.done and not head(ns).sealed
    assert head(ns).producers[closed.producer_id].status == "closed"
    again = run(ns, 1, 2, 2)  # a later run marks it done: the namespace is complete
    assert again.batches == 0 and again.done and again.sealed


def test_max_steps_closes_the_shard_without_marking_it_done(tmp_path) -> None:
    ns = str(tmp_path / "ns")
    part = run(ns, 0, 1, 5, max_steps=2)
    assert not part.exhausted and not part.done and not head(ns).sealed
    rest = run(ns, 0, 1, 5)
    assert rest.start_offset == 2 and rest.sealed and values(ns) == expected({0: 5})


def test_a_shard_that_yields_nothing_says_so(tmp_path, caplog) -> None:
    ns = str(tmp_path / "ns")
    with caplog.at_level(logging.WARNING, logger="torch_tgb.producer.pipeline"):
        report = run(ns, 0, 1, 0)
    assert report.done and report.sealed and report.batches == 0
    assert any("marked done with no batch written" in r.getMessage() for r in caplog.records)


def test_produce_names_its_producer(tmp_path) -> None:
    with pytest.raises(TypeError, match="producer_id= or shard="):
        tgb.produce(str(tmp_path / "ns"), ShardNode(0, 1), layout=LAYOUT)
    with pytest.raises(ValueError, match="a shard's producer id is 'job-shard00000-of00002'"):
        tgb.produce(str(tmp_path / "ns"), ShardNode(0, 1), layout=LAYOUT, shard=(0, 2), producer_id="p0")
    with pytest.raises(ValueError, match="0 <= index < count"):
        tgb.produce(str(tmp_path / "ns"), ShardNode(0, 1), layout=LAYOUT, shard=(2, 2))


def test_a_waiting_reader_names_the_shards_still_missing(tmp_path, caplog) -> None:
    from torch_tgb.consumer import ReaderOptions
    from torch_tgb.datapipes.read.poller import PollPolicy
    from torch_tgb.errors import DataTimeout

    ns = str(tmp_path / "ns")
    run(ns, 0, 3, 2)
    run(ns, 1, 3, 3, max_steps=1)  # stopped, not done
    fast = ReaderOptions(poll=PollPolicy(min_interval=0.01, max_interval=0.02, warn_every=0.05))
    it = iter(tgb.TGBDataset(ns, mesh=tgb.Mesh(0, 1), timeout=0.3, options=fast))
    for _ in range(3):
        next(it)
    with caplog.at_level(logging.WARNING), pytest.raises(DataTimeout) as info:
        next(it)
    warned = [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]
    for text in (warned[0], str(info.value)):
        assert "job 'job' of 3 shards: the stream ends when every shard is done; waiting for shard 1/3 (stopped), " \
               "shard 2/3 (not started)" in text
