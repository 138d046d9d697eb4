"""SIGKILL image producers mid-run: every image lands exactly once, no sample is re-read from the start.

Two producers (shards 0/2 and 1/2 of an image WebDataset) run ``tgb.produce``
over decode -> resize -> patchify -> splice -> PackSamples -> GlobalBatches
(kk over 2 micro-batches) in forked children. Three rounds kill each of them
once at a random point of its reading, then a last round runs both to the
end. A wrapper logs every sample key the source yields and every reset (with
the source's position): a restarted pipeline reads on from its committed
state, and the namespace holds each image once (as the ragged patches of the
row whose tokens stand for it).
"""

from __future__ import annotations

import os
import random
from collections import Counter

import pytest
import torch

import torch_tgb as tgb
from tests.producer._kill import Logged, check_reads_resume, kill_and_finish, reads
from tests.producer._vlm_pipeline import delivered_images, expected_images, layout, pipeline, source
from torch_tgb.producer import ProducerConfig, produce
from torch_tgb.testing.media import image_samples, write_media_tars

pytest.importorskip("PIL")


def key_line(doc: dict) -> str:
    return str(doc["__key__"])


def run(ns: str, urls: list[str], index: int, log: str) -> None:
    # a forked child of a process whose torch ops started OpenMP threads must not start a parallel region:
    # libgomp is not fork-safe (the child hangs in its barrier). One thread runs torch's kernels inline.
    torch.set_num_threads(1)
    docs = Logged(source(urls, shard=(index, 2)), log, key_line, delay_s=0.003)
    produce(ns, pipeline(docs), producer_id=f"p{index}", layout=layout(), commit_policy="fixed:1", seal=True,
            progress=False, config=ProducerConfig())  # one object per batch: each committed, kills land between
    os._exit(0)


@pytest.mark.slow
def test_sigkill_image_producers(tmp_path) -> None:
    samples = image_samples(240, seed=27, max_side=64, max_images=2)
    urls = write_media_tars(tmp_path / "wds", samples, per_tar=12)
    ns = str(tmp_path / "ns")
    logs = [str(tmp_path / f"reads{i}.log") for i in range(2)]
    kills = kill_and_finish(run, lambda i: (ns, urls, i, logs[i]), logs, rounds=3, reads_between=(25, 45),
                            rng=random.Random(27))
    assert kills >= 4

    seen: Counter[str] = Counter()
    for rank in range(2):
        for batch in tgb.TGBDataset(ns, mesh=tgb.Mesh(dp_rank=rank, dp_size=2), timeout=10):
            seen += delivered_images(batch)
    assert seen == expected_images(samples)  # every image exactly once, nothing lost

    for i, log in enumerate(logs):
        check_reads_resume(reads(log), [key_line(d) for d in source(urls, shard=(i, 2))], f"p{i}")
