"""Coverage-guided fuzzing with atheris (optional: ``pip install atheris``).

    python tests/fuzz/atheris_targets.py footer -atheris_runs=200000 [CORPUS_DIR]
    python tests/fuzz/atheris_targets.py version|dataset|llmbatch ...

Without a corpus directory a fresh one is seeded with valid objects of the
target (a TGB object, a manifest version, a dataset.json, an LLMBATCH file),
so libFuzzer mutates real structures instead of growing bytes from nothing.

Each target feeds the bytes to one parser of untrusted input; any exception
other than a ``TGBError`` is a crash that libFuzzer reports with the input.
``test_atheris.py`` runs each target briefly when atheris is installed.
"""

from __future__ import annotations

import sys

import atheris
import numpy  # noqa: F401  - imported before instrumentation: only torch_tgb is instrumented
import torch  # noqa: F401

with atheris.instrument_imports(include=["torch_tgb"]):
    from torch_tgb.errors import TGBError
    from torch_tgb.format import read_footer
    from torch_tgb.format._reader import decode_slice
    from torch_tgb.format.llmbatch import LLMBatchHeader
    from torch_tgb.layout import Layout
    from torch_tgb.manifest.records import DatasetInfo, Version
    from torch_tgb.storage import MemoryStore

STORE = MemoryStore("atheris")


def footer(data: bytes) -> None:
    STORE.put("data/x.tgb", data)
    f = read_footer(STORE, "data/x.tgb")
    for info in f.slices():
        decode_slice(data, info, base_offset=0, verify=True, key="data/x.tgb")


def footer_sealed(data: bytes) -> None:
    """Like ``footer``, but the footer CRC is recomputed first: mutations reach the tables."""
    import struct

    from torch_tgb.format._footer import TRAILER_SIZE, crc32c_of

    if len(data) >= TRAILER_SIZE:
        length, _crc, version, magic = struct.unpack("<QII8s", data[-TRAILER_SIZE:])
        if length <= len(data) - TRAILER_SIZE:
            body = data[len(data) - TRAILER_SIZE - length : len(data) - TRAILER_SIZE]
            data = data[: len(data) - TRAILER_SIZE] + struct.pack("<QII8s", length, crc32c_of(body), version, magic)
    footer(data)


def version(data: bytes) -> None:
    Version.decode(data, number=3)


def dataset(data: bytes) -> None:
    Layout.from_json(DatasetInfo.decode(data, what="dataset.json").layout)


def llmbatch(data: bytes) -> None:
    LLMBatchHeader.parse(data, path="fuzz", file_size=len(data))


TARGETS = {"footer": footer, "footer_sealed": footer_sealed, "version": version, "dataset": dataset, "llmbatch": llmbatch}


def seeds(name: str) -> list[bytes]:
    """Valid inputs of target ``name`` (the starting corpus)."""
    import json


    if name in ("footer", "footer_sealed"):
        from torch_tgb.format import encode_tgb

        out = []
        for dp, cp in ((2, 1), (1, 2)):
            layout = Layout(dp=dp, cp=cp, seq_keys=("ids",))
            batch = {"ids": torch.arange(32, dtype=torch.int32).reshape(4, 8), "w": torch.ones(4, 3)}
            buffers, _ = encode_tgb(layout.cut(batch), layout=layout.to_json(), schema={}, metadata={"m": 1})
            out.append(b"".join(bytes(b) for b in buffers))
        return out
    if name == "version":
        from torch_tgb.manifest.records import ProducerState, TGBEntry

        entry = TGBEntry("data/p0/a.tgb", 9000, 8192, 200, "p0", 4, 2, 16)
        return [Version(3, "0123456789abcdef", 7, (entry,), {"p0": ProducerState(2, 5, 1.5)}).encode()]
    if name == "dataset":
        layout = Layout(dp=2, seq_keys=("ids",)).to_json()
        return [DatasetInfo(layout, {"ids": {"dtype": "int32", "shape": [8]}}, {"vocab_size": 7}, "ab" * 32, 1.0).encode(),
                json.dumps({"format": "tgb-manifest/1"}).encode()]
    header = LLMBatchHeader(1, 2, 8, 1, 0, 7, 2)
    return [header.pack() + bytes(4096)]


def main() -> None:
    import os
    import tempfile

    target = TARGETS[sys.argv[1]]
    args = sys.argv[2:]
    if not any(not a.startswith("-") for a in args):  # no corpus given: seed one
        corpus = tempfile.mkdtemp(prefix=f"tgb-atheris-{sys.argv[1]}-")
        for i, data in enumerate(seeds(sys.argv[1])):
            with open(os.path.join(corpus, f"seed{i}"), "wb") as f:
                f.write(data)
        args.append(corpus)

    def one(data: bytes) -> None:
        try:
            target(data)
        except TGBError:
            pass

    atheris.Setup([sys.argv[0], *args], one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
