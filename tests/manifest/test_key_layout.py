"""Manifest keys spread over prefixes (docs/protocol.md, *Manifest keys spread over prefixes*).

The layout is recorded in dataset.json at creation (spread by default), an
existing namespace keeps its flat keys, a reader that predates spreading
refuses a spread namespace by its format, and head discovery costs the same
requests in both layouts.
"""

from __future__ import annotations

import hashlib
import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _manifest_helpers import CountingStore, commit, started

from torch_tgb.errors import ManifestError
from torch_tgb.layout import Layout
from torch_tgb.manifest import DatasetInfo, Manifest
from torch_tgb.manifest import keys as manifest_keys
from torch_tgb.manifest._dataset_info import FORMAT, FORMAT_SPREAD
from torch_tgb.manifest.keys import FLAT, KeyLayout, snapshot_key, snapshot_part_key, version_key
from torch_tgb.storage import LocalStore, MemoryStore

from tests._key_layouts import SCHEMA, SPREAD, create_namespace, new_namespaces
from tests.consumer._support import produce

NUMBERS = st.integers(min_value=0, max_value=10**20 - 1)
LAYOUTS = st.sampled_from([FLAT, KeyLayout(2), KeyLayout(10), SPREAD, KeyLayout(256)])


@pytest.fixture
def store():
    s = MemoryStore(f"keys-{uuid.uuid4().hex}")
    yield s
    s.destroy()


@settings(max_examples=300, deadline=None)
@given(layout=LAYOUTS, number=NUMBERS, part=st.integers(min_value=0, max_value=99_999))
def test_every_key_names_its_number_and_nothing_else(layout: KeyLayout, number: int, part: int) -> None:
    v, s, p = layout.version_key(number), layout.snapshot_key(number), layout.snapshot_part_key(number, part)
    assert (layout.version_of(v), layout.snapshot_of(s), layout.snapshot_of(p)) == (number, (number, None), (number, part))
    assert layout.version_of(s) is None and layout.snapshot_of(v) is None
    assert all(k.startswith(("_tgb/log/", "_tgb/snapshots/")) for k in (v, s, p))  # one LIST still finds them all
    other = KeyLayout(16) if layout != KeyLayout(16) else FLAT  # a key of another layout is not this one's
    assert layout.version_of(other.version_key(number)) is None or other.version_key(number) == v


@given(number=NUMBERS, part=st.integers(min_value=0, max_value=99_999))
def test_the_flat_layout_is_the_keys_of_before(number: int, part: int) -> None:
    assert FLAT.version_key(number) == version_key(number) == f"_tgb/log/{number:020d}.json"
    assert FLAT.snapshot_key(number) == snapshot_key(number)
    assert FLAT.snapshot_part_key(number, part) == snapshot_part_key(number, part)


def test_a_spread_key_lies_one_level_down() -> None:
    assert SPREAD.version_key(17) == "_tgb/log/1/00000000000000000017.json"  # 0x11: its last hex digit
    digest = hashlib.sha256(b"00000000000000000017").digest()  # a snapshot: its number's hash
    assert SPREAD.snapshot_key(17) == f"_tgb/snapshots/{int.from_bytes(digest[:4], 'big') % 16:x}/00000000000000000017.json"
    assert SPREAD.version_of("_tgb/log/3/00000000000000000017.json") is None  # under the wrong prefix: not ours
    assert SPREAD.version_of("_tgb/log/00000000000000000017.json") is None  # a flat key in a spread namespace


@pytest.mark.parametrize("prefixes", [2, 10, 16, 256])
@pytest.mark.parametrize("start", [0, 1, 255, 4095, 10**12 + 7])
def test_consecutive_versions_take_every_prefix_in_turn(prefixes: int, start: int) -> None:
    """Any window of K consecutive versions hits each of the K prefixes once (the load of a fleet that reads
    versions in order is spread evenly, not by chance)."""
    layout = KeyLayout(prefixes)
    assert len({layout.version_prefix(n) for n in range(start, start + prefixes)}) == prefixes


@pytest.mark.parametrize("every", [8, 16, 64, 100])
def test_snapshots_and_their_parts_spread_too(every: int) -> None:
    """Snapshots at multiples of ``snapshot_every`` do not share one prefix (as ``n mod 16`` would put them),
    and the parts of one snapshot, read a window at a time, take the prefixes in turn."""
    taken = {SPREAD.snapshot_prefix(every * i) for i in range(1, 65)}
    assert len(taken) >= 12, taken
    assert len({SPREAD.snapshot_part_key(every, k).split("/")[2] for k in range(16)}) == 16


def test_dataset_json_records_the_layout(store) -> None:
    info = Manifest(store).ensure_dataset(Layout(), SCHEMA)  # a new namespace: spread by default
    stored = json.loads(store.get("_tgb/dataset.json"))
    assert info.keys == SPREAD == manifest_keys.NEW_NAMESPACE_KEYS
    assert stored["format"] == FORMAT_SPREAD and stored["keys"] == {"scheme": "last-digit/sha256", "prefixes": 16}
    assert Manifest(store).dataset() == info
    flat = DatasetInfo({"dp": 1}, {}, {}, "f" * 64)
    assert flat.to_json()["format"] == FORMAT and "keys" not in flat.to_json()  # flat: byte-for-byte as before
    assert DatasetInfo.decode(flat.encode(), what="d").keys == FLAT


def test_an_older_reader_refuses_a_spread_namespace_by_its_format(store) -> None:
    """Every reader before spreading accepts exactly format ``tgb-manifest/1`` (its DatasetInfo.decode compares
    it and names the format it refuses with "upgrade torch_tgb"): it refuses a spread namespace at open
    instead of probing flat keys that do not exist and reading nothing."""
    Manifest(store).ensure_dataset(Layout(), SCHEMA)
    assert FORMAT == "tgb-manifest/1" != json.loads(store.get("_tgb/dataset.json"))["format"]


@pytest.mark.parametrize(("change", "match"), [
    (lambda d: d.pop("keys"), "has no keys field"),
    (lambda d: d.update(format=FORMAT), "has a keys field"),
    (lambda d: d["keys"].update(scheme="hash"), "upgrade torch_tgb"),
    (lambda d: d["keys"].update(prefixes=1), "2..256"),
    (lambda d: d["keys"].update(prefixes=10**9), "2..256"),
    (lambda d: d["keys"].update(prefixes=16.0), "2..256"),
    (lambda d: d["keys"].update(extra=1), "is not"),
])
def test_a_bad_keys_field_is_refused(store, change, match) -> None:
    Manifest(store).ensure_dataset(Layout(), SCHEMA)
    d = json.loads(store.get("_tgb/dataset.json"))
    change(d)
    store.put("_tgb/dataset.json", json.dumps(d).encode())
    with pytest.raises(ManifestError, match=match):
        Manifest(store).dataset()
    with pytest.raises(ManifestError, match=match):  # every read of a version asks the layout first
        Manifest(store).latest_version()


def test_an_existing_namespace_keeps_its_keys(store) -> None:
    create_namespace(store, "flat")  # created before spreading
    c = started(store, "p0")
    commit(c, 2)
    assert Manifest(store).ensure_dataset(Layout(), SCHEMA, keys=SPREAD).keys == FLAT  # asked for: still flat
    assert store.exists(version_key(1)) and Manifest(store).head().num_steps == 2  # registration takes no version


def test_a_log_written_before_any_dataset_json_stays_flat(store, monkeypatch) -> None:
    """Versions an older torch_tgb committed with no dataset.json (flat keys) are found, and creating the
    dataset.json then records the flat layout."""
    with monkeypatch.context() as old:
        new_namespaces(old, "flat")  # what every torch_tgb before spreading wrote
        commit(started(store, "p0"), 3)
    assert store.exists(version_key(1))
    reader = Manifest(store)
    assert reader.head().num_steps == 3 and reader.key_layout() == FLAT  # found under the flat keys
    info = Manifest(store).ensure_dataset(Layout(), SCHEMA)
    assert info.keys == FLAT and Manifest(store).head().num_steps == 3


def test_a_producer_without_a_schema_creates_a_spread_namespace(tmp_path) -> None:
    """Its epoch bump is committed before it creates dataset.json (at its first append): under the keys new
    namespaces get, so the dataset.json it then creates records them."""
    produce(str(tmp_path), 2)
    store = LocalStore(str(tmp_path))
    assert Manifest(store).dataset().keys == SPREAD
    listed = store.list("_tgb/log/")
    assert listed and all(SPREAD.version_of(k) is not None for k in listed)


def test_a_reader_that_starts_before_the_namespace_finds_its_spread_versions(store) -> None:
    """Before dataset.json exists the reader probes flat keys; it asks again, so it is not stuck there."""
    reader = Manifest(store)
    assert reader.latest_version() == 0
    create_namespace(store, "spread")
    commit(started(store, "p0"), 4)
    assert reader.latest_version() == 1 and reader.head().num_steps == 4
    assert reader.key_layout() == SPREAD


def _probe_costs(keys: str) -> tuple[int, int, int]:
    store = create_namespace(MemoryStore(f"keys-{uuid.uuid4().hex}"), keys)
    c = started(store, "p0", snapshot_every=10_000)
    for _ in range(150):
        commit(c, 1)
    counting = CountingStore(store)
    m = Manifest(counting)
    m.key_layout()  # dataset.json: read once per client whatever the layout (a reader's open reads it anyway)
    counting.reset()
    assert m.latest_version() == 150
    cold = counting.calls["exists"]
    counting.reset()
    m.latest_version()
    warm = counting.total
    counting.reset()
    m.head()
    return cold, warm, counting.calls["get_range"]


def test_head_discovery_costs_the_same_in_both_layouts() -> None:
    """Existence probes, bisection and replay: the same requests, only the keys differ."""
    assert _probe_costs("flat") == _probe_costs("spread")
