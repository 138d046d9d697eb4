"""Excising samples of media rows (``PackSamples``: images spliced into text): the sample's tokens, patches, grids
and key leave its row, every other sample of the row keeps its tokens, labels, pixels and grids, and every step,
slice and row stays where it was; rows written without ``provenance_counts`` are refused, saying what to do."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import torch_tgb as tgb
from torch_tgb import datapipes
from torch_tgb.errors import ProvenanceError
from torch_tgb.layout import Layout, RaggedRows
from torch_tgb.lineage import Lineage, excise, verify_deny
from torch_tgb.lineage._rewrite import _check_array_keys
from torch_tgb.transforms import decode_sample_keys
from torch_tgb.transforms.provenance import COUNTS_KEY, media_keys

pytest.importorskip("PIL")

from tests.datapipes.test_images import SEQ, stages, tars  # noqa: E402,F401 - the fixture, by name

KEYS = ("input_ids", "labels", "document_ids", "pixel_values", "image_grid_thw", "provenance", COUNTS_KEY,
        "sample_keys")


def _samples(ns: str) -> list[list[list[tuple]]]:
    """Per (step, rank) row: its samples in row order as (record, key, tokens, labels, {media key: entries})."""
    out = []
    for rank in range(2):
        for batch in tgb.TGBDataset(ns, mesh=tgb.Mesh(rank, 2), keys=KEYS):
            media = media_keys(["pixel_values", "image_grid_thw"])
            counts, counts_at = batch[COUNTS_KEY].numpy().reshape(-1, len(media)), batch[f"{COUNTS_KEY}_offsets"]
            prov, prov_at = batch["provenance"].numpy().reshape(-1, 3), batch["provenance_offsets"]
            keys = decode_sample_keys(batch["sample_keys"], batch["sample_keys_offsets"])
            at = {k: 0 for k in media}
            for r in range(batch["input_ids"].shape[0]):
                spans = prov[int(prov_at[r]) : int(prov_at[r + 1])]
                mine = counts[int(counts_at[r]) : int(counts_at[r + 1])]
                assert len(mine) == len(spans) == len(keys[r])
                row = []
                ids = batch["document_ids"][r]
                for k, (unit, record, _) in enumerate(spans.tolist()):
                    entries = {}
                    for j, name in enumerate(media):
                        values = batch[name]
                        entries[name] = values[at[name] : at[name] + int(mine[k, j])].numpy().tobytes()
                        at[name] += int(mine[k, j])
                    row.append(((unit, record), keys[r][k], batch["input_ids"][r][ids == k].tolist(),
                                batch["labels"][r][ids == k].tolist(), entries))
                out.append(row)
            for name in media:
                assert at[name] == int(batch[f"{name}_offsets"][-1])  # the counts cover every entry
    return out


def test_excising_a_sample_takes_its_tokens_pixels_and_key_out_of_its_row(tmp_path, tars) -> None:  # noqa: F811
    urls, _ = tars
    rows = datapipes.PackSamples(stages(urls), SEQ, window=5, label_ignore_ids=(1001, 1002), sample_keys=True)
    assert COUNTS_KEY in rows.ragged_keys
    ns = str(tmp_path / "ns")
    tgb.produce(ns, datapipes.GlobalBatches(rows, global_batch_size=4, layout=Layout(dp=2)), producer_id="p0",
                seal=True, progress=False)
    default = next(iter(tgb.TGBDataset(ns, mesh=tgb.Mesh(0, 2))))
    assert "provenance" not in default and COUNTS_KEY not in default  # a trainer's batch is what it trains on
    before = _samples(ns)
    with Lineage(ns) as lineage:
        shared = [row for row in before if len(row) >= 2]  # a row that holds another sample too
        assert shared
        denied = {shared[0][0][0], [row for row in before if row][-1][-1][0]}  # first of a row, last of another
        names = [str(lineage.name(unit, record)) for unit, record in sorted(denied)]
    report = excise(ns, names, who="test")
    assert report.version is not None and report.spans == len(denied)
    assert verify_deny(ns, names).rows == 0
    after = _samples(ns)
    assert len(after) == len(before)  # every step and row where it was
    for old, new in zip(before, after):
        assert new == [sample for sample in old if sample[0] not in denied]  # the others byte for byte


def test_media_rows_without_counts_are_refused_saying_what_to_do() -> None:
    rows = 2
    batch = {
        "input_ids": torch.zeros(rows, 8, dtype=torch.int64), "labels": torch.zeros(rows, 8, dtype=torch.int64),
        "document_ids": torch.zeros(rows, 8, dtype=torch.int64),
        "position_ids": torch.zeros(rows, 8, dtype=torch.int64),
        "pixel_values": RaggedRows.from_lengths(torch.zeros(3, 4, dtype=torch.uint8), [1, 2]),
        "provenance": RaggedRows.from_lengths(torch.zeros(2, 3, dtype=torch.int64), [1, 1]),
    }
    entry = SimpleNamespace(key="data/p0/old.tgb")
    with pytest.raises(ProvenanceError, match=r"no 'provenance_counts'.*produce the affected steps again"):
        _check_array_keys(batch, entry, 2)
    batch[COUNTS_KEY] = RaggedRows.from_lengths(torch.tensor([[1], [2]], dtype=torch.int32), [1, 1])
    owners = _check_array_keys(batch, entry, 2)
    assert owners["pixel_values"].tolist() == [0, 1, 1] and owners[COUNTS_KEY].tolist() == [0, 1]
    batch["mrope"] = torch.zeros(rows, 8)
    with pytest.raises(ProvenanceError, match="mrope"):
        _check_array_keys(batch, entry, 2)


def test_counts_that_do_not_match_their_rows_are_refused() -> None:
    from torch_tgb.transforms.excision import entry_owners, kept_entries, key_owners

    deny = np.array([False, True])
    keep, offsets = kept_entries(np.array([0, 1, 3]), entry_owners(np.array([1, 2])), deny, np.array([0, 1, 2]))
    assert keep.tolist() == [True, False, False] and offsets.tolist() == [0, 1, 1]
    with pytest.raises(ValueError, match="not in the entry's row"):
        kept_entries(np.array([0, 2, 3]), entry_owners(np.array([1, 2])), deny, np.array([0, 1, 2]))
    assert key_owners(np.frombuffer(b"ab\x00c\x00", dtype=np.uint8), 2).tolist() == [0, 0, 0, 1, 1]
    with pytest.raises(ValueError):
        key_owners(np.frombuffer(b"ab\x00c", dtype=np.uint8), 2)
