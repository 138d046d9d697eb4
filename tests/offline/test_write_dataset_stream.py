"""write_dataset at any size: memory-mapped input, resumable stream nodes, shards, document nodes, packing=None."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchdata.nodes import BaseNode, IterableWrapper

from torch_tgb.datapipes import GlobalBatches, Pack
from torch_tgb.errors import ManifestError
from torch_tgb.layout import Layout
from torch_tgb.manifest import Manifest
from torch_tgb.offline import write_dataset
from torch_tgb.sources import TokenFile
from torch_tgb.storage import open_store
from torch_tgb.testing.resume import run_resume_test


def corpus(n: int = 60, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Flat uint16 tokens ``1..total`` (each token names its corpus position) and document offsets."""
    lengths = np.random.default_rng(seed).integers(0, 50, size=n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return np.arange(1, offsets[-1] + 1, dtype=np.uint16), offsets


def real_tokens(batches: list[dict[str, torch.Tensor]]) -> list[int]:
    ids = torch.cat([b["input_ids"] for b in batches]).to(torch.int64)
    if "document_ids" in batches[0]:
        return ids[torch.cat([b["document_ids"] for b in batches]) >= 0].tolist()
    return ids[ids > 0].tolist()


@pytest.mark.parametrize("packing", ["bfd", "none"])
def test_stream_nodes_resume_exactly(packing: str) -> None:
    flat, offsets = corpus(40)

    def make() -> BaseNode:
        docs = TokenFile(flat, offsets=offsets, seed=1, piece_tokens=16)
        rows = Pack(docs, 8, window=5, method=packing)
        return GlobalBatches(rows, global_batch_size=3, layout=Layout.token_rows(dp=1), info={"x": 1})

    for k in (0, 1, 4, 9):
        run_resume_test(make, stop_after=k)


def test_array_documents_pieces_and_memmap(tmp_path) -> None:
    flat, offsets = corpus(10)
    path = tmp_path / "tokens.npy"
    np.save(path, flat)
    mapped = np.load(path, mmap_mode="r")
    docs = [d["tokens"] for d in TokenFile(mapped, offsets=offsets, piece_tokens=7, docs_per_unit=10)]  # one unit
    assert all(len(d) <= 7 for d in docs)
    assert np.concatenate(docs).tolist() == flat.tolist()


def test_memmap_corpus_in_shards_by_two_producers(tmp_path, read_back) -> None:
    flat, offsets = corpus(80)
    np.save(tmp_path / "t.npy", flat)
    mapped = np.load(tmp_path / "t.npy", mmap_mode="r")
    ns = str(tmp_path / "ns")
    layout = Layout(dp=2, seq_keys=("input_ids", "labels", "document_ids", "position_ids"))
    kw = dict(layout=layout, global_batch_size=4, seq_len=16, shuffle_seed=5, progress=False, packing_window=7)
    a = write_dataset(ns, (mapped, offsets), producer_id="w0", shard=(0, 2), seal=False, **kw)
    b = write_dataset(ns, (mapped, offsets), producer_id="w1", shard=(1, 2), seal=False, **kw)
    assert not a["sealed"] and a["tokens"] + b["tokens"] == len(flat)
    write_dataset(ns, (mapped, offsets), producer_id="w1", shard=(1, 2), seal=True, **kw)  # the sealing step
    batches, _, sealed = read_back(ns)
    assert sealed and len(batches) == a["batches"] + b["batches"]
    assert sorted(real_tokens(batches)) == flat.tolist()  # every token exactly once over both shards


def test_document_node_input_and_packing_none_is_none(tmp_path, read_back) -> None:
    flat, offsets = corpus(30)
    docs = [{"tokens": torch.from_numpy(flat[offsets[i] : offsets[i + 1]].astype(np.int64))} for i in range(30)]
    ns = str(tmp_path / "ns")
    summary = write_dataset(ns, IterableWrapper(docs), layout=Layout(dp=1, seq_keys=("input_ids", "labels")),
                            global_batch_size=2, seq_len=10, packing=None, progress=False)
    batches, _, sealed = read_back(ns)
    assert sealed and summary["tokens"] == len(flat) and summary["packing_efficiency"] is None
    assert {"input_ids", "labels"} <= set(batches[0])
    stream = torch.cat([b["input_ids"] for b in batches]).reshape(-1)
    assert stream[: len(flat)].tolist() == flat.tolist()  # the node's order, concatenated
    with pytest.raises(ValueError, match="shard"):
        write_dataset(str(tmp_path / "x"), IterableWrapper(docs), layout=Layout(), global_batch_size=2, seq_len=10,
                      shard=(0, 2))


def test_rerun_after_crash_resumes_from_committed_state(tmp_path, read_back, monkeypatch) -> None:
    flat, offsets = corpus(60)
    ns = str(tmp_path / "ns")
    # segment_bytes=1: one object per batch, so commits happen before the crash (with segments
    # nothing of the open segment is committed and the rerun would start at 0)
    kw = dict(layout=Layout(dp=1), global_batch_size=2, seq_len=16, progress=False, commit_policy="naive",
              segment_bytes=1)
    import torch_tgb.producer.pipeline as pipeline_module

    real = pipeline_module.Producer.append
    calls = {"n": 0}

    def crashing_append(self, batch, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 6:
            raise RuntimeError("injected crash")
        return real(self, batch, **kwargs)

    monkeypatch.setattr(pipeline_module.Producer, "append", crashing_append)
    with pytest.raises(RuntimeError, match="injected"):
        write_dataset(ns, (flat, offsets), **kw)
    monkeypatch.setattr(pipeline_module.Producer, "append", real)
    head = Manifest(open_store(ns)).head()
    assert 0 < head.producers["offline"].next_offset <= 5 and not head.sealed
    summary = write_dataset(ns, (flat, offsets), **kw)
    assert summary["resumed_at"] == head.producers["offline"].next_offset
    batches, _, sealed = read_back(ns)
    assert sealed and sorted(real_tokens(batches)) == flat.tolist()
    again = write_dataset(ns, (flat, offsets), **kw)  # finished and sealed: the summary, nothing written
    assert again["batches"] == summary["batches"] and again["tokens"] == len(flat)
    with pytest.raises(ManifestError, match="different corpus"):
        write_dataset(ns, (flat, offsets), shuffle_seed=9, **kw)


def test_readme_pipeline_example(tmp_path, read_back) -> None:
    """The README's producer pipeline, at a tiny size: it terminates, and a rerun writes nothing twice."""
    import torch_tgb as tgb
    from torch_tgb import sources
    from torch_tgb.offline import document_batches

    flat, offsets = corpus(50)
    np.save(tmp_path / "corpus.npy", flat)
    np.save(tmp_path / "corpus.idx.npy", offsets)
    (tmp_path / "corpus.idx.npy").rename(tmp_path / "corpus.idx")
    layout = tgb.Layout(dp=2)
    ns = str(tmp_path / "run2")
    for rerun in (False, True):
        docs = sources.TokenFile(tmp_path / "corpus.npy", offsets=tmp_path / "corpus.idx", shard=(0, 2))
        batches = document_batches(docs, seq_len=32, global_batch_size=4, packing="bfd", layout=layout)
        report = tgb.produce(ns, batches, producer_id="p0")  # the pipeline's layout: dp 2, token rows
        assert report.exhausted and report.resumed == rerun and (report.batches == 0) == rerun
    written = read_back(ns)[0]
    shard0 = sum(len(d["tokens"]) for d in sources.TokenFile(tmp_path / "corpus.npy", offsets=tmp_path / "corpus.idx",
                                                             shard=(0, 2)))
    assert len(real_tokens(written)) == shard0 > 0
