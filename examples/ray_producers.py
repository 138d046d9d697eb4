"""Preprocessing on a Ray fleet feeding a torchrun training job; a producer actor is killed mid-run.

    python examples/ray_producers.py --workdir /tmp/ray-run            # needs: pip install 'torch-tgb[ray]'

What happens:

1. the example writes a text corpus (generated sentences) as WebDataset tar
   shards and trains a small byte-pair-encoding tokenizer on it with the
   ``tokenizers`` library;
2. a fleet of Ray actors (``--producers``, on a local Ray) preprocesses it:
   shard ``i`` of ``--shards`` is read, normalised and BPE-tokenised (the
   CPU-heavy part), packed into rows (``datapipes.Pack``) and cut into global
   batches, committed as TGBs through ``tgb.produce``;
3. a training job (``torchrun``, 2 ranks, gloo, CPU, a tiny GPT) reads the
   namespace while it is being produced, each rank its own slice;
4. once training is stepping, one producer actor is killed (``ray.kill``);
   Ray restarts it, its shard resumes at its last commit, and the job keeps
   stepping. At the seal the job has trained on every committed step exactly
   once, and the example says so (exit status 1 if not).

Backpressure closes the loop: the trainer checkpoints every ``--ckpt-every``
steps and records a watermark; the fleet runs with ``max_lag``, so producers
pause while the namespace is that many steps ahead of the last checkpoint.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
import time
import unicodedata
from pathlib import Path

import numpy as np
import torch
from torchdata.nodes import BaseNode

import torch_tgb as tgb



def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", nargs="?", choices=("run", "train"), default="run", help="'train' is the torchrun job")
    p.add_argument("--workdir", required=True)
    p.add_argument("--docs", type=int, default=4000, help="generated text documents")
    p.add_argument("--shards", type=int, default=8, help="shards (tar files and producer ids)")
    p.add_argument("--producers", type=int, default=2, help="Ray actors")
    p.add_argument("--vocab-size", type=int, default=1000, help="BPE vocabulary")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--kill-after", type=int, default=5, help="kill a producer once the job trained this many steps")
    p.add_argument("--ckpt-every", type=int, default=5, help="trainer: checkpoint (and watermark) every N steps")
    p.add_argument("--max-lag", type=int, default=12, help="producers pause this many steps ahead of the checkpoints")
    p.add_argument("--timeout", type=float, default=300.0, help="trainer: seconds to wait for a new step")
    return p.parse_args(argv)


# --- the corpus and the tokenizer (made once, by the driver) ----------------------------------


def make_corpus(workdir: Path, *, docs: int, shards: int, vocab_size: int) -> tuple[list[str], str]:
    """Tar shards of ``<key>.txt`` documents and a BPE tokenizer trained on them."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    rng = np.random.default_rng(0)
    syllables = ["ka", "to", "ri", "ne", "so", "lu", "ma", "pe", "di", "go", "an", "el", "is", "or", "um"]
    words = ["".join(rng.choice(syllables, size=int(rng.integers(1, 4)))) for _ in range(400)]
    texts = []
    for _ in range(docs):
        sentences = [" ".join(rng.choice(words, size=int(rng.integers(3, 12)))).capitalize() + "."
                     for _ in range(int(rng.integers(1, 6)))]
        texts.append(" ".join(sentences))
    urls = []
    for s in range(shards):
        path = workdir / "corpus" / f"shard-{s:04d}.tar"
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w") as tar:
            for k in range(s, docs, shards):
                data = texts[k].encode()
                info = tarfile.TarInfo(f"doc{k:07d}.txt")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        urls.append(str(path))
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["[PAD]", "[UNK]"]))
    tokenizer_path = str(workdir / "tokenizer.json")
    tokenizer.save(tokenizer_path)
    return urls, tokenizer_path


# --- the producer-side pipeline (built inside the Ray actors) ---------------------------------


def pipeline_factory(urls: list[str], tokenizer_path: str, *, seq_len: int, global_batch: int):
    """``make_pipeline(shard_index, shard_count)`` for the fleet; shipped to the actors by value."""

    def make_pipeline(shard_index: int, shard_count: int) -> BaseNode[dict[str, torch.Tensor]]:
        from tokenizers import Tokenizer

        from torch_tgb import sources
        from torch_tgb.datapipes import document_batches

        bpe = Tokenizer.from_file(tokenizer_path)

        def tokenize(texts: list[str]) -> list[list[int]]:  # the CPU-heavy step
            normalised = [unicodedata.normalize("NFKC", t).lower() for t in texts]
            return [enc.ids for enc in bpe.encode_batch(normalised)]

        docs = sources.WebDataset(urls, text_field="txt", tokenizer=tokenize, shard=(shard_index, shard_count))
        # BFD packing over windows of 64 documents -> GlobalBatches (the short last batch padded)
        return document_batches(docs, seq_len=seq_len, global_batch_size=global_batch, packing="bfd",
                                packing_window=64, layout=tgb.Layout(dp=2))

    return make_pipeline


# --- the training job (torchrun, 2 ranks) -------------------------------------------------------


def train(args: argparse.Namespace) -> int:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _tiny_gpt import TinyGPT, lm_loss

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    workdir = Path(args.workdir)
    torch.manual_seed(0)
    model = DistributedDataParallel(TinyGPT(vocab_size=args.vocab_size, seq_len=args.seq_len, d_model=32, layers=1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loader = tgb.DataLoader(str(workdir / "ns"), mesh=tgb.Mesh.from_env(dp=world), timeout=args.timeout)
    steps = 0
    (workdir / "checkpoints").mkdir(exist_ok=True)
    for batch in loader:  # ends at the seal
        loss = lm_loss(model(batch["input_ids"].long()), batch["labels"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        steps += 1
        if rank == 0:
            (workdir / "trained.txt").write_text(str(steps))
            if steps % 10 == 0:
                print(f"step {steps:5d}  loss {loss.item():.3f}", flush=True)
            if steps % args.ckpt_every == 0:  # a (model-only) checkpoint, durable, then its watermark
                checkpoint_id = f"step-{steps:06d}"
                torch.save(model.module.state_dict(), workdir / "checkpoints" / f"{checkpoint_id}.pt")
                tgb.checkpoint.record_watermark(str(workdir / "ns"), checkpoint_id, loader.state_dict())
                tgb.checkpoint.keep_last(str(workdir / "ns"), 2)  # the safe boundary moves: producers go on
    if rank == 0:
        print(f"trained {steps} steps on {world} ranks, final loss {loss.item():.3f}", flush=True)
        (workdir / "trained.txt").write_text(str(steps))
    dist.barrier()
    dist.destroy_process_group()
    return 0


# --- the driver ---------------------------------------------------------------------------------


def trained(workdir: Path) -> int:
    try:
        return int((workdir / "trained.txt").read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def run(args: argparse.Namespace) -> int:
    import ray

    from torch_tgb.integrations.ray import Fleet, FleetConfig

    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    ns = str(workdir / "ns")
    urls, tokenizer_path = make_corpus(workdir, docs=args.docs, shards=args.shards, vocab_size=args.vocab_size)
    print(f"corpus: {args.docs} documents in {args.shards} tar shards; BPE tokenizer of {args.vocab_size} tokens")

    ray.init(address="local", num_cpus=max(2, args.producers), include_dashboard=False, log_to_driver=False)
    layout = tgb.Layout(dp=2)  # the pipeline's token rows, cut in 2 dp slices
    make_pipeline = pipeline_factory(urls, tokenizer_path, seq_len=args.seq_len, global_batch=args.global_batch)
    fleet = Fleet(ns, make_pipeline, num_producers=args.producers, num_shards=args.shards, layout=layout, seal=True,
                  max_lag=args.max_lag, progress=False, fleet=FleetConfig(poll_interval_s=0.2))
    fleet.start()
    while sum(s.committed for s in fleet.stats()) < 1:  # the trainer starts once the namespace exists
        if not fleet.running:
            fleet.wait()  # raises the fleet's error
        time.sleep(0.1)

    here = str(Path(__file__).resolve())
    trainer = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", here, "train",
         "--workdir", str(workdir), "--vocab-size", str(args.vocab_size), "--seq-len", str(args.seq_len),
         "--timeout", str(args.timeout), "--ckpt-every", str(args.ckpt_every)],
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    killed_at = None
    try:
        while trainer.poll() is None and killed_at is None and fleet.running:
            running = fleet.actors(running=True)
            if trained(workdir) >= args.kill_after and running:
                ray.kill(running[0], no_restart=False)  # Ray restarts it; its shard resumes at its last commit
                killed_at = trained(workdir)
                print(f"killed a producer actor while the job was at step {killed_at}", flush=True)
            time.sleep(0.1)
        report = fleet.wait()
    except BaseException:
        trainer.terminate()  # the fleet failed: the job would wait for steps that never come
        raise
    print(report.summary(), flush=True)
    code = trainer.wait()
    ray.shutdown()
    steps = trained(workdir)
    ok = code == 0 and killed_at is not None and steps == report.steps and steps > killed_at
    print(f"{'OK' if ok else 'FAILED'}: the job trained {steps} steps of {report.steps} committed "
          f"(producer killed at step {killed_at}, {report.worker_deaths} attempt(s) lost and resumed)", flush=True)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return train(args) if args.mode == "train" else run(args)


if __name__ == "__main__":
    sys.exit(main())
