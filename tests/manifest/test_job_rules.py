"""Jobs of declared shards in the manifest log (issue 25): the record, fold's rules, and the seal under races.

The seal of a namespace that declares its shards means "every declared shard
finished": a version that leaves every declared shard done seals, a version
that seals leaves every declared shard done (unless the operator's sealer
forces it), and a finished shard is final. The race test drives committers
of several shards through interleavings chosen by hypothesis, where a
committer's conditional create of version v is preceded by other shards'
whole attempts (which then take v first): whatever the order, the namespace
ends sealed exactly once, by the version that made the last shard done.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.manifest._manifest_helpers import entries
from torch_tgb.errors import JobMismatch, ManifestError, ShardComplete
from torch_tgb.manifest import SEALER_ID, Committer, JobSpec, Manifest, ManifestState, ProducerState, Version
from torch_tgb.manifest._state import fold
from torch_tgb.manifest.seal import seal_namespace
from torch_tgb.manifest.jobs import missing_shards, parse_shard_producer_id, shard_status
from torch_tgb.storage import ForwardingStore, MemoryStore, ObjectStore

JOB = JobSpec.sharded("tok", 3)
IDS = JOB.producer_ids()


# --- the record ---------------------------------------------------------------------------------


@given(st.from_regex(r"[a-z][a-z0-9._-]{0,20}", fullmatch=True), st.integers(1, 2000), st.data())
def test_sharded_ids_are_members_and_round_trip(prefix: str, shards: int, data) -> None:
    job = JobSpec.sharded(prefix, shards)
    index = data.draw(st.integers(0, shards - 1))
    pid = job.producer_id(index)
    assert pid in job and parse_shard_producer_id(pid) == (prefix, index, shards)
    assert JobSpec.from_json(job.to_json(), what="t") == job
    assert job.label(pid) == f"shard {index}/{shards}"
    assert JobSpec.sharded(prefix, shards + 1).producer_id(index) not in job  # another count: not a member
    assert f"{prefix}x-shard{index:05d}-of{shards:05d}" not in job  # another job name: not a member


def test_explicit_producer_sets() -> None:
    job = JobSpec.of(["b", "a"])
    assert job.producer_ids() == ("a", "b") and "a" in job and "c" not in job
    assert JobSpec.from_json(job.to_json(), what="t") == job
    for bad in ([], ["a", "a"], ["bad/id"], [SEALER_ID]):
        with pytest.raises(ValueError):
            JobSpec.of(bad)
    with pytest.raises(ManifestError, match="'shards'=0 must be >= 1"):
        JobSpec.from_json({"prefix": "p", "shards": 0}, what="t")


# --- fold's rules -------------------------------------------------------------------------------


def _state(**marks: str) -> ManifestState:
    return ManifestState(1, 0, False, {pid: ProducerState(1, 0, 0.0, None, status=mark) for pid, mark in marks.items()},
                         JOB)


def _version(number: int, producers: dict[str, ProducerState], *, sealed: bool = False, job: JobSpec | None = None):
    return Version(number, uuid.uuid4().hex, 0, (), producers, sealed, 0.0, job)


def test_fold_declares_a_job_once_on_a_fresh_namespace() -> None:
    empty = ManifestState(0, 0, False, {})
    state = fold(empty, _version(1, {IDS[0]: ProducerState(1, 0)}, job=JOB))
    assert state.job == JOB
    with pytest.raises(ManifestError, match="already declares"):
        fold(state, _version(2, {IDS[1]: ProducerState(1, 0)}, job=JOB))
    legacy = fold(empty, _version(1, {"p0": ProducerState(1, 0)}))
    with pytest.raises(ManifestError, match="registered without one"):
        fold(legacy, _version(2, {IDS[0]: ProducerState(1, 0)}, job=JOB))


def test_fold_refuses_outsiders_and_changes_to_a_done_shard() -> None:
    state = _state(**{IDS[0]: "done", IDS[1]: "open"})
    with pytest.raises(ManifestError, match="not one of the declared producers"):
        fold(state, _version(2, {"stranger": ProducerState(1, 0)}))
    with pytest.raises(ManifestError, match="shard 0/3 .* changes after it was marked done"):
        fold(state, _version(2, {IDS[0]: ProducerState(2, 0)}))  # a rerun's epoch bump


def test_fold_seals_exactly_when_every_shard_is_done() -> None:
    state = _state(**{IDS[0]: "done", IDS[1]: "done", IDS[2]: "open"})
    last = {IDS[2]: ProducerState(1, 0, status="done")}
    with pytest.raises(ManifestError, match="every declared producer .* is done, but the version does not seal"):
        fold(state, _version(2, last))  # "never neither": the last done mark must seal
    assert fold(state, _version(2, last, sealed=True)).sealed
    with pytest.raises(ManifestError, match=r"seals the namespace while shard 2/3 \(running\)"):
        fold(state, _version(2, {}, sealed=True))
    forced = fold(state, _version(2, {SEALER_ID: ProducerState(1, 0, status="done")}, sealed=True))
    assert forced.sealed and missing_shards(JOB, forced.producers) == [IDS[2]]  # the operator's decision


# --- the committer --------------------------------------------------------------------------------


def _committer(store: ObjectStore, index: int, job: JobSpec = JOB) -> Committer:
    committer = Committer(Manifest(store), job.producer_id(index), job=job)
    committer.start()
    return committer


def _finish(committer: Committer, n: int) -> None:
    """Commit ``n`` offsets, then the done mark, retrying conflicts (as the commit loop does)."""
    todo = entries(committer.producer_id, committer.next_offset, n)
    while not committer.attempt(todo).committed:
        pass
    while not committer.attempt([], mark="done").committed:
        pass


def test_start_refuses_outsiders_and_no_ops_a_done_shard() -> None:
    store = MemoryStore(uuid.uuid4().hex)
    first = _committer(store, 0)
    with pytest.raises(JobMismatch, match="declares job 'tok' of 3 shards; 'tok-shard00001-of00004' belongs to "
                                          "job 'tok' of 4 shards"):
        _committer(store, 1, JobSpec.sharded("tok", 4))
    with pytest.raises(JobMismatch, match="'p9' is not one of the declared producers"):
        Committer(Manifest(store), "p9").start()
    _finish(first, 4)
    version = Manifest(store).latest_version()
    with pytest.raises(ShardComplete, match=r"shard 0/3 already complete \(offsets 0..3\).*waiting for shard 1/3 "
                                            r"\(not started\), shard 2/3 \(not started\)") as info:
        _committer(store, 0)
    assert info.value.next_offset == 4 and not info.value.sealed
    assert Manifest(store).latest_version() == version  # the rerun wrote nothing


def test_a_job_cannot_join_a_namespace_without_one() -> None:
    store = MemoryStore(uuid.uuid4().hex)
    p0 = Committer(Manifest(store), "p0")
    p0.start()  # registered only: the log does not know p0 yet, so a job may still declare itself
    assert p0.attempt(entries("p0", 0, 1)).committed
    with pytest.raises(JobMismatch, match="created without declared shards"):
        _committer(store, 0)


def test_a_registered_outsider_is_refused_at_its_first_commit() -> None:
    """p0 registers (outside the log) before shard 0 declares the job: p0's first commit is refused."""
    store = MemoryStore(uuid.uuid4().hex)
    p0 = Committer(Manifest(store), "p0")
    p0.start()
    _committer(store, 0)
    with pytest.raises(JobMismatch, match="'p0' is not one of the declared producers"):
        p0.attempt(entries("p0", 0, 1))


def test_plain_seal_is_refused_force_says_what_it_cuts_off() -> None:
    store = MemoryStore(uuid.uuid4().hex)
    _finish(_committer(store, 0), 2)
    running = _committer(store, 1)
    assert running.attempt(entries(running.producer_id, 0, 1)).committed  # running: it committed
    with pytest.raises(ManifestError, match=r"shard 1/3 \(running\), shard 2/3 \(not started\) of job 'tok' .* "
                                            r"are not done.*--force"):
        seal_namespace(Manifest(store))
    seal_namespace(Manifest(store), force=True)
    head = Manifest(store).head()
    assert head.sealed and shard_status(JOB, head.producers) == {IDS[0]: "done", IDS[1]: "running",
                                                                 IDS[2]: "not started"}


class _Racing(ForwardingStore):
    """Before the conditional create of a log version, runs ``interrupt()`` (once per create)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.interrupt = None

    def put_if_absent(self, key, data):
        action, self.interrupt = self.interrupt, None
        if action is not None and key.startswith("_tgb/log/"):
            action()
        return self.inner.put_if_absent(key, data)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_shards_finishing_in_any_interleaving_seal_exactly_once(data) -> None:
    """Attempts of 3 shards interleaved, each create possibly overtaken by other shards' attempts."""
    shards = data.draw(st.integers(1, 4), label="shards")
    job = JobSpec.sharded("race", shards)
    racing = _Racing(MemoryStore(uuid.uuid4().hex))
    committers: dict[int, Committer] = {}
    # each shard: a few commits of entries, then its done mark
    plans = {i: data.draw(st.lists(st.integers(1, 3), max_size=3), label=f"commits of shard {i}") + [0]
             for i in range(shards)}

    def step(i: int) -> bool:
        """One attempt of shard ``i`` (starting it first); True once its plan is through."""
        if i not in committers:
            c = Committer(Manifest(racing), job.producer_id(i), job=job)
            c.start()
            committers[i] = c
            return False
        c = committers[i]
        n = plans[i][0]
        result = c.attempt(entries(c.producer_id, c.next_offset, n)) if n else c.attempt([], mark="done")
        if result.committed:
            plans[i].pop(0)
        return not plans[i]

    def overtake(others: list[int]) -> None:
        for j in others:
            if plans[j]:
                step(j)

    live = list(range(shards))
    while live:
        i = data.draw(st.sampled_from(live), label="next")
        others = [j for j in data.draw(st.lists(st.sampled_from(range(shards)), max_size=2), label="overtaken by")
                  if j != i]
        racing.interrupt = (lambda o=others: overtake(o)) if others else None
        if step(i):
            live.remove(i)
        racing.interrupt = None
        live = [j for j in live if plans[j]]
    manifest = Manifest(racing.inner)
    head = manifest.head()  # every version folds: fold itself checks sealed <=> every shard done
    assert head.sealed and head.job == job
    assert set(shard_status(job, head.producers).values()) == {"done"}
    sealing = [v for v in range(1, head.version + 1) if manifest.read_version(v).sealed]
    assert sealing == [head.version]
    assert head.num_steps == sum(c.next_offset for c in committers.values())
