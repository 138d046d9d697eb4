"""The caption (or transcript) of a media file: the tokens of its UTF-8 sidecar ``<file stem>.<ext>``."""

from __future__ import annotations

import os

import torch

from torch_tgb.errors import SourceError
from torch_tgb.sources._inputs import Tokenizer, tokenize

__all__ = ["sidecar_tokens"]


def sidecar_tokens(path: str, ext: str, tokenizer: Tokenizer | None) -> torch.Tensor | SourceError:
    """Tokens of ``<stem of path>.<ext>``; empty without a tokenizer or a sidecar, an error for non-UTF-8 text."""
    sidecar = f"{os.path.splitext(path)[0]}.{ext}"
    if tokenizer is None or not os.path.isfile(sidecar):
        return torch.zeros(0, dtype=torch.int64)
    try:
        with open(sidecar, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        return SourceError(f"{sidecar}: caption is not UTF-8: {e}")
    return tokenize([text], tokenizer, lambda _: sidecar)[0]
