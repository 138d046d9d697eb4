"""``examples/hf_trainer_train.py`` with loader worker processes: ``tgb.DataLoader(ns, num_workers=--workers)``.

    torchrun --nproc-per-node 2 --standalone tests/integrations/hf_trainer_workers.py --workers 2 \\
        --workdir /tmp/hf --stop-after 12

The example's Trainer returns ``tgb.DataLoader(ns)`` from ``get_train_dataloader``;
this runs it with workers, the setting under which a resumed Trainer's
skipping loader (accelerate's ``skip_first_batches``, a plain torch DataLoader
over the TGB dataset) used to receive the loader's shared-memory steps. Every
other argument is the example's. Not part of torch_tgb.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import hf_trainer_train as example  # noqa: E402

import torch_tgb as tgb  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--workers", type=int, default=2)
    args, rest = p.parse_known_args()

    def get_train_dataloader(self: example.TGBTrainer) -> tgb.DataLoader:
        return tgb.DataLoader(example.NAMESPACE, num_workers=args.workers)

    example.TGBTrainer.get_train_dataloader = get_train_dataloader  # type: ignore[method-assign]
    return example.main(rest)


if __name__ == "__main__":
    raise SystemExit(main())
