"""The body of ``tgb verify`` (being built: needs torch_tgb.manifest and torch_tgb.format)."""

from __future__ import annotations

from typing import Any

from torch_tgb.cli._common import require

__all__ = ["verify_namespace"]


def verify_namespace(ns: str, *, storage_options: dict[str, Any] | None = None, crc: bool = True, max_problems: int = 100) -> Any:
    require("torch_tgb.manifest", command="verify")
    from torch_tgb.cli._common import CommandError

    raise CommandError("`tgb verify` is not implemented in this build yet")
