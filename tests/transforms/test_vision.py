"""transforms.vision: target sizes, schedules, resize against Pillow, patchify round trips, token splicing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import MediaError
from torch_tgb.transforms.vision import (
    Resolution,
    as_resolution_schedule,
    image_token_count,
    patchify,
    resize_frames,
    resolution_schedule,
    splice_image_tokens,
    target_size,
    unpatchify,
)

PIL = pytest.importorskip("PIL.Image")


@settings(max_examples=300, deadline=None)
@given(
    h=st.integers(1, 40_000),
    w=st.integers(1, 40_000),
    factor=st.sampled_from([14, 16, 28, 32]),
    top=st.integers(1, 4_000_000),
    low=st.integers(0, 4_000_000),
)
def test_dynamic_target_size_is_bounded_and_aligned(h, w, factor, top, low):
    top = max(top, factor * factor)
    res = Resolution(min_pixels=min(low, top), max_pixels=top)
    th, tw = target_size(h, w, res, factor=factor)
    assert th % factor == 0 and tw % factor == 0 and th >= factor and tw >= factor
    assert th * tw <= top  # the hard bound, whatever the aspect ratio
    rh, rw = max(factor, round(h / factor) * factor), max(factor, round(w / factor) * factor)
    if res.min_pixels <= rh * rw <= top:  # rounding alone meets the budget: the size is only rounded
        assert (th, tw) == (rh, rw)


def test_target_size_keeps_aspect_and_honours_min_pixels():
    res = Resolution(max_pixels=448 * 448)
    th, tw = target_size(300, 451, res, factor=28)  # skimage chelsea
    assert (th, tw) == (308, 448) and abs(th / tw - 300 / 451) < 0.03
    assert target_size(4000, 6000, res, factor=28)[0] * target_size(4000, 6000, res, factor=28)[1] <= 448 * 448
    small = target_size(10, 10, Resolution(min_pixels=224 * 224, max_pixels=448 * 448), factor=28)
    assert small[0] * small[1] >= 224 * 224
    assert target_size(100, 50, Resolution(side=224), factor=14) == (224, 224)
    with pytest.raises(ValueError, match="multiple"):
        target_size(100, 50, Resolution(side=230), factor=14)
    with pytest.raises(MediaError):
        target_size(0, 50, res, factor=14)
    with pytest.raises(ValueError):
        Resolution(side=224, max_pixels=10)


def test_resolution_schedule_switches_at_the_boundary():
    sched = resolution_schedule([100], [224, Resolution(max_pixels=448 * 448)])
    assert sched(0) == sched(99) == Resolution(side=224)
    assert sched(100).max_pixels == 448 * 448
    assert as_resolution_schedule(336)(10**9) == Resolution(side=336)
    assert as_resolution_schedule(lambda step: 224 if step < 5 else 448)(5) == Resolution(side=448)
    with pytest.raises(ValueError):
        resolution_schedule([5, 5], [1, 2, 3])


@pytest.mark.parametrize("mode,pil_mode,tol", [("bilinear", "BILINEAR", 1), ("bicubic", "BICUBIC", 16)])
def test_resize_matches_pillow(mode, pil_mode, tol):
    from torch_tgb.testing.media import photos, synthetic_images

    images = photos()[:3] + list(synthetic_images(3, 5, max_side=300))
    for k, image in enumerate(images):
        h, w = [(224, 224), (112, 336), (308, 448)][k % 3]
        ours = resize_frames(torch.from_numpy(image), (h, w), mode=mode).numpy()
        ref = np.asarray(PIL.fromarray(image).resize((w, h), getattr(PIL.Resampling, pil_mode)))
        diff = np.abs(ours.astype(int) - ref)
        assert diff.max() <= tol and diff.mean() < 0.1


@settings(max_examples=60, deadline=None)
@given(
    t=st.integers(1, 5),
    gh=st.integers(1, 3),
    gw=st.integers(1, 3),
    patch=st.sampled_from([1, 2, 4]),
    tp=st.integers(1, 3),
    merge=st.integers(1, 2),
)
def test_patchify_round_trip_and_shape(t, gh, gw, patch, tp, merge):
    H, W = gh * patch * merge, gw * patch * merge
    frames = torch.randint(0, 256, (t, H, W, 3), dtype=torch.uint8)
    patches, grid = patchify(frames, patch, temporal_patch=tp, merge=merge)
    padded_t = -(-t // tp) * tp
    assert grid == (padded_t // tp, H // patch, W // patch)
    assert patches.shape == (grid[0] * grid[1] * grid[2], 3 * tp * patch * patch) and patches.dtype == torch.uint8
    back = unpatchify(patches, grid, patch, temporal_patch=tp, merge=merge)
    assert torch.equal(back[:t], frames) and all(torch.equal(f, frames[-1]) for f in back[t:])
    assert image_token_count(grid, merge) * merge * merge == patches.shape[0]


def test_patchify_order_groups_merged_patches_and_channels_first():
    image = torch.arange(4 * 4 * 3, dtype=torch.int64).reshape(4, 4, 3)
    patches, grid = patchify(image, 1, merge=2)
    assert grid == (1, 4, 4)
    # the first 4 patches are the top-left 2x2 block, row-major inside it; one patch = its 3 channels
    assert patches[:4].tolist() == [image[0, 0].tolist(), image[0, 1].tolist(), image[1, 0].tolist(), image[1, 1].tolist()]
    p2, _ = patchify(image, 2)
    assert p2[0].tolist() == image[:2, :2].permute(2, 0, 1).reshape(-1).tolist()  # C, then p_h, p_w
    with pytest.raises(ValueError, match="multiple"):
        patchify(torch.zeros(5, 4, 3, dtype=torch.uint8), 2)


@settings(max_examples=100, deadline=None)
@given(
    text=st.lists(st.integers(0, 50), max_size=20),
    counts=st.lists(st.integers(1, 6), max_size=4),
    marked=st.booleans(),
    wrap=st.booleans(),
)
def test_splice_puts_each_run_at_its_placeholder(text, counts, marked, wrap):
    IMG, S, E = 99, 97, 98
    tokens = list(text)
    if marked:
        for i in range(len(counts)):
            tokens.insert(min(len(tokens), 2 * i + 1), IMG)
    ids = {"start_id": S, "end_id": E} if wrap else {}
    out = splice_image_tokens(torch.tensor(tokens, dtype=torch.int64), counts, IMG, **ids).tolist()
    assert out.count(IMG) == sum(counts)
    assert [t for t in out if t not in (IMG, S, E)] == [t for t in tokens if t != IMG]
    if counts and not marked:
        assert out[: counts[0] + 2 * wrap] == [S] * wrap + [IMG] * counts[0] + [E] * wrap
    if marked and counts:
        first = tokens.index(IMG)
        assert out[:first] == tokens[:first] and out[first + wrap] == IMG


def test_splice_refuses_a_placeholder_count_mismatch():
    with pytest.raises(MediaError) as e:
        splice_image_tokens(torch.tensor([1, 99, 2, 99]), [3], 99)
    assert e.value.reason == "placeholders"
    assert splice_image_tokens(torch.tensor([1, 2]), [], 99).tolist() == [1, 2]
