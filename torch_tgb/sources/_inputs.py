"""Raw inputs into documents: local file patterns, token arrays and tokenized text (used by the sources)."""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from torch_tgb.errors import SourceError
from torch_tgb.transforms.tokens import token_ids_problem

__all__ = ["TOKEN_DTYPES", "Tokenizer", "as_tokens", "glob_matches", "tokenize"]


def glob_matches(path: str, what: str) -> list[str] | None:
    """The files a local glob pattern (``*``, ``?``, ``[...]``) matches, sorted; None where ``path`` is not one.

    A URL, a path without those characters and an existing file (a name with a
    bracket) are not patterns. A pattern that matches nothing is refused,
    ``what`` naming the files it was for.
    """
    if "://" in path or not any(c in path for c in "*?[") or os.path.isfile(path):
        return None
    matched = sorted(glob.glob(path))
    if not matched:
        raise SourceError(f"{path}: no {what} matches the pattern")
    return matched


def as_tokens(values: Any, where: str) -> torch.Tensor | SourceError:
    """A 1-D integer token tensor from an array-like, or the error saying why not.

    uint16 widens to int32 and uint32 to int64 (torch has little support for
    wide unsigned types); int32 and int64 stay as they are. Token ids must be
    ``>= 0`` (``transforms.tokens.token_ids_problem``): a negative id is an
    error for that record. Always a copy, so a document never pins a memory
    map or an Arrow buffer.
    """
    array = np.asarray(values)
    if array.ndim != 1:
        return SourceError(f"{where}: tokens must be 1-D, got shape {array.shape}")
    target = TOKEN_DTYPES.get(array.dtype.str.lstrip("<=|"))
    if target is None:
        return SourceError(f"{where}: wrong token dtype {array.dtype}; expected one of {sorted(TOKEN_DTYPES)}")
    problem = token_ids_problem(array)  # the rule write_dataset applies too
    if problem is not None:
        return SourceError(f"{where}: {problem}")
    return torch.from_numpy(array.astype(target, copy=True))


# numpy dtype code of a token array -> the dtype of the yielded tensor
TOKEN_DTYPES = {"u2": np.int32, "i4": np.int32, "u4": np.int64, "i8": np.int64}

Tokenizer = Callable[[list[str]], list[list[int]]]


def tokenize(texts: list[str], tokenizer: Tokenizer, where: Callable[[int], str]) -> list[torch.Tensor | SourceError]:
    """Token tensors of ``texts`` with one batched call; a failing batch is retried text by text.

    So a text the tokenizer rejects becomes an error for that record only
    (``where(i)`` names it), and the others are still read.
    """
    try:
        ids = tokenizer(texts)
        if len(ids) != len(texts):
            raise ValueError(f"the tokenizer returned {len(ids)} results for {len(texts)} texts")
        return [_ids_tensor(x, where(i)) for i, x in enumerate(ids)]
    except Exception:
        if len(texts) == 1:
            return [_tokenize_one(texts[0], tokenizer, where(0))]
        return [_tokenize_one(text, tokenizer, where(i)) for i, text in enumerate(texts)]


def _tokenize_one(text: str, tokenizer: Tokenizer, where: str) -> torch.Tensor | SourceError:
    try:
        ids = tokenizer([text])
        if len(ids) != 1:
            raise ValueError(f"the tokenizer returned {len(ids)} results for 1 text")
        return _ids_tensor(ids[0], where)
    except Exception as e:
        return SourceError(f"{where}: the tokenizer failed: {e!r}")


def _ids_tensor(ids: Any, where: str) -> torch.Tensor | SourceError:
    try:
        return as_tokens(np.asarray(ids, dtype=np.int64), where)
    except (TypeError, ValueError, OverflowError) as e:
        return SourceError(f"{where}: the tokenizer returned {type(ids).__name__}, not a list of ints: {e}")
