"""Mixed (2 sources), packed, kk-balanced pipelines -> tgb.produce / tgb produce flags / write_dataset -> 2 ranks.

Every token of the test corpus is unique, so "every source document's tokens
present exactly once" is a multiset comparison, and a document is told by
its first token (which source it came from, and whether it arrived early).
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch
from torchdata.nodes import IterableWrapper

import torch_tgb as tgb
import torch_tgb.cli.main as cli_main
from tests.sources._corpus import write_parquet
from torch_tgb.datapipes import Mix
from torch_tgb.offline import document_batches, write_dataset
from torch_tgb.transforms import row_costs

SEQ, GBS, DP, ALPHA = 32, 8, 2, 4.0
WEIGHTS = {"web": 0.75, "code": 0.25}


def corpus() -> dict[str, list[np.ndarray]]:
    """web: 400 documents, code: 200 (so web runs out first at 3:1); tokens unique over both."""
    rng = np.random.default_rng(7)
    out, pos = {}, 1
    for name, n in (("web", 400), ("code", 200)):
        docs = []
        for length in np.clip(rng.lognormal(2.2, 0.8, n), 1, 70).astype(int):
            docs.append(np.arange(pos, pos + length, dtype=np.int64))
            pos += length
        out[name] = docs
    return out


def read_ranks(ns: str) -> list[list[dict[str, torch.Tensor]]]:
    """Per step, the batch each of the 2 dp ranks reads."""
    per_rank = [list(tgb.TGBDataset(ns, mesh=tgb.Mesh(dp_rank=r, dp_size=DP), prefetch=0,
                                    derive=("labels", "document_ids"))) for r in range(DP)]
    assert len(per_rank[0]) == len(per_rank[1]) > 0
    return [list(step) for step in zip(*per_rank)]


def check(steps: list[list[dict[str, torch.Tensor]]], docs: dict[str, list[np.ndarray]]) -> list[list[float]]:
    """Tokens exactly once, each row's cost = its documents' cost, early mixture ≈ WEIGHTS; -> slice costs."""
    seen: Counter[int] = Counter()
    slice_costs = []
    for step in steps:
        costs = []
        for part in step:
            ids = part["document_ids"]
            seen.update(part["input_ids"][ids >= 0].tolist())
            lengths = [torch.bincount(r[r >= 0].long()).tolist() if (r >= 0).any() else [] for r in ids]
            assert np.allclose(part["row_cost"].numpy(), row_costs(lengths, alpha=ALPHA))
            costs.append(float(part["row_cost"].sum()))
        slice_costs.append(costs)
    assert seen == Counter(int(t) for d in docs["web"] + docs["code"] for t in d)
    # documents (by first token) in the first third of the steps: web is not exhausted yet
    source_of = {int(d[0]): name for name, ds in docs.items() for d in ds}
    early: Counter[str] = Counter()
    for step in steps[: len(steps) // 3]:
        for part in step:
            early.update(source_of[t] for t in part["input_ids"][part["document_ids"] >= 0].tolist() if t in source_of)
    share = early["web"] / sum(early.values())
    assert sum(early.values()) > 100 and share == pytest.approx(WEIGHTS["web"], abs=0.06)
    return slice_costs


def test_mixed_packed_balanced_pipeline_through_produce(tmp_path) -> None:
    docs = corpus()
    nodes = {name: IterableWrapper([{"tokens": torch.from_numpy(d)} for d in ds]) for name, ds in docs.items()}
    mixed = Mix(nodes, WEIGHTS, seed=3, exhausted="renormalize", tokens_per_step=GBS * SEQ)
    layout = tgb.Layout(dp=DP)
    pipeline = document_batches(mixed, seq_len=SEQ, global_batch_size=GBS, packing="bfd", layout=layout,
                                balance="kk", alpha=ALPHA, packing_window=32)
    reported: list[list[float]] = []
    ns = str(tmp_path / "ns")
    report = tgb.produce(ns, pipeline, producer_id="p0", layout=layout, commit_policy="fixed:4", seal=True,
                         progress=False, on_append=lambda offset: reported.append(pipeline.stats().slice_costs))
    assert report.exhausted and len(reported) == report.end_offset
    costs = check(read_ranks(ns), docs)
    assert np.allclose(costs, reported)  # each rank's slice cost as GlobalBatches.stats() reported
    assert pipeline.stats().tokens == sum(len(d) for ds in docs.values() for d in ds)


def test_mixed_packed_balanced_through_cli_flags(tmp_path, capsys) -> None:
    docs = corpus()
    for name, ds in docs.items():
        (tmp_path / name).mkdir()
        write_parquet(tmp_path / name, ds, files=2, row_group=50)
    ns = str(tmp_path / "ns")
    argv = ["produce", ns, "--source", f"web=parquet:{tmp_path / 'web'}", "--source", f"code=parquet:{tmp_path / 'code'}",
            "--mix", "web=0.75,code=0.25", "--pack", "bfd", "--balance", "kk", "--alpha", str(ALPHA),
            "--seq-len", str(SEQ), "--global-batch", str(GBS), "--dp", str(DP), "--json"]
    assert cli_main.main([*argv, "--steps", "5"]) == 0  # stop, then resume mid-mixture
    assert json.loads(capsys.readouterr().out)["written"] == 5
    assert cli_main.main([*argv, "--seal"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["resumed_at"] == 5 and summary["exhausted"]
    assert summary["tokens"] == sum(len(d) for ds in docs.values() for d in ds)
    costs = check(read_ranks(ns), docs)
    assert max(max(c) / (sum(c) / DP) for c in costs[:-1]) < 1.5  # balanced (the padded last batch aside)


def test_write_dataset_mixes_and_balances(tmp_path) -> None:
    docs = corpus()
    nodes = {name: IterableWrapper([{"tokens": torch.from_numpy(d)} for d in ds]) for name, ds in docs.items()}
    mixed = Mix(nodes, WEIGHTS, seed=3, exhausted="renormalize", tokens_per_step=GBS * SEQ)
    ns = str(tmp_path / "ns")
    summary = write_dataset(ns, mixed, layout=tgb.Layout(dp=DP), global_batch_size=GBS, seq_len=SEQ,
                            packing="concat", balance="kk", alpha=ALPHA, packing_window=32, progress=False)
    assert summary["sealed"] and summary["tokens"] == sum(len(d) for ds in docs.values() for d in ds)
    check(read_ranks(ns), docs)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--source", "web=parquet:/a", "--source", "code=parquet:/b", "--mix", "web=1,books=1"],
         "--mix names unknown source(s) books"),
        (["--source", "web=parquet:/a", "--mix", "web=1"], "--mix needs two or more named sources"),
        (["--source", "web=parquet:/a", "--source", "code=parquet:/b", "--mix", "web=-1,code=1"], "must be finite"),
        (["--source", "web=parquet:/a", "--source", "code=parquet:/b"], "need --mix"),
        (["--source", "parquet:/a", "--source", "parquet:/b", "--mix", "a=1"], "need names"),
        (["--source", "parquet:/a", "--pack", "none", "--balance", "kk"], "--balance kk needs packed rows"),
        (["--balance", "kk"], "--balance applies to --source"),
    ],
)
def test_mixing_flag_errors(tmp_path, capsys, extra: list[str], message: str) -> None:
    assert cli_main.main(["produce", str(tmp_path / "ns"), *extra]) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
