"""Parsing of manifest objects: round trips, and malformed input fails loud naming the version."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import ManifestError
from torch_tgb.manifest import ManifestState, ProducerState, TGBEntry, Version
from torch_tgb.manifest._json import MAX_DEPTH, load_json
from torch_tgb.manifest._state import fold
from torch_tgb.manifest.records import EMPTY_STATE, FORMAT

TOKEN = "0123456789abcdef0123456789abcdef"


def good_version(number: int = 1) -> dict:
    return {
        "format": FORMAT,
        "version": number,
        "token": TOKEN,
        "first_step": 0,
        "entries": [
            {"key": "data/p0/a.tgb", "size": 100, "footer_offset": 60, "footer_length": 16, "producer": "p0",
             "offset": 0, "samples": 4, "tokens": 64},
            {"key": "data/p0/b.tgb", "size": 100, "footer_offset": 60, "footer_length": 16, "producer": "p0",
             "offset": 1, "samples": 4, "tokens": 64},
        ],
        "producers": {"p0": {"epoch": 1, "next_offset": 2, "committed_at": 1.5}},
        "sealed": False,
        "time": 2.0,
    }


def decode(obj: dict, number: int = 1) -> Version:
    return Version.decode(json.dumps(obj).encode(), number=number)


def test_round_trip() -> None:
    version = decode(good_version())
    assert len(version.entries) == 2 and version.stop_step == 2
    assert decode(json.loads(version.encode())) == version


entry_strategy = st.builds(
    lambda o, size, samples: TGBEntry(f"data/p/x{o}.tgb", size + 24, size, 24, "p", o, samples, samples * 3),
    st.integers(0, 10**6),
    st.integers(0, 10**9),
    st.integers(0, 1000),
)


@given(st.integers(0, 50), st.integers(1, 10**6), st.integers(0, 10**9), st.booleans())
@settings(max_examples=50, deadline=None)
def test_round_trip_property(n: int, number: int, first_step: int, sealed: bool) -> None:
    entries = tuple(TGBEntry(f"data/p/x{o}.tgb", 100, 50, 20, "p", 7 + o, o, 2 * o) for o in range(n))
    producers = {"p": ProducerState(3, 7 + n, 1.0)} if n else {"q": ProducerState(2, 0, 0.5)}
    version = Version(number, TOKEN, first_step, entries, producers, sealed, 4.0)
    assert Version.decode(version.encode(), number=number) == version


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda v: v.pop("first_step"), "missing field 'first_step'"),
        (lambda v: v.update(first_step="3"), "must be an integer"),
        (lambda v: v.update(first_step=True), "must be an integer"),
        (lambda v: v.update(first_step=-1), "must be >= 0"),
        (lambda v: v.update(version=2), "object says version=2"),
        (lambda v: v.update(format="other/9"), "format"),
        (lambda v: v.update(token="../../etc"), "malformed commit token"),
        (lambda v: v.update(extra=1), "unknown field"),
        (lambda v: v.update(entries={}), "must be a list"),
        (lambda v: v["entries"][0].update(key="../outside.tgb"), "'..'"),
        (lambda v: v["entries"][0].update(key="/abs/x.tgb"), "relative"),
        (lambda v: v["entries"][0].update(key="s3://other-bucket/x.tgb"), "relative"),
        (lambda v: v["entries"][0].update(key="_tgb/log/00000000000000000001.json"), "outside 'data/'"),
        (lambda v: v["entries"][0].update(producer="bad/id"), "producer_id"),
        (lambda v: v["entries"][0].update(footer_offset=99), "outside the object"),
        (lambda v: v["entries"][1].update(offset=5), "consecutive"),
        (lambda v: v["producers"]["p0"].update(next_offset=7), "next_offset=7"),
        (lambda v: v["producers"]["p0"].update(epoch=0), "must be >= 1"),
        (lambda v: v.update(producers={}), "next_offset=None"),
        (lambda v: v.update(sealed="yes"), "true or false"),
    ],
)
def test_malformed_version_names_it(mutate, message) -> None:
    obj = good_version(7)
    mutate(obj)
    with pytest.raises(ManifestError, match="version=7") as info:
        decode(obj, number=7)
    assert message in str(info.value)


def test_not_json_or_not_object() -> None:
    with pytest.raises(ManifestError, match="version=3.*not valid JSON"):
        Version.decode(b"{nope", number=3)
    with pytest.raises(ManifestError, match="expected a JSON object"):
        Version.decode(b"[1, 2]", number=3)
    with pytest.raises(ManifestError, match="non-finite"):
        Version.decode(b'{"time": NaN}', number=3)


def test_size_and_depth_limits() -> None:
    with pytest.raises(ManifestError, match="exceeds the metadata limit"):
        load_json(b" " * 100, what="x", max_bytes=10)
    deep = ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)).encode()
    with pytest.raises(ManifestError, match="nested"):
        load_json(b'{"a": ' + deep + b"}", what="x")
    very_deep = ("[" * 100_000 + "]" * 100_000).encode()
    with pytest.raises(ManifestError):
        load_json(b'{"a": ' + very_deep + b"}", what="x")


def test_a_versions_entries_are_not_depth_walked_but_checked_flat() -> None:
    """``load_json(flat="entries")`` skips the depth walk there only: a nested entry is refused by the entry
    checks (with its index), deep nesting anywhere else by the walk."""
    deep = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    text = json.dumps(good_version(1))
    nested_entry = text.replace('"entries": [', '"entries": [' + deep + ", ", 1).encode()
    with pytest.raises(ManifestError, match="entry 0: expected an object"):
        Version.decode(nested_entry, number=1)
    nested_field = json.loads(text)
    nested_field["entries"][1]["key"] = json.loads(deep)
    with pytest.raises(ManifestError, match="entry 1: field 'key' must be a string"):
        decode(nested_field)
    nested_producer = text.replace('"producers": {', '"producers": {"x": ' + deep + ", ", 1).encode()
    with pytest.raises(ManifestError, match="nested"):
        Version.decode(nested_producer, number=1)
    assert load_json(b'{"entries": ' + deep.encode() + b"}", what="x", flat="entries")["entries"]
    with pytest.raises(ManifestError, match="nested"):
        load_json(b'{"entries": ' + deep.encode() + b"}", what="x")


def test_fold_checks_continuity() -> None:
    first = decode(good_version(1))
    state = fold(EMPTY_STATE, first)
    assert state == ManifestState(1, 2, False, {"p0": ProducerState(1, 2, 1.5)})

    def next_version(**changes) -> Version:
        obj = good_version(2)
        obj["first_step"] = 2
        for e, o in zip(obj["entries"], (2, 3)):
            e["offset"] = o
        obj["producers"]["p0"]["next_offset"] = 4
        obj.update(changes)
        return decode(obj, number=2)

    assert fold(state, next_version()).num_steps == 4
    with pytest.raises(ManifestError, match="version=2: first_step=5"):
        fold(state, next_version(first_step=5))
    with pytest.raises(ManifestError, match="version=2: producer 'p0' appends offset=0"):
        fold(state, decode(dict(good_version(2), first_step=2), number=2))  # offsets 0,1 again: a duplicate
    older = next_version(producers={"p0": {"epoch": 1, "next_offset": 4}})
    with pytest.raises(ManifestError, match="cannot follow"):
        fold(EMPTY_STATE, older)
    sealed = fold(EMPTY_STATE, decode(dict(good_version(1), sealed=True)))
    with pytest.raises(ManifestError, match="sealed"):
        fold(sealed, next_version())


def test_fold_rejects_epoch_going_back() -> None:
    state = ManifestState(1, 0, False, {"p0": ProducerState(3, 0)})
    bump = Version(2, TOKEN, 0, (), {"p0": ProducerState(2, 0)})
    with pytest.raises(ManifestError, match="version=2: producer 'p0' goes back"):
        fold(state, bump)
