"""PyTorch Lightning off the documented path (DDP, 2 CPU processes): trained by epochs, reloaded loaders, validation.

    python tests/integrations/lightning_offpath.py --workdir /tmp/w --num-steps 30 --max-epochs 2 [--limit 7]
    python tests/integrations/lightning_offpath.py --workdir /tmp/w --num-steps 30 --max-epochs 3 \\
        --resume /tmp/w/ckpt/epoch=1.ckpt

What a new user writes: ``train_dataloader()`` returns ``tgb.DataLoader``, the
Trainer runs by epochs (``max_epochs``, no ``max_steps``), ``ModelCheckpoint``
saves at every epoch end. Options: ``--limit N`` (``limit_train_batches``),
``--reload`` (``reload_dataloaders_every_n_epochs=1``), ``--val`` (a
``tgb.DataLoader`` of a second namespace, ``WORKDIR/val``, as the validation
loader; ``--val-unsealed`` leaves it unsealed), ``--workers``. Every trained
batch is logged to ``WORKDIR/batches-rankR.jsonl`` (``epoch``, ``global_step``,
``step``, ``samples``) and every validation batch to ``WORKDIR/val-rankR.jsonl``
(``run``: the how-many-th validation, ``step``): the test maps each back to its
TGB step and slice. Not part of torch_tgb.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

import torch_tgb as tgb

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from _regression import GLOBAL_BATCH, FEATURES, make_model  # noqa: E402


def write(ns: str, num_steps: int, *, seal: bool) -> None:
    """``num_steps`` global batches of 8 rows (dp=2); ``sample_id`` = step * 1000 + row."""
    with tgb.Producer(ns, producer_id="p0", layout=tgb.Layout(dp=2)) as p:
        for step in range(p.resume_offset, num_steps):
            x = torch.randn(GLOBAL_BATCH, FEATURES, generator=torch.Generator().manual_seed(step))
            p.append({"x": x, "y": x.sum(1, keepdim=True), "sample_id": torch.arange(GLOBAL_BATCH) + step * 1000},
                     offset=step)
        p.close(seal=seal)


def append(path: Path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


class Model(pl.LightningModule):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.net = make_model()
        self.args = args
        self.workdir = Path(args.workdir)
        self.val_runs = 0

    def train_dataloader(self) -> tgb.DataLoader:
        return tgb.DataLoader(str(self.workdir / "ns"), num_workers=self.args.workers)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        ids = batch["sample_id"].tolist()
        append(self.workdir / f"batches-rank{self.global_rank}.jsonl",
               {"epoch": self.current_epoch, "global_step": self.global_step, "step": ids[0] // 1000, "samples": ids})
        return torch.nn.functional.mse_loss(self.net(batch["x"]), batch["y"])

    def on_validation_epoch_start(self) -> None:
        self.val_runs += 1

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        ids = batch["sample_id"].tolist()
        append(self.workdir / f"val-rank{self.global_rank}.jsonl",
               {"run": self.val_runs, "step": ids[0] // 1000, "samples": ids})

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class WithVal(Model):
    def val_dataloader(self) -> tgb.DataLoader:
        return tgb.DataLoader(str(self.workdir / "val"), num_workers=self.args.workers)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", required=True)
    p.add_argument("--num-steps", type=int, default=30)
    p.add_argument("--max-epochs", type=int, default=3)
    p.add_argument("--limit", type=int, default=None, help="limit_train_batches")
    p.add_argument("--reload", action="store_true", help="reload_dataloaders_every_n_epochs=1")
    p.add_argument("--val", action="store_true", help="a TGB validation loader over WORKDIR/val (4 steps)")
    p.add_argument("--val-unsealed", action="store_true", help="... left unsealed")
    p.add_argument("--resume", default=None)
    p.add_argument("--workers", type=int, default=0)
    args = p.parse_args()

    workdir = Path(args.workdir)
    if "LOCAL_RANK" not in os.environ and not (workdir / "ns" / "_tgb").exists():  # Lightning's child skips this
        workdir.mkdir(parents=True, exist_ok=True)
        write(str(workdir / "ns"), args.num_steps, seal=True)
        if args.val or args.val_unsealed:
            write(str(workdir / "val"), 4, seal=not args.val_unsealed)
    pl.seed_everything(0, verbose=False)
    model = WithVal(args) if args.val or args.val_unsealed else Model(args)
    checkpoints = ModelCheckpoint(dirpath=workdir / "ckpt", filename="{epoch}", save_top_k=-1,
                                  save_on_train_epoch_end=True)
    trainer = pl.Trainer(
        accelerator="cpu", devices=2, strategy="ddp", max_epochs=args.max_epochs, callbacks=[checkpoints],
        limit_train_batches=args.limit if args.limit is not None else 1.0,
        reload_dataloaders_every_n_epochs=1 if args.reload else 0,
        logger=False, enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(model, ckpt_path=args.resume)
    if trainer.global_rank == 0:
        print(f"trained {trainer.current_epoch} epochs, to step {trainer.global_step}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
