"""The two rule sets of the footer table checks (a fast plain-Python pass for small footers,
vectorised numpy for large ones and for wording every error) reach the same verdict."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import CorruptObject
from torch_tgb.format import encode_tgb, parse_footer
from torch_tgb.format._checks import _check_tables_vectorised, _tables_valid_small, check_tables
from torch_tgb.format._spec import V3_SLICE_ALIGN
from torch_tgb.layout import Layout

A = V3_SLICE_ALIGN  # the writer writes version 3: slices on 64-byte boundaries

# (table, field) pairs a corruption may hit; values cover in-range and out-of-range cases
_SLICE_FIELDS = ["dp", "cp", "start", "end", "first", "count"]
_TENSOR_FIELDS = ["name", "dtype", "ndim", "dims", "offset", "length"]


def _tables(dp: int, cp: int):
    layout = Layout(dp=dp, cp=cp, seq_keys=("input_ids",))
    batch = {
        "input_ids": torch.arange(dp * 2 * 8 * cp, dtype=torch.int32).reshape(dp * 2, 8 * cp),
        "weight": torch.ones(dp * 2, 3, dtype=torch.float16),
    }
    buffers, obj = encode_tgb(layout.cut(batch), layout=layout)
    data = b"".join(bytes(b) for b in buffers)
    footer = parse_footer(data[obj.footer_offset :], key="k", size=len(data), footer_offset=obj.footer_offset)
    return footer._slices.copy(), footer._tensors.copy(), footer._dims.copy(), list(footer.names), obj.footer_offset


def _verdict(check, *args) -> str | None:
    try:
        check(*args)
    except CorruptObject as e:
        return str(e)
    return None


@settings(max_examples=150, deadline=None)
@given(
    dp=st.integers(1, 3),
    cp=st.integers(1, 2),
    table=st.sampled_from(["slice", "tensor", "dim"]),
    row=st.integers(0, 64),
    field=st.integers(0, 5),
    value=st.one_of(st.integers(0, 300), st.sampled_from([4095, 4096, 8192, 2**31, 2**40, 2**41])),
)
def test_small_and_vectorised_checks_agree_on_every_single_field_corruption(dp, cp, table, row, field, value):
    srows, trows, dims, names, data_end = _tables(dp, cp)
    if table in ("slice", "tensor"):
        rows, name = (srows, _SLICE_FIELDS[field]) if table == "slice" else (trows, _TENSOR_FIELDS[field])
        width = rows.dtype[name].itemsize * 8  # a stored field holds what its width holds
        rows[row % len(rows)][name] = value % (1 << width)
    else:
        dims[row % len(dims)] = value if field % 2 else -value - 1
    small_valid = _tables_valid_small(srows.tolist(), trows.tolist(), dims.tolist(), names, cp, data_end, A)
    vectorised = _verdict(_check_tables_vectorised, "k", srows, trows, dims, names, cp, data_end, A)
    assert small_valid == (vectorised is None)
    assert _verdict(lambda *a: check_tables(*a, align=A), "k", srows, trows, dims, names, cp, data_end) == vectorised


def test_both_paths_accept_a_valid_footer():
    srows, trows, dims, names, data_end = _tables(2, 2)
    assert _tables_valid_small(srows.tolist(), trows.tolist(), dims.tolist(), names, 2, data_end, A)
    assert _verdict(_check_tables_vectorised, "k", srows, trows, dims, names, 2, data_end, A) is None


def test_unknown_tensor_name_is_reported_by_its_id():
    srows, trows, dims, names, data_end = _tables(1, 1)
    trows[1]["name"] = 7
    message = _verdict(check_tables, "k", srows, trows, dims, names, 1, data_end)
    assert message is not None and "tensor #7: tensor name id out of range" in message


def test_unowned_tensor_rows_are_refused_not_a_numpy_error():
    srows, trows, dims, names, data_end = _tables(1, 1)
    srows[0]["count"] = 1  # the second tensor row belongs to no slice
    assert not _tables_valid_small(srows.tolist(), trows.tolist(), dims.tolist(), names, 1, data_end)
    message = _verdict(_check_tables_vectorised, "k", srows, trows, dims, names, 1, data_end)
    assert message is not None and "bad tensor table range" in message


@pytest.mark.parametrize("bad", [np.int64(-1), np.int64(2**41)])
def test_absurd_dimension_refused_by_both(bad):
    srows, trows, dims, names, data_end = _tables(1, 1)
    dims[0] = bad
    assert not _tables_valid_small(srows.tolist(), trows.tolist(), dims.tolist(), names, 1, data_end)
    message = _verdict(check_tables, "k", srows, trows, dims, names, 1, data_end)
    assert message is not None and "absurd tensor dimension" in message
