"""The body of ``tgb produce``: a token source feeding a :class:`~torch_tgb.Producer`."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from torch_tgb.cli._common import CommandError, argument_errors, print_json, storage_options
from torch_tgb.cli._producer_setup import codecs, observed, segments
from torch_tgb.layout import Layout

__all__ = ["file_batches", "produce", "synthetic_batch"]


def synthetic_batch(offset: int, *, global_batch: int, seq_len: int, vocab_size: int, seed: int) -> dict[str, Any]:
    """Global batch ``offset`` of a learnable synthetic stream: a function of (seed, offset) only.

    Each sequence is a Markov chain over the first 16 token ids (fewer if ``vocab_size`` is
    smaller): the next token is ``(5 * previous + 3) % 16`` with probability 0.9 and a random
    one of the 16 otherwise. A model learns it quickly, so its loss visibly falls (from
    ``ln(vocab_size)`` towards about 0.5 nats) instead of sitting at ``ln(vocab_size)`` as on
    uniform noise. ``labels`` are ``input_ids`` shifted by one token.
    """
    import numpy as np
    import torch

    states = min(vocab_size, _STATES)
    rng = np.random.default_rng([seed, offset])
    tokens = np.empty((global_batch, seq_len + 1), dtype=np.int64)
    tokens[:, 0] = rng.integers(0, states, size=global_batch)
    noise = rng.random((global_batch, seq_len + 1)) < _NOISE
    random_tokens = rng.integers(0, states, size=(global_batch, seq_len + 1))
    for t in range(1, seq_len + 1):
        follow = (tokens[:, t - 1] * 5 + 3) % states
        tokens[:, t] = np.where(noise[:, t], random_tokens[:, t], follow)
    out = torch.from_numpy(tokens.astype(np.int32))
    return {"input_ids": out[:, :-1].contiguous(), "labels": out[:, 1:].contiguous()}


#: share of random tokens in the synthetic stream, and the token ids its chain visits
_NOISE = 0.1
_STATES = 16


def file_batches(
    path: str, *, dtype: str, global_batch: int, seq_len: int
) -> tuple[int, Callable[[int], dict[str, Any]]]:
    """(number of full batches in the file, offset → batch) for a flat token file.

    Sequence ``j`` of batch ``i`` is tokens ``[(i*B+j)*L, (i*B+j)*L + L + 1)``,
    so every token is predicted once; a short tail is dropped.
    """
    import numpy as np
    import torch

    try:
        if path.endswith(".npy"):
            tokens = np.load(path, mmap_mode="r")
        else:
            tokens = np.memmap(path, dtype=np.dtype(dtype), mode="r")
    except (OSError, ValueError, TypeError) as e:
        raise CommandError(f"cannot read token file {path!r}: {e}") from e
    if tokens.ndim != 1:
        raise CommandError(f"token file {path!r} must be a flat array, got shape {tokens.shape}")
    per_batch = global_batch * seq_len
    available = max(0, (len(tokens) - 1) // per_batch)

    def batch(offset: int) -> dict[str, Any]:
        starts = (offset * global_batch + np.arange(global_batch)) * seq_len
        rows = np.stack([np.asarray(tokens[s : s + seq_len + 1]) for s in starts]).astype(np.int32)
        t = torch.from_numpy(rows)
        return {"input_ids": t[:, :-1].contiguous(), "labels": t[:, 1:].contiguous()}

    return available, batch


#: token ids of the synthetic stream are below this unless --vocab-size says otherwise
SYNTHETIC_VOCAB = 50257

#: batches of the endless synthetic stream written when --steps is not given
SYNTHETIC_DEFAULT_STEPS = 100


def produce(args: argparse.Namespace) -> int:
    from torch_tgb._progress import rate_text
    from torch_tgb.cli._interrupt import INTERRUPTED_EXIT, stop_on_interrupt
    from torch_tgb.cli._produce_progress import ProduceProgress

    for name in ("steps", "global_batch", "seq_len", "dp", "cp", "vocab_size"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise CommandError(f"--{name.replace('_', '-')} must be at least 1")
    if args.global_batch % args.dp:
        raise CommandError(f"--global-batch {args.global_batch} is not divisible by --dp {args.dp}")
    if args.seq_len % args.cp:
        raise CommandError(f"--seq-len {args.seq_len} is not divisible by --cp {args.cp}")
    if not getattr(args, "source", None):
        for flag in ("mix", "balance"):
            if getattr(args, flag, None) is not None:
                raise CommandError(f"--{flag} applies to --source corpora; give --source")
    if getattr(args, "ray", None):
        from torch_tgb.cli._produce_ray import produce_fleet

        return produce_fleet(args)
    if getattr(args, "shard", None) is not None and not getattr(args, "source", None):
        raise CommandError("--shard I/N runs shard I of a --source corpus; give --source (or --ray for a fleet)")
    if getattr(args, "source", None):
        if args.tokens:
            raise CommandError("--source and --tokens are two inputs; give one")
        from torch_tgb.cli._produce_source import produce_source

        return produce_source(args)
    from torch_tgb.producer import Producer

    steps = args.steps
    if args.tokens:
        available, make = file_batches(
            args.tokens, dtype=args.dtype, global_batch=args.global_batch, seq_len=args.seq_len
        )
        if steps is None or available < steps:
            steps = available
    else:
        if steps is None:
            steps = SYNTHETIC_DEFAULT_STEPS
            print(f"tgb produce: --steps not given: writing {steps} TGBs of the synthetic stream "
                  f"(offsets 0..{steps - 1})", file=sys.stderr)

        def make(offset: int) -> dict[str, Any]:
            return synthetic_batch(
                offset, global_batch=args.global_batch, seq_len=args.seq_len,
                vocab_size=SYNTHETIC_VOCAB if args.vocab_size is None else args.vocab_size, seed=args.seed
            )

    layout = Layout(dp=args.dp, cp=args.cp, seq_keys=("input_ids", "labels"))
    started = time.perf_counter()
    with argument_errors():  # a bad --producer-id, --commit-policy or --max-lag
        producer = Producer(
            args.ns,
            producer_id=args.producer_id,
            layout=layout,
            commit_policy=args.commit_policy,
            max_lag=args.max_lag,
            storage_options=storage_options(args),
            config=segments(args),
            codecs=codecs(args),
        )
    bar = ProduceProgress(f"produce {args.producer_id}", per_batch=(args.global_batch * args.seq_len, "token"),
                          batches=steps, stats_interval=args.stats_interval)
    with stop_on_interrupt(threading.Event(), "the TGB in hand") as stop, producer, observed(producer, args), \
            bar.watch(producer):
        start = producer.resume_offset
        interval = 1.0 / args.rate if args.rate else 0.0
        next_at = time.perf_counter()
        end = start
        for offset in range(start, steps):
            if interval and stop.wait(max(0.0, next_at - time.perf_counter())):
                break
            next_at += interval
            if stop.is_set():
                break
            producer.append(make(offset), offset=offset)
            end = offset + 1
            bar.on_append(offset)
        producer.flush()
        interrupted = stop.is_set() and end < steps
        if args.seal and not interrupted:
            producer.close(seal=True)
        stats = producer.stats()
        sealed = producer.sealed
    seconds = time.perf_counter() - started
    written = max(0, end - start)
    summary = {
        "ns": args.ns,
        "producer_id": args.producer_id,
        "resumed_at": start,
        "written": written,
        "next_offset": max(start, end),
        "done": bool(args.seal) and not interrupted,
        "sealed": sealed,
        "interrupted": interrupted,
        "skipped": {},
        "progress": bar.summary(),
        "seconds": round(seconds, 3),
        "stats": stats,
    }
    code = INTERRUPTED_EXIT if interrupted else 0
    if args.json:
        print_json(summary)
        return code
    rate = bar.rate()
    speed = f"; {rate_text(rate, bar.unit)}" if rate else ""
    if written:
        how = " (interrupted: Ctrl-C)" if interrupted else ""
        print(f"producer {args.producer_id}: wrote offsets {start}..{end - 1} ({written} TGBs{how}) "
              f"in {seconds:.2f}s{speed}")
    elif interrupted:
        print(f"producer {args.producer_id}: interrupted (Ctrl-C) before its first TGB")
    else:
        print(f"producer {args.producer_id}: offsets 0..{start - 1} were already committed, nothing to write")
    if interrupted:
        print(f"producer {args.producer_id}: closed (not done): everything appended is committed; rerun the same "
              f"command to continue from offset {end}")
    elif args.seal:
        print(f"producer {args.producer_id}: done; "
              + ("the namespace is sealed (end of stream)" if sealed
                 else "the namespace is sealed when the producers still running are done too"))
    return code
