"""A plugin for torch_tgb: each extension is a plain function its ``pyproject.toml`` names as an entry point."""

from __future__ import annotations

from typing import Any

import numpy as np

from torch_tgb import sources
from torch_tgb.producer import FixedPolicy
from torch_tgb.storage import MemoryStore


class MySchemeStore(MemoryStore):
    """``myscheme://NAME``: an in-memory store of its own type, so a test can tell who opened it."""


def open_myscheme(url: str, storage_options: dict[str, Any]) -> MySchemeStore:
    if storage_options:
        raise ValueError(f"{url}: myscheme takes no storage_options")
    return MySchemeStore("myscheme-" + url.split("://", 1)[1])


def reverse_round_robin(costs: np.ndarray, parts: int) -> list[list[int]]:
    """Row ``n - 1 - i`` to slice ``i % parts``: a method no built-in has, ignoring costs."""
    n = len(costs)
    return [sorted(n - 1 - i for i in range(p, n, parts)) for p in range(parts)]


def counting_source(where: str, args: Any) -> sources.TokenFile:
    """``counting:N``: N documents of 3 tokens, the ids ``0 .. 3N-1`` (``args``: shard, seed, on_error)."""
    n = int(where)
    return sources.TokenFile(np.arange(3 * n, dtype=np.uint16), offsets=np.arange(0, 3 * n + 1, 3), **args.common())


def every_two(arg: str | None) -> FixedPolicy:
    return FixedPolicy(2)
