"""Corrupt or missing steps skipped by agreement (``ReaderOptions(on_corrupt="skip_step", max_skipped=N)``).

One process here; two ranks that disagree on what they can read are in
tests/distributed/test_skip_torchrun.py. The default (``raise``) is unchanged.
"""

from __future__ import annotations

import os

import pytest
import torch

from torch_tgb import DataLoader, Layout, Mesh, Producer, TGBDataset
from torch_tgb.errors import CorruptObject
from torch_tgb.manifest import Manifest
from torch_tgb.manifest.skips import skipped_steps
from torch_tgb.storage import ForwardingStore, LocalStore

LAYOUT = Layout(dp=2, seq_keys=("ids",))
STEPS = 10


class Remote(ForwardingStore):
    def local_path(self, key: str) -> str | None:
        return None


def batch(step: int) -> dict[str, torch.Tensor]:
    return {"ids": torch.arange(16, dtype=torch.int32).reshape(2, 8) + 100 * step}


@pytest.fixture
def ns(tmp_path) -> str:
    path = str(tmp_path / "ns")
    with Producer(path, producer_id="p", layout=LAYOUT, commit_policy="naive") as p:
        for step in range(STEPS):
            p.append(batch(step), offset=step)
        p.close(seal=True)
    return path


def flip(ns: str, step: int, dp: int = 0) -> None:
    """Flip one byte of slice ``dp`` of ``step``'s data (its CRC32C no longer holds)."""
    entry = Manifest(LocalStore(ns)).entry(step)
    from torch_tgb.format import read_footer

    footer = read_footer(LocalStore(ns), entry.key, size=entry.size, footer_offset=entry.footer_offset,
                         footer_length=entry.footer_length)
    at = footer.slice(dp, 0).tensors[0].offset
    with open(os.path.join(ns, entry.key), "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))


def steps_read(ds) -> list[int]:
    return [int(b["ids"][0, 0]) // 100 for b in ds]


@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote"])
def test_corrupt_steps_are_skipped_counted_and_marked(ns, remote) -> None:
    for step in (2, 7):
        flip(ns, step)
    store = Remote(LocalStore(ns)) if remote else ns
    ds = TGBDataset(store, mesh=Mesh(0, 2), on_corrupt="skip_step", max_skipped=4, prefetch=2)
    assert steps_read(ds) == [s for s in range(STEPS) if s not in (2, 7)]
    assert ds.stats().skipped_steps == 2
    markers = skipped_steps(LocalStore(ns))
    assert sorted(markers) == [2, 7] and all("CRC32C" in m.reason for m in markers.values())
    # a restart (another process, another rank) skips exactly the marked steps, even one it could read
    other = TGBDataset(ns, mesh=Mesh(1, 2), on_corrupt="skip_step")
    assert steps_read(other) == [s for s in range(STEPS) if s not in (2, 7)]
    assert other.stats().skipped_steps == 2


def test_raise_stays_the_default(ns) -> None:
    flip(ns, 3)
    it = iter(TGBDataset(ns, mesh=Mesh(0, 2)))
    for _ in range(3):
        next(it)
    with pytest.raises(CorruptObject, match="step=3"):
        next(it)
    assert not skipped_steps(LocalStore(ns))  # raising readers write no marker


def test_past_max_skipped_the_run_stops_naming_the_steps(ns) -> None:
    for step in (1, 4, 6):
        flip(ns, step)
    ds = TGBDataset(ns, mesh=Mesh(0, 2), on_corrupt="skip_step", max_skipped=2)
    with pytest.raises(CorruptObject, match=r"3 steps skipped .* over max_skipped=2: steps \[1, 4, 6\]"):
        list(ds)


def test_a_missing_object_is_skipped(ns) -> None:
    entry = Manifest(LocalStore(ns)).entry(5)
    os.unlink(os.path.join(ns, entry.key))
    ds = TGBDataset(Remote(LocalStore(ns)), mesh=Mesh(0, 2), on_corrupt="skip_step")
    assert steps_read(ds) == [s for s in range(STEPS) if s != 5]
    assert "5" in str(sorted(skipped_steps(LocalStore(ns))))


def test_a_resume_in_the_middle_skips_the_same_steps(ns) -> None:
    flip(ns, 6)
    first = TGBDataset(ns, mesh=Mesh(0, 2), on_corrupt="skip_step")
    it = iter(first)
    got = [int(next(it)["ids"][0, 0]) // 100 for _ in range(4)]
    state = first.state_dict()
    resumed = TGBDataset(ns, mesh=Mesh(0, 2), on_corrupt="skip_step")
    resumed.load_state_dict(state)
    assert got + steps_read(resumed) == [s for s in range(STEPS) if s != 6]


def test_workers_hand_skips_to_the_main_process(ns) -> None:
    flip(ns, 3)
    loader = DataLoader(ns, mesh=Mesh(0, 2), num_workers=2, on_corrupt="skip_step")
    assert steps_read(loader) == [s for s in range(STEPS) if s != 3]
    assert loader.tgb_dataset.stats().skipped_steps == 1


def test_inspect_prometheus_and_the_reclaimer_see_the_markers(ns) -> None:
    from torch_tgb.checkpoint import Reclaimer, record_watermark
    from torch_tgb.cli._inspect_impl import inspect_namespace, render_text
    from torch_tgb.observability._fields import stats_fields

    flip(ns, 2)
    flip(ns, 8)
    ds = TGBDataset(ns, mesh=Mesh(0, 2), on_corrupt="skip_step")
    list(ds)
    assert stats_fields(ds.stats())["skipped_steps"] == 2.0  # what the Prometheus collector exports
    report = inspect_namespace(ns)
    assert sorted(report["skipped_steps"]) == ["2", "8"] and "CRC32C" in report["skipped_steps"]["2"]
    assert "skipped steps" in render_text(report) and "2 (steps 2, 8" in render_text(report)
    record_watermark(ns, "ck", {"tgb_cursor": {"step": 5, "version": 1}})
    Reclaimer(ns).run_once()
    assert sorted(skipped_steps(LocalStore(ns))) == [8]  # step 2 is reclaimed: its marker goes with it
