"""Samples a pipeline drops are committed with the offsets, by reason, in the producer's manifest record."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torchdata.nodes import BaseNode

from torch_tgb.errors import ManifestError
from torch_tgb.layout import Layout
from torch_tgb.manifest import Manifest
from torch_tgb.manifest._producer_state import ProducerState
from torch_tgb.producer import Producer, produce
from torch_tgb.storage import LocalStore

REASONS = ("corrupt", "too_long", "bad_record")


class Dropping(BaseNode):
    """Yields ``n`` batches; before batch ``i`` it drops ``i % 3`` samples for reason ``REASONS[i % 3]``."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        state = initial_state or {"i": 0, "dropped": {}}
        self.i, self.dropped = int(state["i"]), dict(state["dropped"])

    def next(self) -> dict[str, torch.Tensor]:
        if self.i >= self.n:
            raise StopIteration
        reason = REASONS[self.i % 3]
        if self.i % 3:
            self.dropped[reason] = self.dropped.get(reason, 0) + self.i % 3
        self.i += 1
        return {"x": torch.full((2, 4), self.i, dtype=torch.int32)}

    def get_state(self) -> dict[str, Any]:
        return {"i": self.i, "dropped": dict(self.dropped)}

    def stats(self) -> SimpleNamespace:
        return SimpleNamespace(skipped=sum(self.dropped.values()), skipped_by_reason=dict(self.dropped))


def expected(n: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in range(n):
        if i % 3:
            out[REASONS[i % 3]] = out.get(REASONS[i % 3], 0) + i % 3
    return dict(sorted(out.items()))


def record(root: Any, pid: str) -> ProducerState:
    return Manifest(LocalStore(root)).head().producers[pid]


def test_each_reason_is_in_the_report_and_the_manifest_and_survives_a_resume(tmp_path):
    root = tmp_path / "ns"
    first = produce(str(root), Dropping(7), producer_id="p0", layout=Layout(dp=2), max_steps=4, progress=False)
    assert first.skipped == expected(4) == {"bad_record": 2, "too_long": 1}
    assert record(root, "p0").skipped == expected(4)  # committed with offset 3
    second = produce(str(root), Dropping(7), producer_id="p0", layout=Layout(dp=2), seal=True, progress=False)
    assert second.start_offset == 4 and second.skipped == expected(7)  # counted on from the committed state
    assert record(root, "p0").skipped == expected(7) and set(expected(7)) == {"too_long", "bad_record"}
    assert record(root, "p0").status == "done"  # the close kept the counts


def test_inspect_shows_skips_per_producer_and_in_total(tmp_path):
    from torch_tgb.cli._inspect_impl import inspect_namespace, render_text

    root = tmp_path / "ns"
    for pid in ("a", "b"):
        produce(str(root), Dropping(5), producer_id=pid, layout=Layout(dp=2), progress=False)
    report = inspect_namespace(str(root))
    assert [p["skipped"] for p in report["producers"]] == [expected(5)] * 2
    text = render_text(report)
    total = {k: 2 * v for k, v in expected(5).items()}
    assert f"{sum(total.values())} (bad_record {total['bad_record']}, too_long {total['too_long']})" in text


def test_a_producer_without_skips_records_none(tmp_path):
    root = tmp_path / "ns"
    with Producer(str(root), producer_id="p0", layout=Layout(dp=2)) as p:
        p.append({"x": torch.zeros(2, 4, dtype=torch.int32)})
    assert record(root, "p0").skipped is None and "skipped" not in record(root, "p0").to_json()


@pytest.mark.parametrize("bad", [{"corrupt": -1}, {"corrupt": 1.5}, {"": 1}, {"corrupt": True}, [("corrupt", 1)]])
def test_bad_counts_are_refused_at_append_and_in_a_record(tmp_path, bad):
    with Producer(str(tmp_path / "ns"), producer_id="p0", layout=Layout(dp=2)) as p:
        with pytest.raises(ValueError, match="skip"):
            p.append({"x": torch.zeros(2, 4, dtype=torch.int32)}, skipped=bad)
    obj = {"epoch": 1, "next_offset": 0, "skipped": bad if isinstance(bad, dict) else dict(bad) | {"x": -2}}
    with pytest.raises(ManifestError, match="skip"):
        ProducerState.from_json(obj, what="record")
