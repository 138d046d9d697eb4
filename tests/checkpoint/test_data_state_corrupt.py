"""Any malformed data state decodes to ``CorruptObject`` naming it, never another exception (issue 13 item 6)."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torch_tgb.checkpoint.data_state import _HEADER, _MAGIC, decode_state, encode_state
from torch_tgb.errors import CorruptObject

WHAT = "rank_3"


def framed(body: bytes) -> torch.Tensor:
    """``body`` behind a valid header, as encode_state would store it."""
    blob = _HEADER.pack(_MAGIC, len(body)) + body
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8).clone()


def decodes_or_corrupt(tensor: torch.Tensor) -> None:
    try:
        decode_state(tensor, what=WHAT)
    except CorruptObject as e:
        assert WHAT in str(e)


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,  # RecursionError in json
        b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
        json.dumps({"__tgb_items__": 5}).encode(),  # TypeError: not pairs
        json.dumps({"__tgb_tuple__": 5}).encode(),  # TypeError: tuple over a number
        json.dumps({"__tgb_items__": [[{"__tgb_tuple__": [[1]]}, 2]]}).encode(),  # unhashable tuple key
        json.dumps({"__tgb_items__": [[1, 2, 3]]}).encode(),  # ValueError: too many values
        b"\xff\xfe\x00garbage",  # UnicodeDecodeError
        b"NaN-ish {",
    ],
    ids=["deep-list", "deep-object", "items-not-pairs", "tuple-over-int", "unhashable-key", "items-triple",
         "not-utf8", "bad-json"],
)
def test_malformed_state_is_corrupt_object(body: bytes) -> None:
    with pytest.raises(CorruptObject, match=WHAT):
        decode_state(framed(body), what=WHAT)


def test_deeply_nested_tags_are_corrupt_object() -> None:
    body = ('{"__tgb_tuple__":[' * 50_000 + "1" + "]}" * 50_000).encode()
    with pytest.raises(CorruptObject, match=WHAT):
        decode_state(framed(body), what=WHAT)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=256))
def test_random_bytes(body: bytes) -> None:
    decodes_or_corrupt(framed(body))
    decodes_or_corrupt(torch.frombuffer(bytearray(body + b"\0"), dtype=torch.uint8).clone())


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5)
    | st.sampled_from(["__tgb_tuple__", "__tgb_items__"]),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["__tgb_tuple__", "__tgb_items__", "a", "state"]), children, max_size=3),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON)
def test_random_json_with_tags(value: object) -> None:
    decodes_or_corrupt(framed(json.dumps(value).encode()))


def test_round_trip_still_works() -> None:
    state = {"a": (1, [2, 3]), 4: {"b": None}}
    assert decode_state(encode_state(state)) == state
