"""``tgb prewarm``: the ranks' slices land in the hot tier, and their readers then ask the store for none."""

from __future__ import annotations

import json
import os

import pytest
import torch

import torch_tgb as tgb
import torch_tgb.cli.main as cli_main
from torch_tgb.cli._common import CommandError
from torch_tgb.cli.prewarm import parse_mesh, parse_ranks, parse_size, parse_steps
from torch_tgb.consumer.options import ReaderOptions
from torch_tgb.cursor import CURSOR_KEY, Cursor
from torch_tgb.storage import open_store
from torch_tgb.testing.counting import CountingStore


def _flags(opts: dict, prefix: str = "") -> list[str]:
    flags = []
    for name, value in opts.items():
        flags += _flags(value, f"{prefix}{name}.") if isinstance(value, dict) else ["-o", f"{prefix}{name}={value}"]
    return flags


def test_parsers():
    assert parse_mesh("dp=4,cp=2") == {"dp": 4, "cp": 2, "tp": 1, "pp": 1}
    assert parse_ranks("0-2,5", 8) == [0, 1, 2, 5] and parse_ranks("all", 3) == [0, 1, 2]
    assert parse_steps("3:7") == (3, 7) and parse_steps(":") == (0, None) and parse_steps("5:") == (5, None)
    assert parse_size("2GiB") == 2 << 30 and parse_size("500MB") == 500 * 10**6 and parse_size("4096") == 4096
    for bad in (lambda: parse_mesh("cp=2"), lambda: parse_mesh("dp=0"), lambda: parse_ranks("0-9", 8),
                lambda: parse_ranks("x", 8), lambda: parse_steps("7:3"), lambda: parse_steps("a:b")):
        with pytest.raises(CommandError):
            bad()


def test_a_local_namespace_is_refused_in_one_line(tmp_path, capsys):
    from tests.cli.conftest import write_namespace

    ns = write_namespace(tmp_path / "ns")
    code = cli_main.main(["prewarm", ns, "--mesh", "dp=2", "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("tgb: error:") and err.count("\n") == 1 and "local disk" in err


def test_prewarmed_ranks_read_nothing_from_the_store(cloud_namespace, tmp_path, capsys):
    url, opts = cloud_namespace
    flags = _flags(opts)
    assert cli_main.main(["produce", url, "--steps", "6", "--global-batch", "4", "--seq-len", "8", "--dp", "2",
                          "--seal", *flags]) == 0
    capsys.readouterr()
    cache = str(tmp_path / "cache")
    # a node with ranks 2-3 of dp=2 x tp=2: both read dp slice 1; steps 1..4
    code = cli_main.main(["prewarm", url, "--mesh", "dp=2,tp=2", "--ranks", "2-3", "--steps", "1:4",
                          "--cache-dir", cache, "--cache-bytes", "64MiB", "--json", *flags])
    out = capsys.readouterr().out
    assert code == 0, out
    report = json.loads(out)
    assert report["rank_steps"] == 3 and report["slices_read_by"] == 1 and report["entries_filled"] >= 3
    assert opts.get("connection_string", "unprinted") not in out
    counted = CountingStore(open_store(url, opts))
    ds = tgb.TGBDataset(counted, mesh=tgb.Mesh(1, 2), options=ReaderOptions(cache_dir=cache, stop_step=4))
    ds.load_state_dict({CURSOR_KEY: Cursor(1).to_json()})
    batches = list(ds)
    assert len(batches) == 3 and counted.range_reads("data/") == 0
    uncached = tgb.TGBDataset(open_store(url, opts), mesh=tgb.Mesh(1, 2), options=ReaderOptions(stop_step=4))
    uncached.load_state_dict({CURSOR_KEY: Cursor(1).to_json()})
    for got, want in zip(batches, uncached):
        assert all(torch.equal(got[k], want[k]) for k in want)


@pytest.mark.s3
def test_a_corrupt_object_fails_the_prewarm_and_leaves_nothing_trusted(s3_namespace, tmp_path, capsys):
    url, opts = s3_namespace
    flags = _flags(opts)
    assert cli_main.main(["produce", url, "--steps", "2", "--global-batch", "4", "--seq-len", "64", "--dp", "2",
                          *flags]) == 0
    store = open_store(url, opts)
    (key,) = store.list("data/")
    raw = bytearray(store.get(key))
    raw[100] ^= 0xFF  # inside the first slice's payload
    store.put(key, bytes(raw))
    cache = tmp_path / "cache"
    code = cli_main.main(["prewarm", url, "--mesh", "dp=2", "--cache-dir", str(cache), *flags])
    err = capsys.readouterr().err
    assert code == 1 and "CRC" in err.upper() and err.count("\n") == 1, err
    entries = [f for _, _, files in os.walk(cache / "v1") for f in files]
    assert entries == []
