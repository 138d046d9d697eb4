"""A manifest entry decodes the same through the fast path and the field-by-field path (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import ManifestError
from torch_tgb.manifest._entry import TGBEntry, _entry_fast

GOOD = {"key": "data/p0/e000001-o000000000000-0a1b2c3d.tgb", "size": 4096, "footer_offset": 3800,
        "footer_length": 240, "producer": "p0", "offset": 0, "samples": 32, "tokens": 16384}

values = st.one_of(st.integers(-3, 5000), st.booleans(), st.none(), st.text(max_size=4), st.floats(0, 10),
                   st.just("data/p0/x.tgb"), st.lists(st.integers(), max_size=2))
names = st.sampled_from([*GOOD, "start", "object_size", "extra", "Key"])


def _slow(obj: object) -> TGBEntry | str:
    try:
        return TGBEntry._from_fields(obj, what="entry")
    except ManifestError as e:
        return str(e)


@settings(max_examples=400, deadline=None)
@given(changes=st.dictionaries(names, values, max_size=4), drop=st.sets(st.sampled_from(list(GOOD)), max_size=2))
def test_fast_path_accepts_exactly_what_the_field_checks_accept(changes: dict, drop: set) -> None:
    obj = {k: v for k, v in {**GOOD, **changes}.items() if k not in drop}
    fast, slow = _entry_fast(obj), _slow(obj)
    if fast is not None:
        assert fast == slow  # accepted by both, decoded alike
    # (fast None: the slow path decides, accepting or wording the error)


@pytest.mark.parametrize("obj", [[], "x", None, {**GOOD, "size": True}, {**GOOD, "size": 1.0},
                                 {**GOOD, "offset": -1}, {**GOOD, "extra": 1}, {k: GOOD[k] for k in list(GOOD)[1:]}])
def test_malformed_entries_are_refused_with_a_reason(obj: object) -> None:
    assert _entry_fast(obj) is None
    with pytest.raises(ManifestError, match="entry"):
        TGBEntry.from_json(obj, what="entry")


def test_object_size_zero_means_absent_on_both_paths() -> None:
    obj = {**GOOD, "object_size": 0, "start": 0}
    assert _entry_fast(obj) == TGBEntry._from_fields(obj, what="entry")
    assert _entry_fast(obj).object_size is None


KEYS = st.sampled_from(["data/p0/a.tgb", "data/p1/b.tgb", "other/p0/a.tgb", "data/../x.tgb", "data//x", "/data/x"])
PRODUCERS = st.sampled_from(["p0", "p-1.x", "", "-p", "p/0"])
SIZES = st.sampled_from([0, 1, 240, 3800, 4040, 4096, 5000, 64 * 1024 * 1024 + 1])


@settings(max_examples=400, deadline=None)
@given(items=st.lists(st.fixed_dictionaries(
    {"key": KEYS, "producer": PRODUCERS, "size": SIZES, "footer_offset": SIZES, "footer_length": SIZES},
    optional={"start": SIZES, "object_size": SIZES}), min_size=1, max_size=4))
def test_a_list_decodes_as_each_entry_does(items: list[dict]) -> None:
    """``from_json_list`` (names checked once per pair, messages formatted on failure only) accepts exactly what
    ``from_json`` of each item accepts, and fails with the first failing item's own message and index."""
    objs = [{**GOOD, **item} for item in items]
    try:
        expected: tuple[TGBEntry, ...] | str = tuple(
            TGBEntry.from_json(o, what=f"v entry {i}") for i, o in enumerate(objs))
    except ManifestError as e:
        expected = str(e)
    try:
        got: tuple[TGBEntry, ...] | str = TGBEntry.from_json_list(objs, what="v")
    except ManifestError as e:
        got = str(e)
    assert got == expected
    if not isinstance(got, str):
        for entry in got:
            entry.validate(what="v")  # raises unless each entry is well-formed
