"""Reading a namespace stored compressed: the tensors of the uncompressed one, decoded on the read-ahead threads.

A producer's ``codecs=`` (``Producer``, ``tgb.produce``, ``tgb produce --codec``)
store keys compressed; readers deliver exactly what an uncompressed namespace
of the same batches delivers, on every path (local with read-ahead, DataLoader
workers, a remote store), resume exactly, and ``tgb verify`` checks the stored
bytes and their decoding.
"""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

import torch_tgb as tgb
from torch_tgb.cli.main import main as cli_main
from torch_tgb.cli._verify_impl import verify_namespace
from torch_tgb.format import CODEC_VERSION, read_footer
from torch_tgb.storage import open_store

pytest.importorskip("zstandard")

LAYOUT = tgb.Layout(dp=2, seq_keys=("input_ids",))
CODECS = {"pixel_values": "zstd:1+delta:3x4x4", "input_ids": "zstd"}


def batch(offset: int) -> dict[str, object]:
    """Global batch ``offset``: smooth 'patches' (a gradient, what the delta filter is for) and token rows."""
    rng = np.random.default_rng(offset)
    rows = []
    for r in range(4):
        n = int(rng.integers(0, 5))
        base = np.add.outer(np.arange(n * 3 * 4)[:, None], np.arange(4)) + 7 * offset + r
        rows.append(torch.from_numpy((base % 251).astype(np.uint8).reshape(n, 48)))
    ids = torch.from_numpy(rng.integers(0, 50000, (4, 16), dtype=np.uint16).astype(np.int32))
    return {"input_ids": ids, "pixel_values": rows, "sample_id": torch.arange(4) + 4 * offset}


def write(ns: str, n: int, codecs: dict[str, str] | None, **settings: object) -> None:
    with tgb.Producer(ns, producer_id="p", layout=LAYOUT, codecs=codecs, **settings) as p:
        for offset in range(n):
            p.append(batch(offset), offset=offset)
        p.close(seal=True)


def steps(ns: str, rank: int, **options: object) -> list[dict[str, torch.Tensor]]:
    return list(tgb.TGBDataset(ns, mesh=tgb.Mesh(dp_rank=rank, dp_size=2), **options))


def same(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]]) -> None:
    assert len(a) == len(b) and a
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            assert x[k].dtype == y[k].dtype and torch.equal(x[k], y[k]), k


@pytest.fixture
def namespaces(tmp_path: Path) -> tuple[str, str]:
    plain, coded = str(tmp_path / "plain"), str(tmp_path / "coded")
    write(plain, 6, None)
    write(coded, 6, CODECS)
    return plain, coded


def test_a_coded_namespace_reads_as_the_plain_one_decoded_on_read_ahead_threads(namespaces) -> None:
    plain, coded = namespaces
    schema = json.loads((Path(coded) / "_tgb/dataset.json").read_text())["schema"]
    assert schema["pixel_values"]["codec"] == CODECS["pixel_values"]  # the hint readers pick their path by
    with open_store(coded) as store:
        key = next(k for k in store.list("data/"))
        assert read_footer(store, key).version == CODEC_VERSION
    for rank in range(2):
        same(steps(coded, rank), steps(plain, rank))
    ds = tgb.TGBDataset(coded, mesh=tgb.Mesh(dp_rank=0, dp_size=2))
    it = iter(ds)
    next(it), next(it)
    path = ds.path
    assert type(path).__name__ == "StepPath"  # not the run path, which decodes on the consumer's thread
    assert path.reader._feeder is not None  # decoding runs ahead, on the reader threads
    list(it)
    plain_ds = tgb.TGBDataset(plain, mesh=tgb.Mesh(dp_rank=0, dp_size=2))
    plain_it = iter(plain_ds)
    next(plain_it)
    assert type(plain_ds.path).__name__ == "RunPath"  # unchanged for a plain namespace
    list(plain_it)


def test_a_local_coded_namespace_decodes_its_steps_each_on_a_reader_thread(namespaces, monkeypatch) -> None:
    """Steps already committed are not grouped into one read on a local namespace: each goes to a reader thread
    of its own, so the steps of a compressed one decode side by side (grouped, one thread decoded them in turn)."""
    from torch_tgb.datapipes.read.range_reader import RangeReader

    plain, coded = namespaces
    groups: list[int] = []
    read_group = RangeReader.read_group

    def recorded(self, tasks):  # type: ignore[no-untyped-def]
        groups.append(len(tasks))
        return read_group(self, tasks)

    monkeypatch.setattr(RangeReader, "read_group", recorded)
    same(steps(coded, 0), steps(plain, 0))  # sealed: every step is committed when the feeder starts
    assert len(groups) == 6 and set(groups) == {1}


def test_the_slices_of_one_coded_step_decode_on_a_pool_of_decoding_threads(namespaces, monkeypatch) -> None:
    """A reader of one rank over a dp=2 namespace reads two slices a step: stored compressed, they go to the
    reader's decoding pool (side by side where it has free threads), and the step is the plain one's."""
    from torch_tgb.format import SliceReader

    plain, coded = namespaces
    threads: list[str] = []
    read = SliceReader.read

    def recorded(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        threads.append(threading.current_thread().name)
        return read(self, *args, **kwargs)

    monkeypatch.setattr(SliceReader, "read", recorded)
    got = list(tgb.TGBDataset(coded, mesh=tgb.Mesh(dp_rank=0, dp_size=1)))
    assert any(name.startswith("tgb-decode") for name in threads)
    same(got, list(tgb.TGBDataset(plain, mesh=tgb.Mesh(dp_rank=0, dp_size=1))))


def test_coded_steps_resume_exactly_and_read_through_loader_workers(namespaces) -> None:
    plain, coded = namespaces
    mesh = tgb.Mesh(dp_rank=1, dp_size=2)
    ds = tgb.TGBDataset(coded, mesh=mesh)
    it = iter(ds)
    head = [next(it), next(it), next(it)]
    state = ds.state_dict()
    it.close()
    again = tgb.TGBDataset(coded, mesh=mesh)
    again.load_state_dict(state)
    same(head + list(again), steps(plain, 1))
    loader = tgb.DataLoader(coded, mesh=mesh, num_workers=2)
    same([dict(b) for b in loader], steps(plain, 1))


@pytest.mark.parametrize("prefetch", [0, 3])
def test_a_remote_coded_namespace_reads_as_the_plain_one(prefetch: int) -> None:
    plain, coded = (f"memory://compress-{name}-{uuid.uuid4().hex[:8]}" for name in ("plain", "coded"))
    write(plain, 5, None)
    write(coded, 5, CODECS)
    same(steps(coded, 0, prefetch=prefetch), steps(plain, 0, prefetch=prefetch))


def test_tgb_produce_codec_flag_and_tgb_verify(tmp_path: Path, capsys) -> None:
    tokens = tmp_path / "corpus.npy"
    np.save(tokens, np.random.default_rng(0).integers(0, 50000, 40_000).astype(np.uint16))
    ns = str(tmp_path / "ns")
    assert cli_main(["produce", ns, "--source", f"token-file:{tokens}", "--global-batch", "4", "--seq-len", "64",
                     "--steps", "6", "--codec", "input_ids=zstd", "--seal"]) == 0
    schema = json.loads((Path(ns) / "_tgb/dataset.json").read_text())["schema"]
    assert schema["input_ids"]["codec"] == "zstd"
    assert verify_namespace(ns).ok
    assert cli_main(["produce", ns, "--codec", "input_ids"]) != 0  # not KEY=SPEC: refused, nothing written
    capsys.readouterr()


def test_tgb_verify_finds_a_damaged_coded_tensor(namespaces) -> None:
    _, coded = namespaces
    report = verify_namespace(coded)
    assert report.ok, report.render_text()
    with open_store(coded) as store:
        key = sorted(store.list("data/"))[0]
        footer = read_footer(store, key)
        t = next(t for t in footer.slice(0).tensors if t.name == "pixel_values" and t.codec is not None)
        path = store.local_path(key)
    assert path is not None
    raw = bytearray(Path(path).read_bytes())
    raw[t.offset + t.length - 2] ^= 0x01
    Path(path).write_bytes(bytes(raw))
    report = verify_namespace(coded)
    assert not report.ok and "tensor 'pixel_values': CRC32C mismatch" in report.render_text()


@pytest.mark.parametrize(
    "options",
    [
        {"keys": ("pixel_values",)},
        {"keys": ("input_ids", "sample_id")},
        {"dtype": torch.int64},
        {"read_mode": "copy", "verify": "always"},
        {"shuffle": True, "block_size": 2, "seed": 3},
        {"runs": False, "inline_local": False, "prefetch": 2},
    ],
    ids=lambda o: ",".join(o),
)
def test_reader_options_read_a_coded_namespace_as_the_plain_one(namespaces, options) -> None:
    """Key selection, casts, copies, shuffled epochs, forced read-ahead, one rank merging both slices: each
    the plain namespace's steps."""
    plain, coded = namespaces
    for rank in range(2):
        same(steps(coded, rank, **options), steps(plain, rank, **options))
    merged = [list(tgb.TGBDataset(ns, mesh=tgb.Mesh(dp_rank=0, dp_size=1), **options)) for ns in (coded, plain)]
    same(*merged)


def test_a_corrupt_frame_read_without_crc_checks_is_corrupt_object_never_wrong_tensors(namespaces) -> None:
    """``verify="never"`` trusts the stored bytes; a flipped byte anywhere in a coded tensor's frame is still
    refused (zstd's frame checks, its content checksum), never delivered as a tensor."""
    _, coded = namespaces
    with open_store(coded) as store:
        key = sorted(store.list("data/"))[0]
        t = next(t for t in read_footer(store, key).slice(0).tensors if t.name == "pixel_values" and t.codec)
        path = store.local_path(key)
    assert path is not None
    original = Path(path).read_bytes()
    for at in sorted({t.offset + t.length * k // 8 for k in range(1, 8)} | {t.offset + t.length - 1}):
        raw = bytearray(original)
        raw[at] ^= 0x10
        Path(path).write_bytes(bytes(raw))
        with pytest.raises(tgb.errors.CorruptObject, match="tensor 'pixel_values'"):
            steps(coded, 0, verify="never")
    Path(path).write_bytes(original)
