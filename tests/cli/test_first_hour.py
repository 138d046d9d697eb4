"""Issue 14 (11, 12, 2): the ``tgb`` command as a new user meets it (installed entry point)."""

from __future__ import annotations

import json
import re

import pytest

from tests.cli.conftest import tgb_cli, write_namespace

COMMANDS = ("demo", "inspect", "verify", "reclaim", "seal", "produce", "convert", "bench")


def test_reclaim_on_a_non_namespace_exits_1_like_inspect_and_verify(tmp_path):
    for command in ("reclaim", "inspect", "verify"):
        proc = tgb_cli(command, str(tmp_path / "nope"))
        assert proc.returncode == 1, (command, proc.stdout, proc.stderr)
        assert "no TGB namespace here" in proc.stderr + proc.stdout
        assert "deleted" not in proc.stdout


def test_produce_without_steps_says_what_it_writes(tmp_path):
    proc = tgb_cli("produce", str(tmp_path / "ns"), "--global-batch", "2", "--seq-len", "4", "--vocab-size", "10",
                   "--commit-policy", "fixed:50")
    assert proc.returncode == 0, proc.stderr
    assert "--steps not given: writing 100 TGBs of the synthetic stream" in proc.stderr
    assert "wrote offsets 0..99" in proc.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_every_default(command):
    from torch_tgb.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]  # type: ignore[union-attr]
    formatter = sub._get_formatter()
    for action in sub._actions:
        default = action.default
        if default is None or default is False or default == [] or action.dest == "help":
            continue
        assert "default" in formatter._get_help_string(action), f"tgb {command} {action.dest}: no default shown"


def test_help_output_of_the_installed_command_shows_defaults():
    proc = tgb_cli("produce", "--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "(default: 0)" in text and "100 batches of the endless synthetic stream" in text


def test_every_producer_may_pass_seal_and_the_last_one_seals(tmp_path):
    import torch_tgb as tgb
    from torch_tgb.cli._produce_impl import synthetic_batch

    ns = str(tmp_path / "ns")
    common = ["--global-batch", "4", "--seq-len", "8", "--dp", "2", "--vocab-size", "100", "--json"]
    # p1 runs (open) while p0 finishes with --seal: not sealed, p1 is not cut off
    p1 = tgb.Producer(ns, producer_id="p1", layout=tgb.Layout(dp=2, seq_keys=("input_ids", "labels")))
    first = tgb_cli("produce", ns, "--producer-id", "p0", "--steps", "4", "--seal", *common)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["sealed"] is False
    for offset in range(3):
        p1.append(synthetic_batch(offset, global_batch=4, seq_len=8, vocab_size=100, seed=1), offset=offset)
    p1.close(seal=True)
    assert p1.sealed
    late = tgb_cli("produce", ns, "--producer-id", "p2", "--steps", "1", *common)
    assert late.returncode == 1 and re.search(r"sealed .*'p2' cannot start", late.stderr)


def test_seal_ends_a_stream_of_producers_that_ran_one_after_another(tmp_path):
    ns = str(tmp_path / "ns")
    common = ["--global-batch", "4", "--seq-len", "8", "--dp", "2", "--vocab-size", "100", "--json"]
    for pid, steps in (("p0", "3"), ("p1", "2")):  # each closes without --seal: nothing ends the stream yet
        proc = tgb_cli("produce", ns, "--producer-id", pid, "--steps", steps, *common)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["sealed"] is False
    sealed = tgb_cli("seal", ns)
    assert sealed.returncode == 0, sealed.stderr
    assert "sealed at version" in sealed.stdout and "(5 steps)" in sealed.stdout
    assert tgb_cli("seal", ns).returncode == 0  # idempotent
    import torch_tgb as tgb

    ds = tgb.TGBDataset(ns, mesh=tgb.Mesh(0, 2), timeout=10)
    assert len(list(ds)) == 5  # the loop ends at the seal


def test_seal_refuses_while_a_producer_is_open_and_names_it(tmp_path):
    import torch_tgb as tgb
    from torch_tgb.manifest import Manifest
    from torch_tgb.storage import open_store

    ns = write_namespace(tmp_path / "ns", steps=2, seal=False)
    p1 = tgb.Producer(ns, producer_id="p1", layout=tgb.Layout(dp=2, seq_keys=("input_ids", "labels")))
    try:
        proc = tgb_cli("seal", ns)
        assert proc.returncode == 1 and "['p1'] are still open" in proc.stderr
    finally:
        p1.close()  # closed without seal: nobody is open now, but nothing sealed the stream
    with open_store(ns) as store:
        assert not Manifest(store).head().sealed
    assert tgb_cli("seal", ns).returncode == 0


def test_seal_on_a_non_namespace_exits_1(tmp_path):
    proc = tgb_cli("seal", str(tmp_path / "nope"))
    assert proc.returncode == 1 and "no TGB namespace here" in proc.stderr


def test_one_version_number_for_one_corrupt_step(tmp_path):
    """Issue 14 (12): the loader said "manifest version 14" where verify said version=3 for the same step."""
    import torch_tgb as tgb
    from torch_tgb.errors import CorruptObject
    from torch_tgb.manifest import Manifest
    from torch_tgb.storage import open_store

    ns = write_namespace(tmp_path / "ns", steps=6)
    with open_store(ns) as store:
        entry = Manifest(store).entry(2)
    path = tmp_path / "ns" / entry.key
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF  # inside slice (dp=0): the CRC32C of a tensor no longer matches
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptObject) as info:
        list(tgb.TGBDataset(ns, mesh=tgb.Mesh(0, 2), timeout=10))
    message = str(info.value)
    assert "step=2" in message and entry.key in message
    proc = tgb_cli("verify", ns)
    assert proc.returncode == 1
    line = next(x for x in proc.stdout.splitlines() if entry.key in x)
    said_by_verify = set(re.findall(r"version[ =](\d+)", line))
    assert said_by_verify and set(re.findall(r"version[ =](\d+)", message)) <= said_by_verify
