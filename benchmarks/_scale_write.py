"""The write side's sections of ``benchmarks/scale.py``, bytes at rest and reads per TP group: see
``_scale_sections.py``."""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

import torch
from _scale_sections import FORMAT2, SECTIONS, _state

from torch_tgb.layout import Layout
from torch_tgb.manifest import TGBEntry
from torch_tgb.storage import LatencyStore, MemoryStore
from torch_tgb.testing.counting import CountingStore

def commit_requests(args: dict[str, Any]) -> dict[str, Any]:
    """``producers`` real producers (threads) committing one TGB every ``period_s`` for ``seconds``: manifest
    requests per successful commit and the conflict rate, on a counting store over the latency model."""
    import threading

    from torch_tgb.producer import Producer

    n, seconds, period = int(args.get("producers", 8)), float(args.get("seconds", 8.0)), float(args.get("period_s", 0.5))
    warmup = float(args.get("warmup_s", 0.0))  # counted from here on: DAC's gaps settle over a few caps
    inner = MemoryStore(f"scale-{uuid.uuid4().hex}")
    counting = CountingStore(LatencyStore(inner, rtt=0.020, bandwidth=100e6, max_in_flight=64))
    layout = Layout(dp=1)
    batch = {"x": torch.zeros(1, 8, dtype=torch.int32)}
    stats: list[Any] = []
    at_warmup: list[Any] = []
    def go() -> None:  # the producers' starts not counted; the warm-up counted from the same moment as their stats
        counting.reset()
        if warmup:
            threading.Timer(warmup, counting.reset).start()

    start = threading.Barrier(n, action=go)
    ended: list[dict[str, Any]] = []
    # the window ends when every producer flushed, before their close() commits its mark (not counted in stats)
    done = threading.Barrier(n, action=lambda: ended.append(counting.report()))

    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            with Producer(counting, producer_id=f"p{i:04d}", layout=layout,
                          commit_policy=str(args.get("policy", "naive"))) as p:
                start.wait()
                began = time.monotonic()
                deadline, warm_at = began + seconds, began + warmup
                offset = p.resume_offset
                snapped = not warmup
                while time.monotonic() < deadline:
                    if not snapped and time.monotonic() >= warm_at:
                        at_warmup.append(p.stats())
                        snapped = True
                    p.append(batch, offset=offset)
                    offset += 1
                    time.sleep(period)
                p.flush()
                stats.append(p.stats())
                done.wait()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)
            done.abort()
    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    report = ended[0]
    successes = sum(s.successes for s in stats) - sum(s.successes for s in at_warmup)
    attempts = sum(s.attempts for s in stats) - sum(s.attempts for s in at_warmup)
    manifest = report["manifest_requests"]
    return {"producers": n, "format": 2 if FORMAT2 else 1, "policy": args.get("policy", "naive"), "warmup_s": warmup,
            "successes": successes, "attempts": attempts,
            "conflict_rate": (attempts - successes) / attempts if attempts else 0.0,
            "manifest_requests_per_commit": manifest / successes if successes else None,
            "by_class": {c: v["requests"] for c, v in report["by_class"].items() if v["requests"]},
            "by_request": {f"{c} {t}": v for c, by in report["by_class"].items() if c != "data"
                           for t, v in by.get("by_type", {}).items() if v}}


def reclaim(args: dict[str, Any]) -> dict[str, Any]:
    """Reclaimer passes over ``live`` one-entry versions of one-TGB objects: an idle pass, then one reclaiming
    ``reclaim`` objects; requests of each (exact counts)."""
    from torch_tgb.checkpoint import Reclaimer, record_watermark
    from torch_tgb.manifest import Committer, Manifest

    live, doomed = int(args.get("live", 10_000)), int(args.get("reclaim", 1000))
    store = MemoryStore(f"scale-{uuid.uuid4().hex}")
    c = Committer(Manifest(store), "p")
    c.start()
    for offset in range(live):
        key = f"data/p/e000001-o{offset:012d}-00000000.tgb"
        store.put(key, b"x" * 64)
        assert c.attempt([TGBEntry(key, 64, 32, 8, "p", offset, 1, 1)]).committed
    record_watermark(store, "ck", {"tgb_cursor": {"step": 10, "version": 1}})
    Reclaimer(store).run_once()  # the first pass: whatever it must do to know where it stands
    out: dict[str, Any] = {"live": live, "format": 2 if FORMAT2 else 1}
    for label, step in (("idle", None), ("reclaiming", 10 + doomed)):
        if step is not None:
            record_watermark(store, "ck", {"tgb_cursor": {"step": step, "version": 1}})
        counting = CountingStore(store)
        report = Reclaimer(counting).run_once()
        r = counting.report()
        out[label] = {"requests": r["requests"], "objects": report.objects, "versions": report.versions,
                      "requests_per_object": r["requests"] / report.objects if report.objects else None,
                      "by_type": {t: n for t, n in r["by_type"].items() if n}}
    return out


def encode(args: dict[str, Any]) -> dict[str, Any]:
    """CPU seconds to encode one TGB at dp x cp as the producer does (process time, median of a few): Layout.cut +
    encode_tgb before, encode_batch (no Python object per slice) where the tree has it."""
    from torch_tgb import format as fmt

    dp, cp = int(args.get("dp", 1024)), int(args.get("cp", 8))
    layout = Layout(dp=dp, cp=cp, seq_keys=("input_ids", "labels"))
    rows, seq = dp, 16 * cp
    batch = {"input_ids": torch.randint(0, 50000, (rows, seq), dtype=torch.int32),
             "labels": torch.randint(0, 50000, (rows, seq), dtype=torch.int32)}
    runs = []
    for _ in range(int(args.get("runs", 3))):
        t0 = time.process_time()
        if hasattr(fmt, "encode_batch"):
            fmt.encode_batch(batch, layout)
        else:
            fmt.encode_tgb(layout.cut(batch))
        runs.append(time.process_time() - t0)
    return {"dp": dp, "cp": cp, "payload_bytes": rows * seq * 8, "cpu_ms_median": sorted(runs)[len(runs) // 2] * 1e3}


def state_bytes(args: dict[str, Any]) -> dict[str, Any]:
    """Metadata bytes written per version while ``producers`` producers with ``state_bytes`` of pipeline state
    each commit once after all registered (their states change with every commit)."""
    from torch_tgb.manifest import Committer, Manifest

    n, size = int(args.get("producers", 1024)), int(args.get("state_bytes", 30 * 1024))
    inner = MemoryStore(f"scale-{uuid.uuid4().hex}")
    counting = CountingStore(inner)
    committers = []
    for i in range(n):
        c = Committer(Manifest(counting), f"p{i:05d}")
        c.start()
        committers.append(c)
    counting.reset()
    for i, c in enumerate(committers):
        key = f"data/p{i:05d}/e000001-o{0:012d}-00000000.tgb"
        assert c.attempt([TGBEntry(key, 64, 32, 8, f"p{i:05d}", 0, 1, 1)], state=_state(i + n, size)).committed
    r = counting.report()
    by_class = {k: v["written"] for k, v in r["by_class"].items() if v["written"]}
    return {"producers": n, "state_bytes": size, "format": 2 if FORMAT2 else 1, "versions": n,
            "metadata_written_per_version": sum(by_class.values()) / n, "written_by_class": by_class}




def bytes_at_rest(args: dict[str, Any]) -> dict[str, Any]:
    """Bytes of TGB objects per token for ``uint16`` token rows (labels derived from them on read where the
    tree can, else stored ``seq`` tokens per row), written by a real producer with its defaults."""
    import inspect
    import tempfile

    from torch_tgb.producer import Producer

    dp, batch, seq, steps = (int(args.get(k, d)) for k, d in (("dp", 64), ("batch", 64), ("seq", 2048), ("steps", 4)))
    rows_from = "labels_from" in inspect.signature(Layout).parameters
    layout = Layout(dp=dp, seq_keys=("input_ids",), **({"labels_from": "input_ids"} if rows_from else {}))
    width = seq + 1 if rows_from else seq
    with tempfile.TemporaryDirectory(prefix="tgb-scale-rest-") as ns:
        with Producer(ns, producer_id="p", layout=layout, commit_policy="naive") as p:
            for step in range(steps):
                p.append({"input_ids": torch.randint(0, 60000, (batch, width), dtype=torch.int32).to(torch.uint16)},
                         offset=step)
        stored = 0
        for root, _dirs, files in os.walk(f"{ns}/data"):
            stored += sum(os.path.getsize(f"{root}/{f}") for f in files)
    tokens = steps * batch * seq
    return {"dp": dp, "batch": batch, "seq": seq, "rows_per_rank": batch // dp, "labels_from": rows_from,
            "bytes_per_token": stored / tokens, "over_token_width": stored / tokens / 2}


_TP_RANK = """
import json, sys
import torch.distributed as dist
from torch_tgb import DataLoader, Mesh
from torch_tgb.storage import LocalStore
from torch_tgb.testing.counting import CountingStore

class Remote(CountingStore):
    def local_path(self, key):
        return None

ns, mode, dp, tp = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
dist.init_process_group("gloo")
store = Remote(LocalStore(ns))
loader = DataLoader(store, mesh=Mesh.from_env(dp=dp, tp=tp), prefetch=2)
if mode == "broadcast":
    from torch_tgb.distributed.broadcast import GroupBroadcast, groups_of
    loader = GroupBroadcast(loader, group=groups_of(dp=dp, tp=tp))
steps = sum(1 for _ in loader)
r = store.report()
print("RANK " + json.dumps({"steps": steps, "requests": r["requests"], "bytes": r["bytes"],
                             "data_requests": r["by_class"].get("data", {}).get("requests", 0),
                             "data_bytes": r["by_class"].get("data", {}).get("bytes", 0)}), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


def tp_broadcast(args: dict[str, Any]) -> dict[str, Any]:
    """Store requests and bytes of a dp x tp job (torchrun, gloo, ranks read as from a remote store) reading
    ``steps`` steps, every rank reading its slice vs one read per TP group (``GroupBroadcast``)."""
    import socket
    import subprocess
    import sys
    import tempfile

    from torch_tgb.producer import Producer

    dp, tp, steps = int(args.get("dp", 2)), int(args.get("tp", 2)), int(args.get("steps", 16))
    modes = ["plain"]
    try:
        import torch_tgb.distributed.broadcast  # noqa: F401
        modes.append("broadcast")
    except ImportError:  # the base tree has no broadcast
        pass
    out: dict[str, Any] = {"dp": dp, "tp": tp, "steps": steps}
    with tempfile.TemporaryDirectory(prefix="tgb-scale-tp-") as tmp:
        ns = f"{tmp}/ns"
        with Producer(ns, producer_id="p", layout=Layout(dp=dp, seq_keys=("ids",)), commit_policy="naive") as p:
            for step in range(steps):
                p.append({"ids": torch.randint(0, 50000, (dp * 4, 512), dtype=torch.int32)}, offset=step)
            p.close(seal=True)
        body = f"{tmp}/rank.py"
        with open(body, "w") as f:
            f.write(_TP_RANK)
        for mode in modes:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(dp * tp),
                                   "--master-port", str(port), body, ns, mode, str(dp), str(tp)],
                                  capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
            ranks = [json.loads(line[5:]) for line in proc.stdout.splitlines() if line.startswith("RANK ")]
            if proc.returncode != 0 or len(ranks) != dp * tp:
                raise RuntimeError(f"tp_broadcast {mode}: {proc.stderr[-3000:]}")
            out[mode] = {k: sum(r[k] for r in ranks) for k in ("requests", "bytes", "data_requests", "data_bytes")}
            out[mode]["steps_per_rank"] = sorted({r["steps"] for r in ranks})
    return out


SECTIONS.update({f.__name__: f for f in (commit_requests, reclaim, encode, state_bytes, bytes_at_rest,
                                         tp_broadcast)})
