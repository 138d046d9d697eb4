"""What each chaos process does: producer, consumer, reclaimer, sealer.

Each role is a function of JSON-able keyword arguments, run in a child forked
by ``_zygote.py``; it returns an exit code. Every role may be SIGKILLed at any
instruction and started again with the same arguments: producers resume from
the log (same ``producer_id``), consumers from their last checkpoint file.

Batch content encodes where it came from, so a consumer can check every slice
it reads: tensor ``x`` of offset ``o`` of producer index ``pi`` has
``x[row, 0] = row`` (global row) and ``x[row, 1:] = code(pi, o)``; ``ids`` is
a sequence tensor filled with the same code. A slice that is torn, mixed or
from another step fails the check.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
import uuid
from typing import Any

import torch

import torch_tgb as tgb
from torch_tgb.manifest.watermarks import live_checkpoints, record_watermark, retire
from torch_tgb.consumer import ReaderOptions
from torch_tgb.datapipes.read.poller import PollPolicy
from torch_tgb.producer import ProducerConfig
from torch_tgb.storage import FaultPlan, FaultRates, FaultyStore, LocalStore, ObjectStore, open_store
from torch_tgb.storage.retry import RetryingStore, RetryPolicy

ROWS = 4  # global batch size
DP = 2  # written layout: one consumer per dp rank
WIDTH = 5
SEQ = 6

#: FaultyStore rates of the faulty trials: 5% transient (errors, timeouts, lost
#: acknowledgements) and 1% slow calls (~50x a local call)
FAULTS = FaultRates(error=0.03, timeout=0.01, lost_ack=0.01, slow=0.01, delay=0.02)
RETRY = RetryPolicy(attempts=8, base_delay=0.005, max_delay=0.05)


def code(pi: int, offset: int) -> int:
    return (pi + 1) * 100_000 + offset


def decode(c: int) -> tuple[int, int]:
    return c // 100_000 - 1, c % 100_000


def make_batch(pi: int, offset: int) -> dict[str, torch.Tensor]:
    c = code(pi, offset)
    x = torch.full((ROWS, WIDTH), c, dtype=torch.int64)
    x[:, 0] = torch.arange(ROWS)
    return {"x": x, "ids": torch.full((ROWS, SEQ), c, dtype=torch.int32)}


def layout() -> tgb.Layout:
    return tgb.Layout(dp=DP, seq_keys=("ids",))


def open_ns(root: str, fault_seed: int | None, options: dict[str, Any] | None = None) -> ObjectStore:
    """The store a chaos process uses: a local directory or an S3/GCS/Azure URL (``options``:
    storage_options), optionally behind a FaultyStore, always with retries."""
    # the backend open_store picks for the URL, unwrapped (its RetryingStore goes outside the faults)
    inner: ObjectStore = open_store(root, options).inner if "://" in root else LocalStore(root, fsync=False)
    if fault_seed is not None:
        inner = FaultyStore(inner, FaultPlan(seed=fault_seed, default=FAULTS))
    return RetryingStore(inner, RETRY)


def report_faults(store: ObjectStore) -> None:
    """Print the faults this process's FaultyStore injected (the driver sums them from the logs)."""
    faulty = getattr(store, "inner", None)
    if isinstance(faulty, FaultyStore):
        counts = {f"{op}:{kind}": n for (op, kind), n in faulty.injected.items()}
        print("FAULTS " + json.dumps(counts), flush=True)


def _sleep(lo: float, hi: float) -> None:
    time.sleep(random.uniform(lo, hi))


# --- roles ----------------------------------------------------------------------


#: exit code of a producer that learnt it was fenced by a newer incarnation (expected for
#: an incarnation the driver paused with SIGSTOP while it started a new one)
FENCED_EXIT = 10


def producer(root: str, pi: int, n: int, policy: str, fault_seed: int | None = None, pace: float = 0.06,
             options: dict[str, Any] | None = None) -> int:
    store = open_ns(root, fault_seed, options)
    try:
        with tgb.Producer(store, producer_id=f"p{pi}", layout=layout(), commit_policy=policy) as p:
            print(f"producer p{pi} pid={os.getpid()} epoch={p.epoch} resume_offset={p.resume_offset}", flush=True)
            for offset in range(p.resume_offset, n):
                p.append(make_batch(pi, offset), offset=offset)
                _sleep(0, pace)
            p.flush()
    except tgb.FencedError as e:
        print(f"producer p{pi} pid={os.getpid()} fenced: {e}", flush=True)
        return FENCED_EXIT
    print(f"producer p{pi} pid={os.getpid()} done", flush=True)
    report_faults(store)
    return 0


def stalling_producer(root: str, marker: str, n: int = 3, options: dict[str, Any] | None = None) -> int:
    """Commit offset 0, then SIGSTOP itself between the existence check and the create of offset 1.

    The driver (tests/chaos/test_stall_reclaim.py) reclaims while it is stopped, then resumes it.
    """
    armed = False

    def hook(point: str) -> None:
        nonlocal armed
        if armed and point == "before_commit":
            armed = False
            with open(marker, "w") as f:
                f.write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGSTOP)  # the whole process, mid-commit
            time.sleep(0.5)  # a self-sent stop may take effect a moment later: be inside this sleep then

    store = open_ns(root, None, options)
    config = ProducerConfig(crash_hook=hook)
    with tgb.Producer(store, producer_id="p0", layout=layout(), commit_policy="naive", config=config) as p:
        p.append(make_batch(0, 0), offset=0)
        p.flush()
        armed = True
        for offset in range(1, n):
            p.append(make_batch(0, offset), offset=offset)
        p.flush()
    print(f"stalling producer pid={os.getpid()} done", flush=True)
    return 0


def sealer(root: str, fault_seed: int | None = None, options: dict[str, Any] | None = None) -> int:
    store = open_ns(root, fault_seed, options)
    p = tgb.Producer(store, producer_id="sealer", layout=layout(), commit_policy="naive")
    p.close(seal=True)
    report_faults(store)
    return 0


def _check_slice(batch: dict[str, torch.Tensor], rank: int, step: int) -> int:
    """The code of this slice; raises if the slice is not exactly one offset's rows of this rank."""
    x, ids = batch["x"], batch["ids"]
    rows = ROWS // DP
    if tuple(x.shape) != (rows, WIDTH) or tuple(ids.shape) != (rows, SEQ):
        raise AssertionError(f"{step=} rank={rank}: shapes {tuple(x.shape)} {tuple(ids.shape)}")
    c = int(x[0, 1])
    expected_rows = torch.arange(rank * rows, (rank + 1) * rows)
    if not torch.equal(x[:, 0], expected_rows):
        raise AssertionError(f"{step=} rank={rank}: rows {x[:, 0].tolist()} are not this rank's")
    if not (bool((x[:, 1:] == c).all()) and bool((ids == c).all())):
        raise AssertionError(f"{step=} rank={rank}: slice mixes codes {sorted(set(x[:, 1:].flatten().tolist()))}")
    return c


def consumer(root: str, rank: int, ckpt: str, out: str, every: int, fault_seed: int | None = None,
             timeout: float = 60.0, options: dict[str, Any] | None = None, poll_max: float = 0.05) -> int:
    """Read this rank's slices to the seal; checkpoint every ``every`` steps (file + watermark).

    ``out`` gets one line per event: ``start <step>``, ``step <step> <code>``,
    ``saving <step>`` / ``ckpt <step>`` (around a checkpoint), ``end <step>``; written with ``os.write`` so a SIGKILL
    loses nothing already reported.
    """
    store = open_ns(root, fault_seed, options)
    reader = ReaderOptions(poll=PollPolicy(min_interval=min(0.005, poll_max), max_interval=poll_max))
    ds = tgb.TGBDataset(store, mesh=tgb.Mesh(rank, DP), prefetch=2, timeout=timeout, options=reader)
    state: dict[str, Any] | None = None
    if os.path.exists(ckpt):
        with open(ckpt) as f:
            state = json.load(f)
        ds.load_state_dict(state)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    prefix = f"c{rank}-"

    def emit(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    def checkpoint(st: dict[str, Any]) -> None:
        # order: the checkpoint is durable, then its watermark, then older ones retire
        tmp = f"{ckpt}.tmp"
        with open(tmp, "w") as f:
            json.dump(st, f)
        emit(f"saving {st['tgb_cursor']['step']}")  # a kill from here on may resume at this step
        os.replace(tmp, ckpt)
        cid = f"{prefix}{uuid.uuid4().hex[:12]}"
        record_watermark(store, cid, st)
        for mark in live_checkpoints(store):
            if mark.checkpoint_id.startswith(prefix) and mark.checkpoint_id != cid:
                retire(store, mark.checkpoint_id)
        emit(f"ckpt {st['tgb_cursor']['step']}")

    start = ds.state_dict()
    step = int(start["tgb_cursor"]["step"])
    emit(f"start {step}")
    checkpoint(start)  # the resume point itself is protected from here on
    for batch in ds:
        c = _check_slice(batch, rank, step)
        emit(f"step {step} {c}")
        step += 1
        st = ds.state_dict()
        if int(st["tgb_cursor"]["step"]) != step:
            raise AssertionError(f"cursor says {st['tgb_cursor']} after delivering step={step - 1}")
        if step % every == 0:
            checkpoint(st)
    emit(f"end {step}")
    os.close(fd)
    report_faults(store)
    return 0


def reclaimer(root: str, stop: str, grace: float, fault_seed: int | None = None, interval: float = 0.1,
              options: dict[str, Any] | None = None, skew: float = 0.0) -> int:
    """Reclaim every ``interval`` s; ``skew``: seconds this process's clock runs ahead of the store's."""
    store = open_ns(root, fault_seed, options)
    rec = tgb.Reclaimer(store, grace_period=grace, clock=lambda: time.time() + skew)
    passes = 0
    while not os.path.exists(stop):
        try:
            rec.run_once()
            passes += 1
        except tgb.TGBError as e:  # a pass may fail under injected faults; the next one finishes it
            print(f"reclaim pass failed: {type(e).__name__}: {e}", flush=True)
        time.sleep(interval)
    print(f"reclaimer stopped after {passes} passes", flush=True)
    report_faults(store)
    return 0


ROLES = {"producer": producer, "consumer": consumer, "reclaimer": reclaimer, "sealer": sealer,
         "stalling_producer": stalling_producer}
