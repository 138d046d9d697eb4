"""Lineage end to end: rows carry provenance through Pack/GlobalBatches into the TGB, and a lookup finds every
(step, dp, row) of every record, also where a committer left no delta (the gap is read from the TGBs)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.lineage._corpus import NAME, corpus, produce, read_all, record
from torch_tgb.errors import ProvenanceError
from torch_tgb.lineage import Lineage
from torch_tgb.lineage.keys import DELTA_PREFIX
from torch_tgb.transforms.provenance import RecordId, unpack_extent


def _truth(ns: str, dp: int) -> dict[int, list[tuple[int, int, int]]]:
    """record -> (step, dp, row) from what readers read (provenance delivered with keys=)."""
    truth: dict[int, list[tuple[int, int, int]]] = {}
    for rank, steps in enumerate(read_all(ns, dp)):
        for step, batch in enumerate(steps):
            offs = batch["provenance_offsets"].numpy()
            for r in range(len(offs) - 1):
                for rec in batch["provenance"][offs[r] : offs[r + 1], 1].tolist():
                    truth.setdefault(rec, []).append((step, rank, r))
    return truth


@pytest.mark.parametrize("segment_tgbs", [1, 4])
def test_lookup_finds_every_row_of_every_record(tmp_path, segment_tgbs) -> None:
    path, idx, lengths = corpus(tmp_path)
    ns = str(tmp_path / "ns")
    produce(ns, path, idx, segment_tgbs=segment_tgbs)
    truth = _truth(ns, 2)
    assert sorted(truth) == list(range(len(lengths)))  # every document is somewhere
    with Lineage(ns) as lineage:
        result = lineage.lookup([record(path, d) for d in range(len(lengths))])
        for d in range(len(lengths)):
            got = sorted((h.step, h.dp, h.row) for h in result.hits[RecordId(NAME, str(path), d)])
            assert got == sorted(truth[d]), d


def test_a_step_s_provenance_names_whole_documents(tmp_path) -> None:
    path, idx, lengths = corpus(tmp_path)
    ns = str(tmp_path / "ns")
    produce(ns, path, idx)
    with Lineage(ns) as lineage:
        tokens: dict[int, int] = {}
        step = 0
        while True:
            try:
                found = lineage.provenance(step)
            except Exception:
                break
            for rows in found.slices.values():
                for row in rows:
                    assert sum(s.length for s in row) <= 32
                    for span in row:
                        assert span.record.source == NAME and span.record.unit == str(path)
                        tokens[span.record.record] = tokens.get(span.record.record, 0) + span.length
            step += 1
        assert tokens == {d: int(n) for d, n in enumerate(lengths)}  # each document's tokens, once
        only = lineage.provenance(0, rank=1)
        assert list(only.slices) == [1]
        with pytest.raises(ValueError):
            lineage.provenance(0, rank=2)


def test_a_missing_delta_is_read_from_the_tgbs_and_written_back(tmp_path) -> None:
    path, idx, lengths = corpus(tmp_path)
    ns = str(tmp_path / "ns")
    produce(ns, path, idx, global_batch=4)  # versions past the last compaction (every 8th) hold records
    with Lineage(ns) as lineage:
        covers = lineage.index.state().catalog.covers  # versions merged into runs: their deltas are gone anyway
        every = lineage.lookup([record(path, d) for d in range(len(lengths))]).hits
        rec = next(r for r, h in every.items() if lineage.manifest.version_of_step(h[0].step).number > covers)
        full = lineage.lookup([rec]).hits
        deltas = lineage.store.list(DELTA_PREFIX)
        hit_version = lineage.manifest.version_of_step(full[rec][0].step).number
        lineage.store.delete([k for k in deltas if int(k[len(DELTA_PREFIX) :][:20]) == hit_version])
    with Lineage(ns) as lineage:
        result = lineage.lookup([rec])
        assert result.hits == full and hit_version in result.filled
    with Lineage(ns) as lineage:
        assert hit_version not in lineage.lookup([rec]).filled  # repaired: the index holds it again


def test_unknown_sources_and_units_are_named_in_the_error(tmp_path) -> None:
    path, idx, _ = corpus(tmp_path)
    ns = str(tmp_path / "ns")
    produce(ns, path, idx)
    with Lineage(ns) as lineage:
        with pytest.raises(ProvenanceError, match="no source named 'web'"):
            lineage.lookup(["web:x:1"])
        with pytest.raises(ProvenanceError, match="no unit"):
            lineage.lookup([f"{NAME}:other.npy:1"])
        assert lineage.lookup([f"{NAME}:corpus.npy:1"]).hits  # a unit's base name names it


def test_rows_without_provenance_read_as_before(tmp_path) -> None:
    """A namespace written without provenance (older writers, provenance=False) reads unchanged; lineage says so."""
    import torch_tgb as tgb
    from torch_tgb import sources
    from torch_tgb.datapipes import GlobalBatches, Pack

    path, idx, _ = corpus(tmp_path)
    ns = str(tmp_path / "bare")
    rows = Pack(sources.TokenFile(path, offsets=idx), 32, provenance=False)
    tgb.produce(ns, GlobalBatches(rows, global_batch_size=8, layout=tgb.Layout.token_rows(2)), producer_id="p0",
                seal=True)
    batch = next(iter(tgb.TGBDataset(ns, mesh=tgb.Mesh(0, 2))))
    assert "provenance" not in batch and "input_ids" in batch
    with Lineage(ns) as lineage, pytest.raises(ProvenanceError, match="no provenance"):
        lineage.provenance(0)


def test_extents_cover_documents_split_over_rows(tmp_path) -> None:
    path, idx, lengths = corpus(tmp_path, docs=40)
    ns = str(tmp_path / "ns")
    produce(ns, path, idx, seq_len=16, packing="concat")  # documents cut at row ends
    pieces: dict[int, list[tuple[int, int]]] = {}
    for steps in read_all(ns, 2):
        for batch in steps:
            starts, lens = unpack_extent(batch["provenance"][:, 2].numpy())
            for rec, s, n in zip(batch["provenance"][:, 1].tolist(), starts.tolist(), lens.tolist()):
                pieces.setdefault(rec, []).append((s, n))
    for d, n in enumerate(lengths):
        covered = sorted(pieces[d])
        assert covered[0][0] == 0 and sum(x for _, x in covered) == n
        assert all(a + x == b for (a, x), (b, _) in zip(covered, covered[1:]))  # contiguous pieces
    assert np.mean([len(v) for v in pieces.values()]) > 1  # some documents were split


@pytest.mark.parametrize("kind", ["parquet", "webdataset"])
def test_every_piece_names_the_record_its_tokens_come_from(tmp_path, kind) -> None:
    """Parquet rows are named by their row in the file (not in the row group); WebDataset samples by their index in
    the shard. Every piece of every row holds exactly the tokens of the record it names, at the extent it names."""
    import io
    import tarfile

    import pyarrow as pa
    import pyarrow.parquet as pq

    import torch_tgb as tgb
    from torch_tgb import sources
    from torch_tgb.datapipes import document_batches

    rng = np.random.default_rng(5)
    files = []
    for f in range(2):
        docs = [rng.integers(1, 5000, size=int(rng.integers(3, 40))).astype(np.int32) for _ in range(23)]
        if kind == "parquet":
            path = tmp_path / f"part-{f}.parquet"
            pq.write_table(pa.table({"input_ids": pa.array([d.tolist() for d in docs], pa.list_(pa.int32()))}),
                           str(path), row_group_size=5)  # row groups of 5: record 7 is row 2 of the second
        else:
            path = tmp_path / f"shard-{f}.tar"
            with tarfile.open(path, "w") as tar:
                for k, d in enumerate(docs):
                    buf = io.BytesIO()
                    np.save(buf, d)
                    member = tarfile.TarInfo(f"s{k:04d}.tokens.npy")
                    member.size = buf.tell()
                    tar.addfile(member, io.BytesIO(buf.getvalue()))
        files.append((str(path), docs))
    paths = [p for p, _ in files]
    node = sources.Parquet(paths, name="src") if kind == "parquet" else sources.WebDataset(paths, name="src")
    ns = str(tmp_path / "ns")
    tgb.produce(ns, document_batches(node, seq_len=24, global_batch_size=4, layout=tgb.Layout(dp=1), packing="bfd"),
                producer_id="p0", seal=True)
    with Lineage(ns) as lineage:
        [info] = lineage.sources().values()
        named = lineage.provenance(0).records()
    assert info.units == tuple(paths) and all(r.source == "src" and r.unit in paths for r in named)
    by_path = dict(files)
    seen = 0
    for batch in tgb.TGBDataset(ns, mesh=tgb.Mesh(0, 1), keys=("input_ids", "provenance")):
        offs, prov = batch["provenance_offsets"].numpy(), batch["provenance"].numpy()
        for r in range(batch["input_ids"].shape[0]):
            at = 0
            for k in range(int(offs[r]), int(offs[r + 1])):
                start, n = (int(x) for x in unpack_extent(prov[k, 2]))
                doc = by_path[info.units[int(prov[k, 0]) & 0xFFFFFFFF]][int(prov[k, 1])]
                assert batch["input_ids"][r, at : at + n].tolist() == doc[start : start + n].tolist()
                at += n
                seen += 1
    assert seen >= 46  # every record at least once
