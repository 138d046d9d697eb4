"""A token file of very many units warns that every epoch's order is large, and says which ``docs_per_unit`` fits."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from torch_tgb import sources
from torch_tgb.sources import token_file


def test_very_many_units_warn_with_a_docs_per_unit_that_fits(monkeypatch):
    monkeypatch.setattr(token_file, "LARGE_ORDER_UNITS", 8)
    tokens = np.arange(100 * 4, dtype=np.uint16)  # 100 documents of 4 tokens
    with pytest.warns(UserWarning, match=r"100 units of 1 document\(s\).*docs_per_unit=16 keeps it under"):
        sources.TokenFile(tokens, chunk_tokens=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        source = sources.TokenFile(tokens, chunk_tokens=4, docs_per_unit=16)  # 7 units: what it advised fits
    assert source.num_units == 7
    assert sorted(int(d["tokens"][0]) for d in source) == list(range(0, 400, 4))  # and it still reads everything