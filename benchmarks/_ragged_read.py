"""Reading a VLM-shaped namespace (ragged pixel patches + text) against a raw memmap of the same bytes.

Issue 27's reader figure. Each global batch holds ``ROWS`` rows of
``input_ids`` (``SEQ`` uint32 tokens, dense) and ``pixel_values``, a ragged
key: 0-4 images per row of 256 patches of 3x14x14 uint8 (588 bytes each), so
a batch is a few MB and every row a different size. One rank reads the whole
namespace (``Layout(dp=1)``, segment objects as ``write_dataset`` writes them):

* ``floor``: ``np.memmap`` of a raw file with the same bytes in the same order,
  each step's ``input_ids`` and patches read out (one copy of the bytes) into
  tensors, with their offsets: a raw read of the same bytes, no checks, no format;
* ``tgb``: ``TGBDataset`` (run path, views of the mapping, each byte range's
  CRC32C checked once per reader: a fresh reader per pass, so once per pass,
  offsets checked on every read);
* ``tgb_loader``: the same through ``tgb.DataLoader(num_workers=0)``.

Reported: bytes/s delivered and the ratio to the floor in the same round
(goal >= 0.5), plus range requests per step of the tgb read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

import torch_tgb as tgb
from torch_tgb.producer import Producer, ProducerConfig
from torch_tgb.storage import LocalStore

from _rounds import compare, nbytes  # noqa: E402  (sibling module)

ROWS = 16
SEQ = 1024
PATCH = 3 * 14 * 14
PATCHES_PER_IMAGE = 256


def build(root: str, steps: int) -> dict[str, Any]:
    """The namespace and the raw file with the same bytes; per step, where its rows lie in the raw file."""
    rng = np.random.default_rng(0)
    raw_path = os.path.join(root, "raw.bin")
    ns = os.path.join(root, "ns")
    layout = tgb.Layout(dp=1, seq_keys=("input_ids",))
    index = []
    pos = 0
    with open(raw_path, "wb") as raw, Producer(LocalStore(ns, fsync=False), producer_id="vlm", layout=layout,
                                                commit_policy="fixed:64", config=ProducerConfig.bulk()) as p:
        for step in range(steps):
            ids = rng.integers(0, 50000, size=(ROWS, SEQ), dtype=np.uint32)
            images = rng.integers(0, 5, size=ROWS)
            rows = [rng.integers(0, 255, size=(int(n) * PATCHES_PER_IMAGE, PATCH), dtype=np.uint8) for n in images]
            p.append({"input_ids": torch.from_numpy(ids), "pixel_values": [torch.from_numpy(r) for r in rows]},
                     offset=step)
            values = np.concatenate(rows)
            offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
            raw.write(ids.tobytes())
            raw.write(values.tobytes())
            index.append((pos, len(values), offsets))
            pos += ids.nbytes + values.nbytes
        p.close(seal=True)
    return {"raw": raw_path, "size": pos, "index": index, "ns": ns, "steps": steps}


def _floor(corpus: dict[str, Any]) -> Iterator[dict[str, torch.Tensor]]:
    mm = np.memmap(corpus["raw"], dtype=np.uint8, mode="c", shape=(corpus["size"],))
    for start, items, offsets in corpus["index"]:
        ids = np.frombuffer(mm, dtype=np.uint32, count=ROWS * SEQ, offset=start).reshape(ROWS, SEQ)
        values = np.frombuffer(mm, dtype=np.uint8, count=items * PATCH, offset=start + ids.nbytes)
        yield {"input_ids": torch.from_numpy(ids.copy()), "pixel_values": torch.from_numpy(values.reshape(items, PATCH).copy()),
               "pixel_values_offsets": torch.from_numpy(offsets)}


def _tgb(corpus: dict[str, Any], loader: bool) -> Iterator[dict[str, torch.Tensor]]:
    ds = tgb.TGBDataset(corpus["ns"], mesh=tgb.Mesh(0, 1))
    return iter(tgb.DataLoader(ds) if loader else ds)


def _size(batch: dict[str, torch.Tensor]) -> int:
    return nbytes(batch.values())


def ragged_read(*, quick: bool, rounds: int, tmp: str, log: Callable[[str], None]) -> dict[str, Any]:
    steps = 32 if quick else 256
    corpus = build(tmp, steps)
    log(f"ragged read: {steps} steps of {ROWS} rows, {corpus['size'] / steps / 1e6:.1f} MB per step")
    readers = {
        "floor": (lambda: _floor(corpus), _size),
        "tgb": (lambda: _tgb(corpus, False), _size),
        "tgb_loader": (lambda: _tgb(corpus, True), _size),
    }
    rows = compare(readers, baseline="floor", rounds=rounds, passes=2 if quick else 3, log=log)
    ds = tgb.TGBDataset(corpus["ns"], mesh=tgb.Mesh(0, 1))
    n = sum(1 for _ in ds)
    stats = ds.stats()
    return {"steps": steps, "rows": ROWS, "bytes_per_step": corpus["size"] / steps, "results": rows,
            "data_requests_per_step": stats.data_requests / n, "goal_ratio": 0.5}
