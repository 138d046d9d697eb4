"""Provenance of Lance, Videos and LeRobot sources, through Pack/PackSamples and the producer into the TGB, and
back out through ``Lineage`` and ``tgb lineage``: each names its units and records as docs/provenance.md says
(Lance: fragment + row of the fragment; Videos: file + its one clip; LeRobot: episode + frame index)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import torch_tgb as tgb
import torch_tgb.cli.main as cli_main
from torch_tgb import datapipes, sources
from torch_tgb.lineage import Lineage
from torch_tgb.transforms import decode_sample_keys
from torch_tgb.transforms.provenance import RecordId


def _spans(ns: str) -> dict[tuple[int, int, int], list[Any]]:
    """(step, dp, row) -> the row's spans, as ``Lineage.provenance`` reads them from the TGBs."""
    out = {}
    with Lineage(ns) as lineage:
        for step in range(lineage.manifest.head().num_steps):
            for dp, rows in lineage.provenance(step).slices.items():
                for r, row in enumerate(rows):
                    out[step, dp, r] = row
    return out


def _cli_lineage(capsys: pytest.CaptureFixture[str], ns: str, record: RecordId) -> list[tuple[int, int, int]]:
    assert cli_main.main(["lineage", ns, "--record", str(record), "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)["records"][str(record)]
    return sorted((h["step"], h["dp"], h["row"]) for h in hits if not h["excised"])


def _where(spans: dict[tuple[int, int, int], list[Any]]) -> dict[RecordId, list[tuple[int, int, int]]]:
    found: dict[RecordId, list[tuple[int, int, int]]] = {}
    for at, row in spans.items():
        for span in row:
            found.setdefault(span.record, []).append(at)
    return found


def test_lance_rows_name_fragment_and_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("lance")
    from tests.sources._corpus import write_lance

    rng = np.random.default_rng(5)
    docs = [rng.integers(1, 60_000, size=int(rng.integers(3, 30)), dtype=np.uint16) for _ in range(26)]
    uri = write_lance(tmp_path, docs, rows_per_fragment=6)  # fragments 0..4: rows 6k .. 6k + 5
    node = sources.Lance(uri, column="input_ids", name="lc")
    rows = datapipes.Pack(node, 32, window=8, method="bfd")
    ns = str(tmp_path / "ns")
    tgb.produce(ns, datapipes.GlobalBatches(rows, global_batch_size=4, layout=tgb.Layout(dp=2)), producer_id="p0",
                seal=True, progress=False)
    spans = _spans(ns)
    tokens: dict[int, int] = {}
    delivered = {}
    for rank in range(2):
        for step, batch in enumerate(tgb.TGBDataset(ns, mesh=tgb.Mesh(rank, 2), keys=("input_ids", "seq_lens"))):
            for r in range(batch["input_ids"].shape[0]):
                delivered[step, rank, r] = batch["input_ids"][r].numpy()
    for at, row in spans.items():
        pos = 0
        for span in row:
            assert span.record.source == "lc"
            head, _, fragment = span.record.unit.rpartition(" fragment ")
            assert head == uri
            doc = 6 * int(fragment) + span.record.record  # the fragment's row, not the dataset's
            piece = docs[doc][span.start : span.start + span.length]
            assert delivered[at][pos : pos + span.length].tolist() == piece.tolist()
            tokens[doc] = tokens.get(doc, 0) + span.length
            pos += span.length
    assert tokens == {d: len(doc) for d, doc in enumerate(docs)}  # every row of every fragment, whole, once
    where = _where(spans)
    last = RecordId("lc", f"{uri} fragment 4", 1)  # dataset row 25
    assert _cli_lineage(capsys, ns, last) == sorted(where[last])
    assert _cli_lineage(capsys, ns, RecordId("lc", "4", 1)) == sorted(where[last])  # the unit by its index


def _media_rows(samples: Any, seq: int, ragged_keys: tuple[str, ...] | None = None) -> datapipes.GlobalBatches:
    frames = datapipes.Patchify(datapipes.ResizeImages(samples, 28, patch=14), patch=14, temporal_patch=2) \
        if ragged_keys is None else datapipes.Patchify(datapipes.ResizeImages(samples, 28, patch=14), patch=14)
    from torch_tgb.testing.media import IMAGE_TOKEN

    spliced = datapipes.SpliceImageTokens(frames, image_token_id=IMAGE_TOKEN)
    rows = datapipes.PackSamples(spliced, seq, window=4, ragged_keys=ragged_keys, sample_keys=True,
                                 label_ignore_ids=spliced.special_ids)
    return datapipes.GlobalBatches(rows, global_batch_size=2, layout=tgb.Layout(dp=2))


def _keys_and_spans(ns: str) -> list[tuple[tuple[int, int, int], str, Any]]:
    """Every sample of every row: where it is, its ``__key__`` (``sample_keys``) and its provenance span."""
    spans = _spans(ns)
    out = []
    for rank in range(2):
        for step, batch in enumerate(tgb.TGBDataset(ns, mesh=tgb.Mesh(rank, 2), keys=("sample_keys",))):
            for r, keys in enumerate(decode_sample_keys(batch["sample_keys"], batch["sample_keys_offsets"])):
                row = spans[step, rank, r]
                assert len(row) == len(keys)  # one span a sample: a sample is never split
                out += [((step, rank, r), key, span) for key, span in zip(keys, row)]
    return out


def test_videos_name_the_file_and_its_one_clip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("av")
    pytest.importorskip("PIL")
    from torch_tgb.testing.media import encode_video, word_tokenizer

    paths = []
    for k in range(5):
        frames = np.stack([np.full((28, 28, 3), 30 * k, np.uint8) for _ in range(4 + k)])
        path = tmp_path / f"clip{k}.mp4"
        path.write_bytes(encode_video(frames, fps=10))
        (tmp_path / f"clip{k}.txt").write_text(f"clip number {k}")
        paths.append(str(path))
    node = sources.Videos(paths, num_frames=2, tokenizer=word_tokenizer, name="vids")
    ns = str(tmp_path / "ns")
    tgb.produce(ns, _media_rows(node, 64), producer_id="p0", seal=True, progress=False)
    seen = _keys_and_spans(ns)
    assert sorted(key for _, key, _ in seen) == sorted(paths)  # every clip once
    for _, key, span in seen:
        assert span.record == RecordId("vids", key, 0) and span.start == 0  # the file, its one record, whole
    where = {str(span.record): at for at, _, span in seen}
    third = RecordId("vids", "clip2.mp4", 0)  # a unit by its base name
    assert _cli_lineage(capsys, ns, third) == [where[f"vids:{paths[2]}:0"]]


def test_lerobot_steps_name_episode_and_frame(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("av")
    pytest.importorskip("pyarrow")
    from torch_tgb.testing.media import write_lerobot

    root = write_lerobot(tmp_path / "robot", [6, 5], cameras=("cam.top",), size=(28, 28))
    steps = sources.LeRobot(root, action_horizon=2, stride=2, tokenizer=lambda texts: [[1, 2, 3] for _ in texts],
                            name="robot")
    ns = str(tmp_path / "ns")
    tgb.produce(ns, _media_rows(steps, 32, ragged_keys=("pixel_values", "image_grid_thw", "state")),
                producer_id="p0", seal=True, progress=False)
    seen = _keys_and_spans(ns)
    assert len(seen) == 3 + 3  # frames 0, 2, 4 of each episode (stride 2)
    for _, key, span in seen:
        episode, frame = (int(x) for x in key.removeprefix("episode_").split("/"))
        # the record is the frame's index in its episode (what __key__ names), not the step's under this stride
        assert span.record == RecordId("robot", f"{root} episode {episode}", frame), key
        assert span.start == 0
    where = {str(span.record): at for at, _, span in seen}
    assert _cli_lineage(capsys, ns, RecordId("robot", "1", 4)) == [where[f"robot:{root} episode 1:4"]]
