"""IntegerCast (the reader's per-step cast): the same tensors as ``Tensor.to``, refusing any cast that changes a value."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import SchemaMismatch
from torch_tgb.format import IntegerCast, cast_integers
from torch_tgb.format._dtypes import CHECK, KEEP, WIDEN, cast_rule

INTS = [torch.uint8, torch.int8, torch.int16, torch.uint16, torch.int32, torch.uint32, torch.int64]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
#: the integers each float holds exactly (and all below them): ids past these would round
EXACT = {torch.float16: 2**11, torch.bfloat16: 2**8, torch.float32: 2**24, torch.float64: 2**53}


def _fits(values: list[int], dtype: torch.dtype) -> bool:
    if dtype in EXACT:
        return all(abs(v) <= EXACT[dtype] for v in values)
    info = torch.iinfo(dtype)
    return all(info.min <= v <= info.max for v in values)


@settings(max_examples=300, deadline=None)
@given(source=st.sampled_from(INTS), target=st.sampled_from(INTS + FLOATS), data=st.data())
def test_a_cast_gives_the_values_or_refuses(source, target, data):
    """Integer ids cast to any integer or float dtype: exactly their values, or a SchemaMismatch (never wrapped or
    rounded: float16 holds ids up to 2048 exactly, bfloat16 up to 256)."""
    info = torch.iinfo(source)
    edges = st.sampled_from([v for v in (256, 257, 2048, 2049, 2**24 + 1, -257) if info.min <= v <= info.max] or [0])
    values = data.draw(st.lists(st.one_of(st.integers(int(info.min), int(info.max)), edges), min_size=1, max_size=8))
    tensor = torch.tensor(values, dtype=torch.int64).to(source)
    cast = IntegerCast(target, frozenset({"skipped"}))
    for _ in range(2):  # the second call goes by the remembered rule
        if _fits(values, target):
            out = cast({"ids": tensor, "skipped": tensor, "pixels": tensor.float()})
            assert out["ids"].dtype == target and out["ids"].to(torch.int64).tolist() == values
            assert out["skipped"] is tensor and out["pixels"].dtype == torch.float32
            assert cast_integers({"ids": tensor}, target)["ids"].tolist() == out["ids"].tolist()
        else:
            with pytest.raises(SchemaMismatch, match="'ids'"):
                cast({"ids": tensor})


def test_the_rule_is_remembered_not_the_values():
    """A narrowing cast that fitted once still looks at the next step's values."""
    cast = IntegerCast(torch.int16)
    assert cast({"ids": torch.tensor([1, 2], dtype=torch.int64)})["ids"].tolist() == [1, 2]
    with pytest.raises(SchemaMismatch, match="40000"):
        cast({"ids": torch.tensor([1, 40000], dtype=torch.int64)})


def test_rules():
    assert cast_rule(torch.int64, torch.int64) == KEEP
    assert cast_rule(torch.float32, torch.int64) == KEEP
    assert cast_rule(torch.uint16, torch.int64) == WIDEN
    assert cast_rule(torch.int64, torch.float32) == CHECK  # past 2**24 a float32 rounds ids
    assert cast_rule(torch.uint16, torch.float32) == WIDEN
    assert cast_rule(torch.uint16, torch.float16) == CHECK and cast_rule(torch.uint8, torch.float16) == WIDEN
    assert cast_rule(torch.int64, torch.int16) == CHECK
    assert cast_rule(torch.int8, torch.uint8) == CHECK
