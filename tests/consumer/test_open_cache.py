"""A fresh reader of a local namespace reuses what earlier readers in the process learnt (consumer/_open_cache.py).

Its sealed head, committed entries, parsed footers and checked CRCs, but never
across a namespace written again at the same path, never a reader's own
mapping, and not with ``open_cache=False``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import google_crc32c
import numpy as np
import pytest
import torch

import torch_tgb.consumer._open_cache as open_cache
import torch_tgb.format._reader as format_reader
from torch_tgb import Layout, Mesh, TGBDataset, write_dataset
from torch_tgb.manifest.records import Version

SEQ = 16
ROWS = 4


def corpus(seed: int, steps: int = 6) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, 1000, size=steps * ROWS * SEQ + 1).astype(np.uint16)


def write(ns: str, seed: int) -> None:
    write_dataset(ns, corpus(seed), layout=Layout(dp=1), seq_len=SEQ, global_batch_size=ROWS, packing="none",
                  shuffle_seed=0, progress=False)


def read(ns: str, **settings: object) -> list[dict[str, torch.Tensor]]:
    return [{k: v.clone() for k, v in b.items()} for b in TGBDataset(ns, Mesh(0, 1), **settings)]  # type: ignore[arg-type]


@contextmanager
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Counts of manifest versions decoded, footer runs parsed and CRC32Cs computed while the block runs."""
    counts = {"versions": 0, "footer_runs": 0, "crcs": 0}
    decode, parse, crc = Version.decode.__func__, format_reader.parse_footer_run, google_crc32c.value  # type: ignore[attr-defined]

    def counting(name: str, f):  # noqa: ANN001, ANN202 - a test double
        def wrapped(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            counts[name] += 1
            return f(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(Version, "decode", classmethod(counting("versions", decode)))
    monkeypatch.setattr(format_reader, "parse_footer_run", counting("footer_runs", parse))
    monkeypatch.setattr(open_cache, "parse_footer_run", counting("footer_runs", parse))
    monkeypatch.setattr(google_crc32c, "value", counting("crcs", crc))  # every CRC of the package goes through it
    yield counts


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    open_cache.OPEN_CACHE.clear()
    yield
    open_cache.OPEN_CACHE.clear()


def test_a_second_reader_decodes_no_version_parses_no_footer_checks_no_crc(tmp_path, monkeypatch) -> None:
    ns = str(tmp_path / "ns")
    write(ns, seed=1)
    with counted(monkeypatch) as first:
        expected = read(ns)
    assert first["versions"] > 0 and first["footer_runs"] > 0 and first["crcs"] > 0
    with counted(monkeypatch) as second:
        again = read(ns)
    assert second == {"versions": 0, "footer_runs": 0, "crcs": 0}
    assert len(again) == len(expected) >= 6
    assert all(torch.equal(a[k], b[k]) for a, b in zip(again, expected) for k in b)


def test_open_cache_false_reads_everything_again(tmp_path, monkeypatch) -> None:
    ns = str(tmp_path / "ns")
    write(ns, seed=1)
    read(ns)
    with counted(monkeypatch) as counts:
        read(ns, open_cache=False)
    assert counts["versions"] > 0 and counts["footer_runs"] > 0 and counts["crcs"] > 0


def test_a_namespace_written_again_at_the_same_path_is_read_anew(tmp_path) -> None:
    ns = str(tmp_path / "ns")
    write(ns, seed=1)
    first = read(ns)
    shutil.rmtree(ns)
    write(ns, seed=2)  # the same shape, other tokens
    second = read(ns)
    flat = torch.from_numpy(corpus(2)[:-1].astype(np.int64)).view(-1, ROWS, SEQ)
    assert all(torch.equal(second[i]["input_ids"].to(torch.int64), flat[i]) for i in range(len(flat)))
    assert not torch.equal(first[0]["input_ids"], second[0]["input_ids"])


def test_a_reader_writing_into_its_views_leaves_the_next_readers_bytes_alone(tmp_path) -> None:
    ns = str(tmp_path / "ns")
    write(ns, seed=3)
    for batch in TGBDataset(ns, Mesh(0, 1), derive=()):  # views of the reader's own (copy-on-write) mapping
        batch["input_ids"].fill_(7)
    again = read(ns, derive=())
    flat = torch.from_numpy(corpus(3)[:-1].astype(np.int64)).view(-1, ROWS, SEQ)
    assert all(torch.equal(again[i]["input_ids"].to(torch.int64), flat[i]) for i in range(len(flat)))
