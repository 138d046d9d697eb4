"""The read hot path: verify policy, copy mode, writable remote buffers, dtype, open-object cache."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest
import torch

from tests.consumer._support import open_reader
import torch_tgb.format._decode as decode_module
import torch_tgb.format._reader as reader_module
import torch_tgb.format._slice_run as slice_run_module
from torch_tgb.consumer import TGBDataset
from torch_tgb.consumer import ReaderOptions
from torch_tgb.datapipes.read.local_runs import LocalRuns
from torch_tgb.errors import CorruptObject
from torch_tgb.format import SliceReader
from torch_tgb.layout import Layout, Mesh
from torch_tgb.manifest import Manifest
from torch_tgb.producer import Producer, ProducerConfig
from torch_tgb.storage import ForwardingStore, MemoryStore, open_store

STEPS = 6


def _batch(offset: int) -> dict[str, torch.Tensor]:
    ids = (torch.arange(4 * 64, dtype=torch.int64).reshape(4, 64) + offset * 1000).to(torch.int32)
    return {"input_ids": ids, "w": torch.full((4,), float(offset))}


def _produce(ns, *, segment_tgbs: int = 1) -> None:
    with Producer(ns, producer_id="p", layout=Layout(dp=2), commit_policy="fixed:2",
                  config=ProducerConfig(segment_tgbs=segment_tgbs)) as p:
        for offset in range(STEPS):
            p.append(_batch(offset), offset=offset)
        p.close(seal=True)


class KeepsBlobs(ForwardingStore):
    """Remembers every bytes object its range reads return."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.blobs: list[tuple[bytes, bytes]] = []

    def get_range(self, key: str, start: int, end: int) -> bytes:
        data = self.inner.get_range(key, start, end)
        if key.startswith("data/"):
            self.blobs.append((data, bytes(bytearray(data))))  # the object and a private copy of it
        return data


@pytest.mark.parametrize("segment_tgbs", [1, 3])
def test_remote_tensors_are_writable_and_never_write_into_bytes(segment_tgbs: int) -> None:
    store = MemoryStore(f"hp-{uuid.uuid4().hex}")
    _produce(store, segment_tgbs=segment_tgbs)
    keeping = KeepsBlobs(store)
    for batch in TGBDataset(keeping, mesh=Mesh(1, 2), prefetch=2):
        batch["input_ids"] += 1  # the in-place update a trainer may do
        batch["w"].mul_(2)
    assert keeping.blobs
    assert all(blob == original for blob, original in keeping.blobs)  # no bytes object was written into


def _count_crcs(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = slice_run_module.google_crc32c.value

    class Counting:
        @staticmethod
        def value(data):
            calls.append(1)
            return real(data)

    # the step path checks in _decode.decode_slice, the run path in _slice_run.SliceRun
    monkeypatch.setattr(decode_module, "google_crc32c", Counting)
    monkeypatch.setattr(slice_run_module, "google_crc32c", Counting)
    return calls


def _read_all(reader) -> int:
    """Steps read by a read path's last node: a RangeReader (steps) or LocalRuns (runs of steps)."""
    if isinstance(reader, LocalRuns):
        return sum(len([run.read(i) for i in range(len(run))]) for run in reader)
    return sum(1 for _ in reader)


@pytest.mark.parametrize("verify, second_pass", [("first", 0), ("always", 1), ("never", 0), (True, 1), (False, 0)])
@pytest.mark.parametrize("local, runs, segment_tgbs", [(True, True, 3), (True, False, 3), (True, True, 1), (False, False, 1)])
def test_verify_policy_checks_each_byte_range_once_by_default(
    tmp_path, monkeypatch, verify, second_pass, local, runs, segment_tgbs
) -> None:
    ns = str(tmp_path / "ns") if local else MemoryStore(f"hp-{uuid.uuid4().hex}")
    _produce(ns, segment_tgbs=segment_tgbs)
    calls = _count_crcs(monkeypatch)
    ds = TGBDataset(ns, mesh=Mesh(0, 2), prefetch=0, options=ReaderOptions(verify=verify, runs=runs))
    store = open_store(ns)
    reader = open_reader(ds, store, Layout(dp=2))
    assert isinstance(reader, LocalRuns) == (local and runs)
    first = _read_all(reader)
    after_first = len(calls)
    reader.reset(None)
    assert _read_all(reader) == first == STEPS
    per_pass = STEPS * 2  # two tensors per slice
    assert after_first == (0 if verify in ("never", False) else per_pass)
    assert len(calls) - after_first == second_pass * per_pass
    reader.close()


def test_reader_options_are_checked() -> None:
    with pytest.raises(ValueError, match="verify"):
        ReaderOptions(verify="sometimes")
    with pytest.raises(ValueError, match="read_mode"):
        ReaderOptions(read_mode="mmapped")
    with pytest.raises(TypeError, match="dtype"):
        ReaderOptions(dtype="int64")  # type: ignore[arg-type]


@pytest.mark.parametrize("local", [True, False])
def test_stored_dtype_by_default_and_int64_on_request(tmp_path, local) -> None:
    ns = str(tmp_path / "ns") if local else MemoryStore(f"hp-{uuid.uuid4().hex}")
    _produce(ns, segment_tgbs=4)
    stored = [b for b in TGBDataset(ns, mesh=Mesh(0, 2), prefetch=0)]
    cast = [b for b in TGBDataset(ns, mesh=Mesh(0, 2), prefetch=0, options=ReaderOptions(dtype=torch.int64))]
    assert all(b["input_ids"].dtype == torch.int32 for b in stored)
    assert all(b["input_ids"].dtype == torch.int64 and b["w"].dtype == torch.float32 for b in cast)
    for s, c, offset in zip(stored, cast, range(STEPS)):
        assert torch.equal(c["input_ids"], _batch(offset)["input_ids"][:2].long())
        assert torch.equal(s["input_ids"].long(), c["input_ids"])


def test_local_objects_are_opened_once_per_segment(tmp_path, monkeypatch) -> None:
    ns = str(tmp_path / "ns")
    _produce(ns, segment_tgbs=STEPS)
    opened: list[str] = []
    real = reader_module._open_local
    monkeypatch.setattr(reader_module, "_open_local", lambda path, key, below: (opened.append(key), real(path, key, below))[1])
    assert len(list(TGBDataset(ns, mesh=Mesh(1, 2), prefetch=0))) == STEPS
    assert len(opened) == 1  # footers and slices of all six TGBs from one mapping


def _truncate_segment(ns: str) -> str:
    """The path of the one segment object holding every step."""
    (key,) = {e.key for e in Manifest(open_store(ns)).entries(0, STEPS)}
    return os.path.join(ns, key)


def test_copy_mode_turns_an_object_truncated_in_place_into_corrupt_object(tmp_path) -> None:
    ns = str(tmp_path / "ns")
    _produce(ns, segment_tgbs=STEPS)
    path = _truncate_segment(ns)
    it = iter(TGBDataset(ns, mesh=Mesh(0, 2), prefetch=0, options=ReaderOptions(read_mode="copy", footer_lookahead=8)))
    next(it)  # footers of every step are cached now; the object is not mapped
    os.truncate(path, os.path.getsize(path) // 3)  # truncated in place, as a faulty copy tool would
    with pytest.raises(CorruptObject, match="truncated"):
        for _ in it:
            pass


SIGBUS_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from torch_tgb.consumer import TGBDataset
    from torch_tgb.consumer import ReaderOptions
    from torch_tgb.layout import Mesh
    ns, path, mode = sys.argv[1:]
    options = ReaderOptions(read_mode=mode, verify="always", small_object_bytes=0)  # map even a small object
    it = iter(TGBDataset(ns, mesh=Mesh(0, 2), prefetch=0, options=options))
    next(it)
    os.truncate(path, 4096)
    try:
        for batch in it:
            batch["input_ids"].sum()
    except Exception as e:
        print(type(e).__name__)
        sys.exit(3)
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="SIGBUS on a truncated mapping is Linux behaviour")
@pytest.mark.parametrize("mode, outcome", [("mmap", -signal.SIGBUS), ("copy", 3)])
def test_truncation_under_a_mapping_kills_the_process_only_in_mmap_mode(tmp_path, mode, outcome) -> None:
    ns = str(tmp_path / "ns")
    _produce(ns, segment_tgbs=STEPS)
    path = _truncate_segment(ns)
    env = {**os.environ, "PYTHONFAULTHANDLER": ""}
    proc = subprocess.run([sys.executable, "-c", SIGBUS_SCRIPT, ns, path, mode], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == outcome, proc.stderr[-2000:]
    if mode == "copy":
        assert proc.stdout.strip() == "CorruptObject"


@pytest.mark.parametrize("small_object_bytes, kind", [(1 << 30, bytearray), (0, "mmap")])
def test_small_objects_are_read_whole_large_ones_mapped_and_writes_stay_private(tmp_path, small_object_bytes, kind):
    import mmap

    ns = str(tmp_path / "ns")
    _produce(ns, segment_tgbs=2)
    before = {p: open(p, "rb").read() for p in (os.path.join(r, f) for r, _, fs in os.walk(ns) for f in fs)}
    ds = TGBDataset(ns, mesh=Mesh(0, 2), prefetch=0, options=ReaderOptions(small_object_bytes=small_object_bytes))
    for offset, batch in enumerate(ds):
        assert torch.equal(batch["input_ids"], _batch(offset)["input_ids"][:2])
        batch["input_ids"] += 1  # a private buffer or copy-on-write pages: never the file
    after = {p: open(p, "rb").read() for p in before}
    assert after == before
    reader = SliceReader(open_store(ns), read_whole_below=small_object_bytes)
    key = Manifest(open_store(ns)).entries(0, 1)[0].key
    reader.view(key, 0, 1)
    assert isinstance(reader._maps[key], mmap.mmap if kind == "mmap" else bytearray)
