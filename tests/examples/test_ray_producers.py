"""examples/ray_producers.py: a Ray fleet feeds a torchrun job; a producer actor is killed mid-run."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_fleet_feeds_training_through_a_killed_actor(tmp_path, run_example):
    pytest.importorskip("ray", reason="the [ray] extra is not installed")
    pytest.importorskip("tokenizers", reason="the example trains a BPE tokenizer")
    proc = run_example(
        ["ray_producers.py", "--workdir", str(tmp_path), "--docs", "400", "--shards", "4", "--producers", "2",
         "--seq-len", "32", "--global-batch", "4", "--vocab-size", "300", "--kill-after", "3", "--ckpt-every", "3",
         "--max-lag", "8"],
        timeout=800,
    )
    assert "killed a producer actor while the job was at step" in proc.stdout
    assert "OK: the job trained" in proc.stdout
