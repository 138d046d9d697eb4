"""examples/static_corpus.py: token arrays and LLMBATCH files become sealed namespaces, trained for 2 epochs."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

import torch_tgb as tgb
from torch_tgb.offline import write_llmbatch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load_example():
    spec = importlib.util.spec_from_file_location("_tgb_static_corpus", EXAMPLES / "static_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_synthetic_corpus_two_epochs_as_a_script(tmp_path, run_example):
    ns = tmp_path / "ns"
    proc = run_example(["static_corpus.py", "--ns", str(ns), "--docs", "60", "--seq-len", "16", "--global-batch", "4"])
    batches = int(re.search(r"sealed namespace .*: (\d+) global batches", proc.stdout).group(1))
    epochs = re.findall(r"epoch (\d): (\d+) steps", proc.stdout)
    assert epochs == [("0", str(batches)), ("1", str(batches))]  # each epoch is the whole sealed stream
    assert len(list(tgb.TGBDataset(str(ns), mesh=tgb.Mesh(0, 1)))) == batches


def test_token_array_with_document_offsets(tmp_path, capsys):
    example = _load_example()
    docs = [np.arange(n) % 50 for n in (5, 9, 14, 3, 20, 7)]
    flat = np.concatenate(docs).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
    np.save(tmp_path / "tokens.npy", flat)
    np.save(tmp_path / "offsets.npy", offsets)
    ns = str(tmp_path / "ns")
    assert example.main(["--ns", ns, "--tokens", str(tmp_path / "tokens.npy"), "--doc-offsets",
                         str(tmp_path / "offsets.npy"), "--seq-len", "16", "--global-batch", "2"]) == 0
    out = capsys.readouterr().out
    assert "epoch 1:" in out
    rows = list(tgb.TGBDataset(ns, mesh=tgb.Mesh(0, 1), derive=("document_ids",)))
    # every token of every document is in the namespace exactly once (padding aside)
    seen = sorted(int(t) for b in rows for ids, doc in zip(b["input_ids"], b["document_ids"])
                  for t, d in zip(ids, doc) if d >= 0)
    assert seen == sorted(int(t) for t in flat)


def test_llmbatch_source(tmp_path, capsys):
    example = _load_example()
    records = (np.arange(8 * 16).reshape(8, 16) % 31).astype(np.uint32)
    write_llmbatch(tmp_path / "c.llmbatch", records, batch_size=4)
    ns = str(tmp_path / "ns")
    assert example.main(["--ns", ns, "--llmbatch", str(tmp_path / "c.llmbatch"), "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "2 global batches" in out and "epoch 0: 1 steps" in out and "epoch 1: 1 steps" in out
