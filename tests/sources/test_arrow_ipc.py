"""Arrow IPC files (what ``datasets.save_to_disk`` writes) through ``sources.Parquet``: units are record batches."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from torch_tgb.errors import SourceError
from torch_tgb.sources import Parquet
from torch_tgb.testing.resume import run_resume_test

pa = pytest.importorskip("pyarrow")

DOCS = [np.arange(k * 100, k * 100 + 3 + k % 7, dtype=np.int64) for k in range(23)]


def _write(path, docs, *, stream: bool, batch_rows: int = 5) -> None:
    schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("id", pa.int64())])
    new = pa.ipc.new_stream if stream else pa.ipc.new_file
    with pa.OSFile(str(path), "wb") as sink, new(sink, schema) as writer:
        for at in range(0, len(docs), batch_rows):
            part = docs[at : at + batch_rows]
            writer.write_batch(pa.record_batch([pa.array([d.tolist() for d in part], pa.list_(pa.int32())),
                                                pa.array(range(at, at + len(part)), pa.int64())], schema=schema))


@pytest.fixture(params=["stream", "file"])
def save_to_disk_dir(tmp_path, request):
    """A directory laid out like ``datasets.save_to_disk``: data-*.arrow plus JSON files that are not data."""
    root = tmp_path / "ds"
    root.mkdir()
    _write(root / "data-00000-of-00002.arrow", DOCS[:12], stream=request.param == "stream")
    _write(root / "data-00001-of-00002.arrow", DOCS[12:], stream=request.param == "stream")
    (root / "dataset_info.json").write_text("{}")
    (root / "state.json").write_text("{}")
    return str(root)


def _counts(docs) -> Counter:
    return Counter(tuple(int(t) for t in d) for d in docs)


def test_every_document_once_over_shards(save_to_disk_dir):
    out = []
    for index in range(3):
        source = Parquet(save_to_disk_dir, shard=(index, 3), seed=1)
        out += [d["tokens"] for d in source]
    assert _counts(out) == _counts(DOCS)
    units = Parquet(save_to_disk_dir)
    assert units.num_units == 6  # record batches: 5+5+2 rows in the first file, 5+5+1 in the second
    assert units._unit_name(0).endswith("record batch 0")


def test_resume_inside_a_record_batch_is_exact(save_to_disk_dir):
    full = run_resume_test(lambda: Parquet(save_to_disk_dir, seed=2, shuffle_buffer=3, batch_size=2), stop_after=7)
    assert _counts(d["tokens"] for d in full) == _counts(DOCS)


def test_not_an_arrow_file_names_the_file(tmp_path):
    bad = tmp_path / "data-00000-of-00001.arrow"
    bad.write_bytes(b"not arrow at all")
    with pytest.raises(SourceError, match="not an Arrow IPC file"):
        Parquet(str(bad))
