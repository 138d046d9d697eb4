"""Coverage-guided fuzzing with atheris (optional: ``pip install atheris``).

    python tests/fuzz/atheris_targets.py footer -atheris_runs=200000
    python tests/fuzz/atheris_targets.py version|dataset|llmbatch ...

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


def version(data: bytes) -> None:
    Version.decode(data, number=3)


def dataset(data: bytes) -> None:
    Layout.from_json(DatasetInfo.decode(data, what="dataset.json").layout)


def llmbatch(data: bytes) -> None:
    LLMBatchHeader.parse(data, path="fuzz", file_size=len(data))


TARGETS = {"footer": footer, "version": version, "dataset": dataset, "llmbatch": llmbatch}


def main() -> None:
    target = TARGETS[sys.argv[1]]

    def one(data: bytes) -> None:
        try:
            target(data)
        except TGBError:
            pass

    atheris.Setup([sys.argv[0], *sys.argv[2:]], one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
