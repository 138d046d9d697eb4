"""The public API of ../shared/API.md, exercised as a user writes it.

Each name and call below appears in API.md; if one of them changes, this test
fails and API.md, the README and the examples must change in the same commit.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch
import torch.distributed.checkpoint as dcp

import torch_tgb as tgb

GLOBAL_BATCH = 8
SEQ = 16


def make_global_batch(offset: int) -> dict[str, torch.Tensor]:
    base = offset * GLOBAL_BATCH * SEQ
    ids = torch.arange(base, base + GLOBAL_BATCH * SEQ, dtype=torch.int64).reshape(GLOBAL_BATCH, SEQ)
    return {"input_ids": ids, "labels": ids + 1, "weight": torch.full((GLOBAL_BATCH,), float(offset))}


def test_error_hierarchy() -> None:
    for name in (
        "CommitConflict",
        "FencedError",
        "CorruptObject",
        "SchemaMismatch",
        "ManifestError",
        "StorageError",
        "DataTimeout",
        "LayoutError",
        "ConsistencyError",
    ):
        assert issubclass(getattr(tgb, name), tgb.TGBError), name
    assert tgb.__all__ == sorted(tgb.__all__)


def test_mesh_constructors(monkeypatch: pytest.MonkeyPatch) -> None:
    assert tgb.Mesh(dp_rank=1, dp_size=4, cp_rank=0, cp_size=2) == tgb.Mesh(1, 4, 0, 2)
    assert tgb.Mesh(dp_rank=0, dp_size=2).cp_size == 1
    # 8 ranks = dp 4 x cp 2 (tp = pp = 1): rank 3 is dp replica 1, cp rank 1
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    mesh = tgb.Mesh.from_env(dp=4, cp=2, tp=1, pp=1)
    assert (mesh.dp_rank, mesh.dp_size, mesh.cp_rank, mesh.cp_size) == (1, 4, 1, 2)


def test_produce_consume_checkpoint_reclaim(tmp_path) -> None:
    ns = str(tmp_path / "run1")
    layout = tgb.Layout(dp=2, cp=2, seq_keys=("input_ids", "labels"))
    n = 12
    with tgb.Producer(ns, producer_id="p0", layout=layout, commit_policy="fixed:4") as p:
        assert p.resume_offset == 0
        for offset in range(p.resume_offset, n):
            p.append(make_global_batch(offset), offset=offset)
        p.flush()
        p.close(seal=True)

    # Every (dp, cp) position reads its own part; together they are the global batch.
    seen: dict[tuple[int, int], list[dict[str, torch.Tensor]]] = {}
    for dp_rank in range(2):
        for cp_rank in range(2):
            mesh = tgb.Mesh(dp_rank=dp_rank, dp_size=2, cp_rank=cp_rank, cp_size=2)
            seen[dp_rank, cp_rank] = list(tgb.TGBDataset(ns, mesh=mesh, prefetch=4, timeout=10))
    for step in range(n):
        full = make_global_batch(step)
        for dp_rank in range(2):
            rows = slice(dp_rank * GLOBAL_BATCH // 2, (dp_rank + 1) * GLOBAL_BATCH // 2)
            halves = [seen[dp_rank, c][step]["input_ids"] for c in range(2)]
            assert torch.equal(torch.cat(halves, dim=1), full["input_ids"][rows])
            for c in range(2):
                assert torch.equal(seen[dp_rank, c][step]["weight"], full["weight"][rows])

    # Loader state resumes exactly, through DCP and a watermark.
    mesh = tgb.Mesh(dp_rank=0, dp_size=2, cp_rank=0, cp_size=2)
    loader = tgb.DataLoader(ns, mesh=mesh, num_workers=0, pin_memory=False)
    it = iter(loader)
    for _ in range(5):
        next(it)
    state = loader.state_dict()
    json.dumps(tgb.TGBDataset(ns, mesh=mesh).state_dict())  # JSON-serialisable cursor
    ckpt = str(tmp_path / "ckpt-5")
    dcp.save({"data": tgb.checkpoint.DataState(loader)}, checkpoint_id=ckpt)
    tgb.checkpoint.record_watermark(ns, checkpoint_id="step-5", state=state)
    rest = [b["input_ids"] for b in it]

    fresh = tgb.DataLoader(ns, mesh=mesh, num_workers=0)
    dcp.load({"data": tgb.checkpoint.DataState(fresh)}, checkpoint_id=ckpt)
    resumed = [b["input_ids"] for b in fresh]
    assert len(resumed) == len(rest) == n - 5
    assert all(torch.equal(a, b) for a, b in zip(resumed, rest))

    # Reclamation never touches what the live checkpoint needs ...
    report = tgb.Reclaimer(ns).run_once()
    again = tgb.DataLoader(ns, mesh=mesh)
    again.load_state_dict(state)
    assert all(torch.equal(a, b["input_ids"]) for a, b in zip(rest, again, strict=True))
    # ... and frees what it no longer needs once the checkpoint moves on.
    assert report.safe_step <= 5
    tgb.checkpoint.record_watermark(ns, checkpoint_id="step-12", state={"tgb_cursor": {"step": n}})
    tgb.checkpoint.retire(ns, checkpoint_id="step-5")
    later = tgb.Reclaimer(ns).run_once()
    assert later.safe_step == n and later.objects > 0


def test_write_dataset_and_datapipes(tmp_path) -> None:
    from torch_tgb.datapipes import BlockShuffle, FooterIndex, ManifestPoller, Pack, Project, RangeReader  # noqa: F401

    ns = str(tmp_path / "corpus")
    # token ids start at 1: 0 is the pad id, so every non-zero token must be a document token
    docs = [list(range(i * 100 + 1, i * 100 + 6 + 3 * i)) for i in range(40)]
    layout = tgb.Layout(dp=2, seq_keys=("input_ids", "labels"))
    tgb.write_dataset(ns, docs, layout=layout, global_batch_size=4, seq_len=32, packing="bfd", shuffle_seed=0)
    delivered: Counter[int] = Counter()
    for dp_rank in range(2):
        for batch in tgb.TGBDataset(ns, mesh=tgb.Mesh(dp_rank=dp_rank, dp_size=2), timeout=10):
            assert batch["input_ids"].shape[1] == 32
            delivered.update(t for t in batch["input_ids"].flatten().tolist() if t != 0)
    # packing loses, duplicates and invents nothing
    assert delivered == Counter(t for doc in docs for t in doc)
