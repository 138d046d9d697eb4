"""The whole-rows step of the run path (``Finish.rows``): the step path's tensors, the tokens contiguous."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torch_tgb import Layout, Mesh, TGBDataset, write_dataset

SEQ = 16
ROWS = 4


@pytest.fixture(scope="module")
def ns(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("finish") / "ns")
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 40, size=60)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat = rng.integers(1, 60_000, size=int(offsets[-1])).astype(np.uint16)
    write_dataset(path, (flat, offsets), layout=Layout(dp=1), seq_len=SEQ, global_batch_size=ROWS, packing="bfd",
                  shuffle_seed=0, progress=False)
    return path


SETTINGS = [
    {"dtype": torch.int64},
    {},
    {"dtype": torch.int32},
    {"dtype": torch.int64, "derive": ("labels", "position_ids", "document_ids", "cu_seqlens")},
    {"dtype": torch.int64, "derive": ("position_ids",)},
    {"dtype": torch.int64, "keys": ("input_ids", "labels")},
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "defaults")
def test_rows_deliver_what_the_step_path_does(ns, settings) -> None:
    runs = list(TGBDataset(ns, Mesh(0, 1), open_cache=False, **settings))
    steps = list(TGBDataset(ns, Mesh(0, 1), runs=False, open_cache=False, **settings))
    assert len(runs) == len(steps) > 3
    for a, b in zip(runs, steps):
        assert a.keys() == b.keys()
        for k in b:
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


def test_masked_labels_come_with_contiguous_tokens(ns) -> None:
    """The masked default casts the tokens in one pass from the stored rows: a contiguous tensor, one copy to a device."""
    for batch in TGBDataset(ns, Mesh(0, 1), dtype=torch.int64):
        assert batch["input_ids"].is_contiguous() and batch["labels"].is_contiguous()
        assert batch["input_ids"].dtype == batch["labels"].dtype == torch.int64
        assert bool((batch["labels"] == -100).any())


def test_the_bare_shift_is_two_views_of_one_cast(ns) -> None:
    for batch in TGBDataset(ns, Mesh(0, 1), dtype=torch.int64, derive=("position_ids",)):
        tokens, labels = batch["input_ids"], batch["labels"]
        assert tokens.untyped_storage().data_ptr() == labels.untyped_storage().data_ptr()
        assert torch.equal(tokens[:, 1:], labels[:, :-1])
