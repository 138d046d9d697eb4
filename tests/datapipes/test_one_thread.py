"""Rows joined and gathered on one thread are what torch.cat and index_select make, for every dtype."""

from __future__ import annotations

import pytest
import torch

from torch_tgb.datapipes.produce._one_thread import cat_rows, take_rows

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.uint16, torch.int32, torch.int64, torch.float16,
          torch.float32, torch.float64, torch.bfloat16]


def rows(n: int, dtype: torch.dtype, *trailing: int) -> torch.Tensor:
    return (torch.arange(n * max(1, torch.Size(trailing).numel())) % 97).reshape(n, *trailing).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trailing", [(), (5,), (2, 3), (1, 2, 2)])
def test_same_values_dtype_and_shape_as_torch(dtype: torch.dtype, trailing: tuple[int, ...]) -> None:
    a, b = rows(3, dtype, *trailing), rows(4, dtype, *trailing)
    pad = rows(1, dtype, *trailing)[0].unsqueeze(0).expand(2, *trailing)  # a padding row repeated, stride 0
    for parts in ([a, b], [a, b, pad], [b]):
        got, want = cat_rows(parts), torch.cat(parts)
        assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
    order = [3, 0, 6, 1, 5, 2, 4]
    joined = torch.cat([a, b])
    # through int64 (the values are small integers): torch has no 1-d index_select of uint16
    got, want = take_rows(joined, order), joined.to(torch.int64).index_select(0, torch.tensor(order)).to(dtype)
    assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)


def test_what_numpy_cannot_hold_goes_to_torch() -> None:
    mixed = [rows(2, torch.int32, 3), rows(2, torch.int64, 3)]  # torch promotes; so does the fallback
    assert cat_rows(mixed).dtype == torch.cat(mixed).dtype
    with pytest.raises(RuntimeError):  # torch's own error for trailing shapes that disagree
        cat_rows([rows(2, torch.int32, 3), rows(2, torch.int32, 4)])
    grad = rows(2, torch.float32, 3).requires_grad_()
    assert cat_rows([grad, grad]).requires_grad
