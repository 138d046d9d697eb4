"""HF accelerate on a TGB namespace: ``accelerator.prepare`` and ``save_state``/``load_state``, exact resume.

    torchrun --nproc-per-node 2 --standalone examples/accelerate_train.py --workdir /tmp/acc-run --stop-after 12
    torchrun --nproc-per-node 2 --standalone examples/accelerate_train.py --workdir /tmp/acc-run \\
        --resume /tmp/acc-run/ckpt/step_5

accelerate's own training loop with one change: the loader is a
``tgb.DataLoader`` (each process reads its own dp slice). ``prepare`` keeps it
as it is (no re-sharding, no dispatching from process 0) and ``save_state``
stores its position with the model and optimizer; after ``load_state`` the
loop continues at the first step not trained. Do not call
``accelerator.skip_first_batches`` on it: the loaded state already skips.
``--log-batches`` appends each rank's batches to ``WORKDIR/batches-rankR.jsonl``.
On a GPU pass ``device=accelerator.device`` to the loader (accelerate does not
move a loader it keeps). Needs the ``accelerate`` extra.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator

import torch_tgb as tgb

GLOBAL_BATCH = 8
FEATURES = 16


def write_namespace(ns: str, num_steps: int) -> None:
    """A sealed synthetic regression stream; ``sample_id`` = step * 1000 + row says where each row came from."""
    with tgb.Producer(ns, producer_id="p0", layout=tgb.Layout(dp=2)) as p:
        for step in range(p.resume_offset, num_steps):
            g = torch.Generator().manual_seed(step)
            x = torch.randn(GLOBAL_BATCH, FEATURES, generator=g)
            p.append({"x": x, "y": x.sum(1, keepdim=True), "sample_id": torch.arange(GLOBAL_BATCH) + step * 1000},
                     offset=step)
        p.close(seal=True)


class Progress:
    """The optimizer step count, saved by ``save_state`` (``register_for_checkpointing``)."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--ns", default=None, help="namespace (default WORKDIR/ns, written by rank 0 if missing)")
    parser.add_argument("--num-steps", type=int, default=40, help="global batches written to a new namespace")
    parser.add_argument("--steps", type=int, default=16, help="optimizer steps to train")
    parser.add_argument("--stop-after", type=int, default=None, help="stop after this many steps (a preemption)")
    parser.add_argument("--save-every", type=int, default=5)
    parser.add_argument("--resume", default=None, help="a save_state directory: load_state(...) first")
    parser.add_argument("--workers", type=int, default=0, help="loader worker processes")
    parser.add_argument("--log-batches", action="store_true", help="log every batch to WORKDIR/batches-rankR.jsonl")
    args = parser.parse_args(argv)

    # cpu=True on a machine without CUDA: only then does accelerate treat torchrun's processes as one CPU job
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    workdir = Path(args.workdir)
    ns = args.ns or str(workdir / "ns")
    if accelerator.is_main_process and not Path(ns, "_tgb").exists():
        workdir.mkdir(parents=True, exist_ok=True)
        write_namespace(ns, args.num_steps)
    accelerator.wait_for_everyone()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = tgb.DataLoader(ns, num_workers=args.workers)  # instead of DataLoader(dataset, batch_size=...)
    model, optimizer, prepared = accelerator.prepare(model, optimizer, loader)
    assert prepared is loader  # kept as it is: each rank already reads its own slice
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    if args.resume:
        accelerator.load_state(args.resume)

    stop = min(args.steps, args.stop_after or args.steps)
    rank = accelerator.process_index
    for batch in loader:
        if progress.step >= stop:
            break
        if args.log_batches:
            ids = batch["sample_id"].tolist()
            with open(workdir / f"batches-rank{rank}.jsonl", "a") as f:
                f.write(json.dumps({"global_step": progress.step, "step": ids[0] // 1000, "samples": ids}) + "\n")
        loss = torch.nn.functional.mse_loss(model(batch["x"]), batch["y"])
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        progress.step += 1
        if progress.step % args.save_every == 0:
            accelerator.save_state(str(workdir / "ckpt" / f"step_{progress.step}"))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        print(f"trained to step {progress.step}; checkpoints: {sorted(os.listdir(workdir / 'ckpt'))}")
    accelerator.end_training()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
