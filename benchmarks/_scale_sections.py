"""The sections of ``benchmarks/scale.py``: each measures one row of the scale tables, in this process.

A section is a function ``name(args) -> dict`` run in a child process whose
``PYTHONPATH`` picks the code measured (this checkout, or the base revision
extracted beside it with this checkout's ``testing/counting.py``, the
measuring instrument). It uses public names that both trees have, and says
in its result which manifest format it wrote. Counts and bytes come from a
``CountingStore`` (exact); times, where reported, from a ``LatencyStore``
model (20 ms first byte, 100 MB/s per stream), never from this box's clock
alone. Run one with ``python benchmarks/_scale_run.py NAME '{json args}'``.
"""

from __future__ import annotations

import gc
import hashlib
import json
import time
import uuid
from typing import Any

import torch

from torch_tgb.layout import Layout, Mesh
from torch_tgb.manifest import ProducerState, TGBEntry, Version, records
from torch_tgb.manifest import _reads
from torch_tgb.storage import LatencyStore, MemoryStore
from torch_tgb.testing.counting import CountingStore

FORMAT2 = hasattr(records, "FORMAT2")


def rss_anon() -> int:
    """Anonymous resident memory of this process (bytes): what parsed metadata costs, without mapped files."""
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


def _token() -> str:
    return uuid.uuid4().hex


# --- synthetic namespaces ---------------------------------------------------------------------------------


def _state(i: int, nbytes: int) -> dict[str, Any]:
    """A pipeline state of about ``nbytes`` of JSON (distinct per producer)."""
    return {"producer": i, "pad": hashlib.sha256(str(i).encode()).hexdigest() * max(1, nbytes // 64)}


def write_producers(store: Any, producers: int, state_bytes: int) -> tuple[int, Any]:
    """Register ``producers`` producers with their states, as the code measured stores them.

    Format 1: one version per producer (its epoch bump) and a snapshot of
    them all at the end (in parts when large). Format 2: their buckets, the
    large states as their own objects, and one version naming the table.
    Returns (newest version, the table or None).
    """
    pids = [f"p{i:06d}" for i in range(producers)]
    version_key = _keys(store).version_key
    if not FORMAT2:
        states = {}
        for i, pid in enumerate(pids):
            states[pid] = ProducerState(1, 0, 1.0, _state(i, state_bytes))
            store.put(version_key(i + 1), Version(i + 1, _token(), 0, (), {pid: states[pid]}).encode())
        _reads.put_snapshot(store, records.ManifestState(producers, 0, False, states), _keys(store), where="")
        return producers, None
    from torch_tgb.manifest._producers import encode_bucket
    from torch_tgb.manifest._table import BUCKETS, TableRef, bucket_key, bucket_of, bucket_ref, state_key, state_ref

    token = _token()
    grouped: dict[int, dict[str, ProducerState]] = {}
    for i, pid in enumerate(pids):
        data = json.dumps(_state(i, state_bytes), sort_keys=True, separators=(",", ":")).encode()
        ref = state_ref(1, hashlib.sha256(data).hexdigest())
        store.put(state_key(pid, ref), data)
        grouped.setdefault(bucket_of(pid, BUCKETS), {})[pid] = ProducerState(1, 0, 1.0, state_ref=ref, token=token,
                                                                             at=1)
    table = TableRef.empty(BUCKETS)
    for b, members in grouped.items():
        ref = bucket_ref(1, token)
        store.put(bucket_key(b, ref), encode_bucket(b, BUCKETS, members))
        for _ in members:
            table = table.with_bucket(b, ref, before=None, after="open", declared=False)
    store.put(version_key(1), Version(1, token, 0, (), {}, table=table).encode())
    return 1, table


def append_versions(store: Any, after: int, table: Any, versions: int, per_version: int, *, key: str,
                    tgb: Any, first_step: int = 0) -> int:
    """``versions`` versions of ``per_version`` entries each, by producer ``w``, all naming TGB ``tgb``."""
    step, offset, number = first_step, 0, after
    version_key = _keys(store).version_key
    for _ in range(versions):
        number += 1
        record = {"slice_record": tgb.slice_record} if getattr(tgb, "slice_record", 0) else {}  # version 3 only
        entries = tuple(TGBEntry(key, tgb.size, tgb.footer_offset, tgb.footer_length, "w", offset + i, 1, 1, **record)
                        for i in range(per_version))
        offset += per_version
        delta = {"w": ProducerState(1, offset, 1.0)}
        kwargs = {} if table is None else {"table": table}
        store.put(version_key(number), Version(number, _token(), step, entries, delta, **kwargs).encode())
        step += per_version
        if number % 16 == 0:  # what a committer writes every 16 versions: a snapshot, and the hint to it
            from torch_tgb.manifest import Manifest

            Manifest(store).write_snapshot(number)
    return number


def write_tgb_object(store: Any, layout: Layout, *, rows: int, seq: int, key: str = "data/w/e000001-o000000000000-00000000.tgb") -> Any:
    """One real TGB of ``rows`` x ``seq`` uint16 tokens cut by ``layout``; returns its TGBObject (key set)."""
    from torch_tgb.format import write_tgb

    batch = {"input_ids": torch.arange(rows * seq, dtype=torch.int32).reshape(rows, seq).to(torch.int16)}
    return write_tgb(store, key, layout.cut(batch), layout=layout)


def _keys(store: Any) -> Any:
    """The namespace's manifest key layout (docs/protocol.md, *Manifest keys spread over prefixes*)."""
    from torch_tgb.manifest import Manifest

    return Manifest(store).key_layout()


def _dataset(store: Any, layout: Layout) -> None:
    from torch_tgb.manifest import Manifest

    Manifest(store).ensure_dataset(layout, {"input_ids": {"dtype": "int16"}}, {})


# --- sections ----------------------------------------------------------------------------------------------


def startup(args: dict[str, Any]) -> dict[str, Any]:
    """A fresh reader's first batch: requests, bytes, anonymous RSS and time under the latency model."""
    import torch_tgb as tgb

    producers, state_bytes = int(args.get("producers", 1000)), int(args.get("state_bytes", 30 * 1024))
    layout = Layout(dp=2)
    inner = MemoryStore(f"scale-{uuid.uuid4().hex}")
    _dataset(inner, layout)
    obj = write_tgb_object(inner, layout, rows=4, seq=64)
    newest, table = write_producers(inner, producers, state_bytes)
    newest = append_versions(inner, newest, table, int(args.get("versions", 40)), 1, key=obj.key, tgb=obj)
    next(iter(tgb.TGBDataset(inner, mesh=Mesh(dp_rank=1, dp_size=2), timeout=5)))  # imports, not measured
    counting = CountingStore(LatencyStore(inner, rtt=0.020, bandwidth=100e6))
    gc.collect()
    before = rss_anon()
    t0 = time.perf_counter()
    ds = tgb.TGBDataset(counting, mesh=Mesh(dp_rank=0, dp_size=2), timeout=5)
    reader = iter(ds)  # kept: what it holds is what it costs
    first = next(reader)
    seconds = time.perf_counter() - t0
    gc.collect()
    grown = rss_anon() - before
    assert first["input_ids"].shape[0] == 2
    counts = counting.report()
    import tracemalloc  # a third reader, for the peak of what its open allocates (the heap, not pages)

    tracemalloc.start()
    third = iter(tgb.TGBDataset(inner, mesh=Mesh(dp_rank=0, dp_size=2), timeout=5))
    next(third)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"producers": producers, "state_bytes": state_bytes, "format": 2 if FORMAT2 else 1,
            "seconds_to_first_batch": seconds, "rss_anon_growth": grown, "peak_allocated": peak, "counts": counts}


def footer(args: dict[str, Any]) -> dict[str, Any]:
    """Bytes a rank reads beyond its slice's data to read one step, at a dp x cp layout."""
    import torch_tgb as tgb

    dp, cp = int(args["dp"]), int(args.get("cp", 1))
    seq = 16 * cp
    layout = Layout(dp=dp, cp=cp, seq_keys=("input_ids",))
    inner = MemoryStore(f"scale-{uuid.uuid4().hex}")
    _dataset(inner, layout)
    obj = write_tgb_object(inner, layout, rows=dp, seq=seq)
    newest, table = write_producers(inner, 1, 100)
    append_versions(inner, newest, table, 1, 1, key=obj.key, tgb=obj)
    counting = CountingStore(inner)
    ds = tgb.TGBDataset(counting, mesh=Mesh(dp_rank=dp - 1, dp_size=dp, cp_rank=cp - 1, cp_size=cp), timeout=5)
    batch = next(iter(ds))
    payload = sum(t.numel() * t.element_size() for t in batch.values() if isinstance(t, torch.Tensor))
    data = counting.report()["by_class"]["data"]
    return {"dp": dp, "cp": cp, "object_bytes": obj.size, "data_bytes_read": data["bytes"],
            "data_requests": data["requests"], "slice_payload": payload,
            "footer_bytes_per_rank_step": data["bytes"] - payload}


def versions_memory(args: dict[str, Any]) -> dict[str, Any]:
    """A reader's anonymous RSS while its manifest hands out 10k, then ``steps`` steps (1,024 entries/version)."""
    from torch_tgb.datapipes.read.poller import ManifestPoller
    from torch_tgb.manifest import Manifest

    steps, per = int(args.get("steps", 500_000)), int(args.get("per_version", 1024))
    store = MemoryStore(f"scale-{uuid.uuid4().hex}")
    obj = type("O", (), {"size": 1 << 20, "footer_offset": (1 << 20) - 4096, "footer_length": 4000})
    newest, table = write_producers(store, 1, 100)
    append_versions(store, newest, table, -(-steps // per), per, key="data/w/e000001-o000000000000-00000000.tgb",
                    tgb=obj)
    poller = ManifestPoller(Manifest(store), 0, timeout=1)
    poller.reset()
    gc.collect()
    base = rss_anon()
    marks = {}
    early = min(10_000, steps // 4)  # the first mark: 10k steps, or a quarter of a short run
    for step in range(steps):
        poller.next()
        if step + 1 in (early, steps):
            gc.collect()
            marks[step + 1] = rss_anon() - base
    return {"steps": steps, "per_version": per, "format": 2 if FORMAT2 else 1,
            "first_mark": early, "rss_after_10k": marks[early], "rss_after_all": marks[steps],
            "growth_10k_to_all": marks[steps] - marks[early]}


def shuffled_manifest(args: dict[str, Any]) -> dict[str, Any]:
    """Steps per second a reader's manifest resolves in a block-shuffled order (1,024 entries a version)."""
    import random

    from torch_tgb.manifest import Manifest

    steps, per = int(args.get("steps", 200_000)), int(args.get("per_version", 1024))
    store = MemoryStore(f"scale-{uuid.uuid4().hex}")
    obj = type("O", (), {"size": 1 << 20, "footer_offset": (1 << 20) - 4096, "footer_length": 4000})
    newest, table = write_producers(store, 1, 100)
    append_versions(store, newest, table, -(-steps // per), per, key="data/w/e000001-o000000000000-00000000.tgb",
                    tgb=obj)
    m = Manifest(store)
    blocks = list(range(0, steps, 64))
    random.Random(0).shuffle(blocks)
    n = min(len(blocks), int(args.get("blocks", 1500)))
    t0 = time.perf_counter()
    for b in blocks[:n]:
        for e in m.entries(b, b + 64):
            e.key  # noqa: B018 - touch the entry as a reader does
    seconds = time.perf_counter() - t0
    return {"steps": steps, "blocks": n, "steps_per_s": n * 64 / seconds, "format": 2 if FORMAT2 else 1}


def fold(args: dict[str, Any]) -> dict[str, Any]:
    """Time to fold one version onto the state of a job of ``shards`` declared shards (this box's clock)."""
    from torch_tgb.manifest import JobSpec
    from torch_tgb.manifest._state import fold as fold_one

    shards = int(args.get("shards", 65536))
    job = JobSpec.sharded("big", shards)
    store = MemoryStore(f"scale-{uuid.uuid4().hex}")
    from torch_tgb.manifest import Committer, Manifest

    c = Committer(Manifest(store), job.producer_id(0), job=job)
    c.start()
    state = Manifest(store).head()
    bump = {job.producer_id(0): ProducerState(2, 0, 2.0)}
    extra = {"table": state.table, "job": job} if FORMAT2 else {}
    nxt = Version(state.version + 1, _token(), state.num_steps, (), bump, **extra)
    runs = []
    for _ in range(20):
        t0 = time.perf_counter()
        fold_one(state, nxt)
        runs.append(time.perf_counter() - t0)
    return {"shards": shards, "fold_ms_median": sorted(runs)[len(runs) // 2] * 1e3, "format": 2 if FORMAT2 else 1}


SECTIONS = {f.__name__: f for f in (startup, footer, versions_memory, shuffled_manifest, fold)}

# the write side (and bytes at rest) lives in _scale_write.py, which adds its sections to SECTIONS;
# _scale_run.py runs one section in a child process
