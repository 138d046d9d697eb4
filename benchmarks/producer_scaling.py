"""Producer scaling and commit policies (BatchWeave §7.3, Figures 6-7 analogue).

N producers (threads in this process) each offer ``--rate`` TGBs per second
(preprocessing-bound producers), for each commit policy (Naive, Fixed10, Fixed100, Incr, AIMD, DAC) and
payload size. Reported over a measurement window after a warm-up:
aggregate committed MB/s, commit success rate, conflict rate, mean DAC gap.

Model, not a measured remote store: a MemoryStore behind ``LatencyStore``
(``--rtt-ms`` per request, 100 MB/s per stream, a 404 also costs one rtt).
TGB payloads are encoded and sent through the model but not kept (memory).
Time is compressed: the default rtt is 5 ms so that DAC's gaps, which scale
with the fragile window W (about 2 rtt) and the producer count, fit into
seconds-long runs (the paper's runs last hours).

"full manifest" mode models the paper's design, where each version rewrites
the whole TGB list: a version read or write also moves ``first_step x 200``
bytes. Both modes start from the same pre-built history (``--history``
steps) to show what delta versions buy.

    python benchmarks/producer_scaling.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
import uuid
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, results_dir, save
from commit_cost import build_history

from torch_tgb.layout import Layout
from torch_tgb.producer import Producer, ProducerConfig
from torch_tgb.storage import ForwardingStore, LatencyStore, MemoryStore, ObjectStore

POLICIES = ("naive", "fixed:10", "fixed:100", "incr", "aimd", "dac")
ENTRY_BYTES = 200  # one TGB entry in a JSON manifest
_FIRST_STEP = re.compile(rb'"first_step":(\d+)')


class DataSink(ForwardingStore):
    """Keeps manifest objects; TGB payloads (``data/``) are counted and dropped."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.sizes: dict[str, int] = {}

    def exists(self, key: str) -> bool:
        return key in self.sizes or self.inner.exists(key)

    def put(self, key: str, data: bytes | memoryview) -> None:
        if key.startswith("data/"):
            with self._lock:
                self.sizes[key] = memoryview(data).nbytes
            return
        self.inner.put(key, data)


class FullManifestModel(ForwardingStore):
    """Charges each log version read/write the transfer of a full TGB list (``first_step`` entries)."""

    def __init__(self, inner: ObjectStore, *, bandwidth: float) -> None:
        super().__init__(inner)
        self.bandwidth = bandwidth

    def _charge(self, key: str, data: bytes | memoryview) -> None:
        if key.startswith("_tgb/log/"):
            found = _FIRST_STEP.search(bytes(data))
            if found:
                time.sleep(int(found.group(1)) * ENTRY_BYTES / self.bandwidth)

    def get(self, key: str) -> bytes:
        data = self.inner.get(key)
        self._charge(key, data)
        return data

    def get_range(self, key: str, start: int, end: int) -> bytes:
        # manifest versions are read with a bounded range read (size limit), not get()
        data = self.inner.get_range(key, start, end)
        self._charge(key, data)
        return data

    def put_if_absent(self, key: str, data: bytes | memoryview) -> bool:
        self._charge(key, data)
        return self.inner.put_if_absent(key, data)


def run_once(
    *, producers: int, policy: str, payload: int, warmup: float, window: float, rtt_ms: float, rate: float,
    full_manifest: bool = False, history: int = 0,
) -> dict:
    memory = MemoryStore(f"scaling-{uuid.uuid4().hex}")
    if history:
        build_history(memory, history, per_version=2000)
    bandwidth = 100e6
    store: ObjectStore = LatencyStore(DataSink(memory), rtt=rtt_ms / 1e3, bandwidth=bandwidth)
    if full_manifest:
        store = FullManifestModel(store, bandwidth=bandwidth)
    layout = Layout()
    started = threading.Barrier(producers + 1)
    stop = threading.Event()
    handles: list[Producer] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            p = Producer(store, producer_id=f"p{i:02d}", layout=layout, commit_policy=policy,
                         config=ProducerConfig(max_pending=1_000_000))
            with lock:
                handles.append(p)
            batch = {"x": torch.zeros((1, payload), dtype=torch.uint8)}
            started.wait()
            next_at = time.monotonic()
            while not stop.is_set():
                p.append(batch)
                next_at += 1.0 / rate  # a preprocessing-bound producer: at most `rate` TGBs/s
                delay = next_at - time.monotonic()
                if delay > 0:
                    stop.wait(delay)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            started.abort()

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(producers)]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(warmup)
    before = [p.stats() for p in handles]
    time.sleep(window)
    after = [p.stats() for p in handles]
    stop.set()
    for t in threads:
        t.join(30)
    for p in handles:
        p.abort()
    memory.destroy()
    if errors:
        raise errors[0]
    committed = sum(a.committed_offsets - b.committed_offsets for a, b in zip(after, before))
    attempts = sum(a.attempts - b.attempts for a, b in zip(after, before))
    successes = sum(a.successes - b.successes for a, b in zip(after, before))
    conflicts = sum(a.conflicts - b.conflicts for a, b in zip(after, before))
    appended = sum(a.appended - b.appended for a, b in zip(after, before))
    return {
        "producers": producers,
        "policy": policy.replace(":", ""),
        "payload_kb": payload // 1000,
        "mode": "full" if full_manifest else "delta",
        "history_steps": history,
        "mb_per_s": committed * payload / window / 1e6,
        "offered_mb_per_s": appended * payload / window / 1e6,
        "attempts": attempts,
        "success_rate": successes / attempts if attempts else None,
        "conflict_rate": conflicts / attempts if attempts else None,
        "mean_gap_s": sum(a.gap_s for a in after) / len(after),
        "mean_window_ms": 1e3 * sum(a.fragile_window_s for a in after) / len(after),
        "pending_at_end": sum(a.pending for a in after),
        # Little's law: mean wait from append to visibility = entries waiting / arrival rate
        "visibility_lag_s": sum(a.pending for a in after) / (appended / window) if appended else None,
    }


def fmt(row: dict) -> str:
    rate = "  -  " if row["success_rate"] is None else f"{100 * row['success_rate']:5.1f}%"
    return (
        f"{row['mode']:5} N={row['producers']:>2} {row['payload_kb']:>5} KB {row['policy']:>8}: "
        f"{row['mb_per_s']:8.1f} MB/s committed (offered {row['offered_mb_per_s']:7.1f}), success {rate}, "
        f"{row['attempts']:4d} attempts, gap {row['mean_gap_s']:.2f} s, W {row['mean_window_ms']:.0f} ms, "
        f"lag {row['visibility_lag_s'] or 0:.1f} s"
    )


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    delta = [r for r in rows if r["mode"] == "delta" and not r["history_steps"]]
    payloads = sorted({r["payload_kb"] for r in delta})
    fig, axes = plt.subplots(2, len(payloads), figsize=(6 * len(payloads), 8), squeeze=False)
    for col, kb in enumerate(payloads):
        for policy in dict.fromkeys(r["policy"] for r in delta):
            pts = sorted(
                ((r["producers"], r) for r in delta if r["payload_kb"] == kb and r["policy"] == policy),
                key=lambda nr: nr[0],
            )
            xs = [n for n, _ in pts]
            axes[0][col].plot(xs, [r["mb_per_s"] for _, r in pts], "o-", label=policy)
            axes[1][col].plot(xs, [100 * (r["success_rate"] or 0) for _, r in pts], "o-", label=policy)
        axes[0][col].set_title(f"aggregate committed MB/s, {kb} KB TGBs")
        axes[1][col].set_title(f"commit success rate (%), {kb} KB TGBs")
        for ax in (axes[0][col], axes[1][col]):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("producers")
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    full = [r for r in rows if r["mode"] == "full"]
    if full:
        fig, ax = plt.subplots(figsize=(7, 4))
        policies = list(dict.fromkeys(r["policy"] for r in full))
        xs = range(len(policies))
        for shift, mode in ((-0.2, "delta"), (0.2, "full")):
            vals = []
            for pol in policies:
                match = [r for r in rows if r["mode"] == mode and r["policy"] == pol and r["history_steps"]]
                vals.append(match[0]["mb_per_s"] if match else 0)
            ax.bar([x + shift for x in xs], vals, width=0.4, label=f"{mode} versions")
        ax.set_xticks(list(xs), policies)
        ax.set_ylabel("committed MB/s")
        ax.set_title(f"delta vs full-manifest versions, {full[0]['producers']} producers, "
                     f"history {full[0]['history_steps']} steps")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path.with_name(path.stem + "_full_manifest.png"), dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer points, shorter runs (about 2 minutes)")
    parser.add_argument("--rtt-ms", type=float, default=5.0)
    parser.add_argument("--history", type=int, default=20_000, help="pre-built steps for the delta/full comparison")
    parser.add_argument("--rate", type=float, default=50.0, help="TGBs per second each producer offers")
    parser.add_argument("--replot", action="store_true", help="only redraw the PNGs from the saved JSON")
    add_results_arg(parser)
    args = parser.parse_args()
    if args.replot:
        out = results_dir(args)
        plot(json.loads((out / "producer_scaling.json").read_text())["rows"], out / "producer_scaling.png")
        return
    if args.quick:
        counts, payloads, warmup, window, long_window = (1, 8, 32), (100_000,), 1.0, 4.0, 10.0
        full_policies, full_n = ("naive", "fixed:100", "dac"), 8
    else:
        counts, payloads, warmup, window, long_window = (1, 4, 8, 16, 32), (100_000, 1_000_000), 1.0, 5.0, 20.0
        full_policies, full_n = ("naive", "fixed:10", "fixed:100", "dac"), 8
    rows = []
    t0 = time.time()
    for payload in payloads:
        for n in counts:
            # DAC's gap grows with N (about 10 s at 32 producers here): a longer window at 32
            w = long_window if n >= 32 else window
            for policy in POLICIES:
                row = run_once(producers=n, policy=policy, payload=payload, warmup=warmup * w / window,
                               window=w, rtt_ms=args.rtt_ms, rate=args.rate)
                rows.append(row)
                print(fmt(row), flush=True)
    for policy in full_policies:
        for full in (False, True):
            row = run_once(producers=full_n, policy=policy, payload=payloads[0], warmup=warmup, window=window,
                           rtt_ms=args.rtt_ms, rate=args.rate, full_manifest=full, history=args.history)
            rows.append(row)
            print(fmt(row) + f"  [history {args.history}]", flush=True)
    result = {
        "model": f"MemoryStore behind LatencyStore rtt={args.rtt_ms:g} ms, 100 MB/s per stream, 404 = one rtt; "
        "producers are threads of one process; payloads dropped after transfer; a simulation",
        "warmup_s": warmup,
        "window_s": window,
        "window_at_32_producers_s": long_window,
        "rate_per_producer": args.rate,
        "elapsed_s": time.time() - t0,
        "rows": rows,
    }
    out = results_dir(args)
    save(out, "producer_scaling", {"quick": args.quick, **result})
    plot(rows, out / "producer_scaling.png")
    print(f"done in {result['elapsed_s']:.0f} s")


if __name__ == "__main__":
    main()
