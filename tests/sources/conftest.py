"""Fixtures: one small corpus of documents, and a source of every kind over it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tests.sources._corpus import make_docs, write_lance, write_parquet, write_tars, write_token_file


@pytest.fixture(scope="session")
def docs() -> list[np.ndarray]:
    return make_docs()


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory, docs: list[np.ndarray]) -> dict[str, Callable[..., Any]]:
    """``corpus[kind](**options)`` makes a source of that kind over ``docs``."""
    from torch_tgb import sources

    root = tmp_path_factory.mktemp("corpus")
    tokens, offsets = write_token_file(root, docs)
    (root / "tars").mkdir()
    tars = write_tars(root / "tars", docs, per_tar=5)
    (root / "pq").mkdir()
    parquet = write_parquet(root / "pq", docs)
    uri = write_lance(root, docs)
    return {
        "token_file": lambda **kw: sources.TokenFile(tokens, offsets=offsets, **kw),
        "token_file_grouped": lambda **kw: sources.TokenFile(tokens, offsets=offsets, docs_per_unit=4, **kw),
        "webdataset": lambda **kw: sources.WebDataset(tars, **kw),
        "parquet": lambda **kw: sources.Parquet(parquet, **kw),
        "parquet_inline": lambda **kw: sources.Parquet(parquet, decode_ahead=0, **kw),  # no read-ahead thread
        "lance": lambda **kw: sources.Lance(uri, column="input_ids", **kw),
        "lance_inline": lambda **kw: sources.Lance(uri, column="input_ids", decode_ahead=0, **kw),
    }


