"""A small VLM producer pipeline over an image WebDataset, and what its namespace should hold (test helpers)."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from typing import Any

import torch
from torchdata.nodes import BaseNode

from torch_tgb import datapipes, sources
from torch_tgb.layout import Layout
from torch_tgb.testing.media import IMAGE_TOKEN, word_tokenizer
from torch_tgb.transforms import Resolution, VLMCost, target_size, unpatchify
from torch_tgb.transforms.media import decode_image, media_keys
from torch_tgb.transforms.vision import resize_frames

PATCH, MERGE, SEQ, GLOBAL_BATCH = 14, 2, 96, 4
RESOLUTION = Resolution(max_pixels=56 * 56)
SEQ_KEYS = ("input_ids", "labels", "document_ids", "position_ids")


def layout(dp: int = 2, cp: int = 1) -> Layout:
    return Layout(dp=dp, cp=cp, seq_keys=SEQ_KEYS)


def pipeline(docs: BaseNode[Any], *, dp: int = 2, cp: int = 1) -> datapipes.GlobalBatches:
    """source -> decode -> resize -> patchify -> splice -> PackSamples -> GlobalBatches (kk, 2 micro-batches)."""
    images = datapipes.DecodeImages(docs)
    resized = datapipes.ResizeImages(images, RESOLUTION, patch=PATCH, merge=MERGE)
    patches = datapipes.Patchify(resized, patch=PATCH, merge=MERGE)
    spliced = datapipes.SpliceImageTokens(patches, image_token_id=IMAGE_TOKEN, merge=MERGE)
    rows = datapipes.PackSamples(spliced, SEQ, window=6, label_ignore_ids=spliced.special_ids)
    return datapipes.GlobalBatches(rows, global_batch_size=GLOBAL_BATCH, layout=layout(dp, cp), balance="kk",
                                   micro_batches=2, cost=VLMCost(beta=1.0))


def source(urls: list[str], shard: tuple[int, int] = (0, 1)) -> sources.WebDataset:
    return sources.WebDataset(urls, shard=shard, seed=7, text_field="txt", tokenizer=word_tokenizer)


def _digest(frames: torch.Tensor) -> str:
    return hashlib.sha1(frames.contiguous().numpy().tobytes()).hexdigest()


def expected_images(samples: Iterable[dict[str, Any]]) -> Counter[str]:
    """Digests of every image as the pipeline should deliver it (decoded, resized)."""
    out: Counter[str] = Counter()
    for sample in samples:
        for key in media_keys(sample, ("jpg", "png", "webp")):
            image = decode_image(sample[key])
            size = target_size(image.shape[0], image.shape[1], RESOLUTION, factor=PATCH * MERGE)
            out[_digest(resize_frames(image, size))] += 1
    return out


def delivered_images(batch: dict[str, torch.Tensor]) -> Counter[str]:
    """Digests of the images in one rank's batch (ragged values + offsets), checked against its input_ids."""
    out: Counter[str] = Counter()
    values, voffs = batch["pixel_values"], batch["pixel_values_offsets"]
    grids, goffs = batch["image_grid_thw"], batch["image_grid_thw_offsets"]
    for r in range(batch["input_ids"].shape[0]):
        row_values, row_grids = values[voffs[r] : voffs[r + 1]], grids[goffs[r] : goffs[r + 1]]
        assert int((batch["input_ids"][r] == IMAGE_TOKEN).sum()) == int(row_grids.prod(dim=1).sum()) // MERGE**2
        start = 0
        for grid in row_grids.tolist():
            n = grid[0] * grid[1] * grid[2]
            out[_digest(unpatchify(row_values[start : start + n], grid, PATCH, merge=MERGE)[0])] += 1
            start += n
        assert start == row_values.shape[0]
    return out
