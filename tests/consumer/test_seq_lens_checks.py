"""Stored ``seq_lens`` that cannot be the rows', and derived keys that cannot be made, are refused (issue 40).

- A row of zero-length sequences (``[0, 0, ...]``) would have every label
  ignored and every position 0; lengths that stop short of the row's content
  would call real tokens padding. The packer writes neither
  (``tests/transforms/test_derive.py`` checks its rows), so a reader refuses
  both as ``CorruptObject`` naming the step.
- ``derive=("cu_seqlens",)`` on a namespace without ``seq_lens`` would deliver
  no ``cu_seqlens`` and no error: ``SchemaMismatch`` at open, as ``keys=``
  does. The default ``derive=("labels",)`` keeps reading such namespaces.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torch_tgb import Layout, Mesh, Producer, TGBDataset, write_dataset
from torch_tgb.errors import CorruptObject, SchemaMismatch

SEQ = 16
ROWS_LAYOUT = Layout(dp=1, seq_keys=("input_ids",), labels_from="input_ids")


def token_row(real: int) -> torch.Tensor:
    """A row of ``real`` distinct tokens (1, 2, ...), padded with 0, and the token after it."""
    row = torch.zeros(SEQ + 1, dtype=torch.int32)
    row[:real] = torch.arange(1, real + 1, dtype=torch.int32)
    return row


def write_rows(ns: str, bad_lens: list[list[int]], real: list[int]) -> None:
    """Step 0: two sound rows (one full, one padded); step 1: rows of ``real`` tokens with lengths ``bad_lens``."""
    with Producer(ns, producer_id="p", layout=ROWS_LAYOUT) as p:
        for step, (lens, content) in enumerate((([[SEQ], [SEQ - 4]], [SEQ, SEQ - 4]), (bad_lens, real))):
            p.append({"input_ids": torch.stack([token_row(n) for n in content]),
                      "seq_lens": [torch.tensor(n, dtype=torch.int32) for n in lens]}, offset=step)
        p.close(seal=True)


BAD = {
    # name: (step 1's seq_lens per row, its rows' real tokens, what the error says)
    "zero-length sequences": ([[SEQ], [0, 0]], [SEQ, 0], "row 1 holds a sequence of length 0"),
    "zero-length among real ones": ([[SEQ - 4, 0, 4], [SEQ]], [SEQ, SEQ], "row 0 holds a sequence of length 0"),
    "lengths short of a full row": ([[SEQ], [SEQ - 4]], [SEQ, SEQ], "row 1 holds input_ids tokens [13, 14, 15, 16]"),
    "lengths short of a padded row": ([[SEQ - 1], [SEQ - 8]], [SEQ - 1, SEQ - 4],
                                      "row 1 holds input_ids tokens [9, 10, 11, 12] ..."),
    "lengths one short, beside a padded row": ([[SEQ - 1], [SEQ - 4]], [SEQ, SEQ - 4],
                                               "row 0 holds input_ids token 16 after the 15"),
}


@pytest.mark.parametrize("runs", [True, False], ids=["runs", "steps"])
@pytest.mark.parametrize("case", BAD)
def test_lengths_the_packer_never_writes_are_a_corrupt_object(tmp_path, case, runs) -> None:
    lens, real, says = BAD[case]
    ns = str(tmp_path / "ns")
    write_rows(ns, lens, real)
    for derive in (("labels",), ("position_ids",), ("cu_seqlens", "document_ids")):
        it = iter(TGBDataset(ns, mesh=Mesh(0, 1), runs=runs, prefetch=0, derive=derive))
        first = next(it)  # step 0 is sound: its padded row's padding is what the step pads with
        if "labels" in derive:
            assert torch.equal(first["labels"][1, SEQ - 5 :], torch.full((5,), -100))
        with pytest.raises(CorruptObject, match=r"step=1: .*'seq_lens'") as info:
            next(it)
        assert says in str(info.value), str(info.value)
    assert len(list(TGBDataset(ns, mesh=Mesh(0, 1), runs=runs, derive=()))) == 2  # the bare shift reads as written


@pytest.mark.parametrize("cp_rank", [0, 1])
def test_a_cp_rank_judges_the_padding_it_holds(tmp_path, cp_rank) -> None:
    """With cp=2 each rank holds half of every row: the one whose half holds the miscounted tokens refuses."""
    ns = str(tmp_path / "ns")
    with Producer(ns, producer_id="p", layout=Layout.token_rows(dp=1, cp=2)) as p:
        p.append({"input_ids": torch.stack([token_row(SEQ), token_row(SEQ - 2)]),
                  "seq_lens": [torch.tensor([SEQ - 4], dtype=torch.int32), torch.tensor([SEQ - 2], dtype=torch.int32)]},
                 offset=0)
        p.close(seal=True)
    it = iter(TGBDataset(ns, mesh=Mesh(0, 1, cp_rank, 2)))
    if cp_rank == 0:  # positions 0..7: all real, all counted
        assert next(it)["labels"].shape == (2, SEQ // 2)
    else:
        with pytest.raises(CorruptObject, match=r"row 0 holds input_ids tokens \[13, 14, 15, 16\]"):
            next(it)


def test_derived_keys_a_namespace_cannot_make_are_refused_at_open(tmp_path) -> None:
    """No seq_lens: derive=("cu_seqlens",) is a SchemaMismatch at open; the default derive still reads."""
    dense = str(tmp_path / "dense")
    with Producer(dense, producer_id="p", layout=Layout(dp=1)) as p:
        p.append({"input_ids": torch.zeros(2, SEQ, dtype=torch.int32), "labels": torch.ones(2, SEQ, dtype=torch.int32)},
                 offset=0)
        p.close(seal=True)
    shifted = str(tmp_path / "shifted")  # labels_from rows without seq_lens: labels are the bare shift
    with Producer(shifted, producer_id="p", layout=ROWS_LAYOUT) as p:
        p.append({"input_ids": torch.stack([token_row(SEQ)] * 2)}, offset=0)
        p.close(seal=True)
    for ns in (dense, shifted):
        for derive in (("cu_seqlens",), ("labels", "position_ids"), ("document_ids",)):
            with pytest.raises(SchemaMismatch, match=r"cannot derive \[.*\]: the namespace stores no 'seq_lens'"):
                next(iter(TGBDataset(ns, mesh=Mesh(0, 1), derive=derive)))
        for derive in (("labels",), ()):  # the default (and nothing) read every older namespace as before
            batch = next(iter(TGBDataset(ns, mesh=Mesh(0, 1), derive=derive)))
            assert set(batch) == {"input_ids", "labels"}
            assert torch.equal(batch["labels"], torch.ones(2, SEQ, dtype=torch.int32) if ns == dense
                               else torch.arange(2, SEQ + 2, dtype=torch.int32).expand(2, SEQ).clone().where(
                                   torch.arange(SEQ) < SEQ - 1, torch.tensor(0, dtype=torch.int32)))


def test_a_stored_key_is_read_not_refused(tmp_path) -> None:
    """derive= names a key the namespace stores (older per-token arrays, no seq_lens): it is read as stored."""
    ns = str(tmp_path / "ns")
    with Producer(ns, producer_id="p", layout=Layout(dp=1)) as p:
        p.append({"input_ids": torch.zeros(2, SEQ, dtype=torch.int32),
                  "position_ids": torch.arange(SEQ).expand(2, SEQ).clone()}, offset=0)
        p.close(seal=True)
    batch = next(iter(TGBDataset(ns, mesh=Mesh(0, 1), derive=("labels", "position_ids"))))
    assert torch.equal(batch["position_ids"], torch.arange(SEQ).expand(2, SEQ))


def test_a_derived_key_alone_reads_what_it_is_derived_from(tmp_path) -> None:
    """keys=("position_ids",): the rows' tokens are read (their width, their padding) but not delivered."""
    ns = str(tmp_path / "ns")
    tokens = (np.arange(2 * 4 * SEQ) % 500 + 1).astype(np.uint16)
    write_dataset(ns, tokens, layout=Layout(dp=1), seq_len=SEQ, global_batch_size=4, packing="none", progress=False)
    for runs in (True, False):
        got = list(TGBDataset(ns, mesh=Mesh(0, 1), runs=runs, keys=("position_ids",), derive=("position_ids",)))
        assert len(got) == 2 and all(set(b) == {"position_ids"} for b in got)
        assert torch.equal(got[0]["position_ids"], torch.arange(SEQ).expand(4, SEQ))
