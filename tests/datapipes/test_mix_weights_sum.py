"""Issue 25 edge: weights each finite whose sum overflows are refused when the Mix is made, not at a draw."""

from __future__ import annotations

import pytest
from torchdata.nodes import IterableWrapper

from torch_tgb.datapipes import Mix
from torch_tgb.errors import MixtureError
from torch_tgb.transforms import check_weights


def test_weights_whose_sum_overflows_are_a_mixture_error_at_construction() -> None:
    docs = {"a": IterableWrapper([1, 2]), "b": IterableWrapper([3])}
    with pytest.raises(MixtureError, match="sum to more than the largest float"):
        Mix(docs, {"a": 1e308, "b": 1e308})  # before: OverflowError at the first draw
    with pytest.raises(MixtureError, match=r"step=7.*sum to more than the largest float"):
        check_weights({"a": 1.5e308, "b": 1e308}, step=7)
    assert check_weights({"a": 1e308, "b": 0.0}) == {"a": 1e308, "b": 0.0}  # large but drawable
