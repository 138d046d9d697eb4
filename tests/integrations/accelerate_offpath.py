"""HF accelerate used off the documented path (torchrun, 2 CPU processes).

    torchrun --nproc-per-node 2 --standalone tests/integrations/accelerate_offpath.py --workdir /tmp/w --mode plain

``--mode`` says how the loader reaches ``accelerator.prepare``:

- ``plain``: a torch ``DataLoader(tgb.TGBDataset(ns), batch_size=None)`` (accelerate
  rebuilds it and dispatches batches from process 0);
- ``stateful``: the same as a torchdata ``StatefulDataLoader``;
- ``no-dispatch``: ``plain`` with ``DataLoaderConfiguration(dispatch_batches=False)``
  (accelerate wraps the dataset in its ``IterableDatasetShard``);
- ``skip``: the documented ``tgb.DataLoader``, ``load_state(--resume)`` and then, as
  accelerate's checkpoint guide says, ``accelerator.skip_first_batches(loader, step)``.

Without ``--resume`` it trains ``--steps`` steps with ``save_state`` every 5.
Each trained batch is logged to ``WORKDIR/batches-rankR.jsonl``; an error is
written to ``WORKDIR/error-rankR.txt`` (its type and message) and the process
exits 3, so the test can tell a refusal from a crash. Not part of torch_tgb.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
from accelerate import Accelerator, DataLoaderConfiguration

import torch_tgb as tgb

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from _regression import StepCount, barrier_then_destroy, log_batch, make_model, write_namespace  # noqa: E402


def loader_for(mode: str, ns: str, workers: int) -> object:
    if mode in ("plain", "no-dispatch"):
        return torch.utils.data.DataLoader(tgb.TGBDataset(ns), batch_size=None, num_workers=workers)
    if mode == "stateful":
        from torchdata.stateful_dataloader import StatefulDataLoader

        return StatefulDataLoader(tgb.TGBDataset(ns), batch_size=None, num_workers=workers)
    return tgb.DataLoader(ns, num_workers=workers)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", required=True)
    p.add_argument("--mode", choices=("plain", "stateful", "no-dispatch", "skip"), required=True)
    p.add_argument("--num-steps", type=int, default=20)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--resume", default=None)
    p.add_argument("--workers", type=int, default=0)
    args = p.parse_args()

    config = DataLoaderConfiguration(dispatch_batches=False) if args.mode == "no-dispatch" else None
    accelerator = Accelerator(cpu=not torch.cuda.is_available(), dataloader_config=config)
    workdir = Path(args.workdir)
    ns = str(workdir / "ns")
    if accelerator.is_main_process and not Path(ns, "_tgb").exists():
        workdir.mkdir(parents=True, exist_ok=True)
        write_namespace(ns, args.num_steps)
    accelerator.wait_for_everyone()

    torch.manual_seed(0)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader_for(args.mode, ns, args.workers))
    progress = StepCount()
    accelerator.register_for_checkpointing(progress)
    rank = accelerator.process_index
    try:
        batches = loader
        if args.resume:
            accelerator.load_state(args.resume)
            batches = accelerator.skip_first_batches(loader, progress.step)
        for batch in batches:
            if progress.step >= args.steps:
                break
            log_batch(workdir, rank, progress.step, batch)
            loss = torch.nn.functional.mse_loss(model(batch["x"]), batch["y"])
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            progress.step += 1
            if progress.step % 5 == 0 and not args.resume:
                accelerator.save_state(str(workdir / "ckpt" / f"step_{progress.step}"))
    except Exception as e:  # noqa: BLE001 - the test reads what was raised
        (workdir / f"error-rank{rank}.txt").write_text(f"{type(e).__name__}: {e}")
        os._exit(3)  # the other process may wait in a collective: do not tear down gracefully
    accelerator.wait_for_everyone()
    if accelerator.num_processes > 1:
        barrier_then_destroy()
    accelerator.end_training()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
