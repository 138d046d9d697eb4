"""A small sealed namespace and helpers to tamper with it (used by the security tests)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

import torch_tgb as tgb
from torch_tgb.manifest import Manifest
from torch_tgb.manifest.keys import FLAT, GC_BOUNDARY_PREFIX, version_key
from torch_tgb.storage import LocalStore

LAYOUT = tgb.Layout(dp=1)


def batch(offset: int) -> dict[str, torch.Tensor]:
    return {"x": torch.full((2, 3), offset, dtype=torch.int64)}


class Tamper:
    """A sealed local namespace of 3 steps: v1 epoch bump, v2..v4 one entry each, v5 seal."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ns = str(root)
        with tgb.Producer(self.ns, producer_id="p0", layout=LAYOUT, commit_policy="naive") as p:
            for offset in range(3):
                p.append(batch(offset), offset=offset)
                p.flush()
            p.close(seal=True)
        self.keys = Manifest(LocalStore(self.ns)).key_layout()  # spread over prefixes: the default

    def path(self, key: str) -> Path:
        """Where ``key`` lies; a version or snapshot named by its flat key (``version_key(n)``) lies where the
        namespace's key layout puts it (docs/protocol.md, *Manifest keys spread over prefixes*)."""
        if (number := FLAT.version_of(key)) is not None:
            key = self.keys.version_key(number)
        elif (snapshot := FLAT.snapshot_of(key)) is not None:
            number, part = snapshot
            key = self.keys.snapshot_key(number) if part is None else self.keys.snapshot_part_key(number, part)
        return self.root.joinpath(*key.split("/"))

    def version(self, number: int) -> dict[str, Any]:
        return json.loads(self.path(version_key(number)).read_bytes())

    def write_version(self, number: int, obj: dict[str, Any] | bytes) -> None:
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.path(version_key(number)).write_bytes(data)

    def write(self, key: str, data: bytes) -> None:
        path = self.path(key)
        os.makedirs(path.parent, exist_ok=True)
        path.write_bytes(data)

    def without_boundary_generations(self) -> None:
        """Make it a namespace from before GC-boundary generations: ``_tgb/gc_boundary.json`` is read then."""
        for path in self.path(GC_BOUNDARY_PREFIX).iterdir():
            path.unlink()

    def read_all(self) -> list[int]:
        """Consume the namespace from step 0 (fresh dataset, fresh store)."""
        ds = tgb.TGBDataset(self.ns, mesh=tgb.Mesh(0, 1), timeout=5)
        return [int(b["x"][0, 0]) for b in ds]
