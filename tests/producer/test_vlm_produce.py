"""Images end to end: WebDataset -> media stages -> tgb.produce -> tgb.DataLoader on 2 ranks: every image once."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

import torch_tgb as tgb
from tests.producer._vlm_pipeline import delivered_images, expected_images, layout, pipeline, source
from torch_tgb.testing.media import image_samples, write_media_tars

pytest.importorskip("PIL")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[dict]]:
    samples = image_samples(30, seed=5, max_side=160, max_images=3)
    return write_media_tars(tmp_path_factory.mktemp("wds"), samples, per_tar=5), samples


@pytest.mark.parametrize("dp,cp", [(2, 1), (1, 2)])
def test_every_image_patch_reaches_the_ranks_exactly_once(tmp_path, corpus, dp, cp):
    urls, samples = corpus
    ns = str(tmp_path / "ns")
    report = tgb.produce(ns, pipeline(source(urls), dp=dp, cp=cp), producer_id="p0", layout=layout(dp, cp),
                         commit_policy="fixed:2", seal=True, progress=False)
    assert report.exhausted and report.sealed
    seen: Counter[str] = Counter()
    for dp_rank in range(dp):
        per_cp = []
        for cp_rank in range(cp):
            mesh = tgb.Mesh(dp_rank=dp_rank, dp_size=dp, cp_rank=cp_rank, cp_size=cp)
            per_cp.append(list(tgb.DataLoader(ns, mesh=mesh, num_workers=0)))
        for steps in zip(*per_cp):  # a ragged key is the same on every cp rank of a dp rank
            assert all(torch.equal(s["pixel_values"], steps[0]["pixel_values"]) for s in steps)
            assert all(torch.equal(s["image_grid_thw_offsets"], steps[0]["image_grid_thw_offsets"]) for s in steps)
            batch = dict(steps[0])
            if cp > 1:  # the seq keys are cut over cp: join them back for the token check
                batch["input_ids"] = torch.cat([s["input_ids"] for s in steps], dim=1)
            assert batch["pixel_values"].dtype == torch.uint8
            assert batch["pixel_values_offsets"].dtype == torch.int64 and int(batch["pixel_values_offsets"][0]) == 0
            seen += delivered_images(batch)
    assert seen == expected_images(samples)


def test_lerobot_steps_become_vla_rows(tmp_path):
    pytest.importorskip("av")
    pytest.importorskip("pyarrow")
    from torch_tgb import datapipes, sources
    from torch_tgb.testing.media import IMAGE_TOKEN, write_lerobot

    root = write_lerobot(tmp_path / "robot", [6, 4], cameras=("cam.top", "cam.wrist"), size=(28, 56))
    steps = sources.LeRobot(root, action_horizon=2, tokenizer=lambda texts: [[1, 2, 3] for _ in texts])
    frames = datapipes.Patchify(datapipes.ResizeImages(steps, 28, patch=14), patch=14)
    spliced = datapipes.SpliceImageTokens(frames, image_token_id=IMAGE_TOKEN)
    keys = ("pixel_values", "image_grid_thw", "state", "action")
    rows = datapipes.PackSamples(spliced, 32, window=10, ragged_keys=keys, label_ignore_ids=spliced.special_ids)
    lay = tgb.Layout(dp=2, seq_keys=("input_ids", "labels", "document_ids", "position_ids"))
    ns = str(tmp_path / "ns")
    tgb.produce(ns, datapipes.GlobalBatches(rows, global_batch_size=2, layout=lay), producer_id="p0", layout=lay,
                seal=True, progress=False)
    got = []
    for rank in range(2):
        for b in tgb.TGBDataset(ns, mesh=tgb.Mesh(dp_rank=rank, dp_size=2)):
            assert b["state"].shape[0] == b["action"].shape[0] == int(b["state_offsets"][-1])
            assert b["action"].shape[1:] == (2, 2) and b["image_grid_thw"].shape[0] == 2 * b["state"].shape[0]
            got += [tuple(s) for s in b["state"][:, :2].tolist()]
    assert sorted(got) == sorted((e, i) for e, n in ((0, 6), (1, 4)) for i in range(n))  # every step once
