"""transformers' Trainer on a TGB namespace: ``get_train_dataloader`` returns ``tgb.DataLoader`` (torchrun, CPU).

    torchrun --nproc-per-node 2 --standalone examples/hf_trainer_train.py --workdir /tmp/hf-run --stop-after 12
    torchrun --nproc-per-node 2 --standalone examples/hf_trainer_train.py --workdir /tmp/hf-run \\
        --resume /tmp/hf-run/out/checkpoint-5

The Trainer subclass overrides one method. ``max_steps`` is required (a
stream has no length); each process reads its own dp slice. The Trainer
keeps no loader state in its checkpoints: ``resume_from_checkpoint`` skips
the steps already trained by reading them again (accelerate's
``skip_first_batches``), which is exact but costs a re-read of those steps,
and needs ``dataloader_num_workers=0``. ``--log-batches`` appends each rank's batches
to ``WORKDIR/batches-rankR.jsonl``. Needs the ``transformers`` extra.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

import torch_tgb as tgb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _regression import barrier_then_destroy, example_parser, log_batch, make_model, write_namespace  # noqa: E402

NAMESPACE = "/data/run1"  # set from --ns / --workdir in main()


class TGBTrainer(Trainer):
    """The adoption: the train loader is a TGB loader (this rank's slice of every step)."""

    def get_train_dataloader(self) -> tgb.DataLoader:
        return tgb.DataLoader(NAMESPACE)


class Regression(torch.nn.Module):
    """Takes the batch's tensors as keyword arguments and returns the loss, as Trainer expects."""

    def __init__(self, log_dir: str | None) -> None:
        super().__init__()
        self.net = make_model()
        self.log_dir = log_dir
        self.step = 0  # set by StepLog

    def forward(self, x: torch.Tensor, y: torch.Tensor, sample_id: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.log_dir is not None and self.training:
            rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
            log_batch(self.log_dir, rank, self.step, {"sample_id": sample_id})
        return {"loss": torch.nn.functional.mse_loss(self.net(x), y)}


class StepLog(TrainerCallback):
    """Hands the Trainer's global step to the model's batch log."""

    def __init__(self, model: Regression) -> None:
        self.model = model

    def on_step_begin(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        self.model.step = state.global_step


def main(argv: list[str] | None = None) -> int:
    parser = example_parser(__doc__, steps_help="TrainingArguments max_steps")
    parser.add_argument("--save-every", type=int, default=5)
    parser.add_argument("--resume", default=None, help="a checkpoint-N directory: train(resume_from_checkpoint=...)")
    args = parser.parse_args(argv)

    workdir = Path(args.workdir)
    ns = args.ns or str(workdir / "ns")
    targs = TrainingArguments(
        output_dir=str(workdir / "out"), max_steps=args.steps, per_device_train_batch_size=1, learning_rate=1e-2,
        save_strategy="steps", save_steps=args.save_every, save_total_limit=None, report_to=[], use_cpu=True,
        logging_strategy="no", dataloader_num_workers=0, disable_tqdm=True, seed=0,
    )
    if targs.process_index == 0 and not Path(ns, "_tgb").exists():
        workdir.mkdir(parents=True, exist_ok=True)
        write_namespace(ns, args.num_steps)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    model = Regression(str(workdir) if args.log_batches else None)
    global NAMESPACE
    NAMESPACE = ns
    trainer = TGBTrainer(model=model, args=targs, callbacks=[StepLog(model)])
    if args.stop_after is not None:
        trainer.add_callback(StopAfter(args.stop_after))
    trainer.train(resume_from_checkpoint=args.resume)
    if torch.distributed.is_initialized():
        # drop DDP's reducer (held by the trainer) before its process group: a gloo group left to the
        # interpreter's exit can abort it ("terminate called without an active exception")
        del trainer, model
        barrier_then_destroy()
    return 0


class StopAfter(TrainerCallback):
    """A preemption: end training after ``n`` steps (max_steps stays, so the schedule is the full run's)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        if state.global_step >= self.n:
            control.should_training_stop = True


if __name__ == "__main__":
    raise SystemExit(main())
