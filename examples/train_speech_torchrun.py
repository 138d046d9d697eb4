"""Train a tiny speech-text model on CPU with torchrun, fed log-mel features by producer processes through TGBs.

    torchrun --nproc-per-node 2 --standalone examples/train_speech_torchrun.py --workdir /tmp/speech --steps 20

What it shows:

- rank 0 writes a small speech corpus (``torch_tgb.testing.audio``: chirps as
  WAV, FLAC and MP3 at 16, 22.05 and 44.1 kHz, each with a transcript; nothing
  downloaded), then starts producer processes (this script with
  ``--producer K``);
- a producer reads the files (``sources.Audio``), decodes and resamples them
  to 16 kHz mono and computes log-mel features (``DecodeAudio(features=
  LogMel(...))``), splices 25 audio tokens per second into the transcript
  (``SpliceAudioTokens``), packs samples into rows (``PackSamples``) and
  balances encoder + backbone cost over the dp ranks (``GlobalBatches(cost=
  VLMCost())``: clips priced by duration), then ``tgb.produce`` commits each
  global batch with the pipeline's state;
- each rank reads its rows with ``tgb.DataLoader``: ``audio_features``
  (ragged, ``audio_features_offsets`` per row), ``audio_feature_lengths`` and
  the packed ``input_ids``; a tiny audio encoder stacks 4 frames per token
  and its outputs replace the audio tokens of a tiny GPT with document masks;
  the loss is on the transcripts;
- ``--kill-after N`` preempts the job the hard way: once N steps are
  trained every rank and every producer is SIGKILLed, whatever was not
  checkpointed is lost; the same command without it resumes from the newest
  DCP checkpoint (model, optimizer, data cursor) and replays the lost steps
  exactly (same batches, same losses); producers resume from their committed
  pipeline state.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import torch_tgb as tgb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_vlm_torchrun import Block, newest_checkpoint  # noqa: E402  (the VLM example's block and helper)

AUDIO_TOKEN = 1001
STACK = 4  # feature frames per audio token: SpliceAudioTokens(downsample=4)
VOCAB = 1024
SEQ_KEYS = ("input_ids", "labels", "document_ids", "position_ids")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", required=True, help="holds speech/ (the corpus), ns/, checkpoints/ and logs")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps in total (default 20)")
    p.add_argument("--kill-after", type=int, default=None, help="SIGKILL every rank and producer after N steps")
    p.add_argument("--ckpt-every", type=int, default=5, help="checkpoint every N steps (default 5)")
    p.add_argument("--producers", type=int, default=2, help="producer processes rank 0 starts (default 2)")
    p.add_argument("--clips", type=int, default=48, help="audio files in the corpus (default 48)")
    p.add_argument("--max-seconds", type=float, default=1.5, help="longest clip of the corpus (default 1.5)")
    p.add_argument("--global-batch", type=int, default=4, help="rows per global batch (default 4)")
    p.add_argument("--seq-len", type=int, default=128, help="backbone tokens per row (default 128)")
    p.add_argument("--n-mels", type=int, default=40)
    p.add_argument("--d-model", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for a new step")
    p.add_argument("--log-batches", action="store_true", help="append each rank's batch digests and losses to "
                   "WORKDIR/batches-rankR.jsonl")
    p.add_argument("--producer", type=int, default=None, help=argparse.SUPPRESS)  # internal: run producer K
    p.add_argument("--world", type=int, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


# --- data: the corpus and the producer pipeline ---------------------------------------------------


def write_corpus(workdir: Path, n: int, max_seconds: float) -> list[str]:
    """The example's audio files with transcripts (written once)."""
    from torch_tgb.testing.audio import write_audio_files

    root = workdir / "speech"
    done = root / "DONE"
    if not done.exists():
        write_audio_files(root, n, seed=0, max_seconds=max_seconds)
        done.write_text("ok")
    return sorted(str(p) for p in root.iterdir() if p.suffix in (".wav", ".flac", ".mp3"))


def pipeline(paths: list[str], shard: int, shards: int, world: int, args: argparse.Namespace):
    """Audio -> decode + resample + log-mel -> splice audio tokens -> PackSamples -> GlobalBatches."""
    from torch_tgb import datapipes, sources
    from torch_tgb.testing.media import word_tokenizer
    from torch_tgb.transforms import LogMel, VLMCost

    clips = sources.Audio(paths, shard=(shard, shards), seed=1, epochs=None, tokenizer=word_tokenizer)
    audio = datapipes.DecodeAudio(clips, sample_rate=16000, features=LogMel(n_mels=args.n_mels), waveform=False)
    spliced = datapipes.SpliceAudioTokens(audio, audio_token_id=AUDIO_TOKEN, downsample=STACK)
    rows = datapipes.PackSamples(spliced, args.seq_len, window=16, label_ignore_ids=spliced.special_ids,
                                 ragged_keys=audio.ragged_keys)
    return datapipes.GlobalBatches(rows, global_batch_size=args.global_batch, layout=layout(world), balance="kk",
                                   cost=VLMCost())


def layout(world: int) -> tgb.Layout:
    return tgb.Layout(dp=world, seq_keys=SEQ_KEYS)


def run_producer(args: argparse.Namespace) -> int:
    workdir = Path(args.workdir)
    paths = write_corpus(workdir, args.clips, args.max_seconds)
    per = -(-args.steps // args.producers)
    report = tgb.produce(str(workdir / "ns"), pipeline(paths, args.producer, args.producers, args.world, args),
                         producer_id=f"p{args.producer}", layout=layout(args.world), max_steps=per, seal=False,
                         commit_policy="fixed:2", progress=False)
    done = f"offsets {report.start_offset}..{report.end_offset - 1}" if report.batches else "nothing left to produce"
    print(f"producer p{args.producer}: {done}", flush=True)
    return 0


def start_producers(args: argparse.Namespace, world: int) -> list[subprocess.Popen]:
    """This script in producer mode, one process per shard; a rerun resumes each producer id."""
    argv = _without_kill_after(sys.argv[1:])
    return [subprocess.Popen([sys.executable, __file__, *argv, "--producer", str(k), "--world", str(world)],
                             env=dict(os.environ, TGB_PROGRESS="0")) for k in range(args.producers)]


def _without_kill_after(argv: list[str]) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--kill-after":
            skip = True
        elif not arg.startswith("--kill-after="):
            out.append(arg)
    return out


# --- the model: stacked log-mel frames -> audio tokens of a tiny GPT ---------------------------------


class TinySpeechLM(nn.Module):
    """An audio encoder (4 frames per token, an MLP) + token/position embeddings + blocks (the backbone)."""

    def __init__(self, *, seq_len: int, n_mels: int, d_model: int, layers: int) -> None:
        super().__init__()
        self.audio = nn.Sequential(nn.Linear(STACK * n_mels, d_model), nn.GELU(), nn.Linear(d_model, d_model))
        self.tokens = nn.Embedding(VOCAB, d_model)
        self.positions = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        nn.init.normal_(self.tokens.weight, std=0.02)
        nn.init.normal_(self.positions.weight, std=0.02)

    def encode(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``[Σ frames, n_mels]`` of clips of ``lengths`` frames -> one embedding per audio token, clip by clip."""
        stacked = []
        for clip in features.split(lengths.tolist()):
            pad = -clip.shape[0] % STACK  # the last token's frames padded with silence (the floor, log10 1e-10)
            clip = F.pad(clip, (0, 0, 0, pad), value=-10.0)
            stacked.append(clip.reshape(-1, STACK * clip.shape[1]))
        x = torch.cat(stacked) if stacked else features.new_zeros((0, STACK * features.shape[1]))
        return self.audio((x + 4.0) / 4.0)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        ids = batch["input_ids"].long()
        x = self.tokens(ids)
        audio = ids == AUDIO_TOKEN
        x = x.masked_scatter(audio[..., None], self.encode(batch["audio_features"], batch["audio_feature_lengths"]))
        x = x + self.positions(batch["position_ids"].long().clamp(max=self.positions.num_embeddings - 1))
        mask = tgb.transforms.document_mask(batch["document_ids"])
        for block in self.blocks:
            x = block(x, mask)
        return self.norm(x) @ self.tokens.weight.T


def batch_digest(batch: dict[str, torch.Tensor]) -> str:
    import hashlib

    h = hashlib.blake2b(digest_size=10)
    for key in ("input_ids", "audio_features", "audio_features_offsets", "audio_feature_lengths"):
        h.update(batch[key].contiguous().numpy().tobytes())
    return h.hexdigest()


# --- training --------------------------------------------------------------------------------------


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
        write_corpus(workdir, args.clips, args.max_seconds)
        producers = start_producers(args, world)
    torch.manual_seed(0)
    ns = str(workdir / "ns")
    loader = tgb.DataLoader(ns, mesh=tgb.Mesh.from_env(dp=world), timeout=args.timeout)
    model = DistributedDataParallel(TinySpeechLM(seq_len=args.seq_len, n_mels=args.n_mels, d_model=args.d_model,
                                                 layers=args.layers))
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

    log = open(workdir / f"batches-rank{rank}.jsonl", "a") if args.log_batches else None
    batches = iter(loader)
    started, seconds_of_audio, first_loss, loss = time.perf_counter(), 0.0, None, torch.tensor(0.0)
    for step in range(start, args.steps):
        batch = next(batches, None)
        if batch is None:
            raise SystemExit(f"rank {rank}: the stream is sealed after {step} steps")
        logits = model(batch)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), batch["labels"].reshape(-1).long(), ignore_index=-100)
        first_loss = loss.item() if first_loss is None else first_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        seconds_of_audio += float(batch["audio_feature_lengths"].sum()) / 100  # 100 frames per second
        if log is not None:
            log.write(json.dumps({"step": step, "digest": batch_digest(batch), "loss": loss.item()}) + "\n")
            log.flush()
        if rank == 0 and (step % 5 == 0 or step == args.steps - 1):
            print(f"step {step:4d}  loss {loss.item():.4f}  clips {int(batch['audio_feature_lengths'].numel())}",
                  flush=True)
        if (step + 1) % args.ckpt_every == 0 or step + 1 == args.steps:
            model_sd, optim_sd = get_state_dict(model, optimizer)
            path = ckpt_dir / f"step-{step + 1:06d}"
            dcp.save({"model": model_sd, "optim": optim_sd, "data": DataState(loader), "step": torch.tensor(step + 1)},
                     checkpoint_id=str(path))
            dist.barrier()
            if rank == 0:
                record_watermark(ns, path.name, loader.state_dict())
        if args.kill_after is not None and step + 1 == args.kill_after:
            dist.barrier()  # every rank has logged the step: then the whole job goes, as a lost node takes it
            if rank == 0:
                print(f"killed after step {step + 1} (SIGKILL, simulated preemption); rerun without --kill-after "
                      "to resume", flush=True)
                for proc in producers:
                    proc.kill()
                    proc.wait()
            if log is not None:
                log.close()
            os.kill(os.getpid(), signal.SIGKILL)
    seconds = time.perf_counter() - started
    if log is not None:
        log.close()
    if rank == 0 and first_loss is not None:
        print(f"trained steps {start}..{args.steps - 1} on {world} ranks: {seconds_of_audio / max(seconds, 1e-9):.1f} "
              f"s of audio/s on rank 0, loss {first_loss:.4f} -> {loss.item():.4f}", flush=True)
    codes = [proc.wait() for proc in producers]
    failed = [k for k, code in enumerate(codes) if code != 0]
    for k in failed:
        print(f"producer p{k} exited {codes[k]}", file=sys.stderr, flush=True)
    dist.barrier()
    del model
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
