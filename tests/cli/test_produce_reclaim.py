from __future__ import annotations

import json

import numpy as np
import torch

import torch_tgb as tgb
import torch_tgb.cli.main as cli_main
from torch_tgb.checkpoint import record_watermark


def _run_json(capsys, *argv: str) -> tuple[int, dict]:
    code = cli_main.main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out) if code == 0 else {}


def _read_all(ns: str, dp_size: int = 1) -> list[dict[str, torch.Tensor]]:
    return list(tgb.TGBDataset(ns, mesh=tgb.Mesh(dp_rank=0, dp_size=dp_size), timeout=10))


def test_produce_synthetic_resumes_exactly_once(tmp_path, capsys):
    ns = str(tmp_path / "ns")
    common = ["produce", ns, "--producer-id", "cli0", "--global-batch", "4", "--seq-len", "8", "--json"]
    code, first = _run_json(capsys, *common, "--steps", "3", "--commit-policy", "naive")
    assert code == 0 and first["resumed_at"] == 0 and first["written"] == 3
    assert first["stats"]["successes"] >= 1 and first["stats"]["appended"] == 3
    code, second = _run_json(capsys, *common, "--steps", "5", "--seal")
    assert code == 0 and second["resumed_at"] == 3 and second["written"] == 2 and second["sealed"]
    batches = _read_all(ns)
    assert len(batches) == 5  # iteration ends at the seal
    assert batches[0]["input_ids"].shape == (4, 8)
    # labels are the next tokens
    assert torch.equal(batches[1]["input_ids"][:, 1:], batches[1]["labels"][:, :-1])


def test_produce_from_token_file(tmp_path, capsys):
    tokens = np.arange(2 * 4 * 8 + 5, dtype=np.uint16)  # two full batches and a short tail
    path = tmp_path / "tokens.npy"
    np.save(path, tokens)
    ns = str(tmp_path / "ns")
    code, report = _run_json(
        capsys, "produce", ns, "--tokens", str(path), "--steps", "10", "--global-batch", "4", "--seq-len", "8",
        "--seal", "--json",
    )
    assert code == 0 and report["written"] == 2  # capped by the file
    batches = _read_all(ns)
    assert [b["input_ids"][0, 0].item() for b in batches] == [0, 32]
    assert batches[0]["labels"][0].tolist() == list(range(1, 9))


def test_produce_rejects_bad_sizes(tmp_path, capsys):
    assert cli_main.main(["produce", str(tmp_path / "ns"), "--global-batch", "5", "--dp", "2"]) == 1
    assert "divisible" in capsys.readouterr().err


def test_reclaim_deletes_below_the_watermark(small_ns, capsys):
    record_watermark(small_ns, "ckpt-4", {"tgb_cursor": {"step": 4, "version": 4}})
    code, report = _run_json(capsys, "reclaim", small_ns, "--json")
    assert code == 0
    assert report["safe_step"] == 4 and report["live_checkpoints"] == 1
    assert report["objects"] >= 1 and report["bytes"] > 0
    # what is left still reads from the watermark on
    ds = tgb.TGBDataset(small_ns, mesh=tgb.Mesh(dp_rank=0, dp_size=2), timeout=10)
    ds.load_state_dict({"tgb_cursor": {"step": 4, "version": 4}})
    assert len(list(ds)) == 2
    assert cli_main.main(["verify", small_ns]) == 0


def test_reclaim_text_report(small_ns, capsys):
    record_watermark(small_ns, "ckpt-5", {"tgb_cursor": {"step": 5, "version": 5}})
    assert cli_main.main(["reclaim", small_ns, "--grace-period", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("reclaimed file://")
    assert "safe step            5 (smallest cursor of 1 live checkpoints)" in out
    assert "TGB objects" in out and "bytes freed" in out


def test_reclaim_fence_frees_a_vanished_producers_orphans(tmp_path, capsys):
    from torch_tgb.manifest import Manifest
    from torch_tgb.manifest.keys import object_name
    from torch_tgb.storage import LocalStore

    small_ns = str(tmp_path / "ns")
    with tgb.Producer(small_ns, producer_id="gone", layout=tgb.Layout(dp=1), commit_policy="naive") as p:
        p.append({"x": torch.zeros(1, 2)}, offset=0)  # not sealed: the producer may come back
    store = LocalStore(small_ns)
    pid, state = next(iter(Manifest(store).head().producers.items()))
    lost = object_name(pid, state.epoch, state.next_offset, "0000dead")  # written, never committed
    store.put(lost, b"x")
    code, report = _run_json(capsys, "reclaim", small_ns, "--grace-period", "0", "--json")
    assert code == 0 and report["orphans"] == 0 and report["live_orphans"] == 1 and store.exists(lost)
    code, report = _run_json(capsys, "reclaim", small_ns, "--grace-period", "0", "--fence", pid, "--json")
    assert code == 0 and report["orphans"] == 1 and not store.exists(lost)
    assert Manifest(store).head().producers[pid].epoch == state.epoch + 1


def test_synthetic_stream_is_learnable():
    """Issue 14 (6): uniform random tokens keep any model at ln(V); the stream has structure to learn."""
    import math
    from collections import Counter

    from torch_tgb.cli._produce_impl import synthetic_batch

    pairs: Counter = Counter()
    for offset in range(20):
        b = synthetic_batch(offset, global_batch=8, seq_len=64, vocab_size=256, seed=0)
        assert b["input_ids"].max() < 256 and b["input_ids"].min() >= 0
        for row_in, row_out in zip(b["input_ids"].tolist(), b["labels"].tolist()):
            pairs.update(zip(row_in, row_out))
    firsts: Counter = Counter()
    for (a, _), n in pairs.items():
        firsts[a] += n
    total = sum(pairs.values())
    bigram_entropy = -sum(n / total * math.log(n / firsts[a]) for (a, _), n in pairs.items())
    assert bigram_entropy < 1.0  # a bigram model gets below 1 nat; on uniform noise it stays at ln(256) = 5.55
