from __future__ import annotations

import json

import torch_tgb.cli.main as cli_main
from torch_tgb.checkpoint import record_watermark


def test_inspect_text_and_json(small_ns, capsys):
    record_watermark(small_ns, "ckpt-3", {"tgb_cursor": {"step": 3, "version": 3}})
    assert cli_main.main(["inspect", small_ns]) == 0
    text = capsys.readouterr().out
    assert "steps             6" in text
    assert "sealed            yes (end of stream)" in text
    assert "p0  done    epoch 1  next offset 6" in text
    assert "ckpt-3  step 3" in text and "live" in text

    assert cli_main.main(["inspect", small_ns, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["steps"] == 6
    assert report["sealed"] is True
    assert [p["id"] for p in report["producers"]] == ["p0"]
    assert report["producers"][0]["next_offset"] == 6
    assert report["producers"][0]["status"] == "done"
    assert report["live_checkpoints"] == 1
    assert report["safe_boundary"] == 3
    assert report["lag"]["steps_ahead_of_safe_boundary"] == 3
    assert report["dataset"]["layout"]["dp"] == 2
    assert report["storage"]["by_area"]["data/"]["objects"] == 6
    assert report["storage"]["total_bytes"] >= report["storage"]["by_area"]["data/"]["bytes"] > 0
    assert report["versions"]["latest"] >= 6


def test_inspect_no_sizes_skips_listing(small_ns, capsys):
    assert cli_main.main(["inspect", small_ns, "--json", "--no-sizes"]) == 0
    assert "storage" not in json.loads(capsys.readouterr().out)


def test_inspect_missing_namespace_is_one_line_error(tmp_path, capsys):
    assert cli_main.main(["inspect", str(tmp_path / "nothing")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tgb: error:") and err.count("\n") == 1 and "no TGB namespace" in err


def test_inspect_tells_closed_producers_from_open_ones(tmp_path, capsys):
    """Issue 14: an unsealed stream whose producers all closed is told apart from one being written."""
    from tests.cli.conftest import write_namespace

    ns = write_namespace(tmp_path / "ns", seal=False)  # p0 closed without seal
    assert cli_main.main(["inspect", ns]) == 0
    text = capsys.readouterr().out
    assert "every producer is closed" in text and "p0  closed" in text
    import torch_tgb as tgb

    from torch_tgb.cli._produce_impl import synthetic_batch

    p1 = tgb.Producer(ns, producer_id="p1", layout=tgb.Layout(dp=2, seq_keys=("input_ids", "labels")),
                      commit_policy="naive")
    try:
        p1.append(synthetic_batch(0, global_batch=4, seq_len=8, vocab_size=100, seed=0), offset=0)
        p1.flush()  # in the log from its first commit (its registration alone writes no version)
        assert cli_main.main(["inspect", ns]) == 0
        text = capsys.readouterr().out
        assert "1 of 2 producers open: still being written" in text and "p1  open" in text
    finally:
        p1.close()
