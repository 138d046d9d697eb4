"""The working directory the documented snippets run in: the files they name, at tiny sizes.

A snippet says ``sources.TokenFile("corpus.npy", offsets="corpus.idx")`` or
``--source webdataset:'shards/train-{0000..0099}.tar'``: those files exist
here (a few thousand tokens in all), so the snippet runs as written. Absolute
paths of the docs (``/data/...``, ``/tmp/...``, ``/ckpt/...``) are moved under
this directory by :func:`localize`; nothing outside it is written.
"""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import numpy as np

#: what the prelude of every doc's Python snippets defines (names the docs use without defining them)
PRELUDE = '''
import numpy as np
import torch
import torch_tgb as tgb
from torch_tgb import sources

rank, world = 0, 2                                   # this process's place in a job of 2
num_batches = 4
ns = "{ws}/ns"                                        # a fresh local namespace
layout = tgb.Layout(dp=8, seq_keys=("input_ids", "labels"))
doc_offsets = np.load("corpus.idx")


def make_global_batch(offset):
    tokens = torch.randint(0, 1000, (8, 17), generator=torch.Generator().manual_seed(offset))
    return {{"input_ids": tokens[:, :-1], "labels": tokens[:, 1:]}}


web_docs = sources.TokenFile("corpus.npy", offsets="corpus.idx", shard=(0, 2))
code_docs = sources.TokenFile("corpus.npy", offsets="corpus.idx", shard=(1, 2))
urls = sorted(str(p) for p in __import__("pathlib").Path("text").glob("*.tar"))


def encode(texts):                                   # a tokenizer: list of texts -> list of id lists
    return [list(t.encode()) for t in texts]


model = torch.nn.Linear(2, 2)


def train_step(batch):
    return float(batch["input_ids"].float().mean())


# a producer and a reader of a small sealed namespace, for the observability pages
producer = tgb.Producer("{ws}/observed", producer_id="p0", layout=tgb.Layout(dp=1), commit_policy="naive")
for _k in range(3):
    producer.append(make_global_batch(_k), offset=_k)
producer.close(seal=True)
dataset = tgb.TGBDataset("{ws}/observed", mesh=tgb.Mesh(0, 1))


def train():
    for batch in dataset:
        train_step(batch)
'''

_ABSOLUTE = re.compile(r"""(?P<q>["'])/(?P<dir>data|tmp|ckpt)/""")
_SHELL_ABSOLUTE = re.compile(r"(?<![\w./])/(?P<dir>data|tmp|ckpt)/")


def localize(code: str, ws: Path, *, shell: bool = False) -> str:
    """``code`` with the docs' absolute paths (``/data/``, ``/tmp/``, ``/ckpt/``) moved under ``ws``."""
    if shell:
        return _SHELL_ABSOLUTE.sub(lambda m: f"{ws}/{m['dir']}/", code)
    return _ABSOLUTE.sub(lambda m: f"{m['q']}{ws}/{m['dir']}/", code)


def _documents(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 30_000, size=int(rng.integers(20, 200)), dtype=np.uint16) for _ in range(n)]


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def _tar(path: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _token_file(root: Path, docs: list[np.ndarray]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    np.save(root / "corpus.npy", np.concatenate(docs))
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
    for name in ("corpus.idx", "offsets.npy"):
        with open(root / name, "wb") as f:
            np.save(f, offsets)


def _parquet(root: Path, docs: list[np.ndarray], column: str = "input_ids") -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({column: pa.array([d.astype(np.int32).tolist() for d in docs], pa.list_(pa.int32()))}),
                   str(root / "part-000.parquet"), row_group_size=8)


def prepare(ws: Path) -> None:
    """Write every input file the docs name into ``ws``."""
    import pyarrow as pa

    docs = _documents(120, seed=0)
    _token_file(ws, docs)
    _token_file(ws / "data", docs)
    (ws / "shards").mkdir()
    for i in range(100):  # shards/train-{0000..0099}.tar: one document each
        _tar(ws / "shards" / f"train-{i:04d}.tar", {f"doc{i:05d}.tokens.npy": _npy(docs[i].astype(np.int32))})
    (ws / "text").mkdir()
    for i in range(3):
        _tar(ws / "text" / f"text-{i}.tar", {f"doc{k:05d}.txt": f"document {k}".encode() for k in range(i * 4, i * 4 + 4)})
    _parquet(ws / "hf_dataset" / "data", docs[:40])
    _parquet(ws / "web", docs[:60])
    _parquet(ws / "code", docs[60:])
    (ws / "saved" / "train").mkdir(parents=True)
    table = pa.table({"input_ids": pa.array([d.astype(np.int32).tolist() for d in docs[:30]], pa.list_(pa.int32()))})
    with pa.OSFile(str(ws / "saved" / "train" / "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as writer:  # what datasets.save_to_disk writes
            writer.write_table(table)
    import lance

    lance.write_dataset(pa.table({"tokens": pa.array([d.astype(np.int32).tolist() for d in docs[:30]],
                                                     pa.list_(pa.int32()))}), str(ws / "corpus.lance"))
    from torch_tgb.format.llmbatch import write_llmbatch

    write_llmbatch(ws / "corpus.llmbatch", (np.arange(16 * 16) % 50).astype(np.int32).reshape(16, 16), batch_size=8)
    _clips(ws / "clips")
    for name in ("tmp", "ckpt"):
        (ws / name).mkdir()
    (ws / "denied.txt").write_text("# records to excise (docs/provenance.md)\ncorpus.npy:0:3\n")


def _clips(root: Path) -> None:
    """clips/a.mp4 and clips/b.webm: a few frames each (encoded here with PyAV, nothing downloaded)."""
    from torch_tgb.testing.media import encode_video

    root.mkdir()
    frames = np.random.default_rng(0).integers(0, 255, size=(6, 32, 48, 3), dtype=np.uint8)
    (root / "a.mp4").write_bytes(encode_video(frames, fps=4))
    (root / "b.webm").write_bytes(encode_video(frames, fps=4, container="webm", codec="libvpx"))
