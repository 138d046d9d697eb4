"""``tgb inspect`` prints the namespace's data contract: its metadata, as a reader's ``expect=`` compares it."""

from __future__ import annotations

import torch

import torch_tgb.cli.main as cli_main
from torch_tgb import Layout, Producer


def test_inspect_prints_the_contract(tmp_path, capsys):
    ns = str(tmp_path / "ns")
    with Producer(ns, producer_id="p0", layout=Layout(dp=1),
                  metadata={"vocab_size": 50257, "tokenizer": "gpt2@sha256:1f0c", "pipeline": ["pack", "bfd"]}) as p:
        p.append({"input_ids": torch.zeros(2, 4, dtype=torch.int32)}, offset=0)
        p.close(seal=True)
    assert cli_main.main(["inspect", ns, "--no-sizes"]) == 0
    line = next(line.strip() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("contract"))
    assert line.split(None, 1)[1] == 'pipeline=["pack", "bfd"], tokenizer="gpt2@sha256:1f0c", vocab_size=50257'


def test_a_namespace_without_metadata_has_an_empty_contract(small_ns, capsys):
    assert cli_main.main(["inspect", small_ns, "--no-sizes"]) == 0
    assert any(line.split() == ["contract", "-"] for line in capsys.readouterr().out.splitlines())
