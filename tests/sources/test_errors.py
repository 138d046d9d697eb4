"""Bad input fails loud with a SourceError naming the file; corrupt records are raised or counted, never dropped."""

from __future__ import annotations

import numpy as np
import pytest

from tests.sources._corpus import arrow_table, bad_tar, byte_tokenizer, write_tars
from torch_tgb import sources
from torch_tgb.errors import SourceError, TGBError


def test_source_error_is_a_tgb_value_error():
    assert issubclass(SourceError, TGBError) and issubclass(SourceError, ValueError)


# --- TokenFile -----------------------------------------------------------------------


def test_token_file_bad_inputs(tmp_path):
    with pytest.raises(SourceError, match="missing.npy: no such token file"):
        sources.TokenFile(tmp_path / "missing.npy")
    with pytest.raises(SourceError, match="a directory, not a token file"):
        sources.TokenFile(tmp_path)
    raw = tmp_path / "t.bin"
    np.arange(10, dtype=np.uint16).tofile(raw)
    with pytest.raises(SourceError, match="t.bin: a raw token file needs dtype="):
        sources.TokenFile(raw)
    with pytest.raises(SourceError, match="t.bin: 20 bytes is not a whole number of int64 tokens"):
        sources.TokenFile(raw, dtype="int64")
    np.save(tmp_path / "f.npy", np.zeros(4, dtype=np.float32))
    with pytest.raises(SourceError, match="f.npy: wrong token dtype float32"):
        sources.TokenFile(tmp_path / "f.npy")
    np.save(tmp_path / "u.npy", np.zeros(4, dtype=np.uint16))
    with pytest.raises(SourceError, match="u.npy: holds uint16 tokens, dtype=int32 was given"):
        sources.TokenFile(tmp_path / "u.npy", dtype="int32")
    np.save(tmp_path / "e.npy", np.zeros(0, dtype=np.uint16))
    with pytest.raises(SourceError, match="e.npy: empty source"):
        sources.TokenFile(tmp_path / "e.npy")
    with pytest.raises(SourceError, match="must start at 0 and end at the token count 4"):
        sources.TokenFile(tmp_path / "u.npy", offsets=[0, 2, 3])
    with pytest.raises(SourceError, match="non-decreasing"):
        sources.TokenFile(tmp_path / "u.npy", offsets=[0, 3, 2, 4])
    (tmp_path / "m.idx").write_bytes(b"MMIDIDX\x00\x00" + bytes(32))
    with pytest.raises(SourceError, match="m.idx: a Megatron .idx file"):
        sources.TokenFile(tmp_path / "u.npy", offsets=tmp_path / "m.idx")


def test_token_file_raw_bin_and_chunks(tmp_path):
    tokens = np.arange(10, dtype=np.uint32)
    tokens.tofile(tmp_path / "t.bin")
    got = [d["tokens"].tolist() for d in sources.TokenFile(tmp_path / "t.bin", dtype="uint32", chunk_tokens=4)]
    assert sorted(got) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


# --- WebDataset ----------------------------------------------------------------------


def test_webdataset_bad_inputs(tmp_path):
    not_tar = tmp_path / "x.tar"
    not_tar.write_bytes(b"hello, not a tar" * 100)
    with pytest.raises(SourceError, match="x.tar: not a tar file"):
        next(sources.WebDataset([str(not_tar)]))
    with pytest.raises(SourceError, match="nope.tar: no such tar shard"):
        sources.WebDataset([str(tmp_path / "nope.tar")])
    with pytest.raises(SourceError, match="empty source"):
        sources.WebDataset([])
    with pytest.raises(SourceError, match="needs tokenizer="):
        sources.WebDataset([str(not_tar)], text_field="txt")
    with pytest.raises(SourceError, match="must be a .npy member"):
        sources.WebDataset([str(not_tar)], field="tokens.bin")


def test_webdataset_truncated_tar_raises_even_when_skipping(tmp_path, docs):
    (path,) = write_tars(tmp_path, docs[:5], per_tar=5)
    data = open(path, "rb").read()
    cut = tmp_path / "cut.tar"
    # inside the end-of-archive block, exactly at the boundary before the third member, inside a member's data
    for size in (len(data) // 2 + 100, 4096, 3600):
        cut.write_bytes(data[:size])
        with pytest.raises(SourceError, match="cut.tar"):
            list(sources.WebDataset([str(cut)], on_error="skip"))


@pytest.mark.parametrize("shuffle_buffer", [0, 2])
def test_webdataset_corrupt_record_raises_or_is_counted(tmp_path, shuffle_buffer):
    bad_tar(tmp_path / "bad.tar")
    with pytest.raises(SourceError, match=r"bad.tar sample 1 \(key 'b'\): 'tokens.npy' is not a valid .npy"):
        list(sources.WebDataset([str(tmp_path / "bad.tar")], shuffle_buffer=shuffle_buffer))
    node = sources.WebDataset([str(tmp_path / "bad.tar")], on_error="skip", shuffle_buffer=shuffle_buffer)
    got = sorted(d["tokens"].tolist() for d in node)
    assert got == [[0, 1], [0, 1, 2]]
    assert node.stats() == sources.SourceStats(records=2, tokens=5, skipped=1)


def test_webdataset_missing_member_is_a_record_error(tmp_path, docs):
    (path,) = write_tars(tmp_path, docs[:3], per_tar=3)
    node = sources.WebDataset([path], field="other.npy", on_error="skip")
    assert list(node) == [] and node.stats().skipped == 3
    with pytest.raises(SourceError, match="no member 'other.npy'"):
        list(sources.WebDataset([path], field="other.npy"))


# --- Parquet -------------------------------------------------------------------------


def _parquet(tmp_path, table, name="t.parquet", row_group=4):
    import pyarrow.parquet as pq

    path = str(tmp_path / name)
    pq.write_table(table, path, row_group_size=row_group)
    return path


def test_parquet_bad_inputs(tmp_path, docs):
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet at all" * 10)
    with pytest.raises(SourceError, match="junk.parquet: not a Parquet file"):
        sources.Parquet(str(junk))
    with pytest.raises(SourceError, match="missing.parquet: no such Parquet file"):
        sources.Parquet(str(tmp_path / "missing.parquet"))
    path = _parquet(tmp_path, arrow_table(docs))
    with pytest.raises(SourceError, match="t.parquet: no column 'tokens'"):
        sources.Parquet(path, column="tokens")
    with pytest.raises(SourceError, match="t.parquet: column 'id' holds text; pass tokenizer="):
        sources.Parquet(path, column="id")
    with pytest.raises(SourceError, match="no column 'nope'"):
        sources.Parquet(path, extra=["nope"])
    import pyarrow as pa

    floats = _parquet(tmp_path, pa.table({"x": pa.array([[1.5]], pa.list_(pa.float32()))}), "f.parquet")
    with pytest.raises(SourceError, match="f.parquet: column 'x' has type list<"):
        sources.Parquet(floats, column="x")
    with pytest.raises(SourceError, match="empty source"):
        sources.Parquet([])
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="empty: empty source"):
        sources.Parquet(str(tmp_path / "empty"))


def test_parquet_tokenizer_failure_is_per_record(tmp_path):
    import pyarrow as pa

    path = _parquet(tmp_path, pa.table({"text": ["ab", "a BAD one", "c", None]}))
    with pytest.raises(SourceError, match=r"t.parquet row group 0 row 1: the tokenizer failed"):
        list(sources.Parquet(path, column="text", tokenizer=byte_tokenizer))
    node = sources.Parquet(path, column="text", tokenizer=byte_tokenizer, on_error="skip")
    assert [d["tokens"].tolist() for d in node] == [[97, 98], [99]]
    assert node.stats() == sources.SourceStats(records=2, tokens=3, skipped=2)  # BAD and the null row


def test_lance_bad_inputs(tmp_path, docs):
    import lance

    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "file.txt").write_text("x")
    with pytest.raises(SourceError, match="plain: not a Lance dataset"):
        sources.Lance(str(tmp_path / "plain"))
    with pytest.raises(SourceError, match="nothing.lance: no such Lance dataset"):
        sources.Lance(str(tmp_path / "nothing.lance"))
    uri = str(tmp_path / "d.lance")
    lance.write_dataset(arrow_table(docs), uri)
    with pytest.raises(SourceError, match="d.lance: no column 'tokens'"):
        sources.Lance(uri)
    with pytest.raises(SourceError, match="d.lance: column 'id' holds text"):
        sources.Lance(uri, column="id")


def test_lance_null_tokens_counted(tmp_path):
    import lance
    import pyarrow as pa

    uri = str(tmp_path / "n.lance")
    lance.write_dataset(pa.table({"tokens": pa.array([[1, 2], None, [3]], pa.list_(pa.int64()))}), uri)
    with pytest.raises(SourceError, match=r"n.lance fragment 0 row 1: null tokens"):
        list(sources.Lance(uri))
    node = sources.Lance(uri, on_error="skip")
    assert [d["tokens"].tolist() for d in node] == [[1, 2], [3]] and node.stats().skipped == 1


def test_bad_options():
    with pytest.raises(ValueError, match="shard"):
        sources.TokenFile("x.npy", shard=(2, 2))
    with pytest.raises(ValueError, match="on_error"):
        sources.TokenFile("x.npy", on_error="ignore")  # type: ignore[arg-type]
