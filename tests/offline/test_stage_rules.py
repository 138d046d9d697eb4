"""Issue 25 edges: a stage refuses what would make it yield nothing or wrong ids, on write as on read.

- ``seq_len=0`` made ``document_batches(..., packing="none")`` yield nothing, so
  ``tgb.produce(..., seal=True)`` sealed an empty namespace and reported success;
- ``token_dtype=torch.int32`` wrapped ids >= 2**31 to negatives while ``labels``
  kept the real ids; a reader's ``ReaderOptions(dtype=...)`` cast did the same.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchdata.nodes import IterableWrapper

import torch_tgb as tgb
from torch_tgb.consumer import ReaderOptions
from torch_tgb.errors import SchemaMismatch
from torch_tgb.offline import document_batches
from torch_tgb.datapipes import Pack

BIG = 2**31 + 7  # fits uint32 and int64, not int32


def docs() -> IterableWrapper:
    return IterableWrapper([{"tokens": torch.arange(1, 9)} for _ in range(4)])


@pytest.mark.parametrize("packing", ["none", "bfd", "concat"])
def test_seq_len_zero_is_refused_where_the_stage_is_built(tmp_path, packing: str) -> None:
    with pytest.raises(ValueError, match="seq_len must be an int >= 1, got 0"):
        batches = document_batches(docs(), seq_len=0, global_batch_size=2, packing=packing)
        tgb.produce(str(tmp_path / "ns"), batches, producer_id="p0", layout=tgb.Layout(dp=1), seal=True)
    with pytest.raises(ValueError, match="global_batch_size must be an int >= 1, got 0"):
        document_batches(docs(), seq_len=4, global_batch_size=0, packing=packing)
    with pytest.raises(ValueError, match="seq_len and window must be ints >= 1"):
        Pack(docs(), 0, method="none")
    assert not (tmp_path / "ns").exists()  # nothing was sealed


@pytest.mark.parametrize("packing", ["none", "bfd"])
def test_int32_storage_refuses_ids_that_do_not_fit(tmp_path, packing: str) -> None:
    tokens = np.array([1, 2, BIG, 3, 4, 5], dtype=np.int64)
    with pytest.raises(ValueError, match=f"a value {BIG} does not fit int32"):
        tgb.write_dataset(str(tmp_path / "ns"), tokens, layout=tgb.Layout(dp=1), global_batch_size=1, seq_len=4,
                          packing=packing, token_dtype=torch.int32, progress=False)
    ok = tgb.write_dataset(str(tmp_path / "ok"), tokens, layout=tgb.Layout(dp=1), global_batch_size=1, seq_len=4,
                           packing=packing, token_dtype=torch.uint32, progress=False)  # uint32 holds it
    assert ok["tokens"] == len(tokens)


def test_a_reader_cast_that_would_change_an_id_is_refused(tmp_path) -> None:
    ns = str(tmp_path / "ns")
    tokens = np.array([1, 2, BIG, 3, 4, 5, 6, 7], dtype=np.int64)
    tgb.write_dataset(ns, tokens, layout=tgb.Layout(dp=1), global_batch_size=1, seq_len=4, packing="none",
                      token_dtype=torch.uint32, progress=False)
    wide = list(tgb.TGBDataset(ns, mesh=tgb.Mesh(0, 1), options=ReaderOptions(dtype=torch.int64)))
    assert int(wide[0]["input_ids"].max()) == BIG and wide[0]["input_ids"].dtype == torch.int64
    with pytest.raises(SchemaMismatch, match=f"cannot read 'input_ids' \\(uint32\\) as torch.int32: a value {BIG} "
                                             "does not fit int32"):
        list(tgb.TGBDataset(ns, mesh=tgb.Mesh(0, 1), options=ReaderOptions(dtype=torch.int32)))
