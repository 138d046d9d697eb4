"""torchtitan's data loader contract and checkpoint manager on a TGB namespace (torchrun, CPU, gloo).

    torchrun --nproc-per-node 2 --standalone examples/torchtitan_train.py --workdir /tmp/tt-run --stop-after 12
    torchrun --nproc-per-node 2 --standalone examples/torchtitan_train.py --workdir /tmp/tt-run --load-step 5

torchtitan's ``Trainer`` needs CUDA (its device type falls back to "cuda"),
so on a CPU this runs the trainer's own pieces the way ``Trainer.train`` does:
the loader built from its config with the arguments the trainer passes
(``TGBDataLoader.Config(dataset_path=NS).build(dp_world_size=, dp_rank=, ...)``),
torchtitan's optimizer and LR scheduler containers, its ``CheckpointManager``
(DCP; ``save(step)`` every ``--interval`` steps, ``load(step=...)``), and the
loop ``step += 1; next(data_iterator); ...; checkpointer.save(step)``. On GPUs
the same loader goes into a real ``Trainer.Config`` (docs/frameworks.md).
``--log-batches`` appends each rank's batches to ``WORKDIR/batches-rankR.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torchtitan.components.checkpoint import CheckpointManager
from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw

from torch_tgb.integrations.torchtitan import TGBDataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _regression import (  # noqa: E402
    GLOBAL_BATCH,
    StepCount,
    barrier_then_destroy,
    example_parser,
    log_batch,
    make_model,
    write_namespace,
)


def main(argv: list[str] | None = None) -> int:
    parser = example_parser(__doc__, steps_help="training.steps")
    parser.add_argument("--interval", type=int, default=5, help="checkpoint.interval")
    parser.add_argument("--load-step", type=int, default=-1, help="checkpoint.load_step (-1: the newest, if any)")
    args = parser.parse_args(argv)

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    workdir = Path(args.workdir)
    ns = args.ns or str(workdir / "ns")
    if rank == 0 and not Path(ns, "_tgb").exists():
        workdir.mkdir(parents=True, exist_ok=True)
        write_namespace(ns, args.num_steps)
    dist.barrier()

    torch.manual_seed(0)
    model = DistributedDataParallel(make_model())
    optimizers = default_adamw(lr=1e-3).build(model_parts=[model])
    lr_schedulers = LRSchedulersContainer.Config(warmup_steps=1).build(optimizers=optimizers, training_steps=args.steps)
    # what Trainer.__init__ does with config.dataloader (the tokenizer is not needed)
    dataloader = TGBDataLoader.Config(
        dataset_path=ns, input_key="x", labels_key="y", extra_keys={"sample_id": "sample_id"}
    ).build(
        dp_world_size=world, dp_rank=rank, tokenizer=None, seq_len=0, local_batch_size=GLOBAL_BATCH // world,
    )
    train_state = StepCount()  # what the Trainer saves as train_state
    checkpointer = CheckpointManager.Config(
        enable=True, folder="checkpoint", interval=args.interval, keep_latest_k=0, last_save_model_only=False,
        initial_load_model_only=False,
    ).build(dataloader=dataloader, model_parts=[model], optimizers=optimizers, lr_schedulers=lr_schedulers,
            states={"train_state": train_state}, sd_adapter=None, base_folder=str(workdir))

    checkpointer.load(step=args.load_step)  # Trainer.train: nothing to load on a fresh start
    stop = min(args.steps, args.stop_after or args.steps)
    data_iterator = iter(dataloader)
    while train_state.step < stop:
        train_state.step += 1
        input_dict, labels = next(data_iterator)
        if args.log_batches:
            log_batch(workdir, rank, train_state.step - 1, {"sample_id": input_dict["sample_id"]})
        loss = torch.nn.functional.mse_loss(model(input_dict["input"]), labels)
        loss.backward()
        optimizers.step()
        lr_schedulers.step()
        optimizers.zero_grad()
        checkpointer.save(train_state.step, last_step=train_state.step == args.steps)
    checkpointer.close()
    if rank == 0:
        saved = sorted(p.name for p in (workdir / "checkpoint").iterdir())
        print(f"trained to step {train_state.step}; checkpoints: {saved}")
    barrier_then_destroy()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
