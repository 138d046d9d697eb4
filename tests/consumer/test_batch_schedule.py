"""batch_schedule (issue 46): a ramp of global batch sizes read from fixed TGBs, exact across restarts and world sizes.

The pure mapping (consumer/_schedule.py) is property-tested on its own; the
reader is held to the issue's goal: the same samples at every training step
with or without a restart at any step, while the world size goes 2 -> 4 -> 1.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from torch_tgb.consumer import DataLoader, ReaderOptions, TGBDataset
from torch_tgb.consumer._schedule import BatchSchedule, batch_ramp
from torch_tgb.errors import LayoutError
from torch_tgb.layout import Layout, Mesh
from torch_tgb.producer import Producer

# --- the pure mapping -------------------------------------------------------------------------

schedules = st.lists(st.tuples(st.integers(1, 40), st.integers(1, 6)), max_size=4).map(
    lambda pts: [(0, 1)] + sorted({s: r for s, r in pts}.items()))


@settings(max_examples=300, deadline=None)
@given(schedules, st.sampled_from([1, 2, 4]), st.integers(0, 120))
def test_start_and_step_at_are_inverse(points, unit, step) -> None:
    schedule = BatchSchedule.parse([(s, r * 4) for s, r in points])  # sizes in multiples of 4 rows
    rows = 4 // unit  # TGBs of 4, 2 or 1 rows
    at = schedule.at(step, rows)
    assert at.first == schedule.start(step, rows) and at.stop == schedule.start(step + 1, rows)
    assert (at.stop - at.first) * rows == schedule.size(step) == at.batch_size
    assert schedule.step_at(at.first, rows) == step
    for inside in range(at.first + 1, at.stop):
        with pytest.raises(LayoutError, match="inside training step"):
            schedule.step_at(inside, rows)
    assert schedule.steps_within(at.first, rows) == step
    assert schedule.steps_within(at.stop - 1, rows) == step  # a step is whole only with its last TGB
    assert schedule.steps_within(at.stop, rows) == step + 1


def test_the_issue_example() -> None:
    schedule = BatchSchedule.parse([(0, 256), (2000, 512), (4000, 1024)])
    assert schedule.start(2000, 128) == 4000 and schedule.start(4000, 128) == 12000
    assert schedule.at(4001, 128).first == 12008 and schedule.step_at(12008, 128) == 4001
    with pytest.raises(LayoutError, match="not a multiple of the namespace's 384 rows"):
        schedule.start(1, 384)


@pytest.mark.parametrize("bad", [[], [(1, 256)], [(0, 256), (0, 512)], [(0, 0)], [(0, 256.0)], "256", [(0,)]])
def test_a_bad_schedule_is_refused(bad) -> None:
    with pytest.raises(ValueError):
        ReaderOptions(batch_schedule=bad)


def test_what_a_schedule_does_not_combine_with() -> None:
    for kwargs in ({"shuffle": True}, {"dp_split": "spread"}, {"on_corrupt": "skip_step"}):
        with pytest.raises(ValueError, match="does not combine"):
            ReaderOptions(batch_schedule=[(0, 8)], **kwargs)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.integers(0, 6), st.integers(1, 4), st.integers(0, 500))
def test_batch_ramp(start_units, increments, unit, steps) -> None:
    start, inc = start_units * unit, unit
    stop = start + increments * inc
    points = batch_ramp(start, stop, increment=inc, steps=steps)
    schedule = BatchSchedule.parse(points)
    sizes = [schedule.size(t) for t in range(steps + 2)]
    assert sizes == sorted(sizes) and all(s % inc == 0 for s in sizes) and sizes[steps] == stop
    if steps >= increments + 1:  # room for every size: each holds steps / n steps, from start up by increment
        assert sizes[0] == start and all(b - a in (0, inc) for a, b in zip(sizes, sizes[1:]))
        assert len(points) == increments + 1


# --- the reader -----------------------------------------------------------------------------

G = 16  # rows per TGB, cut into 2 slices
SCHEDULE = [(0, 32), (3, 64), (6, 128)]
STEPS = 12
TGBS = BatchSchedule.parse(SCHEDULE).start(STEPS, G)  # 66


@pytest.fixture(scope="module")
def ns(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("schedule") / "ns")
    with Producer(path, producer_id="p0", layout=Layout(dp=2), commit_policy="fixed:16") as p:
        for t in range(TGBS):
            ids = torch.arange(t * G, (t + 1) * G, dtype=torch.int64)
            p.append({"sample": ids, "x": ids.float()[:, None].repeat(1, 3)}, offset=t)
        p.close(seal=True)
    return path


def expected(step: int) -> list[int]:
    at = BatchSchedule.parse(SCHEDULE).at(step, G)
    return list(range(at.first * G, at.stop * G))


def read(ns: str, world: int, state: dict | None, count: int | None) -> tuple[list[list[int]], dict]:
    """``count`` training steps (None: to the end) on ``world`` ranks from ``state``; each step's samples, the state."""
    readers = [TGBDataset(ns, mesh=Mesh(r, world), batch_schedule=SCHEDULE, prefetch=0, timeout=10)
               for r in range(world)]
    if state is not None:
        for reader in readers:
            reader.load_state_dict(state)
    iters = [iter(r) for r in readers]
    out: list[list[int]] = []
    while count is None or len(out) < count:
        try:
            batches = [next(it) for it in iters]
        except StopIteration:
            break
        step = readers[0].batch_step
        assert step is not None and all(r.batch_step == step for r in readers)
        assert step.step == len(out) + (0 if state is None else _step_of(state))
        for b in batches:
            assert b["sample"].shape[0] == step.batch_size // world  # every rank holds its share of B(t)
            assert torch.equal(b["x"][:, 0], b["sample"].float())
        out.append(sorted(torch.cat([b["sample"] for b in batches]).tolist()))
    states = [r.state_dict() for r in readers]
    assert len({s["tgb_cursor"]["step"] for s in states}) == 1  # every rank stands at the same TGB boundary
    return out, states[0]


def _step_of(state: dict) -> int:
    return BatchSchedule.parse(SCHEDULE).step_at(state["tgb_cursor"]["step"], G)


def test_uninterrupted_reads_follow_the_schedule(ns) -> None:
    for world in (1, 2, 4):
        got, state = read(ns, world, None, None)
        assert got == [expected(t) for t in range(STEPS)], world
        assert state["tgb_cursor"]["step"] == TGBS
    assert len(TGBDataset(ns, mesh=Mesh(0, 2), batch_schedule=SCHEDULE)) == STEPS


@settings(max_examples=12, deadline=None)
@given(st.integers(0, STEPS), st.integers(0, STEPS))
@example(0, 0)
@example(3, 6)  # at both ramp boundaries
@example(STEPS, STEPS)  # at the end of the stream
def test_restarts_at_any_step_with_world_sizes_2_4_1(ns, first, second) -> None:
    first, second = min(first, second), max(first, second)
    a, state = read(ns, 2, None, first)
    b, state = read(ns, 4, state, second - first)
    c, _ = read(ns, 1, state, STEPS - second)  # a read begun at the end of a sealed stream reads its next pass
    assert a + b + c == [expected(t) for t in range(STEPS)]


def test_workers_join_in_the_main_process(ns) -> None:
    loader = DataLoader(ns, mesh=Mesh(1, 2), batch_schedule=SCHEDULE, num_workers=2, timeout=10)
    it = iter(loader)
    head = [next(it)["sample"].tolist() for _ in range(5)]
    assert loader.batch_step is not None and loader.batch_step.step == 4 and loader.batch_step.batch_size == 64
    state = loader.state_dict()
    straight = [b["sample"].tolist() for b in DataLoader(ns, mesh=Mesh(1, 2), batch_schedule=SCHEDULE)]
    again = DataLoader(ns, mesh=Mesh(1, 2), batch_schedule=SCHEDULE, num_workers=2, timeout=10)
    again.load_state_dict(state)
    assert head + [b["sample"].tolist() for b in again] == straight and len(straight) == STEPS


def test_a_cursor_inside_a_training_step_is_refused(ns) -> None:
    plain = TGBDataset(ns, mesh=Mesh(0, 2))
    it = iter(plain)
    for _ in range(3):  # TGB steps 0..2: training step 1 is TGBs [2, 4)
        next(it)
    scheduled = TGBDataset(ns, mesh=Mesh(0, 2), batch_schedule=SCHEDULE)
    scheduled.load_state_dict(plain.state_dict())
    with pytest.raises(LayoutError, match="inside training step 1"):
        next(iter(scheduled))


def test_a_batch_size_the_reader_cannot_split_is_refused(ns) -> None:
    reader = TGBDataset(ns, mesh=Mesh(0, 8), batch_schedule=[(0, 32), (2, 64)])  # a step spans 4 TGBs = 64 rows
    with pytest.raises(LayoutError, match="training step 0 takes 32 rows"):
        next(iter(reader))


def test_len_of_a_scheduled_reader_leaves_a_handed_in_store_open(ns) -> None:
    """The rows of a TGB are read through the reader's own store (its node share, its hot tier), and a store
    handed in stays the caller's: ``len()`` does not close it."""
    from torch_tgb.storage import open_store
    from torch_tgb.testing.counting import CountingStore

    class Closing(CountingStore):
        closed = 0

        def close(self) -> None:
            Closing.closed += 1
            super().close()

    store = Closing(open_store(ns))
    assert len(TGBDataset(store, mesh=Mesh(0, 2), batch_schedule=SCHEDULE)) == STEPS
    assert Closing.closed == 0
