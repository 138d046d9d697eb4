"""SIGKILL ``produce()`` processes at random points: every document lands exactly once, nothing re-read from the start.

Two producers (shards 0/2 and 1/2 of one corpus) run ``tgb.produce`` over a
resumable document node in forked children (torch is already imported, so a
child starts in milliseconds). Five rounds kill each of them once at a
random point of its reading (10 kills), then a last round runs both to the
end. Every read is logged by the node, every reset too, so the test checks
that a restarted pipeline starts reading exactly where the committed state
says, and the namespace holds each document of the corpus once.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time

import numpy as np

from torch_tgb.format import read_footer, read_slice
from torch_tgb.layout import Layout
from torch_tgb.manifest import Manifest
from torch_tgb.producer import produce
from torch_tgb.storage import open_store

from tests.producer._pipeline_nodes import DocumentRows, corpus_documents, write_corpus

FORK = multiprocessing.get_context("fork")
LAYOUT = Layout(dp=2, seq_keys=("input_ids",))
NUM_DOCS = 360
ROWS = 4
SEQ = 48


class LoggedRows(DocumentRows):
    """DocumentRows that logs ``reset <pos>`` on each reset and sleeps a little per batch."""

    def reset(self, initial_state=None):  # type: ignore[no-untyped-def]
        super().reset(initial_state)
        with open(self.reads_log, "a") as f:  # type: ignore[arg-type]
            f.write(f"reset {self._pos}\n")

    def next(self):  # type: ignore[no-untyped-def]
        time.sleep(0.004)
        return super().next()


def run(ns: str, path: str, index: int, log: str) -> None:
    node = LoggedRows(path, shard=(index, 2), rows=ROWS, seq_len=SEQ, reads_log=log)
    produce(ns, node, producer_id=f"p{index}", layout=LAYOUT, commit_policy="fixed:3", progress=False)
    os._exit(0)


def reads(log: str) -> list[str]:
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return f.read().splitlines()


def namespace_rows(ns: str) -> list[tuple[int, ...]]:
    store = open_store(ns)
    m = Manifest(store)
    rows = []
    for e in m.entries(0, m.head().num_steps):
        footer = read_footer(store, e.key, size=e.size, footer_offset=e.footer_offset, footer_length=e.footer_length)
        for dp in range(2):
            part = read_slice(store, e.key, footer, footer.slice(dp, 0))["input_ids"]
            rows.extend(tuple(r[r > 0].tolist()) for r in part)
    return [r for r in rows if r]


def test_sigkill_two_producers_ten_times(tmp_path) -> None:
    rng = random.Random(16)
    path = str(tmp_path / "corpus")
    write_corpus(path, NUM_DOCS, max_len=SEQ, seed=3)
    ns = str(tmp_path / "ns")
    logs = [str(tmp_path / f"reads{i}.log") for i in range(2)]
    kills = 0
    for _ in range(5):
        procs = []
        for i in range(2):
            p = FORK.Process(target=run, args=(ns, path, i, logs[i]))
            p.start()
            procs.append((p, len(reads(logs[i])) + rng.randint(4, 40)))
        deadline = time.monotonic() + 60
        for (p, target), log in zip(procs, logs):
            while p.is_alive() and len(reads(log)) < target and time.monotonic() < deadline:
                time.sleep(0.005)
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
                kills += 1
            p.join()
    for i in range(2):  # run both to the end
        p = FORK.Process(target=run, args=(ns, path, i, logs[i]))
        p.start()
        p.join(120)
        assert p.exitcode == 0, f"producer p{i} exited with {p.exitcode}"
    assert kills >= 8  # nearly every kill lands mid-run (a few may find the shard already done)

    docs = corpus_documents(path)
    expected = sorted(tuple(int(t) for t in d) for d in docs)
    assert sorted(namespace_rows(ns)) == expected  # every document exactly once, nothing lost

    for i, log in enumerate(logs):
        lines = reads(log)
        shard_docs = list(range(i, NUM_DOCS, 2))
        resets = [(k, int(line.split()[1])) for k, line in enumerate(lines) if line.startswith("reset")]
        assert resets[0][1] == 0 and len(resets) >= 2
        for (k, pos), (k_next, _) in zip(resets, resets[1:] + [(len(lines), 0)]):
            run_reads = [int(x) for x in lines[k + 1 : k_next]]
            # a restarted run reads on from its committed position: never from the start again
            assert run_reads == shard_docs[pos : pos + len(run_reads)], f"p{i} run from pos {pos}"
        later_starts = [pos for _, pos in resets[1:]]
        assert later_starts == sorted(later_starts)  # committed positions only move forward
        assert any(pos > 0 for pos in later_starts)
