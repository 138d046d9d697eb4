"""Producer fleets on Ray: exactly-once under actor kills, elastic pools, zombies, bad input.

One local Ray (2 CPUs) for the module. Every test produces a token-file corpus
(one document per row, zero-padded) through a fleet and checks the namespace:
every document's tokens exactly once, in whole global batches, and a reader
with 2 data-parallel ranks sees every step once.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torchdata.nodes import BaseNode

try:
    import ray
except ImportError as e:  # CI installs the [ray] extra; elsewhere say why nothing ran
    print(f"skipping the Ray fleet tests: import ray failed: {e}", file=sys.stderr)
    pytest.skip(f"Ray is not installed ({e}): pip install 'torch-tgb[ray]'", allow_module_level=True)

import torch_tgb as tgb
from torch_tgb.errors import FleetError
from torch_tgb.integrations.ray import Fleet, FleetConfig, produce_on_ray, shard_producer_id
from torch_tgb.manifest import JobSpec, Manifest
from torch_tgb.storage import open_store

pytestmark = pytest.mark.timeout(300)

ROWS, SEQ_LEN = 4, 16
LAYOUT = tgb.Layout(dp=2)

# Ray workers cannot import this test module: ship its functions and classes by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # a new cluster, workers inherit PYTHONPATH
    yield
    ray.shutdown()


# --- the corpus and its pipeline ---------------------------------------------------------------


def write_corpus(path: Path, num_docs: int, seed: int = 0) -> None:
    """``tokens.npy`` (flat, ids >= 1) and ``offsets.npy``: documents of 1..SEQ_LEN tokens."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, SEQ_LEN + 1, size=num_docs)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    np.save(path / "tokens.npy", rng.integers(1, 60000, size=int(offsets[-1]), dtype=np.int32))
    np.save(path / "offsets.npy", offsets)


def documents(path: Path) -> list[tuple[int, ...]]:
    tokens, offsets = np.load(path / "tokens.npy"), np.load(path / "offsets.npy")
    return [tuple(tokens[offsets[d] : offsets[d + 1]].tolist()) for d in range(len(offsets) - 1)]


class ShardRows(BaseNode[dict[str, torch.Tensor]]):
    """Documents ``shard, shard + count, ...`` of the corpus, one per row, ROWS rows per global batch.

    ``delay_s`` per batch keeps the fleet running long enough to be disturbed;
    ``pause`` = (directory, shard, position): the first incarnation of that
    shard to reach that position waits until a later incarnation starts (a
    zombie), see ``test_zombie_is_fenced``.
    """

    def __init__(self, path: str, shard: int, count: int, *, delay_s: float = 0.0,
                 pause: tuple[str, int, int] | None = None) -> None:
        super().__init__()
        self.path, self.shard, self.delay_s, self.pause = path, shard, delay_s, pause
        self.offsets = np.load(os.path.join(path, "offsets.npy"))
        self.docs = list(range(shard, len(self.offsets) - 1, count))
        self._pos = 0

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._pos = 0 if initial_state is None else int(initial_state["pos"])
        if self.pause is not None and self.pause[1] == self.shard:
            paused = os.path.join(self.pause[0], "paused")
            if os.path.exists(paused) and open(paused).read() != str(os.getpid()):
                open(os.path.join(self.pause[0], "release"), "w").close()  # our epoch bump is committed

    def next(self) -> dict[str, torch.Tensor]:
        if self._pos >= len(self.docs):
            raise StopIteration
        if self.pause is not None and self.pause[1] == self.shard and self._pos == self.pause[2]:
            self._maybe_pause(self.pause[0])
        tokens = np.load(os.path.join(self.path, "tokens.npy"), mmap_mode="r")
        out = np.zeros((ROWS, SEQ_LEN), dtype=np.int32)
        for r, d in enumerate(self.docs[self._pos : self._pos + ROWS]):
            doc = tokens[self.offsets[d] : self.offsets[d + 1]]
            out[r, : len(doc)] = doc
        self._pos += ROWS
        if self.delay_s:
            time.sleep(self.delay_s)
        return {"input_ids": torch.from_numpy(out)}

    def _maybe_pause(self, directory: str) -> None:
        try:
            os.unlink(os.path.join(directory, "armed"))  # exactly one incarnation wins this
        except FileNotFoundError:
            return
        with open(os.path.join(directory, "paused"), "w") as f:
            f.write(str(os.getpid()))
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(directory, "release")) and time.monotonic() < deadline:
            time.sleep(0.05)

    def get_state(self) -> dict[str, Any]:
        return {"pos": self._pos}


def make_factory(path: Path, **kwargs: Any):
    def make_pipeline(shard: int, count: int) -> ShardRows:
        return ShardRows(str(path), shard, count, **kwargs)

    return make_pipeline


def read_rows(ns: str, *, dp: int = 2) -> list[tuple[int, ...]]:
    """Every row of the sealed namespace, read by ``dp`` ranks; checks each rank sees every step once."""
    per_rank = []
    for rank in range(dp):
        ds = tgb.TGBDataset(ns, mesh=tgb.Mesh(dp_rank=rank, dp_size=dp), timeout=60)
        per_rank.append([batch["input_ids"] for batch in ds])
    steps = Manifest(open_store(ns)).head().num_steps
    assert [len(r) for r in per_rank] == [steps] * dp, "every rank sees every step exactly once"
    rows = []
    for step in range(steps):
        global_batch = torch.cat([per_rank[r][step] for r in range(dp)])
        assert global_batch.shape == (ROWS, SEQ_LEN), f"{step=} is a whole global batch"
        for row in global_batch.tolist():
            doc = tuple(t for t in row if t != 0)
            if doc:
                rows.append(doc)
    return rows


def assert_exactly_once(ns: str, corpus: Path) -> None:
    rows = read_rows(ns)
    expected = documents(corpus)
    assert len(rows) == len(expected)
    assert sorted(rows) == sorted(expected), "every document's tokens exactly once"


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus"
    path.mkdir()
    write_corpus(path, num_docs=480)
    return path


# --- tests -------------------------------------------------------------------------------------


def test_three_actors_killed_three_times_exactly_once(tmp_path: Path, corpus: Path) -> None:
    ns = str(tmp_path / "ns")
    fleet = Fleet(ns, make_factory(corpus, delay_s=0.05), num_producers=3, num_shards=6, layout=LAYOUT,
                  max_restarts=3, seal=True, progress=False, fleet=FleetConfig(poll_interval_s=0.2))
    fleet.start()
    rng = random.Random(0)
    total_steps = 480 // ROWS
    kills = 0
    for threshold in sorted(rng.sample(range(5, total_steps - 30), 3)):
        deadline = time.monotonic() + 120
        while sum(s.committed for s in fleet.stats()) < threshold and time.monotonic() < deadline:
            time.sleep(0.05)
        while not fleet.actors(running=True) and time.monotonic() < deadline:
            time.sleep(0.05)
        victim = rng.choice(fleet.actors(running=True))
        ray.kill(victim, no_restart=False)
        kills += 1
    report = fleet.wait(timeout=240)
    assert kills == 3
    assert 1 <= report.worker_deaths <= 3  # a kill can land as its shard ends: then no attempt is lost
    assert report.sealed
    assert sorted(p.producer_id for p in report.producers) == [shard_producer_id("fleet", i, 6) for i in range(6)]
    assert all(p.state == "done" for p in report.producers)
    assert sum(p.committed for p in report.producers) == report.steps == total_steps
    assert_exactly_once(ns, corpus)


def wait_for(condition, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def committed(fleet: Fleet) -> int:
    return sum(s.committed for s in fleet.stats())


def test_elastic_two_to_four_to_one_exactly_once(tmp_path: Path, corpus: Path) -> None:
    ns = str(tmp_path / "ns")
    fleet = Fleet(ns, make_factory(corpus, delay_s=0.15), num_producers=2, num_shards=8, layout=LAYOUT, seal=True,
                  progress=False, fleet=FleetConfig(poll_interval_s=0.2))
    fleet.start()
    wait_for(lambda: committed(fleet) >= 5, "5 committed steps on 2 workers")
    fleet.scale(4)
    wait_for(lambda: len(fleet.actors(running=True)) == 4, "4 workers running shards")
    fleet.scale(1)
    report = fleet.wait(timeout=240)
    assert report.workers == 1
    assert report.reassigned >= 1  # shards of the removed workers went back to the queue
    assert all(p.state == "done" for p in report.producers)
    assert report.steps == 480 // ROWS
    assert_exactly_once(ns, corpus)


def test_zombie_is_fenced(tmp_path: Path, corpus: Path) -> None:
    """Shard 0's first incarnation pauses mid-shard; its replacement starts (epoch bump), then it resumes."""
    ctl = tmp_path / "zombie"
    ctl.mkdir()
    (ctl / "armed").touch()
    ns = str(tmp_path / "ns")
    report = produce_on_ray(
        ns, make_factory(corpus, delay_s=0.01, pause=(str(ctl), 0, 8)), num_producers=2, num_shards=2,
        layout=LAYOUT, seal=True, progress=False,
        fleet=FleetConfig(poll_interval_s=0.2, stall_timeout_s=3.0, drain_timeout_s=90),
    )
    assert not (ctl / "armed").exists() and (ctl / "release").exists(), "the zombie paused and was released"
    assert report.fenced >= 1 and report.producers[0].fenced >= 1
    assert report.reassigned >= 1
    assert_exactly_once(ns, corpus)


def test_rerun_with_other_worker_count_resumes(tmp_path: Path, corpus: Path) -> None:
    ns = str(tmp_path / "ns")
    first = produce_on_ray(ns, make_factory(corpus), num_producers=1, num_shards=3, layout=LAYOUT,
                           max_steps=4, progress=False)
    assert first.steps == 12 and [p.committed for p in first.producers] == [4, 4, 4]
    with pytest.raises(FleetError, match="num_shards=3"):
        produce_on_ray(ns, make_factory(corpus), num_producers=2, num_shards=4, layout=LAYOUT, progress=False)
    second = produce_on_ray(ns, make_factory(corpus), num_producers=2, num_shards=3, layout=LAYOUT, seal=True,
                            progress=False)
    assert second.steps == 480 // ROWS - 12 and second.sealed
    assert_exactly_once(ns, corpus)
    with pytest.raises(FleetError, match="sealed"):
        produce_on_ray(ns, make_factory(corpus), num_producers=1, num_shards=3, layout=LAYOUT, progress=False)


def test_stats_and_prometheus_endpoint(tmp_path: Path, corpus: Path) -> None:
    pytest.importorskip("prometheus_client")
    import urllib.request

    ns = str(tmp_path / "ns")
    fleet = Fleet(ns, make_factory(corpus, delay_s=0.05), num_producers=2, num_shards=2, layout=LAYOUT,
                  progress=False, fleet=FleetConfig(poll_interval_s=0.2, metrics_port=0))
    fleet.start()
    wait_for(lambda: committed(fleet) >= 4, "4 committed steps")
    with urllib.request.urlopen(f"http://127.0.0.1:{fleet.metrics_port}/metrics", timeout=30) as r:
        text = r.read().decode()
    assert 'tgb_committed{id="fleet-shard00000-of00002"' in text and "tgb_mb_per_s" in text
    report = fleet.wait(timeout=240)
    for p in report.producers:
        assert p.committed == p.appended == 480 // ROWS // 2
        assert p.bytes == p.appended * ROWS * SEQ_LEN * 4 and p.mb_per_s > 0
        assert 0 < p.commit_success_rate <= 1 and p.lag == 0 and p.visibility_lag_s > 0


# --- bad input: one clear error, nothing half-committed -------------------------------------------


def test_unreachable_address_fails_fast(tmp_path: Path, corpus: Path) -> None:
    with pytest.raises(FleetError, match="cannot reach the Ray cluster at '127.0.0.1:1'"):
        produce_on_ray(str(tmp_path / "ns"), make_factory(corpus), num_producers=1, layout=LAYOUT,
                       address="127.0.0.1:1", fleet=FleetConfig(connect_timeout_s=2))
    assert not (tmp_path / "ns").exists()


@pytest.mark.parametrize("bad", [{"num_producers": 0}, {"num_producers": -1}, {"num_producers": 1, "num_shards": 0}])
def test_bad_counts_are_refused(tmp_path: Path, corpus: Path, bad: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=">= 1"):
        produce_on_ray(str(tmp_path / "ns"), make_factory(corpus), layout=LAYOUT, **bad)
    assert not (tmp_path / "ns").exists()


def failing_factory(shard: int, count: int) -> ShardRows:
    raise RuntimeError(f"no corpus for shard {shard}")


def test_failing_pipeline_factory_is_one_clear_error(tmp_path: Path) -> None:
    ns = str(tmp_path / "ns")
    with pytest.raises(FleetError) as info:
        produce_on_ray(ns, failing_factory, num_producers=2, num_shards=2, layout=LAYOUT, progress=False)
    message = str(info.value)
    assert "make_pipeline(" in message and "RuntimeError: no corpus for shard" in message
    assert "fleet-shard0000" in message
    head = Manifest(open_store(ns)).head()
    assert head.num_steps == 0 and not head.producers  # no producer even started


def test_a_fleet_declares_its_job_and_seals_unless_the_stream_continues(tmp_path: Path, corpus: Path) -> None:
    """Issue 25: a fleet's namespace declares its shards; seal=False leaves them closed, a rerun completes it."""
    ns = str(tmp_path / "ns")
    first = produce_on_ray(ns, make_factory(corpus), num_producers=2, num_shards=3, layout=LAYOUT, seal=False,
                           progress=False)
    head = Manifest(open_store(ns)).head()
    assert not first.sealed and not head.sealed and head.job == JobSpec.sharded("fleet", 3)
    assert {s.status for s in head.producers.values()} == {"closed"}
    second = produce_on_ray(ns, make_factory(corpus), num_producers=1, num_shards=3, layout=LAYOUT, progress=False)
    assert second.sealed and second.steps == 0  # nothing written again: every shard is only marked done
    assert_exactly_once(ns, corpus)


def test_autoscaling_grows_on_stall_shrinks_when_ahead_exactly_once(tmp_path: Path, corpus: Path) -> None:
    """Issue 46: FleetConfig(autoscale=) sizes the pool from the trainer's reports; scale-down loses nothing."""
    from torch_tgb.integrations.ray import AutoscalePolicy
    from torch_tgb.manifest import ControlChannel

    ns = str(tmp_path / "ns")
    trainer = ControlChannel(ns)
    trainer.report_trainer(step=10_000, stall=0.5)  # waiting half the time with nothing ahead of it: grow
    policy = AutoscalePolicy(1, 3, lead_low=0, lead_high=1, up_cooldown_s=0, down_cooldown_s=0)
    fleet = Fleet(ns, make_factory(corpus, delay_s=0.1), num_producers=1, num_shards=6, layout=LAYOUT, seal=True,
                  progress=False, fleet=FleetConfig(poll_interval_s=0.2, autoscale=policy, autoscale_interval_s=0.2))
    fleet.start()
    wait_for(lambda: len(fleet.actors(running=True)) == 3, "3 workers running shards")
    trainer.report_trainer(step=0, stall=0.0)  # fed, and the producers ahead of it: shrink, one a round
    wait_for(lambda: fleet.num_producers == 1, "the pool back at 1")
    report = fleet.wait(timeout=240)
    ups = [(e.before, e.after) for e in report.autoscale if e.after > e.before]
    downs = [(e.before, e.after) for e in report.autoscale if e.after < e.before]
    assert ups == [(1, 2), (2, 3)] and downs == [(3, 2), (2, 1)]
    assert report.timeline and report.timeline[0].stall == 0.5 and report.workers == 1
    assert "1 -> 2 actors: trainer waits 50%" in report.scaling() and "4 autoscale changes" in report.summary()
    assert report.steps == 480 // ROWS and all(p.state == "done" for p in report.producers)
    assert_exactly_once(ns, corpus)


def make_slice_factory(root: Path, plan: Any, **kwargs: Any):
    """Shard ``i`` of a fleet planned by source: the documents of its slice of its source's corpus."""
    def make_pipeline(shard: int, count: int) -> ShardRows:
        (piece,) = plan.shard(shard).sources  # one source per group in these tests
        node = ShardRows(str(root / piece.name), 0, 1, **kwargs)
        node.docs = list(piece.units(len(node.offsets) - 1))
        return node

    return make_pipeline


def test_a_weight_doubled_by_a_control_record_sends_the_next_actor_to_that_source(tmp_path: Path) -> None:
    """Issue 46, mixture-driven scaling by source: actors dedicated to source groups; the next one goes to code.

    Two sources too big to share a pod: one group each, one planned worker
    each, 3 shards each. The trainer stalls (grow by one) and a control record
    ahead doubles code's weight: the new actor serves code and runs a code
    shard. Then the trainer is fed and far behind: the pool shrinks (a busy
    actor may be killed), and every document of both sources is there once.
    """
    from torch_tgb.integrations.ray import AutoscalePolicy, SourceSpec, load_plan, source_plan
    from torch_tgb.manifest import ControlChannel

    for name, seed in (("web", 1), ("code", 2)):
        (tmp_path / name).mkdir()
        write_corpus(tmp_path / name, num_docs=120, seed=seed)
    ns = str(tmp_path / "ns")
    plan = source_plan(ns, {"web": SourceSpec(600, 0.1), "code": SourceSpec(600, 0.1)}, pod_memory_bytes=1000,
                       latency_budget_s=0.1, spread=3)
    code = next(j for j, g in enumerate(plan.groups) if g.parts[0].name == "code")
    assert plan.num_shards == 6 and plan.workers == 2
    trainer = ControlChannel(ns)
    trainer.set_mix({"web": 1.0, "code": 2.0}, step=4096)  # ahead of the producers: code's share doubles
    trainer.report_trainer(step=10_000, stall=0.5)  # waiting half the time with nothing ahead of it: grow
    policy = AutoscalePolicy(2, 3, lead_low=0, lead_high=1, up_cooldown_s=600, down_cooldown_s=0)
    fleet = Fleet(ns, make_slice_factory(tmp_path, plan, delay_s=0.3), num_producers=2, layout=LAYOUT, seal=True,
                  progress=False, fleet=FleetConfig(poll_interval_s=0.2, autoscale=policy, autoscale_interval_s=0.2,
                                                    plan=plan))
    fleet.start()
    wait_for(lambda: len([a for a in fleet.assignments() if a[2] is not None]) == 3, "3 actors running shards")
    newest = max(fleet.assignments(), key=lambda a: int(a[0].rsplit("-w", 1)[1]))
    assert newest[1] == code and plan.group_of(newest[2]) == code, (newest, fleet.assignments())
    trainer.report_trainer(step=0, stall=0.0)  # fed, and the producers ahead of it: shrink
    wait_for(lambda: fleet.num_producers == 2, "the pool back at 2")
    report = fleet.wait(timeout=240)
    ups = [e for e in report.autoscale if e.after > e.before]
    assert [(e.before, e.after, e.groups) for e in ups] == [(2, 3, (plan.group_name(code),))]
    assert "new actors for g" in report.scaling() and "6 shards" in report.scaling() and report.plan == plan
    assert report.steps == 240 // ROWS and all(p.state == "done" for p in report.producers)
    rows = read_rows(ns)
    expected = documents(tmp_path / "web") + documents(tmp_path / "code")
    assert sorted(rows) == sorted(expected), "every document of both sources exactly once"
    assert load_plan(open_store(ns), "fleet") == plan  # recorded: a rerun runs the same shards
