"""The shared unit walker on an in-memory source: resume and stats exact for any layout of units and errors."""

from __future__ import annotations

import json

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import SourceError
from torch_tgb.sources import SourceStats, UnitSource
from torch_tgb.testing.resume import run_resume_test


class ListSource(UnitSource):
    """Units are lists of records; a record of None is corrupt."""

    def __init__(self, units: list[list[int | None]], *, known_length: bool, **options) -> None:
        super().__init__(**options)
        self.units, self.known_length = units, known_length
        self.opened: list[tuple[int, int]] = []
        self._set_num_units(len(units), "list")

    def _unit_name(self, unit: int) -> str:
        return f"list unit {unit}"

    def _unit_length(self, unit: int) -> int | None:
        return len(self.units[unit]) if self.known_length else None

    def _records(self, unit, start):
        self.opened.append((unit, start))
        for i, value in enumerate(self.units[unit][start:], start):
            yield SourceError(f"unit {unit} record {i}") if value is None else {"tokens": torch.tensor([unit, i, value])}


layouts = st.lists(st.lists(st.one_of(st.none(), st.integers(0, 9)), max_size=7), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(
    units=layouts,
    count=st.integers(1, 3),
    buffer=st.sampled_from([0, 1, 3]),
    epochs=st.integers(1, 2),
    known=st.booleans(),
    stop=st.floats(0, 1),
)
def test_resume_and_stats_are_exact(units, count, buffer, epochs, known, stop):
    def make(index=0):
        return ListSource(units, known_length=known, shard=(index, count), seed=1, epochs=epochs,
                          shuffle_buffer=buffer, on_error="skip")

    full_node = make()
    full = list(full_node)
    good = sum(v is not None for u in units for v in u)
    corrupt = sum(v is None for u in units for v in u)
    k = int(stop * len(full))
    run_resume_test(make, stop_after=k)
    # the stats of a resumed run end where the uninterrupted run's end
    head = make()
    for _ in range(k):
        next(head)
    resumed = make()
    resumed.reset(json.loads(json.dumps(head.state_dict())))
    rest = list(resumed)
    assert len(rest) == len(full) - k
    assert resumed.stats() == full_node.stats()
    if count == 1:  # one shard reads everything, every epoch
        assert full_node.stats().records == good * epochs and full_node.stats().skipped == corrupt * epochs
    shards = [list(make(i)) for i in range(count)]
    assert sum(map(len, shards)) == good * epochs


def test_raise_names_the_record():
    node = ListSource([[1, None, 2]], known_length=True)
    assert next(node)["tokens"].tolist() == [0, 0, 1]
    try:
        next(node)
    except SourceError as e:
        assert "unit 0 record 1" in str(e)
    else:
        raise AssertionError("the corrupt record was not raised")


def test_a_finished_unit_with_known_length_is_not_reopened():
    node = ListSource([[1, 2], [3]], known_length=True)
    next(node), next(node)
    state = node.state_dict()  # the first unit (in permuted order) is done: point at the next one
    assert state["record"] == 0 and state["emitted"] == 0
    fresh = ListSource([[1, 2], [3]], known_length=True)
    fresh.reset(state)
    list(fresh)
    assert fresh.opened == [(int(u), 0) for u in fresh._assignment()[state["unit"] :]]
    assert fresh.stats() == SourceStats(records=3, tokens=9, skipped=0)
