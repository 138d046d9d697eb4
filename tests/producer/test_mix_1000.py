"""A ``Mix`` over 1,000 sources through ``produce``: its state (~100 KB, far over format 1's 32 KiB cap) is
committed out of line with each offset, and a producer stopped mid-run resumes to exactly the TGBs of an
uninterrupted run (issue 42)."""

from __future__ import annotations

import uuid
from typing import Any

import torch
from torchdata.nodes import BaseNode, IterableWrapper

from torch_tgb.datapipes import Mix
from torch_tgb.layout import Layout
from torch_tgb.manifest import Manifest
STATE_PREFIX = "_tgb/state/"
from torch_tgb.producer import produce
from torch_tgb.storage import MemoryStore

SOURCES = 1000
LAYOUT = Layout(dp=2, seq_keys=("input_ids",))


class Rows(BaseNode[dict[str, torch.Tensor]]):
    """Four mixed documents (ints) per global batch; its state is the Mix's."""

    def __init__(self, mix: Mix) -> None:
        super().__init__()
        self.mix = mix

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.mix.reset(None if initial_state is None else initial_state["mix"])

    def next(self) -> dict[str, torch.Tensor]:
        docs = [next(self.mix) for _ in range(4)]
        return {"input_ids": torch.tensor(docs, dtype=torch.int64).reshape(4, 1).repeat(1, 8)}

    def get_state(self) -> dict[str, Any]:
        return {"mix": self.mix.state_dict()}


def pipeline() -> Rows:
    sources = {f"s{i:04d}": IterableWrapper(range(i * 1000, i * 1000 + 50)) for i in range(SOURCES)}
    weights = {name: 1.0 + (i % 7) for i, name in enumerate(sorted(sources))}
    return Rows(Mix(sources, weights, seed=11))


def rows(store: MemoryStore) -> list[list[int]]:
    """Every committed batch's first column (the document of each row), in step order."""
    from torch_tgb.format import read_footer, read_slice

    m = Manifest(store)
    out = []
    for e in m.entries(0, m.head().num_steps):
        footer = read_footer(store, e.key, size=e.size, footer_offset=e.footer_offset, footer_length=e.footer_length)
        out.append([int(x) for d in range(2) for x in read_slice(store, e.key, footer, footer.slice(d, 0))
                    ["input_ids"][:, 0]])
    return out


def test_a_mix_of_1000_sources_commits_and_resumes_exactly() -> None:
    whole = MemoryStore(f"mix-{uuid.uuid4().hex}")
    produce(whole, pipeline(), producer_id="p", layout=LAYOUT, commit_policy="fixed:2", max_steps=9)

    split = MemoryStore(f"mix-{uuid.uuid4().hex}")
    produce(split, pipeline(), producer_id="p", layout=LAYOUT, commit_policy="fixed:2", max_steps=4)
    state = Manifest(split).head().producers["p"]
    assert state.state_ref  # out of line: a state of this size never fitted inline
    assert [k for k in split.list(STATE_PREFIX)]
    report = produce(split, pipeline(), producer_id="p", layout=LAYOUT, commit_policy="fixed:2", max_steps=9)
    assert report.resumed and report.start_offset == 4
    assert rows(split) == rows(whole)
    assert len({d for r in rows(whole) for d in r}) == 36  # 9 steps x 4 documents, none drawn twice
