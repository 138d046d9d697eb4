"""PyTorch Lightning on a TGB namespace: DDP on CPU, Lightning's own checkpoints, exact resume.

    python examples/lightning_train.py --workdir /tmp/pl-run --steps 20 --stop-after 12
    python examples/lightning_train.py --workdir /tmp/pl-run --steps 20 --resume /tmp/pl-run/ckpt/step=5.ckpt

The only TGB lines are in ``train_dataloader()``: it returns ``tgb.DataLoader``
instead of a DataLoader; Lightning launches the 2 DDP processes itself, each
reads its own dp slice, and the loader's position rides in Lightning's
checkpoints. ``fit(ckpt_path=...)`` continues at the first step the fit loop
had not trained (Lightning fetches one batch ahead; torch-tgb's Lightning
callback, registered through an entry point, keeps that batch out of the
saved state). ``--log-batches`` appends each rank's batches (global step, TGB
step, sample ids) to ``WORKDIR/batches-rankR.jsonl`` so runs can be compared.

The namespace (``--ns``, default ``WORKDIR/ns``) is written once, sealed:
``--num-steps`` global batches of 8 rows cut for dp=2. Needs the ``lightning``
extra (``pip install 'torch-tgb[lightning]'``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

import torch_tgb as tgb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _regression import example_parser, log_batch, make_model, write_namespace  # noqa: E402


class Regression(pl.LightningModule):
    def __init__(self, ns: str, log_dir: str | None, workers: int) -> None:
        super().__init__()
        self.net = make_model()
        self.ns, self.log_dir, self.workers = ns, log_dir, workers

    def train_dataloader(self) -> tgb.DataLoader:
        # The whole adoption: this rank's slice of every step (rank and world size from torch.distributed).
        return tgb.DataLoader(self.ns, num_workers=self.workers)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.log_dir is not None:
            log_batch(self.log_dir, self.global_rank, self.global_step, batch)
        return torch.nn.functional.mse_loss(self.net(batch["x"]), batch["y"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main(argv: list[str] | None = None) -> int:
    parser = example_parser(__doc__, steps_help="optimizer steps to train (Trainer max_steps)")
    parser.add_argument("--save-every", type=int, default=5, help="ModelCheckpoint every_n_train_steps")
    parser.add_argument("--resume", default=None, help="a checkpoint of this run: fit(ckpt_path=...)")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--workers", type=int, default=0, help="loader worker processes")
    args = parser.parse_args(argv)

    workdir = Path(args.workdir)
    ns = args.ns or str(workdir / "ns")
    if "LOCAL_RANK" not in os.environ and not Path(ns, "_tgb").exists():  # Lightning's child processes skip this
        workdir.mkdir(parents=True, exist_ok=True)
        write_namespace(ns, args.num_steps)
    pl.seed_everything(0, verbose=False)
    model = Regression(ns, str(workdir) if args.log_batches else None, args.workers)
    checkpoints = ModelCheckpoint(dirpath=workdir / "ckpt", filename="{step}", every_n_train_steps=args.save_every,
                                  save_top_k=-1)
    trainer = pl.Trainer(accelerator="cpu", devices=args.devices, strategy="ddp" if args.devices > 1 else "auto",
                         max_steps=min(args.steps, args.stop_after or args.steps), callbacks=[checkpoints],
                         logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, ckpt_path=args.resume)
    if trainer.global_rank == 0:
        saved = sorted(p.name for p in (workdir / "ckpt").iterdir())
        print(f"trained to step {trainer.global_step}; checkpoints: {saved}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
