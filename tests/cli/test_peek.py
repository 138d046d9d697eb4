"""`tgb peek`: a step's keys, a row's tokens and documents, its sample keys, and its images reassembled to a PNG."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import torch_tgb as tgb
import torch_tgb.cli.main as cli_main
from torch_tgb import datapipes, sources
from torch_tgb.layout import Layout
from torch_tgb.transforms import Resolution, decode_sample_keys

PIL = pytest.importorskip("PIL")
PATCH, MERGE, SEQ = 14, 2, 256
RESOLUTION = Resolution(max_pixels=84 * 84)


@pytest.fixture(scope="module")
def image_ns(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, dict]]:
    """An image-text namespace (dp=2) produced with sample keys on, and the source samples by key."""
    from torch_tgb.testing.media import IMAGE_TOKEN, image_samples, word_tokenizer, write_media_tars

    root = tmp_path_factory.mktemp("peek")
    samples = image_samples(12, seed=3, max_side=150)
    urls = write_media_tars(root / "tars", samples, per_tar=6)
    docs = sources.WebDataset(urls, text_field="txt", tokenizer=word_tokenizer, seed=1)
    images = datapipes.DecodeImages(docs)
    resized = datapipes.ResizeImages(images, RESOLUTION, patch=PATCH, merge=MERGE)
    patches = datapipes.Patchify(resized, patch=PATCH, merge=MERGE)
    spliced = datapipes.SpliceImageTokens(patches, image_token_id=IMAGE_TOKEN, merge=MERGE)
    rows = datapipes.PackSamples(spliced, SEQ, window=5, sample_keys=True)
    batches = datapipes.GlobalBatches(rows, global_batch_size=4, layout=Layout(dp=2))
    ns = str(root / "ns")
    tgb.produce(ns, batches, producer_id="p0", seal=True, progress=False)
    return ns, {s["__key__"]: s for s in samples}


def _resized_images(sample: dict) -> list[np.ndarray]:
    """The producer's resized images of a source sample, in member order (what DecodeImages + ResizeImages make)."""
    from torch_tgb.transforms.media import decode_image
    from torch_tgb.transforms.vision import resize_frames, target_size

    out = []
    for key in sorted(k for k in sample if k.rsplit(".", 1)[-1] in ("jpg", "png", "webp")):
        image = decode_image(sample[key])
        size = target_size(image.shape[0], image.shape[1], RESOLUTION, factor=PATCH * MERGE)
        out.append(resize_frames(image, size).numpy())
    return out


def test_sample_keys_reach_the_trainer_row_by_row(image_ns):
    ns, by_key = image_ns
    seen = []
    for rank in range(2):
        for batch in tgb.TGBDataset(ns, mesh=tgb.Mesh(dp_rank=rank, dp_size=2)):
            assert batch["sample_keys"].dtype == torch.uint8
            keys = decode_sample_keys(batch["sample_keys"], batch["sample_keys_offsets"])
            for r, row_keys in enumerate(keys):
                docs = batch["document_ids"][r]
                assert len(row_keys) == len(set(docs[docs >= 0].tolist()))  # one key per document of the row
                # the row's images, in order, are exactly those of its keys' samples, in order
                offsets = batch["image_grid_thw_offsets"]
                grids = batch["image_grid_thw"][offsets[r] : offsets[r + 1]]
                expected = [img for key in row_keys for img in _resized_images(by_key[key])]
                assert [tuple(g[1:].tolist()) for g in grids] == [(i.shape[0] // PATCH, i.shape[1] // PATCH)
                                                                  for i in expected]
                seen += row_keys
    assert sorted(seen) == sorted(by_key)


def test_peek_draws_the_producers_images_pixel_for_pixel(image_ns, tmp_path, capsys):
    from PIL import Image

    ns, by_key = image_ns
    drawn = 0
    for rank in range(2):
        png = tmp_path / f"rank{rank}.png"
        assert cli_main.main(["peek", ns, "--step", "0", "--rank", str(rank), "--png", str(png), "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["keys"]["pixel_values"]["dtype"] == "uint8" and report["media"]["geometry"]["image"] == {
            "patch": PATCH, "temporal_patch": 1, "merge": MERGE, "channels": 3}  # inferred, not given
        sheet = np.asarray(Image.open(png).convert("RGB"))
        for box in report["media"]["boxes"]:
            keys = report["sample_keys"][box["row"]]
            expected = [img for key in keys for img in _resized_images(by_key[key])][box["index"]]
            crop = sheet[box["y"] : box["y"] + box["h"], box["x"] : box["x"] + box["w"]]
            assert crop.shape == expected.shape and np.array_equal(crop, expected)
            drawn += 1
    assert drawn > 0


def test_peek_prints_keys_tokens_and_documents(tmp_path, capsys):
    from tests.cli.conftest import write_namespace

    ns = write_namespace(tmp_path / "ns")
    assert cli_main.main(["peek", ns, "--step", "2", "--rank", "1", "--row", "1", "--tokens", "4"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"step 2 of file://{Path(ns)}: rank 1 of dp=2, 2 rows")
    assert "input_ids" in out and "[2, 8]" in out and "row 1: 8 token positions" in out
    batch = next(iter(tgb.TGBDataset(ns, mesh=tgb.Mesh(dp_rank=1, dp_size=2), options=tgb.ReaderOptions(stop_step=3))
                      ), None)
    assert batch is not None
    assert cli_main.main(["peek", ns, "--step", "6"]) == 1
    assert "step 6 is not committed (steps 0..5)" in capsys.readouterr().err
    assert cli_main.main(["peek", ns, "--step", "0", "--png", str(tmp_path / "x.png")]) == 1
    assert "has no images or video frames" in capsys.readouterr().err


def test_peek_shows_token_rows_documents_decoded_with_a_tokenizer(tmp_path, capsys):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(["[UNK]", "the", "cat", "sat", "on", "mat", "a", "dog"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tok.json"))
    docs = [tok.encode(t).ids for t in ["the cat sat", "on a mat", "a dog sat on the mat"]]
    np.save(tmp_path / "c.npy", np.concatenate(docs).astype(np.uint16))
    np.save(tmp_path / "c.idx.npy", np.cumsum([0] + [len(d) for d in docs]).astype(np.int64))
    ns = str(tmp_path / "ns")
    assert cli_main.main(["produce", ns, "--source", f"token-file:{tmp_path / 'c.npy'}", "--offsets",
                          str(tmp_path / "c.idx.npy"), "--pack", "concat", "--global-batch", "1", "--seq-len", "16",
                          "--seal"]) == 0
    capsys.readouterr()
    assert cli_main.main(["peek", ns, "--step", "0", "--tokenizer", str(tmp_path / "tok.json")]) == 0
    out = capsys.readouterr().out
    # the documents (in the source's shuffled order) at their boundaries, each decoded
    assert "row 0: 16 token positions in 3 documents" in out and "documents: [0, 6), [6, 9), [9, 12)" in out
    texts = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("  document ")]
    assert texts == ["'a dog sat on the mat'", "'the cat sat'", "'on a mat'"]
