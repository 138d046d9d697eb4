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

import os
import random
from collections import Counter

import torch

from tests.offline.conftest import read_global_batches
from tests.producer._kill import Logged, check_reads_resume, kill_and_finish, reads
from tests.sources._corpus import make_docs, write_tars
from torch_tgb.layout import Layout
from torch_tgb.datapipes import document_batches
from torch_tgb.producer import ProducerConfig, produce
from torch_tgb.sources import WebDataset

LAYOUT = Layout.token_rows(dp=2)
NUM_DOCS = 400
SEQ = 32


def tokens_line(doc: dict) -> str:
    return ",".join(str(t) for t in doc["tokens"].tolist())


def shard_source(urls: list[str], index: int) -> WebDataset:
    return WebDataset(urls, shard=(index, 2), seed=7)


def run(ns: str, urls: list[str], index: int, log: str) -> None:
    docs = Logged(shard_source(urls, index), log, tokens_line, delay_s=0.002)
    pipeline = document_batches(docs, seq_len=SEQ, global_batch_size=4, packing="bfd", packing_window=8)
    produce(ns, pipeline, producer_id=f"p{index}", layout=LAYOUT, commit_policy="fixed:3", progress=False,
            config=ProducerConfig())  # one object per batch: every third batch committed, so kills land between commits
    os._exit(0)


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
    kills = kill_and_finish(run, lambda i: (ns, urls, i, logs[i]), logs, rounds=5, reads_between=(5, 40), rng=rng)
    assert kills >= 8  # nearly every kill lands mid-run (a few may find the shard already done)

    expected = Counter(",".join(str(int(t)) for t in d) for d in docs if len(d))
    assert spans(ns) == expected  # every document exactly once, nothing lost

    for i, log in enumerate(logs):
        check_reads_resume(reads(log), [tokens_line(d) for d in shard_source(urls, i)], f"p{i}")
