"""Train a tiny vision-language model on CPU with torchrun, fed images by producer processes through TGBs.

    torchrun --nproc-per-node 2 --standalone examples/train_vlm_torchrun.py --workdir /tmp/vlm --steps 20

What it shows:

- rank 0 writes a WebDataset of images and captions (``skimage.data``
  photographs where scikit-image is installed, plus drawn images of many sizes
  and aspect ratios, as JPEG/PNG/WebP), then starts producer processes (this
  script with ``--producer K``);
- a producer decodes, resizes (aspect kept, within a pixel budget), cuts
  patches, splices image tokens into the caption, packs samples into rows
  and balances encoder + backbone cost over the dp ranks and 2
  micro-batches (``GlobalBatches(cost=VLMCost(), micro_batches=2)``), then
  ``tgb.produce`` commits each global batch with the pipeline's state;
- each rank reads its rows with ``tgb.DataLoader``: ``pixel_values`` (uint8
  patches of all its rows' images, ``pixel_values_offsets`` per row),
  ``image_grid_thw`` and the packed ``input_ids``; the tiny encoder embeds the
  patches (and merges 2x2), the embeddings replace the image tokens, the tiny
  GPT attends within documents (``document_ids``);
- ``--stop-after N`` stops as a preemption would; rerunning the command
  without it resumes from the newest DCP checkpoint (model, optimizer, data
  cursor) with exactly the next steps; producers resume from their committed
  pipeline state.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import torch_tgb as tgb

PATCH, MERGE = 14, 2
IMAGE_TOKEN = 1000  # torch_tgb.testing.media.word_tokenizer's id for "<image>"
VOCAB = 1024
SEQ_KEYS = ("input_ids", "labels", "document_ids", "position_ids")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", required=True, help="holds images/ (the WebDataset), ns/, checkpoints/ and logs")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps in total (default 20)")
    p.add_argument("--stop-after", type=int, default=None, help="stop after this step, as if preempted")
    p.add_argument("--ckpt-every", type=int, default=5, help="checkpoint every N steps (default 5)")
    p.add_argument("--producers", type=int, default=2, help="producer processes rank 0 starts (default 2)")
    p.add_argument("--images", type=int, default=64, help="samples in the WebDataset (default 64)")
    p.add_argument("--global-batch", type=int, default=4, help="rows per global batch (default 4)")
    p.add_argument("--seq-len", type=int, default=128, help="backbone tokens per row (default 128)")
    p.add_argument("--max-pixels", type=int, default=112 * 112, help="pixel budget per image (default 112x112)")
    p.add_argument("--d-model", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for a new step")
    p.add_argument("--log-batches", action="store_true", help="append each rank's batch digests to WORKDIR/batches-rankR.jsonl")
    p.add_argument("--producer", type=int, default=None, help=argparse.SUPPRESS)  # internal: run producer K
    p.add_argument("--world", type=int, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


# --- data: the WebDataset and the producer pipeline -----------------------------------------------


def write_images(workdir: Path, n: int) -> list[str]:
    """The example's WebDataset (written once): images with captions, some with <image> placeholders."""
    from torch_tgb.testing.media import image_samples, write_media_tars

    root = workdir / "images"
    done = root / "DONE"
    if not done.exists():
        write_media_tars(root, image_samples(n, seed=0, max_side=256), per_tar=8)
        done.write_text("ok")
    return sorted(str(p) for p in root.glob("*.tar"))


def pipeline(urls: list[str], shard: int, shards: int, world: int, args: argparse.Namespace):
    """WebDataset -> decode -> resize -> patchify -> splice -> PackSamples -> GlobalBatches (VLM balance)."""
    from torch_tgb import datapipes, sources
    from torch_tgb.testing.media import word_tokenizer
    from torch_tgb.transforms import Resolution, VLMCost

    docs = sources.WebDataset(urls, shard=(shard, shards), seed=1, epochs=None, shuffle_buffer=8,
                              text_field="txt", tokenizer=word_tokenizer, on_error="skip")
    images = datapipes.DecodeImages(docs, on_error="skip")
    resized = datapipes.ResizeImages(images, Resolution(max_pixels=args.max_pixels), patch=PATCH, merge=MERGE)
    patches = datapipes.Patchify(resized, patch=PATCH, merge=MERGE)
    spliced = datapipes.SpliceImageTokens(patches, image_token_id=IMAGE_TOKEN, merge=MERGE)
    rows = datapipes.PackSamples(spliced, args.seq_len, window=16, label_ignore_ids=spliced.special_ids)
    return datapipes.GlobalBatches(rows, global_batch_size=args.global_batch, layout=layout(world), balance="kk",
                                   micro_batches=2, cost=VLMCost())


def layout(world: int) -> tgb.Layout:
    return tgb.Layout(dp=world, seq_keys=SEQ_KEYS)


def run_producer(args: argparse.Namespace) -> int:
    workdir = Path(args.workdir)
    urls = write_images(workdir, args.images)
    per = -(-args.steps // args.producers)
    # The stream is open-ended (epochs=None) and the trainer stops at --steps, so no producer seals it: with
    # producers started independently, seal=True on one that finishes before another has registered would end
    # the stream early. A finite data set is a job of declared shards (produce(shard=(k, n))), sealed when all
    # its shards are done.
    report = tgb.produce(str(workdir / "ns"), pipeline(urls, args.producer, args.producers, args.world, args),
                         producer_id=f"p{args.producer}", layout=layout(args.world), max_steps=per, seal=False,
                         commit_policy="fixed:2", progress=False)
    done = f"offsets {report.start_offset}..{report.end_offset - 1}" if report.batches else "nothing left to produce"
    print(f"producer p{args.producer}: {done}", flush=True)
    return 0


def start_producers(args: argparse.Namespace, world: int) -> list[subprocess.Popen]:
    """This script in producer mode, one process per shard; a rerun resumes each producer id."""
    argv = without_stop_after(sys.argv[1:])
    return [subprocess.Popen([sys.executable, __file__, *argv, "--producer", str(k), "--world", str(world)],
                             env=dict(os.environ, TGB_PROGRESS="0")) for k in range(args.producers)]


def without_stop_after(argv: list[str]) -> list[str]:
    """``argv`` less ``--stop-after N``: the command that runs (or resumes) to the end."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--stop-after":
            skip = True
        elif not arg.startswith("--stop-after="):
            out.append(arg)
    return out


# --- the model: a tiny patch encoder + a tiny GPT over the packed sequence --------------------------


class Block(nn.Module):
    def __init__(self, d: int, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.ln2(x))


class TinyVLM(nn.Module):
    """Patch embedding + 2x2 merger (the encoder), token/position embeddings + blocks (the backbone)."""

    def __init__(self, *, seq_len: int, d_model: int, layers: int) -> None:
        super().__init__()
        self.patch = nn.Sequential(nn.Linear(3 * PATCH * PATCH, d_model), nn.GELU())
        self.merger = nn.Linear(MERGE * MERGE * d_model, d_model)
        self.tokens = nn.Embedding(VOCAB, d_model)
        self.positions = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        nn.init.normal_(self.tokens.weight, std=0.02)
        nn.init.normal_(self.positions.weight, std=0.02)

    def encode(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """uint8 patches [n, 3·p·p] (merge groups consecutive) -> one embedding per image token."""
        x = self.patch(pixel_values.float() / 127.5 - 1.0)
        return self.merger(x.reshape(-1, MERGE * MERGE * x.shape[-1]))

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        ids = batch["input_ids"].long()
        x = self.tokens(ids)
        image = ids == IMAGE_TOKEN
        x = x.masked_scatter(image[..., None], self.encode(batch["pixel_values"]))  # image i -> its token run
        x = x + self.positions(batch["position_ids"].long().clamp(max=self.positions.num_embeddings - 1))
        mask = tgb.transforms.document_mask(batch["document_ids"])
        for block in self.blocks:
            x = block(x, mask)
        return self.norm(x) @ self.tokens.weight.T


def batch_digest(batch: dict[str, torch.Tensor]) -> str:
    import hashlib

    h = hashlib.blake2b(digest_size=10)
    for key in ("input_ids", "pixel_values", "pixel_values_offsets"):
        h.update(batch[key].contiguous().numpy().tobytes())
    return h.hexdigest()


# --- training --------------------------------------------------------------------------------------


def newest_checkpoint(ckpt_dir: Path) -> Path | None:
    done = sorted(p for p in ckpt_dir.glob("step-*") if (p / ".metadata").exists())
    return done[-1] if done else None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.producer is not None:
        return run_producer(args)
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.nn.parallel import DistributedDataParallel

    from torch_tgb.checkpoint import DataState, record_watermark

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    workdir = Path(args.workdir)
    ckpt_dir = workdir / "checkpoints"
    producers: list[subprocess.Popen] = []
    if rank == 0:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        write_images(workdir, args.images)
        producers = start_producers(args, world)
    torch.manual_seed(0)
    ns = str(workdir / "ns")
    loader = tgb.DataLoader(ns, mesh=tgb.Mesh.from_env(dp=world), timeout=args.timeout)
    model = DistributedDataParallel(TinyVLM(seq_len=args.seq_len, d_model=args.d_model, layers=args.layers))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)

    start = 0
    dist.barrier()
    resume_from = newest_checkpoint(ckpt_dir)
    if resume_from is not None:
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd, "data": DataState(loader), "step": torch.tensor(0)}
        dcp.load(state, checkpoint_id=str(resume_from))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        start = int(state["step"])
        if rank == 0:
            print(f"resumed from {resume_from.name} at step {start}", flush=True)
    stop = min(args.steps, args.stop_after) if args.stop_after is not None else args.steps

    log = open(workdir / f"batches-rank{rank}.jsonl", "a") if args.log_batches else None
    batches = iter(loader)
    started, images, first_loss, loss = time.perf_counter(), 0, None, torch.tensor(0.0)
    for step in range(start, stop):
        batch = next(batches, None)
        if batch is None:
            raise SystemExit(f"rank {rank}: the stream is sealed after {step} steps; --steps {args.steps} asks "
                             "for more")
        logits = model(batch)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), batch["labels"].reshape(-1).long(), ignore_index=-100)
        first_loss = loss.item() if first_loss is None else first_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        images += int(batch["image_grid_thw"].shape[0])
        if log is not None:
            log.write(json.dumps({"step": step, "digest": batch_digest(batch)}) + "\n")
            log.flush()
        if rank == 0 and (step % 5 == 0 or step == stop - 1):
            print(f"step {step:4d}  loss {loss.item():.4f}  images {int(batch['image_grid_thw'].shape[0])}", flush=True)
        if (step + 1) % args.ckpt_every == 0 or step + 1 == stop:
            model_sd, optim_sd = get_state_dict(model, optimizer)
            path = ckpt_dir / f"step-{step + 1:06d}"
            dcp.save({"model": model_sd, "optim": optim_sd, "data": DataState(loader), "step": torch.tensor(step + 1)},
                     checkpoint_id=str(path))
            dist.barrier()
            if rank == 0:
                record_watermark(ns, path.name, loader.state_dict())
    seconds = time.perf_counter() - started
    if log is not None:
        log.close()
    if rank == 0:
        if first_loss is not None:
            print(f"trained steps {start}..{stop - 1} on {world} ranks: {images / max(seconds, 1e-9):.1f} images/s "
                  f"on rank 0, loss {first_loss:.4f} -> {loss.item():.4f}", flush=True)
        if stop < args.steps:
            argv = without_stop_after(sys.argv[1:])
            cmd = shlex.join(["torchrun", "--nproc-per-node", str(world), "--standalone", sys.argv[0], *argv])
            print(f"stopped after step {stop} (simulated preemption). To resume, run: {cmd}", flush=True)
    preempted = stop < args.steps
    for proc in producers:
        if preempted:
            proc.terminate()  # the producers stop too; their committed state is where they resume
    codes = [proc.wait() for proc in producers]
    failed = [] if preempted else [k for k, code in enumerate(codes) if code != 0]
    for k in failed:
        print(f"producer p{k} exited {codes[k]}", file=sys.stderr, flush=True)
    dist.barrier()
    del model  # drop DDP's reducer first: its process group then goes in destroy_process_group, GIL released
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
