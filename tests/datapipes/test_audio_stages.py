"""The audio stages: sources.Audio / WebDataset / Parquet -> DecodeAudio -> SpliceAudioTokens -> rows -> TGBs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import torch_tgb as tgb
from torch_tgb import datapipes, sources
from torch_tgb.errors import MediaError, SourceError
from torch_tgb.testing.audio import bad_audio, encode_audio, reference_decode, sweep, write_audio_files
from torch_tgb.testing.media import word_tokenizer
from torch_tgb.testing.resume import run_resume_test
from torch_tgb.transforms import LogMel, VLMCost, audio_token_count

pytest.importorskip("av")
AUDIO_TOKEN = 1001


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_audio_files(tmp_path_factory.mktemp("clips"), 9, seed=5, max_seconds=1.2)


@pytest.fixture(scope="module")
def with_bad(tmp_path_factory: pytest.TempPathFactory, clips: list[str]) -> list[str]:
    root = tmp_path_factory.mktemp("bad")
    paths = list(clips)
    for name, (ext, data) in bad_audio().items():
        path = root / f"{name}.{ext}"
        path.write_bytes(data)
        paths.append(str(path))
    return paths


def test_decode_audio_resamples_every_format_like_pyav(clips):
    decoded = sorted(datapipes.DecodeAudio(sources.Audio(clips, tokenizer=word_tokenizer), sample_rate=16000),
                     key=lambda d: d["__key__"])  # the walker permutes the files (seed 0)
    assert [d["__key__"] for d in decoded] == clips
    for path, doc in zip(clips, decoded):
        ref = reference_decode(Path(path).read_bytes(), sample_rate=16000)
        assert doc["audio_values"].dtype == torch.float32 and doc["audio_lengths"].tolist() == [ref.shape[0]]
        assert np.abs(doc["audio_values"].numpy() - ref).max() <= 1e-4
        assert doc["tokens"].tolist() == word_tokenizer([Path(path).with_suffix(".txt").read_text()])[0]
        assert doc["__sample_rate__"] == 16000 and not any(k in doc for k in ("wav", "flac", "mp3"))


def test_features_are_computed_on_the_producer(clips):
    mel = LogMel(n_mels=40)
    docs = list(datapipes.DecodeAudio(sources.Audio(clips[:3]), features=mel, waveform=False))
    for doc in docs:
        path = doc["__key__"]
        wave = torch.from_numpy(reference_decode(Path(path).read_bytes()))
        assert "audio_values" not in doc and doc["audio_lengths"].tolist() == [wave.shape[0]]
        assert doc["audio_feature_lengths"].tolist() == [mel.frames(wave.shape[0])]
        assert torch.allclose(doc["audio_features"], mel(wave), atol=1e-5)
    stage = datapipes.DecodeAudio(sources.Audio(clips[:1]), features=mel)
    assert stage.ragged_keys == ("audio_values", "audio_lengths", "audio_features", "audio_feature_lengths")
    with pytest.raises(ValueError):
        datapipes.DecodeAudio(sources.Audio(clips[:1]), waveform=False)
    with pytest.raises(ValueError):
        datapipes.DecodeAudio(sources.Audio(clips[:1]), sample_rate=8000, features=LogMel())


def test_bad_files_are_skipped_and_counted_by_reason(with_bad, clips):
    stage = datapipes.DecodeAudio(sources.Audio(with_bad), max_seconds=2.5)
    assert sorted(d["__key__"] for d in stage) == clips
    stats = stage.stats()
    assert stats.skipped == 6 and stats.samples == len(clips) and stats.inputs == len(with_bad)
    assert stats.skipped_by_reason == {"corrupt": 1, "truncated": 2, "zero_length": 2, "too_long": 1}
    corrupt = [p for p in with_bad if p.endswith("corrupt.mp3")]
    with pytest.raises(MediaError, match="corrupt.mp3") as e:  # "raise" names the file
        next(datapipes.DecodeAudio(sources.Audio(corrupt), on_error="raise"))
    assert e.value.reason == "corrupt"


def test_a_file_over_max_bytes_is_never_read(clips):
    source = sources.Audio(clips[:2], max_bytes=10, on_error="skip")
    assert list(source) == [] and source.stats().skipped == 2
    with pytest.raises(SourceError, match="not an audio file extension"):
        sources.Audio([clips[0].rsplit(".", 1)[0] + ".txt"])


@pytest.mark.parametrize("stop_after", [0, 3, 7, 11])
def test_resume_mid_stream_reproduces_the_rest(with_bad, stop_after):
    def make():
        docs = sources.Audio(with_bad, tokenizer=word_tokenizer, seed=3, shuffle_buffer=0, shard=(0, 1))
        return datapipes.SpliceAudioTokens(datapipes.DecodeAudio(docs, max_seconds=2.5), audio_token_id=AUDIO_TOKEN)

    full = run_resume_test(make, stop_after=min(stop_after, 9))
    assert len(full) == 9
    node = make()
    for _ in range(5):
        next(node)
    resumed = make()
    resumed.reset(node.state_dict())
    assert resumed.stats() == node.stats()  # the skip counters by reason come back with the position


def test_webdataset_audio_members_decode(tmp_path):
    from torch_tgb.testing.media import write_media_tars

    samples = [{"__key__": f"utt{k}", "flac" if k % 2 else "wav": encode_audio(sweep(0.3 + 0.1 * k, 22050), 22050,
                                                                                "flac" if k % 2 else "wav"),
                "txt": f"hello number {k}"} for k in range(5)]
    urls = write_media_tars(tmp_path, samples, per_tar=2)
    docs = sources.WebDataset(urls, text_field="txt", tokenizer=word_tokenizer)
    got = sorted(datapipes.DecodeAudio(docs), key=lambda d: d["__key__"])  # shards in permuted order
    assert [d["__key__"] for d in got] == [s["__key__"] for s in samples]
    for s, d in zip(samples, got):
        data = s.get("flac", s.get("wav"))
        assert np.abs(d["audio_values"].numpy() - reference_decode(data)).max() <= 1e-4


def test_parquet_byte_and_hf_audio_columns_decode(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    data = [encode_audio(sweep(0.4, 16000, seed=k), 16000, "flac") for k in range(4)]
    table = pa.table({"text": [f"utterance {k}" for k in range(4)], "audio": data,
                      "hf": [{"bytes": d, "path": f"u{k}.flac"} for k, d in enumerate(data)]})
    pq.write_table(table, str(tmp_path / "speech.parquet"))
    for column in ("audio", "hf"):
        docs = sources.Parquet(str(tmp_path / "speech.parquet"), column="text", tokenizer=word_tokenizer,
                               extra=[column])
        got = list(datapipes.DecodeAudio(docs, field=column))
        assert len(got) == 4 and column not in got[0]
        for d, raw in zip(got, data):
            assert np.abs(d["audio_values"].numpy() - reference_decode(raw)).max() <= 1e-4
    with pytest.raises(MediaError, match="no audio member"):
        next(datapipes.DecodeAudio(sources.Parquet(str(tmp_path / "speech.parquet"), column="text",
                                                   tokenizer=word_tokenizer), on_error="raise"))


def test_splice_audio_tokens_at_placeholders_or_in_front(clips):
    decoded = next(datapipes.DecodeAudio(sources.Audio(clips[:1])))
    n = audio_token_count(int(decoded["audio_lengths"][0]), hop_length=160, downsample=4)
    stage = datapipes.SpliceAudioTokens(_One({**decoded, "tokens": torch.tensor([5, AUDIO_TOKEN, 6])}),
                                        audio_token_id=AUDIO_TOKEN, start_id=1, end_id=2)
    out = next(stage)["tokens"].tolist()
    assert out == [5, 1] + [AUDIO_TOKEN] * n + [2, 6] and stage.special_ids == (1, 2, AUDIO_TOKEN)
    front = next(datapipes.SpliceAudioTokens(_One({**decoded, "tokens": torch.tensor([7])}), audio_token_id=9))
    assert front["tokens"].tolist() == [9] * n + [7]
    bad = datapipes.SpliceAudioTokens(_One({**decoded, "tokens": torch.tensor([9, 9])}), audio_token_id=9,
                                      on_error="raise")
    with pytest.raises(MediaError, match="2 audio placeholders for 1 clips"):
        next(bad)


def test_vlm_cost_prices_audio_by_duration():
    cost = VLMCost(audio_samples_per_position=320, audio_weight=2.0, beta=1.0)
    one_second = {"audio_lengths": torch.tensor([16000]), "document_ids": torch.tensor([0, 0, 0, -1])}
    encoder, backbone = cost.parts(one_second)
    assert encoder == 2.0 * (50 * 50 + 50) and backbone == 9.0
    two = cost.parts({**one_second, "audio_lengths": torch.tensor([16000, 16001])})[0]
    assert two == 2.0 * (50 * 50 + 50 + 51 * 51 + 51)  # a clip's positions round up
    with pytest.raises(ValueError):
        VLMCost(audio_samples_per_position=0)


def test_audio_rows_go_through_tgbs_to_each_rank(tmp_path, clips):
    mel = LogMel(n_mels=16)
    decoded = datapipes.DecodeAudio(sources.Audio(clips, tokenizer=word_tokenizer), features=mel)
    spliced = datapipes.SpliceAudioTokens(decoded, audio_token_id=AUDIO_TOKEN)
    rows = datapipes.PackSamples(spliced, 128, window=9, label_ignore_ids=spliced.special_ids,
                                 ragged_keys=decoded.ragged_keys)
    layout = tgb.Layout(dp=2, seq_keys=("input_ids", "labels"))
    batches = datapipes.GlobalBatches(rows, global_batch_size=4, layout=layout, balance="kk", cost=VLMCost())
    tgb.produce(str(tmp_path / "ns"), batches, producer_id="p0", layout=layout, seal=True, progress=False)
    seen = 0
    for rank in range(2):
        for batch in tgb.TGBDataset(str(tmp_path / "ns"), mesh=tgb.Mesh(rank, 2)):
            lengths, offs = batch["audio_lengths"], batch["audio_lengths_offsets"]
            assert batch["audio_values"].shape[0] == int(lengths.sum()) and batch["audio_values"].shape[1] == 1
            assert batch["audio_features"].shape == (int(batch["audio_feature_lengths"].sum()), 16)
            for r in range(batch["input_ids"].shape[0]):  # each row's audio tokens are its clips' tokens
                row_clips = lengths[offs[r] : offs[r + 1]].tolist()
                want = sum(audio_token_count(n) for n in row_clips)
                assert int((batch["input_ids"][r] == AUDIO_TOKEN).sum()) == want
            seen += int(lengths.numel())
    assert seen == len(clips)


class _One(torch.utils.data.IterableDataset):
    """One sample, as a node (a tiny source for the splice tests)."""

    def __new__(cls, sample):  # a torchdata node that yields ``sample`` once
        from torchdata.nodes import IterableWrapper

        return IterableWrapper([sample])
