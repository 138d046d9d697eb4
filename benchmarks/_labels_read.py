"""A ``write_dataset`` corpus read as ``input_ids`` + ``labels`` (int64) against the raw memmap floor.

Issue 28's reader figure. One corpus of uint16 tokens (a 50k vocabulary) is
saved as a flat ``.npy`` and written with ``write_dataset`` (its defaults:
token rows, ``input_ids`` stored once at uint16 with one more column, labels
derived on read; segment objects), ``packing="none"`` so that the two
deliver the same tensors: global batches of ``ROWS`` x ``SEQ``, one rank.

* ``floor``: ``np.memmap`` of the ``.npy``; per step the ``ROWS * SEQ + 1``
  tokens of the step cast to int64 once, ``input_ids`` and ``labels`` the
  two views (a slice and its shift) of that one copy: no checks, no format,
  no -100 (the namespace's rows end their sequence: their last label is -100);
* ``tgb``: ``TGBDataset(dtype=torch.int64)`` (run path, each slice's CRC32C
  checked once per reader, labels derived from ``seq_lens``);
* ``tgb_loader``: the same through ``tgb.DataLoader(num_workers=0)``;
* ``tgb_views`` / ``tgb_loader_views``: ``derive=()``, the bare shift: the
  rows cast to int64 once and ``input_ids`` and ``labels`` handed out as two
  views of that copy, as the floor does (the -100 then comes from a device-side
  ``mask_labels`` in the training step, not measured here);
* ``tgb_arrays``: the per-token arrays older namespaces store
  (``rows="arrays"``: ``input_ids``, ``labels``, ``document_ids``,
  ``position_ids``) read the same way with ``keys=("input_ids", "labels")``;
* ``tgb_loader_derived``: ``derive=("labels", "position_ids", "document_ids")``
  through the loader (what a packed-attention step asks for), against
  ``tgb_loader_arrays4``: the same four keys read as stored per-token arrays.

Reported: tokens/s delivered (``input_ids`` elements) and the ratio to the
floor in the same round (goal >= 0.67 for ``tgb_loader``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _rounds import compare

import torch_tgb as tgb

ROWS = 32
SEQ = 512


def build(root: str, steps: int) -> dict[str, Any]:
    """The flat token file and two namespaces of it (token rows, per-token arrays)."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 50_000, size=steps * ROWS * SEQ + 1, dtype=np.uint16)
    path = os.path.join(root, "corpus.npy")
    np.save(path, tokens)
    corpus = np.load(path, mmap_mode="r")
    out: dict[str, Any] = {"path": path, "steps": steps}
    for rows in ("tokens", "arrays"):
        ns = os.path.join(root, f"ns-{rows}")
        tgb.write_dataset(ns, corpus, layout=tgb.Layout(dp=1), seq_len=SEQ, global_batch_size=ROWS, packing="none",
                          rows=rows, shuffle_seed=0, progress=False)
        out[rows] = ns
    return out


def _floor(corpus: dict[str, Any]) -> Iterator[dict[str, torch.Tensor]]:
    mm = np.load(corpus["path"], mmap_mode="r")
    n = ROWS * SEQ
    for step in range(corpus["steps"]):
        chunk = torch.from_numpy(mm[step * n : (step + 1) * n + 1].astype(np.int64))
        yield {"input_ids": chunk[:-1].view(ROWS, SEQ), "labels": chunk[1:].view(ROWS, SEQ)}


FOUR = ("input_ids", "labels", "position_ids", "document_ids")


def _tgb(corpus: dict[str, Any], rows: str, loader: bool, *, views: bool = False,
         derive: tuple[str, ...] = ("labels",), keys: tuple[str, ...] | None = None) -> Iterator[dict[str, torch.Tensor]]:
    if keys is None and (rows == "arrays" or views):
        keys = ("input_ids", "labels")
    ds = tgb.TGBDataset(corpus[rows], mesh=tgb.Mesh(0, 1), dtype=torch.int64, keys=keys,
                        derive=() if views else derive)
    return iter(tgb.DataLoader(ds) if loader else ds)


def _tokens(batch: dict[str, torch.Tensor]) -> int:
    if batch["labels"].shape != batch["input_ids"].shape or batch["labels"].dtype != torch.int64:
        raise AssertionError(f"labels {tuple(batch['labels'].shape)} {batch['labels'].dtype} do not match input_ids")
    return batch["input_ids"].numel()


def labels_read(*, quick: bool, rounds: int, tmp: str, log: Callable[[str], None]) -> dict[str, Any]:
    steps = 128 if quick else 1024  # 2M / 16M tokens
    corpus = build(tmp, steps)
    first = next(_tgb(corpus, "tokens", False))
    floor = next(_floor(corpus))
    views = next(_tgb(corpus, "tokens", True, views=True))
    if not (torch.equal(views["input_ids"], floor["input_ids"])
            and torch.equal(views["labels"][:, :-1], floor["labels"][:, :-1])
            and views["labels"].untyped_storage().data_ptr() == views["input_ids"].untyped_storage().data_ptr()):
        raise AssertionError("derive=() does not deliver the floor's tensors as two views of one copy")
    # the same tensors, but for the label of each row's last token: -100 in the namespace (a row ends its
    # sequence), the next row's first token in the floor
    if not (torch.equal(first["input_ids"], floor["input_ids"])
            and torch.equal(first["labels"][:, :-1], floor["labels"][:, :-1])
            and bool((first["labels"][:, -1] == -100).all())):
        raise AssertionError("the namespace does not deliver the floor's tensors")
    derived, stored = next(_tgb(corpus, "tokens", False, derive=FOUR[1:], keys=FOUR)), next(_tgb(corpus, "arrays", False, keys=FOUR))
    if not all(torch.equal(derived[k], stored[k]) and derived[k].dtype == stored[k].dtype for k in FOUR):
        raise AssertionError("derived position_ids/document_ids/labels differ from the stored arrays")
    log(f"labels read: {steps} steps of {ROWS}x{SEQ} uint16 tokens delivered as int64 input_ids + labels")
    readers = {
        "floor": (lambda: _floor(corpus), _tokens),
        "tgb": (lambda: _tgb(corpus, "tokens", False), _tokens),
        "tgb_loader": (lambda: _tgb(corpus, "tokens", True), _tokens),
        "tgb_views": (lambda: _tgb(corpus, "tokens", False, views=True), _tokens),
        "tgb_loader_views": (lambda: _tgb(corpus, "tokens", True, views=True), _tokens),
        "tgb_arrays": (lambda: _tgb(corpus, "arrays", False), _tokens),
        "tgb_loader_derived": (lambda: _tgb(corpus, "tokens", True, derive=FOUR[1:], keys=FOUR), _tokens),
        "tgb_loader_arrays4": (lambda: _tgb(corpus, "arrays", True, keys=FOUR), _tokens),
    }
    # a pass of the floor lasts ~15 ms here: the median of 15 passes per process steadies the ratio
    rows = compare(readers, baseline="floor", rounds=rounds, passes=2 if quick else 15, log=log, unit="tokens")
    at_rest = {name: sum(f.stat().st_size for f in Path(corpus[name], "data").rglob("*") if f.is_file())
               / (steps * ROWS * SEQ) for name in ("tokens", "arrays")}
    return {"steps": steps, "rows": ROWS, "seq_len": SEQ, "stored": "uint16", "results": rows,
            "bytes_per_token_at_rest": at_rest, "goal_ratio": 0.67}
