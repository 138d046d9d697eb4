"""Small corpora written in every source format from the same documents (helpers of the tests)."""

from __future__ import annotations

import tarfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

NUM_DOCS = 41


def make_docs(n: int = NUM_DOCS, seed: int = 0) -> list[np.ndarray]:
    """Documents of 0..24 tokens, some empty; values fit uint16."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 60_000, size=int(rng.integers(0, 25)), dtype=np.uint16) for _ in range(n)]


def byte_tokenizer(texts: list[str]) -> list[list[int]]:
    """A tiny local tokenizer: UTF-8 bytes; refuses texts containing 'BAD' (a corrupt record)."""
    if any("BAD" in t for t in texts):
        raise ValueError("cannot tokenize BAD")
    return [list(t.encode()) for t in texts]


def doc_text(doc: np.ndarray) -> str:
    return " ".join(str(int(x)) for x in doc)


def counts(docs: Iterable[Any]) -> Counter[tuple[int, ...]]:
    """Multiset of documents as token tuples (from arrays or yielded dicts)."""
    return Counter(tuple(int(x) for x in (d["tokens"] if isinstance(d, dict) else d)) for d in docs)


def write_tars(root: Path, docs: list[np.ndarray], per_tar: int, *, text: bool = False) -> list[str]:
    import webdataset as wds

    paths = []
    for start in range(0, len(docs), per_tar):
        path = root / f"shard-{start // per_tar:04d}.tar"
        with wds.TarWriter(str(path)) as sink:
            for k in range(start, min(start + per_tar, len(docs))):
                sample: dict[str, Any] = {"__key__": f"doc{k:05d}"}
                if text:
                    sample["txt"] = doc_text(docs[k])
                else:
                    sample["tokens.npy"] = docs[k]
                sink.write(sample)
        paths.append(str(path))
    return paths


def arrow_table(docs: list[np.ndarray], *, text: bool = False) -> Any:
    import pyarrow as pa

    ids = pa.array([f"doc{k:05d}" for k in range(len(docs))])
    if text:
        return pa.table({"text": pa.array([doc_text(d) for d in docs]), "id": ids})
    return pa.table({"input_ids": pa.array([d.astype(np.int32).tolist() for d in docs], pa.list_(pa.int32())), "id": ids})


def write_parquet(root: Path, docs: list[np.ndarray], *, files: int = 3, row_group: int = 4, text: bool = False) -> list[str]:
    import pyarrow.parquet as pq

    table = arrow_table(docs, text=text)
    bounds = np.linspace(0, len(docs), files + 1).astype(int)
    paths = []
    for f in range(files):
        path = root / f"part-{f:03d}.parquet"
        pq.write_table(table.slice(bounds[f], bounds[f + 1] - bounds[f]), str(path), row_group_size=row_group)
        paths.append(str(path))
    return paths


def write_lance(root: Path, docs: list[np.ndarray], *, rows_per_fragment: int = 6, text: bool = False) -> str:
    import lance

    uri = str(root / "corpus.lance")
    lance.write_dataset(arrow_table(docs, text=text), uri, max_rows_per_file=rows_per_fragment)
    return uri


def write_token_file(root: Path, docs: list[np.ndarray]) -> tuple[str, str]:
    tokens = np.concatenate(docs).astype(np.uint16)
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
    np.save(root / "tokens.npy", tokens)
    np.save(root / "tokens.idx.npy", offsets)
    (root / "tokens.idx.npy").rename(root / "tokens.idx")
    return str(root / "tokens.npy"), str(root / "tokens.idx")


KINDS = ["token_file", "token_file_grouped", "webdataset", "parquet", "lance"]


def bad_tar(path: Path) -> None:
    """A tar whose second sample's .npy member is garbage."""
    import io

    with tarfile.open(path, "w") as tar:
        for key, data in (("a", _npy(np.arange(3, dtype=np.int32))), ("b", b"not an npy"), ("c", _npy(np.arange(2, dtype=np.int32)))):
            info = tarfile.TarInfo(f"{key}.tokens.npy")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _npy(array: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()
