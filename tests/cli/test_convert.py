from __future__ import annotations

import json

import numpy as np

import torch_tgb as tgb
import torch_tgb.cli.main as cli_main
from torch_tgb.offline import write_llmbatch


def test_convert_llmbatch_into_sealed_namespace(tmp_path, capsys):
    records = (np.arange(12 * 8).reshape(12, 8) % 97).astype(np.uint32)
    src = tmp_path / "corpus.llmbatch"
    write_llmbatch(src, records, batch_size=4, shuffle=False)
    ns = str(tmp_path / "ns")
    assert cli_main.main(["convert", str(src), ns, "--dp", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["result"]["batches"] == 3 and summary["dp"] == 2
    rank1 = list(tgb.TGBDataset(ns, mesh=tgb.Mesh(dp_rank=1, dp_size=2), timeout=10))
    assert len(rank1) == 3  # ends at the seal
    assert rank1[0]["input_ids"].tolist() == records[2:4].tolist()
    assert cli_main.main(["inspect", ns, "--json", "--no-sizes"]) == 0
    assert json.loads(capsys.readouterr().out)["sealed"] is True


def test_convert_missing_file_is_one_line_error(tmp_path, capsys):
    assert cli_main.main(["convert", str(tmp_path / "nope.llmbatch"), str(tmp_path / "ns")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tgb: error:") and err.count("\n") == 1 and "nope.llmbatch" in err
