"""Message-queue baseline (seed 000 compares with Kafka): the same global batches through Redis Streams.

Starts Debian's ``redis-server`` on 127.0.0.1 (a free port, no persistence)
and stops it after; skipped with a printed reason when it is absent. One
stream message = one global batch (``--batch-bytes``).

1. Producer throughput at 1/4/8 producer processes: Redis ``XADD`` vs
   ``tgb.Producer`` committing the same batches to a local namespace
   (commit policy dac), interleaved, each for ``--seconds``.
2. Consumers at 8/32 (threads, one connection each): every consumer needs
   1/C of each batch but a stream delivers whole messages, so each reads the
   whole batch: read amplification (bytes read / bytes used) and delivery
   latency (XADD to XREAD return) p50/p95. torch_tgb's range-read
   amplification for the same world sizes is in consumer_read.json.

Usage: python benchmarks/redis_queue.py [--quick] [--results-dir DIR]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, pct, results_dir, save, spread

STREAM = "tgb"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> RedisServer:
        import redis

        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--protected-mode", "yes"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port)
        for _ in range(100):
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not answer on 127.0.0.1")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def _redis_producer(port: int, payload: int, seconds: float, out: Any) -> None:
    import redis

    client = redis.Redis(port=port)
    data = b"x" * payload
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        client.xadd(STREAM, {"b": data, "t": repr(time.time())}, maxlen=64, approximate=True)
        n += 1
    out.put(n)


def _tgb_producer(ns: str, index: int, payload: int, seconds: float, out: Any) -> None:
    import torch

    import torch_tgb as tgb

    batch = {"payload": torch.zeros((8, payload // 8), dtype=torch.uint8)}
    n, end = 0, time.perf_counter() + seconds
    with tgb.Producer(ns, producer_id=f"p{index}", layout=tgb.Layout(dp=8), commit_policy="dac") as p:
        while time.perf_counter() < end:
            p.append(batch, offset=n)
            n += 1
        p.flush()
    out.put(n)


def producers(kind: str, n: int, port: int, payload: int, seconds: float, tmp: str) -> float:
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    ns = f"{tmp}/ns-{kind}-{n}-{time.time_ns()}"
    procs = [ctx.Process(target=_redis_producer, args=(port, payload, seconds, out)) if kind == "redis"
             else ctx.Process(target=_tgb_producer, args=(ns, i, payload, seconds, out)) for i in range(n)]
    for p in procs:
        p.start()
    total = sum(out.get(timeout=seconds + 120) for _ in procs)
    for p in procs:
        p.join()
    shutil.rmtree(ns, ignore_errors=True)
    return total * payload / seconds


def consumers(port: int, count: int, payload: int, messages: int) -> dict[str, Any]:
    import redis

    client = redis.Redis(port=port)
    client.delete(STREAM)
    latencies: list[float] = []
    read_bytes = [0] * count
    lock = threading.Lock()
    ready = threading.Barrier(count + 1)

    def consume(i: int) -> None:
        c = redis.Redis(port=port)
        last, got = "$", 0
        ready.wait()
        while got < messages:
            reply = c.xread({STREAM: last}, block=5000, count=16)
            if not reply:
                break
            for msg_id, fields in reply[0][1]:
                now = time.time()
                last, got = msg_id, got + 1
                read_bytes[i] += len(fields[b"b"])
                with lock:
                    latencies.append(now - float(fields[b"t"]))

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    ready.wait()
    time.sleep(0.2)
    data = b"x" * payload
    started = time.perf_counter()
    for _ in range(messages):
        client.xadd(STREAM, {"b": data, "t": repr(time.time())})
        time.sleep(0.005)
    for t in threads:
        t.join()
    used = payload / count * messages * count
    return {"consumers": count, "messages": messages, "read_amplification": sum(read_bytes) / used,
            "latency_p50_ms": pct(latencies, 50) * 1e3, "latency_p95_ms": pct(latencies, 95) * 1e3,
            "elapsed_s": time.perf_counter() - started}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batch-bytes", type=int, default=1 << 20, help="bytes of one global batch")
    parser.add_argument("--seconds", type=float, default=None, help="producer run length")
    add_results_arg(parser)
    args = parser.parse_args(argv)
    out = results_dir(args)
    if shutil.which("redis-server") is None:
        reason = "redis-server not found (apt-get install redis-server); Redis Streams baseline skipped"
        print(reason)
        save(out, "redis_queue", {"skipped": reason})
        return 0
    seconds = args.seconds or (2.0 if args.quick else 4.0)
    counts = (1, 4) if args.quick else (1, 4, 8)
    rounds = 1 if args.quick else 2
    result: dict[str, Any] = {"batch_bytes": args.batch_bytes, "seconds": seconds, "producers": [],
                              "consumers": [], "server": "redis-server on 127.0.0.1, no persistence",
                              "tgb": "tgb.Producer to a local namespace (file system), commit policy dac"}
    with RedisServer() as server, tempfile.TemporaryDirectory(prefix="tgb-redis-") as tmp:
        for n in counts:
            got: dict[str, list[float]] = {"redis": [], "tgb": []}
            for r in range(rounds):
                for kind in (("redis", "tgb") if r % 2 == 0 else ("tgb", "redis")):
                    got[kind].append(producers(kind, n, server.port, args.batch_bytes, seconds, tmp))
            row = {"producers": n, "redis_MBps": spread([x / 1e6 for x in got["redis"]]),
                   "tgb_MBps": spread([x / 1e6 for x in got["tgb"]])}
            result["producers"].append(row)
            print(f"{n} producers: redis {row['redis_MBps']['median']:.0f} MB/s, tgb (local fs) "
                  f"{row['tgb_MBps']['median']:.0f} MB/s", flush=True)
        for c in (8, 32):
            row = consumers(server.port, c, args.batch_bytes // 4, 20 if args.quick else 60)
            result["consumers"].append(row)
            print(f"{c} consumers: read amplification {row['read_amplification']:.1f}x, latency p50 "
                  f"{row['latency_p50_ms']:.1f} ms p95 {row['latency_p95_ms']:.1f} ms", flush=True)
    save(out, "redis_queue", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
