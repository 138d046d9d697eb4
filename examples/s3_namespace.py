"""Produce, train, checkpoint, restart and reclaim against an S3 namespace.

    export AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=...
    python examples/s3_namespace.py --ns s3://my-bucket/runs/demo --endpoint-url https://s3.example.com

Any S3-compatible store with conditional writes (``If-None-Match: *``) works:
AWS S3, MinIO, Ceph RGW, R2, a local moto server. Credentials come from the
usual places (environment, ~/.aws, instance roles) or ``-o key=... -o
secret=...``; they are handed to fsspec/s3fs and never printed.

One process: a producer thread writes a learnable synthetic token stream (the loss
falls) with the DAC
commit policy; the training loop reads it with ``TGBDataset``, checkpoints
every ``--ckpt-every`` steps (model + data cursor in a local file, watermark
in the namespace), simulates a restart at half the steps by building a new
dataset from the last checkpoint, and reclaims what no checkpoint needs.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

import torch_tgb as tgb
from torch_tgb.checkpoint import Reclaimer, keep_last, record_watermark
from torch_tgb.errors import DataTimeout

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tiny_gpt import TinyGPT, learnable_batch, lm_loss  # noqa: E402


def parse_options(items: list[str]) -> dict[str, Any]:
    """``["a=1", "client_kwargs.region_name=x"]`` → nested dict (values: JSON if they parse)."""
    options: dict[str, Any] = {}
    for item in items:
        key, _, value = item.partition("=")
        node = options
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        try:
            node[leaf] = json.loads(value)
        except ValueError:
            node[leaf] = value
    return options


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ns", required=True, help="namespace URL, e.g. s3://bucket/prefix")
    p.add_argument("--endpoint-url", default=None, help="S3 endpoint (omit for AWS)")
    p.add_argument("-o", "--storage-option", action="append", default=[], metavar="KEY=VALUE",
                   help="extra fsspec/s3fs option, repeatable (dotted keys nest: client_kwargs.region_name=eu-west-1)")
    p.add_argument("--steps", type=int, default=40, help="training steps (default 40)")
    p.add_argument("--ckpt-every", type=int, default=5, help="checkpoint every N steps (default 5)")
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument("--checkpoint-dir", default=None, help="local checkpoint directory (default: a temp dir)")
    return p.parse_args(argv)


def produce(args: argparse.Namespace, opts: dict[str, Any], errors: list[BaseException]) -> None:
    try:
        layout = tgb.Layout(dp=1, seq_keys=("input_ids", "labels"))
        with tgb.Producer(args.ns, producer_id="s3-example", layout=layout, storage_options=opts) as producer:
            for offset in range(producer.resume_offset, args.steps):
                producer.append(learnable_batch(offset, batch=args.global_batch, seq_len=args.seq_len, seed=7),
                                offset=offset)
            producer.close(seal=True)
    except BaseException as e:  # reported by the main thread
        errors.append(e)


def save(path: Path, step: int, model, optimizer, dataset, args, opts) -> None:
    """Checkpoint locally, then (only then) protect its data with a watermark; keep 2; reclaim."""
    state = dataset.state_dict()
    torch.save({"model": model.state_dict(), "optim": optimizer.state_dict(), "step": step}, path / f"step-{step}.pt")
    (path / f"step-{step}.data.json").write_text(json.dumps(state))
    record_watermark(args.ns, f"step-{step}", state, storage_options=opts)
    keep_last(args.ns, 2, storage_options=opts)
    report = Reclaimer(args.ns, storage_options=opts).run_once()
    print(f"checkpoint step-{step}: reclaimed {report.objects} objects ({report.bytes} bytes), "
          f"safe step {report.safe_step}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    opts = parse_options(args.storage_option)
    if args.endpoint_url:
        opts["endpoint_url"] = args.endpoint_url
    ckpt = Path(args.checkpoint_dir) if args.checkpoint_dir else Path(__import__("tempfile").mkdtemp(prefix="tgb-s3-ckpt-"))
    ckpt.mkdir(parents=True, exist_ok=True)

    errors: list[BaseException] = []
    producer = threading.Thread(target=produce, args=(args, opts, errors), daemon=True)
    producer.start()

    torch.manual_seed(0)
    model = TinyGPT(vocab_size=args.vocab_size, seq_len=args.seq_len, d_model=32, layers=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    mesh = tgb.Mesh(dp_rank=0, dp_size=1)
    dataset = tgb.TGBDataset(args.ns, mesh=mesh, timeout=10, storage_options=opts)
    restart_at = args.steps // 2
    step, started, first_loss = 0, time.perf_counter(), None
    batches = iter(dataset)
    while step < args.steps:
        if step == restart_at and step > 0:
            # simulated restart: a new process would do exactly this from its last checkpoint
            last = max(int(p.stem.split("-")[1].split(".")[0]) for p in ckpt.glob("step-*.data.json"))
            saved = torch.load(ckpt / f"step-{last}.pt", weights_only=True)
            model.load_state_dict(saved["model"])
            optimizer.load_state_dict(saved["optim"])
            dataset = tgb.TGBDataset(args.ns, mesh=mesh, timeout=10, storage_options=opts)
            dataset.load_state_dict(json.loads((ckpt / f"step-{last}.data.json").read_text()))
            batches, step, restart_at = iter(dataset), last, -1
            print(f"restarted from checkpoint step-{last}", flush=True)
        try:
            batch = next(batches)
        except StopIteration:
            break  # the producer sealed the stream
        except DataTimeout:
            # A wait over the timeout ends one iterator (after periodic warnings). The producer's
            # own error, if it failed, says why; else a new iterator continues where this one stopped.
            if errors:
                raise errors[0] from None
            if not producer.is_alive():
                raise
            batches = iter(dataset)
            continue
        loss = lm_loss(model(batch["input_ids"].long()), batch["labels"])
        first_loss = loss.item() if first_loss is None else first_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        if step % args.ckpt_every == 0 or step == args.steps:
            save(ckpt, step, model, optimizer, dataset, args, opts)
    producer.join()
    if errors:
        raise errors[0]
    store = tgb.open_store(args.ns, opts)
    stored = store.list("data/")
    stats = dataset.stats()
    print(f"trained {step} steps in {time.perf_counter() - started:.1f}s, loss {first_loss:.4f} -> {loss.item():.4f}; "
          f"{stats.bytes_read} bytes read in {stats.requests} requests; "
          f"{len(stored)} TGB objects still stored in {store.url}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
