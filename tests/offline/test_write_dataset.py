"""write_dataset: pack, permute, cut and commit a sealed namespace; no token lost."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torch_tgb.errors import LayoutError, ManifestError
from torch_tgb.layout import Layout
from torch_tgb.offline import as_documents, write_dataset

SEQ_KEYS = ("input_ids", "labels", "document_ids", "position_ids")


def _docs(n: int = 30, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 40, size=n)
    start = np.concatenate([[0], np.cumsum(lengths)])
    return [np.arange(start[i], start[i + 1]) + 1 for i in range(n)]  # token = 1 + corpus position


def test_as_documents_forms():
    docs = [np.array([1, 2]), np.array([], dtype=np.int64), np.array([3])]
    flat, off = as_documents(docs)
    assert flat.tolist() == [1, 2, 3] and off.tolist() == [0, 2, 2, 3]
    flat2, off2 = as_documents((np.array([1, 2, 3]), np.array([0, 2, 2, 3])))
    assert flat2.tolist() == flat.tolist() and off2.tolist() == off.tolist()
    flat3, off3 = as_documents(torch.tensor([5, 6]))
    assert flat3.tolist() == [5, 6] and off3.tolist() == [0, 2]
    with pytest.raises(ValueError, match="offsets"):
        as_documents((np.array([1, 2, 3]), np.array([0, 5])))
    with pytest.raises(ValueError, match="integers"):
        as_documents([np.array([0.5])])
    with pytest.raises(ValueError):
        as_documents([np.array([-1])])


@pytest.mark.parametrize("rows", ["tokens", "arrays"])
@pytest.mark.parametrize("layout", [Layout(dp=2, cp=2, seq_keys=SEQ_KEYS), Layout(dp=4, cp=2, seq_keys=SEQ_KEYS[:1], cp_order="zigzag")])
def test_bfd_dataset_keeps_every_token(tmp_path, read_back, layout, rows):
    """Token rows and per-token arrays read back the same tensors; the layout keeps the caller's cut."""
    docs = _docs()
    ns = str(tmp_path / "ns")
    summary = write_dataset(ns, docs, layout=layout, global_batch_size=8, seq_len=16, shuffle_seed=3, progress=False,
                            rows=rows)
    batches, got_layout, sealed = read_back(ns)
    assert sealed and len(batches) == summary["batches"]
    assert (got_layout.dp, got_layout.cp, got_layout.cp_order) == (layout.dp, layout.cp, layout.cp_order)
    assert got_layout.labels_from == ("input_ids" if rows == "tokens" else None)
    assert set(SEQ_KEYS) <= set(batches[0])
    ids = torch.cat([b["input_ids"] for b in batches])
    docs_ids = torch.cat([b["document_ids"] for b in batches])
    total = sum(len(d) for d in docs)
    assert summary["tokens"] == total and 0 < summary["packing_efficiency"] <= 1
    # every corpus token exactly once; padding is 0 with document id -1
    assert sorted(ids[docs_ids >= 0].tolist()) == list(range(1, total + 1))
    assert (ids[docs_ids < 0] == 0).all()
    assert all(b["input_ids"].shape == (8, 16) for b in batches)


def test_deterministic_and_seed_dependent(tmp_path, read_back):
    docs = _docs(20)
    layout = Layout(dp=1)
    runs = {}
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        write_dataset(str(tmp_path / name), docs, layout=layout, global_batch_size=4, seq_len=16, shuffle_seed=seed, progress=False)
        runs[name] = torch.cat([b["input_ids"] for b in read_back(str(tmp_path / name))[0]])
    assert torch.equal(runs["a"], runs["b"])
    assert not torch.equal(runs["a"], runs["c"])


def test_no_packing_concat_and_chunk_uint32(tmp_path, read_back):
    flat = np.arange(1, 101)
    ns = str(tmp_path / "ns")
    write_dataset(ns, (flat, np.array([0, 40, 100])), layout=Layout(dp=2), global_batch_size=2, seq_len=10,
                  packing="none", token_dtype=torch.uint32, progress=False)
    batches, _, _ = read_back(ns)
    assert {"input_ids", "labels"} <= set(batches[0]) and batches[0]["input_ids"].dtype == torch.uint32
    ids = torch.cat([b["input_ids"] for b in batches]).to(torch.int64)
    assert sorted(ids.reshape(-1).tolist()) == list(range(1, 101))
    for b in batches:
        x, y = b["input_ids"].to(torch.int64), b["labels"]
        assert torch.equal(y[:, :-1], x[:, 1:]) and (y[:, -1] == -100).all()


def test_rerun_resumes_and_sealed_mismatch_fails(tmp_path):
    docs = _docs(10)
    ns = str(tmp_path / "ns")
    first = write_dataset(ns, docs, layout=Layout(dp=1), global_batch_size=2, seq_len=8, progress=False)
    again = write_dataset(ns, docs, layout=Layout(dp=1), global_batch_size=2, seq_len=8, progress=False)
    assert again["resumed_at"] == first["batches"]
    with pytest.raises(ManifestError, match="sealed"):
        write_dataset(ns, docs + docs, layout=Layout(dp=1), global_batch_size=2, seq_len=8, progress=False)


def test_argument_errors(tmp_path):
    with pytest.raises(LayoutError, match="dp=3"):
        write_dataset(str(tmp_path / "x"), _docs(3), layout=Layout(dp=3), global_batch_size=4, seq_len=8)
    with pytest.raises(ValueError, match="packing"):
        write_dataset(str(tmp_path / "x"), _docs(3), layout=Layout(), global_batch_size=4, seq_len=8, packing="greedy")
    with pytest.raises(LayoutError, match="not divisible into 2"):
        write_dataset(str(tmp_path / "x"), _docs(3), layout=Layout(cp=2, seq_keys=("input_ids",)), global_batch_size=4, seq_len=7)


def test_progress_bar_forced_on_does_not_change_output(tmp_path, read_back, capsys):
    docs = _docs(8)
    write_dataset(str(tmp_path / "a"), docs, layout=Layout(), global_batch_size=2, seq_len=8, progress=True)
    write_dataset(str(tmp_path / "b"), docs, layout=Layout(), global_batch_size=2, seq_len=8, progress=False)
    assert "write_dataset" in capsys.readouterr().err
    a = torch.cat([b["input_ids"] for b in read_back(str(tmp_path / "a"))[0]])
    b = torch.cat([b["input_ids"] for b in read_back(str(tmp_path / "b"))[0]])
    assert torch.equal(a, b)
