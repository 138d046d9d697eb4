"""RaggedRows: a ragged key's rows held joined are the same rows as a list, checked once, cut without a step per row."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import LayoutError
from torch_tgb.format import encode_tgb, schema_of
from torch_tgb.layout import Layout, RaggedRows

lengths = st.lists(st.integers(0, 5), min_size=1, max_size=12)


def rows_of(lens: list[int]) -> list[torch.Tensor]:
    start = 0
    out = []
    for n in lens:
        out.append(torch.arange(start, start + 2 * n, dtype=torch.int16).reshape(n, 2))
        start += 2 * n
    return out


def same(a, b) -> bool:
    return len(a) == len(b) and all(x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(a, b))


@settings(max_examples=60, deadline=None)
@given(lens=lengths, data=st.data())
def test_joined_rows_are_the_rows_and_slice_as_a_list_does(lens: list[int], data) -> None:
    rows = rows_of(lens)
    joined = RaggedRows.from_rows("pix", rows)
    assert same(joined, rows) and same(list(joined), rows)
    assert same(RaggedRows.from_lengths(joined.values, lens), rows)
    a = data.draw(st.integers(-len(lens) - 2, len(lens) + 2))
    b = data.draw(st.integers(-len(lens) - 2, len(lens) + 2))
    part = joined[a:b]
    assert isinstance(part, RaggedRows) and same(part, rows[a:b]) and int(part.offsets[0]) == 0
    i = data.draw(st.integers(-len(lens), len(lens) - 1))
    assert torch.equal(joined[i], rows[i])


@settings(max_examples=40, deadline=None)
@given(lens=lengths.filter(lambda ls: len(ls) % 2 == 0), cp=st.sampled_from([1, 2]))
def test_a_batch_with_joined_rows_cuts_and_encodes_as_with_a_list(lens: list[int], cp: int) -> None:
    rows = rows_of(lens)
    ids = torch.arange(len(lens) * 4, dtype=torch.int32).reshape(len(lens), 4)
    layout = Layout(dp=2, cp=cp, seq_keys=("ids",))
    as_list = {"ids": ids, "pix": rows}
    joined = {"ids": ids, "pix": RaggedRows.from_rows("pix", rows)}
    assert layout.check_batch(joined) == layout.check_batch(as_list) == len(lens)
    assert schema_of(joined) == schema_of(as_list)
    one, two = layout.cut(as_list), layout.cut(joined)
    for x, y in zip(one, two):
        assert (x.dp, x.cp, x.ragged) == (y.dp, y.cp, y.ragged) and x.tensors.keys() == y.tensors.keys()
        assert all(torch.equal(x.tensors[k], y.tensors[k]) for k in x.tensors)
    assert b"".join(bytes(b) for b in encode_tgb(one)[0]) == b"".join(bytes(b) for b in encode_tgb(two)[0])


@pytest.mark.parametrize(
    "values, offsets, message",
    [
        (torch.zeros(4), torch.tensor([0, 3, 2, 4]), "decrease"),
        (torch.zeros(4), torch.tensor([0, 2, 5]), "end at 5"),
        (torch.zeros(4), torch.tensor([1, 4]), "start at 1"),
        (torch.zeros(4), torch.tensor([0, 4], dtype=torch.int32), "int64"),
        (torch.tensor(3.0), torch.tensor([0, 1]), "item dim 0"),
    ],
)
def test_malformed_joined_rows_are_refused(values, offsets, message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        RaggedRows(values, offsets)


def test_rows_of_mixed_kinds_are_refused_naming_the_key() -> None:
    with pytest.raises(LayoutError, match="ragged key 'pix', row 1"):
        RaggedRows.from_rows("pix", [torch.zeros(2, 3), torch.zeros(2, 4)])
    with pytest.raises(LayoutError, match="contiguous"):
        RaggedRows.from_rows("pix", [torch.zeros(1), torch.zeros(2)])[::2]


def test_joined_rows_pickle_and_count_their_bytes() -> None:
    """They travel like the list they stand for (Ray actors, DataLoader workers) and meters count their bytes."""
    import pickle

    rows = rows_of([2, 0, 3])
    joined = RaggedRows.from_rows("pix", rows)
    again = pickle.loads(pickle.dumps(joined))
    assert isinstance(again, RaggedRows) and same(again, rows)
    assert joined.nbytes == sum(r.nbytes for r in rows) + 4 * 8  # the values, and int64 offsets [rows + 1]
