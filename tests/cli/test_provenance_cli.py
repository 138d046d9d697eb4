"""``tgb lineage`` / ``provenance`` / ``excise`` / ``verify --deny`` / ``card``: the issue 47 commands, end to end
on a small BFD-packed namespace (in-process, through ``cli.main``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import torch_tgb.cli.main as cli_main
from tests.lineage._corpus import NAME, corpus, produce


def _json(capsys, *argv: str) -> tuple[int, dict]:
    code = cli_main.main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def prov_ns(tmp_path: Path) -> tuple[str, Path]:
    path, idx, _ = corpus(tmp_path)
    ns = str(tmp_path / "ns")
    produce(ns, path, idx, metadata={"tokenizer": "bytes-v1", "git_sha": "abc123"})
    return ns, path


def test_provenance_lineage_excise_verify_and_card_agree(prov_ns, tmp_path, capsys) -> None:
    ns, path = prov_ns
    code, step = _json(capsys, "provenance", ns, "--step", "2", "--rank", "1")
    assert code == 0 and list(step["slices"]) == ["1"]
    first = step["slices"]["1"][0][0]["record"]  # row 0 of dp slice 1 of step 2
    assert first.startswith(f"{NAME}:{path}:")
    doc = int(first.rsplit(":", 1)[1])
    # the same record by the unit's base name and by its index
    short = f"{NAME}:{path.name}:{doc}"
    code, found = _json(capsys, "lineage", ns, "--record", short, "--record", f"{NAME}:0:{doc}")
    assert code == 0
    hits = found["records"][short]
    assert {"step": 2, "dp": 1, "row": 0, "excised": False} in hits
    assert found["records"][f"{NAME}:0:{doc}"] == hits

    denied = tmp_path / "denied.txt"
    denied.write_text(f"# revoked\n{short}\n\n")
    code, report = _json(capsys, "verify", ns, "--deny", str(denied))
    assert code == 1 and report["rows"] == len(hits)  # every row the index named, found by the scan too

    code, done = _json(capsys, "excise", ns, "--records", str(denied), "--by", "legal@example", "--reason", "T-1")
    assert code == 0 and done["version"] is not None and done["steps"] == sorted({h["step"] for h in hits})
    code, report = _json(capsys, "verify", ns, "--deny", str(denied))
    assert code == 0 and report["rows"] == 0 and report["found"] == []
    code, report = _json(capsys, "verify", ns)  # the objects in effect: present, whole, CRC-clean
    assert code == 0 and report["ok"] is True, report["problems"]
    code, found = _json(capsys, "lineage", ns, "--from-file", str(denied))
    assert all(h["excised"] for h in found["records"][short])

    code, step = _json(capsys, "provenance", ns, "--step", "2", "--rank", "1")
    assert all(s["record"] != first for row in step["slices"]["1"] for s in row)

    code, card = _json(capsys, "card", ns)
    assert code == 0
    assert card["dataset"]["contract"] == {"tokenizer": "bytes-v1", "git_sha": "abc123"}
    [source] = card["sources"]
    assert source["name"] == NAME and source["kind"] == "TokenFile" and source["tokens"] == card["packing"]["tokens"]
    assert 0 < card["packing"]["efficiency"] <= 1
    [excision] = card["excisions"]
    assert excision["who"] == "legal@example" and excision["reason"] == "T-1" and excision["version"] == done["version"]
    assert cli_main.main(["card", ns]) == 0 and "legal@example" in capsys.readouterr().out


def test_a_bad_records_file_is_refused_with_its_line_and_nothing_is_committed(prov_ns, tmp_path, capsys) -> None:
    from torch_tgb.manifest import Manifest
    from torch_tgb.storage import open_store

    ns, _ = prov_ns
    head = Manifest(open_store(ns)).latest_version()
    bad = tmp_path / "bad.txt"
    bad.write_text(f"{NAME}:0:1\nnot-a-record\n")
    assert cli_main.main(["excise", ns, "--records", str(bad)]) == 1
    assert "bad.txt:2" in capsys.readouterr().err
    assert Manifest(open_store(ns)).latest_version() == head


def test_an_unknown_source_is_named(prov_ns, capsys) -> None:
    ns, _ = prov_ns
    assert cli_main.main(["lineage", ns, "--record", "elsewhere:0:1"]) == 1
    assert "no source named 'elsewhere'" in capsys.readouterr().err
