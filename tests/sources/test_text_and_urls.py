"""Text columns/members with a local tokenizer, fsspec URLs, and imports that stay light."""

from __future__ import annotations

import gzip
import subprocess
import sys

import fsspec
import pytest

from tests.sources._corpus import (
    byte_tokenizer,
    counts,
    doc_text,
    write_lance,
    write_parquet,
    write_tars,
)
from torch_tgb import sources
from torch_tgb.testing.resume import run_resume_test


def _expected(docs, tokenize):
    return counts(tokenize([doc_text(d) for d in docs]))


def _text_sources(tmp_path, docs, tokenizer):
    (tmp_path / "tars").mkdir()
    (tmp_path / "pq").mkdir()
    tars = write_tars(tmp_path / "tars", docs, per_tar=6, text=True)
    parquet = write_parquet(tmp_path / "pq", docs, text=True)
    uri = write_lance(tmp_path, docs, text=True)
    return {
        "webdataset": lambda **kw: sources.WebDataset(tars, text_field="txt", tokenizer=tokenizer, **kw),
        "parquet": lambda **kw: sources.Parquet(parquet, column="text", tokenizer=tokenizer, **kw),
        "lance": lambda **kw: sources.Lance(uri, column="text", tokenizer=tokenizer, **kw),
    }


def test_text_with_byte_tokenizer_round_trips_and_resumes(tmp_path, docs):
    for kind, make in _text_sources(tmp_path, docs, byte_tokenizer).items():
        out = [d for i in range(3) for d in make(shard=(i, 3), seed=1, shuffle_buffer=4)]
        assert counts(out) == _expected(docs, byte_tokenizer), kind
        run_resume_test(lambda: make(shard=(0, 2), seed=1, shuffle_buffer=4), stop_after=5)


def test_text_with_a_tiny_bpe_trained_here(tmp_path, docs):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    bpe = tokenizers.Tokenizer(models.BPE(unk_token="[UNK]"))
    bpe.pre_tokenizer = pre_tokenizers.Whitespace()
    bpe.train_from_iterator([doc_text(d) for d in docs], trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"]))

    def encode(texts: list[str]) -> list[list[int]]:
        return [e.ids for e in bpe.encode_batch(texts)]

    for kind, make in _text_sources(tmp_path, docs, encode).items():
        assert counts(make()) == _expected(docs, encode), kind


def test_extra_fields_travel_with_the_document(tmp_path, docs):
    made = _text_sources(tmp_path, docs, byte_tokenizer)
    keys = [d["id"] for d in sources.Parquet(write_parquet(tmp_path, docs, files=1), extra=["id"])]
    assert sorted(keys) == [f"doc{k:05d}" for k in range(len(docs))]
    wds_keys = [d["__key__"] for d in made["webdataset"](extra=["__key__"])]
    assert sorted(wds_keys) == sorted(keys)
    assert sorted(d["id"] for d in made["lance"](extra=["id"])) == sorted(keys)


def test_fsspec_urls(tmp_path, docs):
    fs = fsspec.filesystem("memory")
    tars = write_tars(tmp_path, docs, per_tar=10)
    urls = []
    for i, path in enumerate(tars):
        data = open(path, "rb").read()
        if i % 2:  # compressed shards are read too
            data, name = gzip.compress(data), f"memory://wds/shard-{i}.tar.gz"
        else:
            name = f"memory://wds/shard-{i}.tar"
        fs.pipe_file(name, data)
        urls.append(name)
    assert counts(sources.WebDataset(urls)) == counts(docs)
    (parquet,) = write_parquet(tmp_path, docs, files=1)
    fs.pipe_file("memory://pq/a.parquet", open(parquet, "rb").read())
    node = sources.Parquet("memory://pq/a.parquet", seed=2)
    assert counts(node) == counts(docs)
    run_resume_test(lambda: sources.Parquet("memory://pq/a.parquet", seed=2), stop_after=9)


def test_brace_expansion(tmp_path, docs):
    write_tars(tmp_path, docs, per_tar=10)
    node = sources.WebDataset(str(tmp_path / "shard-{0000..0004}.tar"))
    assert node.num_units == 5 and counts(node) == counts(docs)


IMPORTS = """
import importlib, sys
import torch_tgb, torch_tgb.sources
heavy = [m for m in ("webdataset", "lance", "pyarrow") if m in sys.modules]
assert not heavy, heavy
assert sorted(torch_tgb.sources.__all__) == torch_tgb.sources.__all__
for module, source, extra in (("lance", "lance", "lance"), ("pyarrow", "parquet", "parquet"),
                              ("webdataset", "webdataset", "webdataset")):
    sys.modules[module] = None  # as if the extra were not installed
    try:
        importlib.import_module("torch_tgb.sources." + source)
    except ImportError as e:
        assert f"pip install 'torch-tgb[{extra}]'" in str(e), str(e)
    else:
        raise AssertionError(f"imported without {module}")
"""


def test_imports_stay_light_and_missing_extras_say_what_to_install():
    subprocess.run([sys.executable, "-c", IMPORTS], check=True)
