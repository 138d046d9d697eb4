"""``tgb produce --source KIND:WHERE``: every document of every source kind lands exactly once, resumably."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch

import torch_tgb.cli.main as cli_main
from tests.offline.conftest import read_global_batches
from tests.sources._corpus import make_docs, write_lance, write_parquet, write_tars, write_token_file

SEQ = 32


def run(capsys, *argv: str) -> dict:
    code = cli_main.main(["produce", *argv, "--seq-len", str(SEQ), "--global-batch", "4", "--dp", "2", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def spans(ns: str) -> Counter[tuple[int, ...]]:
    """Multiset of the packed documents (spans by document_ids) in the namespace."""
    out: Counter[tuple[int, ...]] = Counter()
    batches, _, _ = read_global_batches(ns)
    for b in batches:
        for ids, doc_ids in zip(b["input_ids"], b["document_ids"]):
            for k in torch.unique(doc_ids[doc_ids >= 0]).tolist():
                out[tuple(ids[doc_ids == k].tolist())] += 1
    return out


def expected(docs: list[np.ndarray]) -> Counter[tuple[int, ...]]:
    return Counter(tuple(int(x) for x in d) for d in docs if len(d))


@pytest.fixture(scope="module")
def docs() -> list[np.ndarray]:
    return make_docs(60, seed=4)


def source_spec(kind: str, root, docs) -> tuple[str, str | None]:
    if kind == "token-file":
        tokens, offsets = write_token_file(root, docs)
        return f"token-file:{tokens}", offsets
    if kind == "webdataset":
        paths = write_tars(root, docs, per_tar=7)
        return "webdataset:" + ",".join(paths), None
    if kind == "parquet":
        write_parquet(root, docs)
        return f"parquet:{root}", None
    return "lance:" + write_lance(root, docs), None  # its token column is input_ids: --column below


@pytest.mark.parametrize("kind", ["token-file", "webdataset", "parquet", "lance"])
def test_each_source_kind_in_two_shards(tmp_path, capsys, docs, kind: str) -> None:
    spec, offsets = source_spec(kind, tmp_path, docs)
    extra = ["--offsets", offsets] if offsets else []
    if kind == "lance":
        extra = ["--column", "input_ids"]
    ns = str(tmp_path / "ns")
    a = run(capsys, ns, "--source", spec, *extra, "--shard", "0/2")
    b = run(capsys, ns, "--source", spec, *extra, "--shard", "1/2")
    assert a["exhausted"] and b["exhausted"] and not a["sealed"] and b["sealed"]  # the last shard done seals
    assert a["tokens"] + b["tokens"] == sum(len(d) for d in docs)
    assert spans(ns) == expected(docs)


def test_steps_then_resume_reads_on(tmp_path, capsys, docs) -> None:
    paths = write_tars(tmp_path, docs, per_tar=5)
    ns = str(tmp_path / "ns")
    spec = "webdataset:" + ",".join(paths)
    first = run(capsys, ns, "--source", spec, "--steps", "2", "--packing", "bfd")
    assert (first["resumed_at"], first["written"], first["exhausted"]) == (0, 2, False)
    second = run(capsys, ns, "--source", spec, "--seal")
    assert second["resumed_at"] == 2 and second["exhausted"]
    assert first["tokens"] < second["tokens"] == sum(len(d) for d in docs)  # counts restored from the state
    assert spans(ns) == expected(docs)
    assert cli_main.main(["inspect", ns, "--json", "--no-sizes"]) == 0
    (producer,) = json.loads(capsys.readouterr().out)["producers"]
    assert producer["next_offset"] == second["next_offset"] and producer["pipeline_state"]["done"] is True


def test_bad_source_arguments(tmp_path, capsys) -> None:
    ns = str(tmp_path / "ns")
    assert cli_main.main(["produce", ns, "--source", "csv:foo"]) == 1
    assert "KIND:WHERE" in capsys.readouterr().err
    assert cli_main.main(["produce", ns, "--source", "webdataset:/nope.tar", "--shard", "2/2"]) == 1
    assert "--shard" in capsys.readouterr().err
    assert cli_main.main(["produce", ns, "--source", "webdataset:/nope.tar"]) == 1
    assert "/nope.tar" in capsys.readouterr().err


def test_synthetic_default_steps_is_said(tmp_path, capsys) -> None:
    assert cli_main.main(["produce", str(tmp_path / "ns"), "--global-batch", "2", "--seq-len", "4", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["written"] == 100
    assert "--steps not given: writing 100 TGBs" in captured.err


def test_text_source_with_a_local_tokenizer_file(tmp_path, capsys, docs) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = sorted({str(int(t)) for d in docs for t in d})
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "tokenizer.json"))
    paths = write_tars(tmp_path, docs, per_tar=9, text=True)
    ns = str(tmp_path / "ns")
    report = run(capsys, ns, "--source", "webdataset:" + ",".join(paths), "--text-field", "txt",
                 "--tokenizer", str(tmp_path / "tokenizer.json"), "--seal")
    assert report["exhausted"] and report["tokens"] == sum(len(d) for d in docs)
    index = {w: i for i, w in enumerate(words)}
    assert spans(ns) == Counter(tuple(index[str(int(t))] for t in d) for d in docs if len(d))
    assert cli_main.main(["produce", str(tmp_path / "x"), "--source", f"webdataset:{paths[0]}", "--text-field", "txt",
                          "--tokenizer", str(tmp_path / "missing.json")]) == 1
    assert "cannot load tokenizer" in capsys.readouterr().err
