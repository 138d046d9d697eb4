"""Small namespaces with provenance for the lineage tests: a token file packed by BFD, produced by tgb.produce."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

import torch_tgb as tgb
from torch_tgb import sources
from torch_tgb.datapipes import document_batches
from torch_tgb.producer import ProducerConfig

NAME = "corpus"


def corpus(tmp: Path, *, docs: int = 160, seed: int = 0) -> tuple[Path, Path, np.ndarray]:
    """A token file of ``docs`` documents (uint16 ids, lengths 3..60) and its offsets; the lengths."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 60, size=docs)
    tokens = rng.integers(1, 30_000, size=int(lengths.sum())).astype(np.uint16)
    path, idx = tmp / "corpus.npy", tmp / "corpus.idx"
    np.save(path, tokens)
    np.concatenate([[0], np.cumsum(lengths)]).astype("<i8").tofile(idx)
    return path, idx, lengths


def produce(ns: str, path: Path, idx: Path, *, dp: int = 2, global_batch: int = 8, seq_len: int = 32,
            segment_tgbs: int = 1, producer_id: str = "p0", shard: tuple[int, int] = (0, 1), seal: bool = True,
            rows: str = "tokens", packing: str = "bfd", **options: Any) -> Any:
    docs = sources.TokenFile(path, offsets=idx, name=NAME, shard=shard, seed=3)
    batches = document_batches(docs, seq_len=seq_len, global_batch_size=global_batch, layout=tgb.Layout(dp=dp),
                               packing=packing, rows=rows, packing_window=32)
    config = ProducerConfig(segment_tgbs=segment_tgbs)
    return tgb.produce(ns, batches, producer_id=producer_id, seal=seal, config=config, commit_policy="fixed:3",
                       **options)


def record(path: Path, doc: int) -> str:
    return f"{NAME}:{path}:{doc}"


def read_all(ns: str, dp: int, keys: tuple[str, ...] = ("input_ids", "seq_lens", "provenance")) -> list[list[dict]]:
    """Every step of every dp rank, as delivered (tensors cloned)."""
    out = []
    for rank in range(dp):
        ds = tgb.TGBDataset(ns, mesh=tgb.Mesh(rank, dp), keys=keys)
        out.append([{k: v.clone() for k, v in b.items()} for b in ds])
    return out


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def pieces(batch: dict[str, torch.Tensor], r: int) -> list[tuple[int, list[int]]]:
    """Row r's pieces: (record, its tokens), in row order, from the provenance extents."""
    offs, prov = batch["provenance_offsets"].numpy(), batch["provenance"].numpy()
    tokens = batch["input_ids"][r].tolist()
    out, at = [], 0
    for k in range(int(offs[r]), int(offs[r + 1])):
        n = int(prov[k, 2]) & 0xFFFFFF
        out.append((int(prov[k, 1]), tokens[at : at + n]))
        at += n
    return out
