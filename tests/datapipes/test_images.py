"""The media stages: decode -> resize (schedule) -> patchify -> splice -> PackSamples -> GlobalBatches.

Every image's patches land exactly once, in the row whose input_ids hold its
tokens; the pipeline resumes exactly; each bad input is skipped and counted
(or raised, naming the sample).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from torch_tgb import datapipes, sources
from torch_tgb.errors import LayoutError, MediaError, SourceError
from torch_tgb.layout import Layout, RaggedRows
from torch_tgb.observability import stats_fields
from torch_tgb.testing.media import IMAGE_TOKEN, bad_images, image_samples, word_tokenizer, write_media_tars
from torch_tgb.testing.resume import run_resume_test
from torch_tgb.transforms import Resolution, VLMCost, resolution_schedule, unpatchify
from torch_tgb.transforms.media import decode_image
from torch_tgb.transforms.vision import resize_frames, target_size

pytest.importorskip("PIL")
PATCH, MERGE, SEQ = 14, 2, 256
START, END = 1001, 1002


@pytest.fixture(scope="module")
def tars(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[dict]]:
    samples = image_samples(24, seed=3, max_side=200)
    return write_media_tars(tmp_path_factory.mktemp("imgs"), samples, per_tar=6), samples


def stages(urls: list[str], *, resolution=Resolution(max_pixels=84 * 84), on_error="skip", shard=(0, 1)):
    docs = sources.WebDataset(urls, text_field="txt", tokenizer=word_tokenizer, shard=shard, seed=1,
                              on_error="skip")
    images = datapipes.DecodeImages(docs, on_error=on_error)
    resized = datapipes.ResizeImages(images, resolution, patch=PATCH, merge=MERGE)
    patches = datapipes.Patchify(resized, patch=PATCH, merge=MERGE, on_error=on_error)
    return datapipes.SpliceImageTokens(patches, image_token_id=IMAGE_TOKEN, merge=MERGE, start_id=START, end_id=END,
                                       on_error=on_error)


def pipeline(urls: list[str], **kw) -> datapipes.GlobalBatches:
    samples = stages(urls, **kw)
    rows = datapipes.PackSamples(samples, SEQ, window=5, label_ignore_ids=samples.special_ids)
    return datapipes.GlobalBatches(rows, global_batch_size=4, layout=Layout(dp=2), balance="kk", micro_batches=2,
                                   cost=VLMCost(beta=1.0))


def test_every_image_lands_once_with_its_tokens(tars):
    urls, samples = tars
    batches = list(pipeline(urls))
    expected = {}
    for s in samples:
        for key in sorted(k for k in s if k.rsplit(".", 1)[-1] in ("jpg", "png", "webp")):
            image = decode_image(s[key])
            size = target_size(image.shape[0], image.shape[1], Resolution(max_pixels=84 * 84), factor=PATCH * MERGE)
            expected.setdefault(resize_frames(image, size).numpy().tobytes(), 0)
            expected[resize_frames(image, size).numpy().tobytes()] += 1
    seen: dict[bytes, int] = {}
    for b in batches:
        assert isinstance(b["pixel_values"], RaggedRows) and len(b["pixel_values"]) == 4
        for r in range(4):
            ids, grids, values = b["input_ids"][r], b["image_grid_thw"][r], b["pixel_values"][r]
            assert values.dtype == torch.uint8 and values.shape[1] == 3 * PATCH * PATCH
            tokens_per_image = (grids.prod(dim=1) // (MERGE * MERGE)).tolist()
            assert int((ids == IMAGE_TOKEN).sum()) == sum(tokens_per_image)
            assert int((ids == START).sum()) == len(tokens_per_image) == int((ids == END).sum())
            assert not bool(torch.isin(b["labels"][r], torch.tensor([IMAGE_TOKEN, START, END])).any())
            offset = 0
            for grid in grids.tolist():
                n = grid[0] * grid[1] * grid[2]
                frames = unpatchify(values[offset : offset + n], grid, PATCH, merge=MERGE)
                seen[frames[0].numpy().tobytes()] = seen.get(frames[0].numpy().tobytes(), 0) + 1
                offset += n
            assert offset == values.shape[0]
    assert seen == expected


def test_pipeline_resumes_exactly(tars):
    urls, _ = tars
    run_resume_test(lambda: pipeline(urls), stop_after=2)
    run_resume_test(lambda: stages(urls, resolution=resolution_schedule([7], [56, 112])), stop_after=9)


def test_resolution_schedule_switches_at_its_step(tars):
    urls, _ = tars
    node = stages(urls, resolution=resolution_schedule([5], [56, 112]))
    grids = [d["image_grid_thw"] for d in node]
    assert all(g[:, 1:].eq(56 // PATCH).all() for g in grids[:5])
    assert all(g[:, 1:].eq(112 // PATCH).all() for g in grids[5:])
    resize = node.source.source
    assert resize.step == 24 and resize.stats().items == sum(len(g) for g in grids)


def _image_of(sample: dict) -> bytes:
    return next(v for k, v in sample.items() if k in ("jpg", "png", "webp"))


def _bad_corpus(root: Path, only: str | None = None) -> list[str]:
    good = image_samples(3, seed=9, max_side=64, max_images=1)
    bad = bad_images()
    samples = good[:1] + [
        {"__key__": "truncated", "jpg": bad["truncated"], "txt": "a b"},
        {"__key__": "corrupt", "jpg": bad["corrupt"], "txt": "a b"},
        {"__key__": "empty", "png": bad["empty"], "txt": "a b"},
        {"__key__": "bomb", "jpg": bad["bomb"], "txt": "a b"},
        {"__key__": "gif_as_jpg", "jpg": bad["gif"], "txt": "a b"},
        {"__key__": "caption_only", "txt": "a caption without image"},
        {"__key__": "unknown_ext", "bmp": b"BM....", "txt": "a b"},
        {"__key__": "placeholders", "png": _image_of(good[1]), "txt": "<image> x <image>"},
    ] + good[2:]
    if only is not None:
        samples = [x for x in samples if x["__key__"] in (only, "img9-00000", "unknown_ext")]
    return write_media_tars(root, samples, per_tar=4)


def test_bad_inputs_are_skipped_and_counted(tmp_path):
    urls = _bad_corpus(tmp_path)
    node = stages(urls)
    out = list(node)
    assert [d["__key__"] for d in out] == ["img9-00000", "img9-00002"]
    decode = node.source.source.source
    source = decode.source
    assert source.stats().skipped == 1  # unknown extension, at the source
    assert decode.stats().skipped_by_reason == {"corrupt": 1, "format": 2, "empty": 1, "too_large": 1, "no_image": 1}
    assert node.stats().skipped_by_reason == {"placeholders": 1}
    fields = stats_fields(decode.stats())
    assert fields["skipped"] == 6 and fields["skipped_by_reason_too_large"] == 1


@pytest.mark.parametrize("key,reason", [("truncated", "corrupt"), ("bomb", "too_large"), ("caption_only", "no_image")])
def test_bad_inputs_raise_naming_the_sample(tmp_path, key, reason):
    urls = _bad_corpus(tmp_path, only=key)
    node = datapipes.DecodeImages(sources.WebDataset(urls, text_field="txt", tokenizer=word_tokenizer,
                                                     on_error="skip"), on_error="raise")
    assert next(node)["__key__"] == "img9-00000"
    with pytest.raises(MediaError, match=key if key != "caption_only" else "no image member") as e:
        next(node)  # a text document (the caption) has no __key__
    assert e.value.reason == reason and isinstance(e.value, SourceError)
    with pytest.raises(SourceError, match="unknown media extension 'bmp'"):
        list(sources.WebDataset(urls, text_field="txt", tokenizer=word_tokenizer))


def test_pack_samples_skips_or_raises_a_sample_longer_than_a_row(tars):
    urls, _ = tars
    small = datapipes.PackSamples(stages(urls, resolution=112), 16, window=4)
    assert list(small) == [] and small.stats().skipped == 24
    with pytest.raises(MediaError, match="seq_len=16"):
        next(iter(datapipes.PackSamples(stages(urls, resolution=112), 16, on_error="raise")))


def test_global_batches_report_encoder_backbone_and_micro_imbalance(tars):
    urls, _ = tars
    node = pipeline(urls)
    batch = next(iter(node))
    stats = node.stats()
    fields = stats_fields(stats)
    for name in ("encoder_imbalance", "backbone_imbalance", "micro_imbalance", "mean_encoder_imbalance"):
        assert name in fields and fields[name] >= 1.0
    assert stats.encoder_imbalance != stats.backbone_imbalance
    costs = batch["row_cost"]
    assert costs.shape == (4,) and bool((costs > 0).any())
    vector = datapipes.GlobalBatches(node.source, global_batch_size=4, layout=Layout(dp=2), balance="vector",
                                     micro_batches=2, cost=VLMCost(beta=1.0))
    assert vector.stats().encoder_imbalance == 1.0 and next(iter(vector))["row_cost"].shape == (4,)
    with pytest.raises(ValueError, match="VLMCost"):
        datapipes.GlobalBatches(node.source, global_batch_size=4, layout=Layout(dp=2), balance="vector")
    with pytest.raises(LayoutError, match="micro_batches"):
        datapipes.GlobalBatches(node.source, global_batch_size=4, layout=Layout(dp=2), micro_batches=3)


def test_padding_rows_have_empty_ragged_values(tars):
    urls, _ = tars
    samples = stages(urls)
    rows = datapipes.PackSamples(samples, SEQ, window=64)
    batches = list(datapipes.GlobalBatches(rows, global_batch_size=8, layout=Layout(dp=2)))
    last = batches[-1]
    pads = [r for r in range(8) if int((last["document_ids"][r] >= 0).sum()) == 0]
    assert pads and all(last["pixel_values"][r].shape == (0, 3 * PATCH * PATCH) for r in pads)
    assert all(last["image_grid_thw"][r].shape == (0, 3) for r in pads)
    patches = sum(int(v.shape[0]) for b in batches for v in b["pixel_values"])
    assert patches == rows.stats().patches


def test_videos_patchify_with_temporal_patches(tmp_path):
    pytest.importorskip("av")
    from torch_tgb.testing.media import encode_video

    frames = np.stack([np.full((56, 84, 3), 12 * i, np.uint8) for i in range(10)])
    urls = write_media_tars(tmp_path, [{"__key__": "v0", "mp4": encode_video(frames, fps=10), "txt": "a clip"},
                                       {"__key__": "v1", "mp4": b"garbage", "txt": "bad"}], per_tar=2)
    docs = sources.WebDataset(urls, text_field="txt", tokenizer=word_tokenizer)
    clips = datapipes.DecodeVideos(docs, num_frames=5)
    resized = datapipes.ResizeImages(clips, 28, patch=14)
    patches = datapipes.Patchify(resized, patch=14, temporal_patch=2)
    out = list(datapipes.SpliceImageTokens(patches, image_token_id=IMAGE_TOKEN))
    assert len(out) == 1 and clips.stats().skipped_by_reason == {"corrupt": 1}
    (sample,) = out
    assert sample["video_grid_thw"].tolist() == [[3, 2, 2]]  # 5 frames padded to 6, t=2
    assert sample["pixel_values_videos"].shape == (12, 3 * 2 * 14 * 14)
    assert sample["pixel_values"].shape == (0, 3 * 2 * 14 * 14) and sample["image_grid_thw"].shape == (0, 3)
    assert int((sample["tokens"] == IMAGE_TOKEN).sum()) == 12
