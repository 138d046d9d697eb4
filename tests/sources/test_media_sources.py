"""Media sources: WebDataset image samples (raw bytes, caption tokens), Videos (frames at fps or count)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from torch_tgb import sources
from torch_tgb.errors import SourceError
from torch_tgb.testing.media import encode_video, image_samples, word_tokenizer, write_media_tars
from torch_tgb.testing.resume import run_resume_test

pytest.importorskip("PIL")


@pytest.fixture(scope="module")
def image_tars(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[dict]]:
    samples = image_samples(15, seed=4, max_side=96, max_images=3)
    return write_media_tars(tmp_path_factory.mktemp("wds"), samples, per_tar=4), samples


def test_image_samples_carry_raw_bytes_and_caption_tokens(image_tars):
    urls, samples = image_tars
    got = {d["__key__"]: d for d in sources.WebDataset(urls, text_field="txt", tokenizer=word_tokenizer)}
    assert set(got) == {s["__key__"] for s in samples}
    for s in samples:
        doc = got[s["__key__"]]
        media = sorted(k for k in s if k.rsplit(".", 1)[-1] in ("jpg", "png", "webp"))
        assert sorted(k for k in doc if k not in ("tokens", "__key__", "__url__", "__provenance__")) == media
        assert all(doc[k] == s[k] for k in media)  # undecoded
        assert doc["tokens"].tolist() == word_tokenizer([s["txt"]])[0]
    plain = next(iter(sources.WebDataset(urls)))  # no tokenizer, no tokens.npy: empty caption tokens
    assert plain["tokens"].numel() == 0 and plain["__url__"] in urls


@pytest.mark.parametrize("shards", [1, 2, 3])
def test_image_samples_shard_and_resume(image_tars, shards):
    urls, samples = image_tars
    keys: Counter[str] = Counter()
    for i in range(shards):
        keys.update(d["__key__"] for d in sources.WebDataset(urls, shard=(i, shards), seed=2, shuffle_buffer=3))
    assert keys == Counter(s["__key__"] for s in samples)
    run_resume_test(lambda: sources.WebDataset(urls, shard=(0, 2), seed=2, shuffle_buffer=3), stop_after=3)


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    pytest.importorskip("av")
    root = tmp_path_factory.mktemp("videos")
    paths = []
    for k in range(5):
        frames = np.stack([np.full((32, 48, 3), (20 * k + 8 * i) % 256, np.uint8) for i in range(10 + 5 * k)])
        path = root / f"clip{k}.{'webm' if k == 3 else 'mp4'}"
        path.write_bytes(encode_video(frames, fps=10, **({"container": "webm", "codec": "libvpx"} if k == 3 else {})))
        (root / f"clip{k}.txt").write_text(f"clip number {k}")
        paths.append(str(path))
    (root / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(200))
    paths.append(str(root / "broken.mp4"))
    return paths


def test_videos_sample_frames_and_skip_a_broken_file(videos):
    node = sources.Videos(videos, fps=2, tokenizer=word_tokenizer, on_error="skip")
    out = {d["__key__"]: d for d in node}
    assert len(out) == 5 and node.stats().skipped == 1
    for k in range(5):
        clip = out[videos[k]]["videos"][0]
        assert clip.shape == (int(np.ceil((10 + 5 * k) / 5)), 32, 48, 3)
        assert out[videos[k]]["tokens"].tolist() == word_tokenizer([f"clip number {k}"])[0]
    with pytest.raises(SourceError, match="broken.mp4"):
        list(sources.Videos(videos, num_frames=2))
    counted = sources.Videos(videos[:5], num_frames=3)
    assert [d["videos"][0].shape[0] for d in counted] == [3] * 5


def test_videos_shard_and_resume(videos):
    keys: Counter[str] = Counter()
    for i in range(2):
        keys.update(d["__key__"] for d in sources.Videos(videos[:5], num_frames=2, shard=(i, 2), seed=1))
    assert keys == Counter(videos[:5])
    run_resume_test(lambda: sources.Videos(videos[:5], num_frames=2, seed=1), stop_after=2)
    with pytest.raises(ValueError):
        sources.Videos(videos, fps=2, num_frames=3)


@pytest.fixture(scope="module")
def lerobot(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("av")
    pytest.importorskip("pyarrow")
    from torch_tgb.testing.media import write_lerobot

    return write_lerobot(tmp_path_factory.mktemp("lerobot"), [7, 5, 9], cameras=("cam.top", "cam.wrist"))


def test_lerobot_steps_carry_state_actions_and_a_frame_per_camera(lerobot):
    node = sources.LeRobot(lerobot, action_horizon=3, stride=2, tokenizer=word_tokenizer)
    steps = list(node)
    assert len(steps) == 4 + 3 + 5 and node.stats().records == 12
    for s in steps:
        episode, i = (int(x) for x in s["__key__"].removeprefix("episode_").split("/"))
        assert s["state"].tolist() == [[episode, i, 0.0]]
        assert s["action"].shape == (1, 3, 2) and s["action"][0, 0].tolist() == [episode, i]
        last = {0: 6, 1: 4, 2: 8}[episode]
        assert s["action"][0, :, 1].tolist() == [min(k, last) for k in range(i, i + 3)]  # the last repeated
        assert len(s["images"]) == 2 and s["images"][0].shape == (32, 48, 3)
        for c, image in enumerate(s["images"]):  # the frame on screen at the step (codec error aside)
            assert abs(int(image[16, 24, 0]) - (37 * episode + 11 * i + 60 * c) % 200) <= 6
        assert s["tokens"].tolist() == word_tokenizer([f"pick the cube number {episode}"])[0]


def test_lerobot_shards_and_resumes_inside_an_episode(lerobot):
    keys: Counter[str] = Counter()
    for i in range(2):
        keys.update(d["__key__"] for d in sources.LeRobot(lerobot, cameras=["cam.top"], shard=(i, 2), seed=3))
    assert len(keys) == 21 and set(keys.values()) == {1}
    run_resume_test(lambda: sources.LeRobot(lerobot, cameras=["cam.top"], seed=3, shuffle_buffer=4), stop_after=9)
    with pytest.raises(SourceError, match="no video feature"):
        sources.LeRobot(lerobot, cameras=["nope"])


def test_a_member_over_max_member_bytes_is_never_read(tmp_path):
    samples = [{"__key__": "small", "txt": "a b", "jpg": b"x" * 10}, {"__key__": "big", "txt": "c", "jpg": b"y" * 5000}]
    urls = write_media_tars(tmp_path, samples, per_tar=2)
    node = sources.WebDataset(urls, text_field="txt", tokenizer=word_tokenizer, max_member_bytes=1000,
                              on_error="skip")
    assert [d["__key__"] for d in node] == ["small"] and node.stats().skipped == 1
    with pytest.raises(SourceError, match="'jpg' has 5000 bytes > max_member_bytes=1000"):
        list(sources.WebDataset(urls, text_field="txt", tokenizer=word_tokenizer, max_member_bytes=1000))


def test_json_captions(tmp_path):
    import json

    samples = [{"__key__": "a", "jpg": b"x", "json": json.dumps({"caption": "one two", "w": 3})},
               {"__key__": "b", "jpg": b"x", "json": json.dumps({"text": "three"})},
               {"__key__": "c", "jpg": b"x", "json": json.dumps([1, 2])}]
    urls = write_media_tars(tmp_path, samples, per_tar=3)
    node = sources.WebDataset(urls, text_field="json", tokenizer=word_tokenizer, on_error="skip")
    got = {d["__key__"]: d["tokens"].tolist() for d in node}
    assert got == {"a": word_tokenizer(["one two"])[0], "b": word_tokenizer(["three"])[0]}
    assert node.stats().skipped == 1
