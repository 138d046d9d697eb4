"""Child-process bodies for the multi-process producer tests (fork or spawn)."""

from __future__ import annotations

import hashlib
import os
import sys
import time
from typing import Any

import torch

from torch_tgb.errors import FencedError
from torch_tgb.layout import Layout
from torch_tgb.manifest import Manifest
from torch_tgb.producer import Producer, ProducerConfig
from torch_tgb.storage import open_store

LAYOUT = Layout(dp=2, seq_keys=("input_ids",))
FENCED_EXIT = 3
CRASH_EXIT = 137


def batch(pid: str, offset: int) -> dict[str, torch.Tensor]:
    seed = int(hashlib.sha256(f"{pid}/{offset}".encode()).hexdigest()[:8], 16)
    return {"input_ids": torch.full((2, 8), seed % 50_000, dtype=torch.int32)}


def run_producer(
    ns: str,
    options: dict[str, Any] | None,
    pid: str,
    stop: int,
    *,
    policy: str = "dac",
    crash_point: str | None = None,
    crash_after: int = 1,
    delay_s: float = 0.0,
) -> None:
    """Produce offsets resume_offset..stop-1 as ``pid``; ``os._exit`` at the n-th ``crash_point``."""
    seen = {"n": 0}

    def hook(point: str) -> None:
        if point == crash_point:
            seen["n"] += 1
            if seen["n"] >= crash_after:
                os._exit(CRASH_EXIT)  # like SIGKILL: no cleanup, no flush

    try:
        with Producer(ns, producer_id=pid, layout=LAYOUT, commit_policy=policy, storage_options=options,
                      config=ProducerConfig(crash_hook=hook if crash_point else None)) as p:
            for offset in range(p.resume_offset, stop):
                p.append(batch(pid, offset), offset=offset)
                if delay_s:
                    time.sleep(delay_s)
    except FencedError as e:
        print(f"fenced: {e}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(FENCED_EXIT)


def run_reader(
    ns: str, options: dict[str, Any] | None, total: int, queue: Any, timeout_s: float = 120.0, poll_s: float = 0.05
) -> None:
    """Follow the log until ``total`` steps are visible; put the sha256 of the key sequence on ``queue``."""
    manifest = Manifest(open_store(ns, options))
    keys: list[str] = []
    deadline = time.monotonic() + timeout_s
    while len(keys) < total and time.monotonic() < deadline:
        head = manifest.head()
        if head.num_steps > len(keys):
            keys.extend(e.key for e in manifest.entries(len(keys), head.num_steps))
        else:
            time.sleep(poll_s)
    # and once more from a cold start: the incremental view equals a fresh read
    cold = Manifest(open_store(ns, options))
    fresh = [e.key for e in cold.entries(0, total)]
    digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()
    queue.put((len(keys), digest, fresh == keys))
