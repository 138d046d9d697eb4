from __future__ import annotations

import json
from pathlib import Path

import torch_tgb.cli.main as cli_main
from torch_tgb.manifest import Manifest
from torch_tgb.storage import open_store


def _entry(ns: str, step: int):
    return Manifest(open_store(ns)).entry(step)


def _verify_json(ns: str, capsys, *extra: str) -> tuple[int, dict]:
    code = cli_main.main(["verify", ns, "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_verify_clean_namespace(small_ns, capsys):
    code, report = _verify_json(small_ns, capsys)
    assert code == 0 and report["ok"] is True
    assert report["steps_checked"] == 6 and report["objects_checked"] == 6
    assert report["bytes_checked"] > 0 and report["unreferenced_objects"] == 0


def test_verify_finds_flipped_payload_byte_by_step(small_ns, capsys):
    entry = _entry(small_ns, 2)
    path = Path(small_ns) / entry.key
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF  # inside slice (0, 0), far from the footer
    path.write_bytes(bytes(data))
    code, report = _verify_json(small_ns, capsys)
    assert code == 1
    [problem] = report["problems"]
    assert problem["step"] == 2 and problem["key"] == entry.key and "CRC32C" in problem["message"]
    # sizes and footers alone do not see a payload flip
    code, report = _verify_json(small_ns, capsys, "--no-crc")
    assert code == 0


def test_verify_finds_missing_and_truncated_objects(small_ns, capsys):
    missing, truncated = _entry(small_ns, 1), _entry(small_ns, 4)
    (Path(small_ns) / missing.key).unlink()
    path = Path(small_ns) / truncated.key
    path.write_bytes(path.read_bytes()[:-7])
    assert cli_main.main(["verify", small_ns, "--no-crc"]) == 1
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.strip().startswith("[")]
    assert len(lines) == 2
    assert "step=1" in lines[0] and "missing" in lines[0]
    assert "step=4" in lines[1] and "size" in lines[1]


def test_verify_reports_malformed_version(small_ns, capsys):
    # a log object past the newest version, not JSON: a hole/garbage in the log
    manifest = Manifest(open_store(small_ns))
    latest = manifest.latest_version()
    path = Path(small_ns) / manifest.version_key(latest + 2)  # in the namespace's key layout
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not json")
    code, report = _verify_json(small_ns, capsys)
    assert code == 1
    versions = [p["version"] for p in report["problems"]]
    # reported either as a version beyond the newest, or (when discovery lists the log) as a
    # missing version before an unreadable one: always by version number, never a crash
    assert latest + 2 in versions and all(v > latest for v in versions)


def test_verify_counts_unreferenced_objects_without_failing(small_ns, capsys):
    (Path(small_ns) / "data" / "p0" / "orphan.tgb").write_bytes(b"x" * 100)
    code, report = _verify_json(small_ns, capsys)
    assert code == 0
    assert report["unreferenced_objects"] == 1 and report["unreferenced_bytes"] == 100


def test_verify_max_problems_stops_early(small_ns, capsys):
    for step in range(6):
        (Path(small_ns) / _entry(small_ns, step).key).unlink()
    code, report = _verify_json(small_ns, capsys, "--max-problems", "2")
    assert code == 1 and len(report["problems"]) == 2 and report["truncated"] is True


def test_verify_finds_a_broken_step_sequence(small_ns, capsys):
    import json as _json

    # version 3 claims to start 3 steps later than it does: the sequence no longer adds up
    path = Path(small_ns) / Manifest(open_store(small_ns)).version_key(3)  # in the namespace's key layout
    record = _json.loads(path.read_bytes())
    true_first = record["first_step"]
    record["first_step"] = true_first + 3
    path.write_bytes(_json.dumps(record).encode())
    code, report = _verify_json(small_ns, capsys, "--no-crc")
    assert code == 1
    first = report["problems"][0]
    assert first["version"] == 3 and f"first_step={true_first + 3}, expected {true_first}" in first["message"]


def test_verify_checks_a_segment_index_once_per_object(tmp_path, capsys):
    import torch

    from torch_tgb.layout import Layout
    from torch_tgb.producer import Producer, ProducerConfig

    ns = str(tmp_path / "seg")
    with Producer(ns, producer_id="p", layout=Layout(dp=2), config=ProducerConfig(segment_tgbs=4)) as p:
        for offset in range(8):
            p.append({"x": torch.full((4, 8), offset, dtype=torch.int32)}, offset=offset)
        p.close(seal=True)
    code, report = _verify_json(ns, capsys)
    assert code == 0 and report["steps_checked"] == 8
    entry = _entry(ns, 5)
    path = Path(ns) / entry.key
    data = bytearray(path.read_bytes())
    data[entry.total_size - 30] ^= 0x01  # the segment index, not any TGB
    path.write_bytes(bytes(data))
    code, report = _verify_json(ns, capsys, "--no-crc")
    assert code == 1
    [problem] = report["problems"]  # once for the segment, at its first step
    assert problem["step"] == 4 and problem["key"] == entry.key and "segment index" in problem["message"]
