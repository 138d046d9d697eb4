"""`tgb produce` shows a bar with a total and an ETA, short stats lines above it, and its skips by reason."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest

import torch_tgb.cli.main as cli_main
from torch_tgb import sources
from torch_tgb._progress import count_text, rate_text, share_text
from torch_tgb.producer._walk import pipeline_skips, pipeline_work

from tests.cli.conftest import tgb_cli


def _corpus(path: Path, tokens: int = 60_000) -> str:
    np.save(path / "corpus.npy", (np.arange(tokens) % 997).astype(np.uint16))
    np.save(path / "corpus.idx.npy", np.arange(0, tokens + 1, 1_000, dtype=np.int64))
    return str(path / "corpus.npy")


def _lines(stderr: str) -> list[str]:
    """What a terminal shows: every carriage return or newline starts a line."""
    return [line for line in re.split(r"[\r\n]", stderr) if line.strip()]


def test_a_slowed_token_file_run_shows_its_total_and_an_eta(tmp_path):
    corpus = _corpus(tmp_path)
    proc = tgb_cli("produce", str(tmp_path / "ns"), "--source", f"token-file:{corpus}", "--offsets",
                   str(tmp_path / "corpus.idx.npy"), "--global-batch", "4", "--seq-len", "256", "--rate", "25",
                   "--stats-interval", "0.5", env_extra={"TGB_PROGRESS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    bars = [line for line in _lines(proc.stderr) if re.match(r"produce producer cli: +\d+%\|", line)]
    # the total is the file's 60,000 tokens; tqdm's ETA is the time after '<' once a rate is known
    assert bars and all("/60.0k" in line for line in bars)
    assert any(re.search(r"\[\d\d:\d\d<\d\d:\d\d, +[\d.]+ktok/s\]", line) for line in bars[:-1])
    stats = [line for line in _lines(proc.stderr)
             if line.startswith("produce producer cli: ") and "TGBs committed" in line]
    # the short stats line: share of the total, ETA, rate, TGBs, lag, stall, skips; on a line of its own
    assert stats and re.search(r"\d+\.\d% of 60\.0k tok, ETA \d\d:\d\d \| [\d.]+k tok/s \| \d+ TGBs committed",
                               stats[0])
    assert "lag: no checkpoint yet" in stats[0] and stats[-1].endswith("| 0 skipped")
    assert "0 samples skipped" in proc.stdout


def test_the_synthetic_stream_counts_tokens_and_a_resumed_run_starts_where_it_stopped(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TGB_PROGRESS", "1")
    ns = str(tmp_path / "ns")
    args = ["produce", ns, "--global-batch", "2", "--seq-len", "8", "--json"]
    assert cli_main.main([*args, "--steps", "3"]) == 0
    first = json.loads(capsys.readouterr().out)
    progress = {k: first["progress"][k] for k in ("unit", "done", "total")}
    assert progress == {"unit": "token", "done": 48.0, "total": 48.0}  # 3 TGBs x 2 rows x 8 tokens
    assert cli_main.main([*args, "--steps", "5"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["progress"]["done"] == 80.0
    assert any("/80.0 [" in line for line in _lines(captured.err))  # 5 TGBs x 16 tokens, from offset 3 on


def test_produce_counts_skipped_samples_by_reason_and_warns(tmp_path):
    from torch_tgb.testing.media import write_media_tars

    good = {"__key__": "good", "tokens.npy": _npy([1, 2, 3])}
    shards = write_media_tars(tmp_path / "tars", [good, {"__key__": "bad", "tokens.npy": b"not npy"},
                                                   {"__key__": "gif", "gif": b"GIF89a"}], per_tar=3)
    empty = tmp_path / "tars" / "empty.tar"
    with tarfile.open(empty, "w"):
        pass  # a valid tar of no members: a bad record under on_error, not "not a tar file"
    proc = tgb_cli("produce", str(tmp_path / "ns"), "--source", f"webdataset:{shards[0]},{empty}",
                   "--on-error", "skip", "--global-batch", "1", "--seq-len", "4", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert summary["skipped"] == {"bad_record": 3} and summary["written"] >= 1
    assert "warning: 3 samples skipped (bad_record 3)" in proc.stderr
    inspected = tgb_cli("inspect", str(tmp_path / "ns"), "--json")  # the manifest's record of the producer
    assert [p["skipped"] for p in json.loads(inspected.stdout)["producers"]] == [{"bad_record": 3}]
    assert re.search(r"samples skipped +3 \(bad_record 3\)", tgb_cli("inspect", str(tmp_path / "ns")).stdout)
    raised = tgb_cli("produce", str(tmp_path / "ns2"), "--source", f"webdataset:{empty}", "--global-batch", "1",
                     "--seq-len", "4")
    assert raised.returncode == 1 and "an empty tar (no members)" in raised.stderr


def _npy(values: list[int]) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, np.asarray(values, dtype=np.int32))
    return buf.getvalue()


def test_sources_measure_their_work_in_tokens_rows_or_samples(tmp_path):
    corpus = _corpus(tmp_path, 10_000)
    whole = sources.TokenFile(corpus, offsets=str(tmp_path / "corpus.idx.npy"))
    half = sources.TokenFile(corpus, offsets=str(tmp_path / "corpus.idx.npy"), shard=(1, 2))
    assert whole.work().total == 10_000 and whole.work().unit == "token"
    assert half.work().total == 5_000 and sum(int(d["tokens"].numel()) for d in half) == half.work().done == 5_000
    from torch_tgb.testing.media import image_samples, write_media_tars

    urls = write_media_tars(tmp_path / "img", image_samples(5, max_side=32), per_tar=2)
    tars = sources.WebDataset(urls)
    assert (tars.work().total, tars.work().unit) == (5, "sample")
    list(tars)
    assert tars.work().done == 5


def test_pipeline_work_counts_what_was_batched_and_skips_by_reason(tmp_path):
    from torch_tgb.datapipes import document_batches

    corpus = _corpus(tmp_path, 8_192)
    batches = document_batches(sources.TokenFile(corpus), seq_len=64, global_batch_size=2, packing="bfd")
    next(iter(batches))
    work = pipeline_work(batches)
    # the packer read ahead (a window of documents), but only the batched tokens count as done
    assert work.unit == "token" and work.total == 8_192 and work.done == batches.stats().tokens
    assert 0 < work.done <= 2 * 64 < batches.source.source.work().done
    assert pipeline_skips(batches) == {}


def test_short_human_forms():
    assert count_text(1_234_567, "token") == "1.23M tok" and rate_text(350_000, "token") == "350k tok/s"
    assert count_text(12, "TGB") == "12 TGBs" and share_text(1, 3) == "33.3%" and share_text(1, None) == "?"


@pytest.mark.parametrize("reasons", [{"corrupt": 2}, {}])
def test_pipeline_skips_sum_reasons_over_stages(tmp_path, reasons):
    from torchdata.nodes import BaseNode

    class Stage(BaseNode):
        def __init__(self, source=None, skipped=None):
            super().__init__()
            self.source, self._skipped = source, skipped

        def next(self):
            raise StopIteration

        def get_state(self):
            return {}

        def stats(self):
            from types import SimpleNamespace

            return SimpleNamespace(skipped=sum(self._skipped.values()), skipped_by_reason=dict(self._skipped))

    root = Stage(Stage(Stage(None, dict(reasons)), {"format": 1, **reasons}), {})
    expected = {"format": 1, **{k: 2 * v for k, v in reasons.items()}}
    assert pipeline_skips(root) == dict(sorted(expected.items()))
