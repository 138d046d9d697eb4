"""SIGKILL ``produce()`` processes at random points: every document lands exactly once, nothing re-read from the start.

Two producers (shards 0/2 and 1/2 of one WebDataset corpus) run
``tgb.produce`` over source -> BFD packing -> global batches in forked
children (torch is already imported, so a child starts in milliseconds).
Five rounds kill each of them once at a random point of its reading (10
kills), then a last round runs both to the end. A wrapper logs every
document the source yields and every reset (with the source's position), so
the test checks that a restarted pipeline reads on from the committed state,
never from the start, and that the namespace holds each document once.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from collections import Counter
from typing import Any

import torch
from torchdata.nodes import BaseNode

from tests.offline.conftest import read_global_batches
from tests.sources._corpus import make_docs, write_tars
from torch_tgb.layout import Layout
from torch_tgb.offline._stream import document_batches
from torch_tgb.producer import produce
from torch_tgb.sources import WebDataset

FORK = multiprocessing.get_context("fork")
KEYS = ("input_ids", "labels", "document_ids", "position_ids")
LAYOUT = Layout(dp=2, seq_keys=KEYS)
NUM_DOCS = 400
SEQ = 32


class LoggedDocs(BaseNode[dict[str, Any]]):
    """Passes a source through, logging ``reset <documents before>`` and one line per document read."""

    def __init__(self, source: WebDataset, log: str, delay_s: float = 0.0) -> None:
        super().__init__()
        self.source, self.log, self.delay_s = source, log, delay_s

    def _write(self, line: str) -> None:
        with open(self.log, "a") as f:
            f.write(line + "\n")

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.source.reset(initial_state)
        self._write(f"reset {self.source.state_dict()['stats']['records']}")

    def next(self) -> dict[str, Any]:
        time.sleep(self.delay_s)
        doc = next(self.source)
        self._write(",".join(str(t) for t in doc["tokens"].tolist()))
        return doc

    def get_state(self) -> dict[str, Any]:
        return self.source.state_dict()


def shard_source(urls: list[str], index: int) -> WebDataset:
    return WebDataset(urls, shard=(index, 2), seed=7)


def run(ns: str, urls: list[str], index: int, log: str) -> None:
    docs = LoggedDocs(shard_source(urls, index), log, delay_s=0.002)
    pipeline = document_batches(docs, seq_len=SEQ, global_batch_size=4, packing="bfd", packing_window=8)
    produce(ns, pipeline, producer_id=f"p{index}", layout=LAYOUT, commit_policy="fixed:3", progress=False)
    os._exit(0)


def reads(log: str) -> list[str]:
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return f.read().splitlines()


def spans(ns: str) -> Counter[str]:
    """Multiset of the packed documents in the namespace, as logged ("t1,t2,...")."""
    out: Counter[str] = Counter()
    for b in read_global_batches(ns)[0]:
        for ids, doc_ids in zip(b["input_ids"], b["document_ids"]):
            for k in torch.unique(doc_ids[doc_ids >= 0]).tolist():
                out[",".join(str(t) for t in ids[doc_ids == k].tolist())] += 1
    return out


def test_sigkill_two_producers_ten_times(tmp_path) -> None:
    rng = random.Random(16)
    docs = make_docs(NUM_DOCS, seed=16)
    urls = write_tars(tmp_path, docs, per_tar=20)
    ns = str(tmp_path / "ns")
    logs = [str(tmp_path / f"reads{i}.log") for i in range(2)]
    kills = 0
    for _ in range(5):
        procs = []
        for i in range(2):
            p = FORK.Process(target=run, args=(ns, urls, i, logs[i]))
            p.start()
            procs.append((p, len(reads(logs[i])) + rng.randint(5, 40)))
        deadline = time.monotonic() + 60
        for (p, target), log in zip(procs, logs):
            while p.is_alive() and len(reads(log)) < target and time.monotonic() < deadline:
                time.sleep(0.005)
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
                kills += 1
            p.join()
    for i in range(2):  # run both to the end
        p = FORK.Process(target=run, args=(ns, urls, i, logs[i]))
        p.start()
        p.join(120)
        assert p.exitcode == 0, f"producer p{i} exited with {p.exitcode}"
    assert kills >= 8  # nearly every kill lands mid-run (a few may find the shard already done)

    expected = Counter(",".join(str(int(t)) for t in d) for d in docs if len(d))
    assert spans(ns) == expected  # every document exactly once, nothing lost

    for i, log in enumerate(logs):
        order = [",".join(str(t) for t in d["tokens"].tolist()) for d in shard_source(urls, i)]
        lines = reads(log)
        resets = [(k, int(line.split()[1])) for k, line in enumerate(lines) if line.startswith("reset")]
        assert resets[0][1] == 0 and len(resets) >= 2
        for (k, pos), (k_next, _) in zip(resets, resets[1:] + [(len(lines), 0)]):
            run_reads = lines[k + 1 : k_next]
            # a run reads on from the position its committed state names: never from the start again
            assert run_reads == order[pos : pos + len(run_reads)], f"p{i} run from document {pos}"
        later = [pos for _, pos in resets[1:]]
        assert later == sorted(later) and any(pos > 0 for pos in later)
