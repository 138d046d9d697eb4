"""The body of ``tgb inspect`` (being built: needs torch_tgb.manifest)."""

from __future__ import annotations

from typing import Any

from torch_tgb.cli._common import require

__all__ = ["inspect_namespace", "render_text"]


def inspect_namespace(ns: str, *, storage_options: dict[str, Any] | None = None, sizes: bool = True) -> dict[str, Any]:
    require("torch_tgb.manifest", command="inspect")
    from torch_tgb.cli._common import CommandError

    raise CommandError("`tgb inspect` is not implemented in this build yet")


def render_text(report: dict[str, Any]) -> str:
    return str(report)
