"""The loaders ``peers.py`` compares: how each one is prepared from the corpus, read, and resumed.

Every peer delivers the same thing: batches of 32 rows of 512 tokens as an
int64 tensor, read from the same uint32 corpus (``corpus.bin``). A peer is a
``Peer(prepare, open, pip)``: ``prepare(work, corpus, worlds)`` builds its
format once; ``open(work, rank, world, state)`` returns ``(iterator,
state_fn)`` where ``state_fn()`` gives what that loader checkpoints (``None``:
it cannot, and resume replays). Optional peers are imported inside their
functions so that a missing one is reported, never faked.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROWS, SEQ = 32, 512
BATCH_TOKENS = ROWS * SEQ


@dataclass(frozen=True)
class Peer:
    prepare: Callable[[Path, np.ndarray, list[int]], None]
    open: Callable[[Path, int, int, Any], tuple[Iterator[torch.Tensor], Callable[[], Any] | None]]
    pip: str | None = None  # the install line, for peers outside the CI extras
    module: str | None = None  # what must import for the peer to count as installed
    note: str = ""
    resume: str = "state_dict"  # "state_dict" | "offset" (open(..., state=step)) | "replay" (skip N batches)


def corpus(work: Path) -> np.memmap:
    return np.memmap(work / "corpus.bin", dtype=np.uint32, mode="r")


def _nothing(work: Path, tokens: np.ndarray, worlds: list[int]) -> None:
    pass


# --- raw floor: slice the memmap, cast, wrap ---------------------------------------------------------


def _floor_open(work: Path, rank: int, world: int, state: Any):
    mm = corpus(work)
    nb = len(mm) // BATCH_TOKENS
    start = state or 0

    def it():
        for i in range(rank + start * world, nb, world):
            yield torch.from_numpy(mm[i * BATCH_TOKENS:(i + 1) * BATCH_TOKENS].astype(np.int64)).view(ROWS, SEQ)

    return it(), None


# --- torch DataLoader / torchdata StatefulDataLoader over np.memmap (Megatron style) ------------------


class MemmapSamples(torch.utils.data.Dataset):
    """Sample i = tokens[i*512:(i+1)*512] as int64, the way Megatron's indexed datasets hand them out."""

    def __init__(self, path: Path):
        self.path = path
        self.mm = None
        self.n = os.path.getsize(path) // 4 // SEQ

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.mm is None:
            self.mm = np.memmap(self.path, dtype=np.uint32, mode="r")
        return torch.from_numpy(self.mm[i * SEQ:(i + 1) * SEQ].astype(np.int64))


def _rank_samples(n: int, rank: int, world: int) -> list[int]:
    """This rank's samples: whole batches dealt round-robin (batch b goes to rank b % world)."""
    nb = n // ROWS
    return [b * ROWS + j for b in range(rank, nb, world) for j in range(ROWS)]


def _dataloader_open(work: Path, rank: int, world: int, state: Any):
    ds = MemmapSamples(work / "corpus.bin")
    consumed = (state or 0) * ROWS  # Megatron resumes by skipping consumed_samples in its sampler
    loader = torch.utils.data.DataLoader(ds, batch_size=ROWS, sampler=_rank_samples(len(ds), rank, world)[consumed:])
    return iter(loader), None


def _stateful_open(work: Path, rank: int, world: int, state: Any):
    from torchdata.stateful_dataloader import StatefulDataLoader

    ds = MemmapSamples(work / "corpus.bin")
    loader = StatefulDataLoader(ds, batch_size=ROWS, sampler=_rank_samples(len(ds), rank, world))
    if state is not None:
        loader.load_state_dict(state)
    return iter(loader), loader.state_dict


# --- torch_tgb: write_dataset corpus read by tgb.DataLoader ------------------------------------------


def _tgb_ns(work: Path, world: int) -> str:
    return str(work / f"tgb_dp{world}")


def _tgb_prepare(work: Path, tokens: np.ndarray, worlds: list[int]) -> None:
    import torch_tgb as tgb

    for world in worlds:
        tgb.write_dataset(_tgb_ns(work, world), tokens, layout=tgb.Layout(dp=world), global_batch_size=ROWS * world,
                          seq_len=SEQ, packing="none", token_dtype=torch.uint32, progress=False)


def _tgb_open(work: Path, rank: int, world: int, state: Any):
    import torch_tgb as tgb

    loader = tgb.DataLoader(_tgb_ns(work, world), mesh=tgb.Mesh(dp_rank=rank, dp_size=world), num_workers=0)
    if state is not None:
        loader.load_state_dict(state)
    return (b["input_ids"].to(torch.int64) for b in loader), loader.state_dict


# --- WebDataset: tar shards of .npy samples ----------------------------------------------------------

WDS_SHARD_SAMPLES = 1024


def _wds_prepare(work: Path, tokens: np.ndarray, worlds: list[int]) -> None:
    import webdataset as wds

    out = work / "wds"
    out.mkdir(exist_ok=True)
    n = len(tokens) // SEQ
    per_shard = WDS_SHARD_SAMPLES
    for s in range((n + per_shard - 1) // per_shard):
        with wds.TarWriter(str(out / f"shard-{s:05d}.tar")) as sink:
            for i in range(s * per_shard, min(n, (s + 1) * per_shard)):
                sink.write({"__key__": f"{i:09d}", "tokens.npy": np.asarray(tokens[i * SEQ:(i + 1) * SEQ])})


def _wds_open(work: Path, rank: int, world: int, state: Any):
    import webdataset as wds

    shards = sorted(str(p) for p in (work / "wds").glob("shard-*.tar"))
    ds = wds.WebDataset(shards[rank::world], shardshuffle=False, empty_check=False).decode().to_tuple("tokens.npy")
    it = (torch.from_numpy(np.asarray(b[0])).to(torch.int64) for b in ds.batched(ROWS, partial=False))
    return it, None  # no state: resume replays


# --- MosaicML Streaming (MDS) ------------------------------------------------------------------------


def _import_streaming():
    """``streaming`` imports its vision/text modules and transformers at import; stand-ins keep those out."""
    for name in ("streaming.vision", "streaming.text"):
        sys.modules.setdefault(name, types.ModuleType(name))
    if "transformers" not in sys.modules:
        root = types.ModuleType("transformers")
        root.__path__ = []
        fe = types.ModuleType("transformers.feature_extraction_utils")
        fe.BatchFeature = type("BatchFeature", (dict,), {})
        tb = types.ModuleType("transformers.tokenization_utils_base")
        tb.BatchEncoding = type("BatchEncoding", (dict,), {})
        sys.modules.update({"transformers": root, fe.__name__: fe, tb.__name__: tb})
    import streaming

    return streaming


def _mds_prepare(work: Path, tokens: np.ndarray, worlds: list[int]) -> None:
    streaming = _import_streaming()
    n = len(tokens) // SEQ
    with streaming.MDSWriter(out=str(work / "mds"), columns={"tokens": f"ndarray:uint32:{SEQ}"},
                             size_limit=1 << 26) as out:
        for i in range(n):
            out.write({"tokens": np.asarray(tokens[i * SEQ:(i + 1) * SEQ])})


def _mds_open(work: Path, rank: int, world: int, state: Any):
    streaming = _import_streaming()
    ds = streaming.StreamingDataset(local=str(work / "mds"), batch_size=ROWS, shuffle=False, replication=None)
    loader = streaming.StreamingDataLoader(ds, batch_size=ROWS, num_workers=0)
    if state is not None:
        loader.load_state_dict(state)
    return (b["tokens"].to(torch.int64) for b in loader), loader.state_dict


# --- LitData: optimize + TokensLoader ----------------------------------------------------------------

LIT_CHUNK_TOKENS = 1 << 21


def _lit_item(args: tuple[str, int]) -> torch.Tensor:
    path, i = args
    mm = np.memmap(path, dtype=np.uint32, mode="r")
    return torch.from_numpy(mm[i * LIT_CHUNK_TOKENS:(i + 1) * LIT_CHUNK_TOKENS].astype(np.int32))


def _lit_prepare(work: Path, tokens: np.ndarray, worlds: list[int]) -> None:
    from litdata import TokensLoader, optimize

    chunks = (len(tokens) + LIT_CHUNK_TOKENS - 1) // LIT_CHUNK_TOKENS
    optimize(fn=_lit_item, inputs=[(str(work / "corpus.bin"), i) for i in range(chunks)],
             output_dir=str(work / "litdata"), chunk_size=LIT_CHUNK_TOKENS, item_loader=TokensLoader(),
             num_workers=1, verbose=False, start_method="fork")


def _lit_open(work: Path, rank: int, world: int, state: Any):
    from litdata import StreamingDataLoader, StreamingDataset, TokensLoader

    ds = StreamingDataset(str(work / "litdata"), item_loader=TokensLoader(block_size=SEQ), shuffle=False,
                          drop_last=True)
    loader = StreamingDataLoader(ds, batch_size=ROWS, num_workers=0, drop_last=True)
    if state is not None:
        loader.load_state_dict(state)
    return (b.to(torch.int64) for b in loader), loader.state_dict


PEERS: dict[str, Peer] = {
    "floor": Peer(_nothing, _floor_open, note="memmap slice -> int64 tensor, no loader at all", resume="offset"),
    "dataloader_memmap": Peer(_nothing, _dataloader_open, resume="offset",
                              note="torch DataLoader(num_workers=0) over np.memmap; resume = sampler offset"),
    "stateful_dataloader": Peer(_nothing, _stateful_open, module="torchdata",
                                note="torchdata StatefulDataLoader over the same memmap dataset"),
    "torch_tgb": Peer(_tgb_prepare, _tgb_open,
                      note="write_dataset(packing='none', token rows at uint32) read by tgb.DataLoader(num_workers=0); "
                      "delivers labels too (derived from the same bytes, -100 at row ends)"),
    "webdataset": Peer(_wds_prepare, _wds_open, pip="pip install webdataset", module="webdataset",
                       note=f"tar shards of {WDS_SHARD_SAMPLES} .npy samples, .decode().batched(32)",
                       resume="replay"),
    "mosaicml_streaming": Peer(_mds_prepare, _mds_open, module="streaming",
                               pip="pip install -c benchmarks/constraints.txt --no-deps mosaicml-streaming "
                               "&& pip install -c benchmarks/constraints.txt brotli zstd python-snappy catalogue "
                               "'xxhash<4'",
                               note="MDS ndarray:uint32:512 column; StreamingDataLoader(num_workers=0); stand-in "
                               "modules for streaming.vision, streaming.text and transformers"),
    "litdata": Peer(_lit_prepare, _lit_open, module="litdata",
                    pip="pip install -c benchmarks/constraints.txt --no-deps litdata "
                    "&& pip install -c benchmarks/constraints.txt lightning-utilities obstore",
                    note="optimize(TokensLoader, int32 chunks) + StreamingDataLoader(num_workers=0)"),
}
BUILTIN = ("floor", "dataloader_memmap", "stateful_dataloader", "torch_tgb")


def installed(name: str) -> bool:
    module = PEERS[name].module
    if module is None:
        return True
    try:
        if module == "streaming":
            _import_streaming()
        else:
            __import__(module)
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return False
    return True
