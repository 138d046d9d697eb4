"""examples/s3_namespace.py against the loopback moto S3 server."""

from __future__ import annotations

import pytest

import torch_tgb as tgb

pytestmark = [pytest.mark.slow, pytest.mark.s3]


def test_s3_example_trains_restarts_and_reclaims(s3_namespace, run_example, tmp_path):
    url, opts = s3_namespace
    proc = run_example(
        [
            "s3_namespace.py", "--ns", url, "--endpoint-url", opts["endpoint_url"],
            "-o", f"key={opts['key']}", "-o", f"secret={opts['secret']}",
            "-o", f"client_kwargs.region_name={opts['client_kwargs']['region_name']}",
            "--steps", "6", "--ckpt-every", "2", "--global-batch", "2", "--seq-len", "8",
            "--checkpoint-dir", str(tmp_path / "ckpt"),
        ]
    )
    out = proc.stdout
    assert "restarted from checkpoint step-2" in out
    assert "trained 6 steps" in out
    assert opts["secret"] not in out  # credentials never printed
    store = tgb.open_store(url, opts)
    # keep_last(2) + reclaim: only what the step-4 and step-6 checkpoints need is left
    from torch_tgb.checkpoint import live_checkpoints

    assert sorted(m.checkpoint_id for m in live_checkpoints(store)) == ["step-4", "step-6"]
    assert len(store.list("data/")) < 6
