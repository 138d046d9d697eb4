"""Turn a pre-tokenised corpus into a sealed namespace and train over it for 2 epochs.

    python examples/static_corpus.py --ns /tmp/corpus-ns                      # synthetic documents
    python examples/static_corpus.py --ns /tmp/corpus-ns --tokens docs.npy    # a flat token array
    python examples/static_corpus.py --ns /tmp/corpus-ns --llmbatch data.llmbatch

Sources:

- default: synthetic "documents" (arithmetic token sequences of random length,
  learnable, so the loss visibly drops);
- ``--tokens FILE.npy``: a flat token array, optionally ``--doc-offsets
  FILE.npy`` (document d is ``tokens[off[d]:off[d+1]]``);
- ``--llmbatch FILE``: an LLMBATCH file, converted batch for batch
  (``torch_tgb.offline.convert_llmbatch``).

Token arrays go through ``torch_tgb.offline.write_dataset``: best-fit-decreasing
packing into ``--seq-len`` rows, each token stored once at the corpus's width
with the row's document lengths (readers derive ``labels``, -100 where a
document ends, and on request ``document_ids``/``position_ids``), a seeded
shuffle, global batches of ``--global-batch`` rows, committed and sealed. Rerunning resumes an interrupted conversion. Training
then reads the namespace twice (2 epochs); each epoch ends at the seal.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

import torch_tgb as tgb
from torch_tgb.offline import convert_llmbatch, write_dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tiny_gpt import TinyGPT, lm_loss  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ns", required=True, help="namespace URL or directory to create")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--tokens", default=None, help="flat token array (.npy)")
    src.add_argument("--llmbatch", default=None, help="LLMBATCH file")
    p.add_argument("--doc-offsets", default=None, help="document offsets (.npy) for --tokens")
    p.add_argument("--docs", type=int, default=400, help="synthetic documents (default 400)")
    p.add_argument("--vocab-size", type=int, default=128, help="synthetic vocabulary (default 128)")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--global-batch", type=int, default=16)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps", type=int, default=None, help="stop each epoch after this many steps")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def synthetic_documents(n: int, vocab: int, seed: int) -> list[np.ndarray]:
    """Documents ``a, a+d, a+2d, ...`` (mod vocab) of random length: predictable from context."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n):
        length, start, stride = rng.integers(4, 60), rng.integers(0, vocab), rng.integers(1, 4)
        docs.append(((start + stride * np.arange(length)) % vocab).astype(np.int64))
    return docs


def build(args: argparse.Namespace) -> tuple[dict, int]:
    layout = tgb.Layout(dp=1, seq_keys=("input_ids", "labels"))
    if args.llmbatch:
        summary = convert_llmbatch(args.llmbatch, args.ns, layout=layout)
        return summary, int(summary.get("vocab_size", 0)) or 0
    if args.tokens:
        flat = np.load(args.tokens)
        tokens = (flat, np.load(args.doc_offsets)) if args.doc_offsets else flat
        vocab = int(flat.max()) + 1
    else:
        tokens = synthetic_documents(args.docs, args.vocab_size, args.seed)
        vocab = args.vocab_size
    summary = write_dataset(
        args.ns, tokens, layout=layout, global_batch_size=args.global_batch, seq_len=args.seq_len,
        packing="bfd", shuffle_seed=args.seed,
    )
    return summary, vocab


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    summary, vocab = build(args)
    print(f"sealed namespace {args.ns}: {summary['batches']} global batches "
          f"({time.perf_counter() - started:.1f}s)", flush=True)
    if not vocab:  # LLMBATCH: learn the vocabulary size from the data
        vocab = 1 + max(int(b["input_ids"].max()) for b in tgb.TGBDataset(args.ns, mesh=tgb.Mesh(0, 1)))

    torch.manual_seed(args.seed)
    seq_len = int(summary.get("seq_len", args.seq_len))
    model = TinyGPT(vocab_size=vocab, seq_len=seq_len, d_model=32, layers=2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for epoch in range(args.epochs):
        dataset = tgb.TGBDataset(args.ns, mesh=tgb.Mesh(dp_rank=0, dp_size=1))
        losses, steps = [], 0
        for batch in dataset:  # ends at the seal: one epoch
            loss = lm_loss(model(batch["input_ids"].long()), batch["labels"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            steps += 1
            if args.steps is not None and steps >= args.steps:
                break
        print(f"epoch {epoch}: {steps} steps, mean loss {np.mean(losses):.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
