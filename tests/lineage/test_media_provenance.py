"""Media samples (WebDataset images through decode, resize, patchify, splice, PackSamples, GlobalBatches) carry
their provenance: every piece of a row names the sample (shard, index in the shard) whose tokens it holds."""

from __future__ import annotations

import pytest

from torch_tgb import datapipes
from torch_tgb.layout import Layout
from torch_tgb.transforms.provenance import unpack_extent

pytest.importorskip("PIL")

from tests.datapipes.test_images import SEQ, stages, tars  # noqa: E402,F401 - the fixture, by name


def test_pack_samples_rows_name_each_sample_they_hold(tars) -> None:  # noqa: F811 - the fixture
    urls, samples = tars
    rows = datapipes.PackSamples(stages(urls), SEQ, window=5, label_ignore_ids=(1001, 1002))
    assert rows.provenance and "provenance" in rows.ragged_keys
    per_shard = len(samples) // len(urls)
    seen = []
    for batch in datapipes.GlobalBatches(rows, global_batch_size=4, layout=Layout(dp=2)):
        prov = batch["provenance"]
        for r in range(batch["input_ids"].shape[0]):
            pieces = prov[r].numpy().reshape(-1, 3)
            ids = batch["document_ids"][r]
            assert len(pieces) == int(ids.max()) + 1 if (ids >= 0).any() else len(pieces) == 0
            at = 0
            for k, (unit, record, extent) in enumerate(pieces.tolist()):
                start, n = (int(x) for x in unpack_extent(extent))
                assert start == 0 and n == int((ids == k).sum())  # a whole sample: the tokens of sequence k
                seen.append((unit & 0xFFFFFFFF) * per_shard + record)
                at += n
            assert at == int((ids >= 0).sum())  # the pieces cover the row's tokens, in order
    assert sorted(seen) == sorted(set(seen)) and len(seen) == len(samples)  # every sample once, by its place
