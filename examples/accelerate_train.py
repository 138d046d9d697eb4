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

import os
import sys
from pathlib import Path

import torch
from accelerate import Accelerator

import torch_tgb as tgb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _regression import (  # noqa: E402
    StepCount,
    barrier_then_destroy,
    example_parser,
    log_batch,
    make_model,
    write_namespace,
)


def main(argv: list[str] | None = None) -> int:
    parser = example_parser(__doc__, steps_help="optimizer steps to train")
    parser.add_argument("--save-every", type=int, default=5)
    parser.add_argument("--resume", default=None, help="a save_state directory: load_state(...) first")
    parser.add_argument("--workers", type=int, default=0, help="loader worker processes")
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
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = tgb.DataLoader(ns, num_workers=args.workers)  # instead of DataLoader(dataset, batch_size=...)
    model, optimizer, prepared = accelerator.prepare(model, optimizer, loader)
    assert prepared is loader  # kept as it is: each rank already reads its own slice
    progress = StepCount()  # the optimizer step count, saved by save_state
    accelerator.register_for_checkpointing(progress)
    if args.resume:
        accelerator.load_state(args.resume)

    stop = min(args.steps, args.stop_after or args.steps)
    rank = accelerator.process_index
    for batch in loader:
        if progress.step >= stop:
            break
        if args.log_batches:
            log_batch(workdir, rank, progress.step, batch)
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
    if accelerator.num_processes > 1:
        barrier_then_destroy()  # accelerator.end_training() would destroy the group after a plain barrier
    accelerator.end_training()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
