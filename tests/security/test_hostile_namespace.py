"""Namespaces crafted to attack the reader: each is rejected with an error naming the key or version.

The reader under attack is the real consumer (``TGBDataset`` on a fresh
store) and, for the lifecycle files, the Reclaimer's ``safe_boundary``.
"""

from __future__ import annotations

import json
import os
import shutil
import tracemalloc

import pytest
from _tamper import Tamper

import torch_tgb as tgb
from torch_tgb.manifest.watermarks import safe_boundary
from torch_tgb.errors import InvalidKey, ManifestError, TGBError
from torch_tgb.testing.version_json import append_entry, get_entry, get_entry_field, set_entry, set_entry_field
from torch_tgb.manifest._json import MAX_METADATA_BYTES
from torch_tgb.manifest.keys import DATASET_KEY, GC_BOUNDARY_KEY, SNAPSHOT_HINT_KEY, version_key
from torch_tgb.storage import open_store

# --- keys that leave the namespace ------------------------------------------------

ESCAPING_KEYS = [
    "../outside.tgb",
    "data/../../outside.tgb",
    "data/p0/../../../etc/passwd",
    "/etc/passwd",
    "//etc/passwd",
    "~/outside.tgb",
    "s3://other-bucket/data/x.tgb",
    "gs://other/x.tgb",
    "file:///etc/passwd",
    "http://169.254.169.254/latest/meta-data",
    "data\\..\\..\\outside.tgb",
    "data/p0/\x00.tgb",
    "data//p0/x.tgb",
    "data/./p0/x.tgb",
    "_tgb/dataset.json",  # inside the namespace, but not a data object
]


@pytest.mark.parametrize("key", ESCAPING_KEYS)
def test_entry_key_outside_namespace_is_rejected(tamper: Tamper, key: str) -> None:
    v = tamper.version(3)
    set_entry_field(v, 0, "key", key)
    tamper.write_version(3, v)
    with pytest.raises(ManifestError) as info:
        tamper.read_all()
    message = str(info.value)
    assert "version=3" in message
    assert repr(key)[1:-1][:20] in message or key[:20] in message


def test_symlinked_object_pointing_outside_is_rejected(tamper: Tamper, tmp_path) -> None:
    outside = tmp_path / "outside.tgb"
    key = get_entry_field(tamper.version(3), 0, "key")
    shutil.copy(tamper.path(key), outside)  # a valid TGB object, but outside the namespace
    os.unlink(tamper.path(key))
    os.symlink(outside, tamper.path(key))
    with pytest.raises(InvalidKey) as info:
        tamper.read_all()
    assert key in str(info.value)


def test_symlinked_directory_pointing_outside_is_rejected(tamper: Tamper, tmp_path) -> None:
    outside = tmp_path / "outside-dir"
    shutil.move(str(tamper.path("data/p0")), outside)
    os.symlink(outside, tamper.path("data/p0"))
    with pytest.raises(InvalidKey) as info:
        tamper.read_all()
    assert "data/p0/" in str(info.value)


def test_symlink_inside_the_namespace_is_allowed(tamper: Tamper) -> None:
    """Control: a link that stays inside the root is not an attack."""
    key = get_entry_field(tamper.version(3), 0, "key")
    moved = tamper.path("data/elsewhere.bin")
    shutil.move(str(tamper.path(key)), moved)
    os.symlink(moved, tamper.path(key))
    assert tamper.read_all() == [0, 1, 2]


def test_symlinked_dir_swapped_in_after_first_read(tamper: Tamper, tmp_path) -> None:
    """bugs.md B3 (fixed): a directory trusted once must not be trusted after it became a symlink."""
    store = open_store(tamper.ns)
    key = get_entry_field(tamper.version(3), 0, "key")
    store.get(key)  # the directory data/p0 is now known to the store
    outside = tmp_path / "outside-dir"
    shutil.move(str(tamper.path("data/p0")), outside)
    (outside / "secret.tgb").write_bytes(b"TOP SECRET")
    os.symlink(outside, tamper.path("data/p0"))
    with pytest.raises(InvalidKey):
        store.get("data/p0/secret.tgb")


# --- size and depth limits ---------------------------------------------------------


def test_giant_version_is_rejected(tamper: Tamper) -> None:
    v = tamper.version(3)
    v["pad"] = " " * (MAX_METADATA_BYTES + 10)
    tamper.write_version(3, v)
    with pytest.raises(ManifestError, match=r"version=3.*exceeds the metadata limit"):
        tamper.read_all()


def test_giant_version_is_not_read_whole(tamper: Tamper) -> None:
    """bugs.md B6 (fixed): a planted 32 MiB version is refused without reading it whole."""
    tamper.write_version(3, b" " * (4 * MAX_METADATA_BYTES))
    from torch_tgb.manifest import Manifest

    manifest = Manifest(open_store(tamper.ns))
    tracemalloc.start()
    try:
        with pytest.raises(ManifestError):
            manifest.read_version(3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * MAX_METADATA_BYTES, f"peak allocation {peak} bytes for a {4 * MAX_METADATA_BYTES}-byte object"


def test_giant_dataset_json_is_rejected(tamper: Tamper) -> None:
    info = json.loads(tamper.path(DATASET_KEY).read_bytes())
    info["metadata"] = {"pad": "x" * (2 << 20)}
    tamper.write(DATASET_KEY, json.dumps(info).encode())
    with pytest.raises(ManifestError, match="dataset.json"):
        tamper.read_all()


DEEP = [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000]


@pytest.mark.parametrize("payload", DEEP, ids=["list", "object"])
@pytest.mark.parametrize("key", [version_key(3), DATASET_KEY, SNAPSHOT_HINT_KEY, GC_BOUNDARY_KEY])
def test_deeply_nested_metadata_is_rejected(tamper: Tamper, key: str, payload: bytes) -> None:
    if key == GC_BOUNDARY_KEY:
        tamper.without_boundary_generations()  # read only then
    tamper.write(key, payload)
    with pytest.raises(ManifestError) as info:
        tamper.read_all()
    assert key.rsplit("/", 1)[-1] in str(info.value) or "version=3" in str(info.value)


def test_moderately_nested_version_is_rejected(tamper: Tamper) -> None:
    v = tamper.version(3)
    nested: object = 1
    for _ in range(40):
        nested = [nested]
    set_entry_field(v, 0, "tokens", nested)
    tamper.write_version(3, v)
    with pytest.raises(ManifestError, match="version=3"):
        tamper.read_all()


def test_deep_watermark_json(tamper: Tamper) -> None:
    """bugs.md B2 (fixed): watermarks go through the bounded JSON reader."""
    tamper.write("_tgb/watermarks/evil.json", DEEP[0])
    with pytest.raises(ManifestError, match="evil"):
        safe_boundary(tamper.ns)


def test_malformed_watermark_fails_loud(tamper: Tamper) -> None:
    """Skipping a bad watermark could let the Reclaimer delete what it protects."""
    tamper.write("_tgb/watermarks/evil.json", b'{"format": 1, "checkpoint_id": "other", "step": 0, "version": 0, "time": 0}')
    with pytest.raises(ManifestError, match="evil"):
        safe_boundary(tamper.ns)
    with pytest.raises(ManifestError, match="evil"):
        tgb.Reclaimer(tamper.ns).run_once()


def test_entry_with_absurd_size(tamper: Tamper) -> None:
    """bugs.md B5 (fixed): the entry's size must not drive an unbounded read."""
    v = tamper.version(3)
    set_entry(v, 0, {**get_entry(v, 0), "size": 10**13, "footer_offset": 0, "footer_length": 0})
    tamper.write_version(3, v)
    with pytest.raises((ManifestError, tgb.CorruptObject)) as info:
        tamper.read_all()
    assert "MemoryError" not in str(info.value)


def test_entry_with_wrong_footer_location(tamper: Tamper) -> None:
    v = tamper.version(3)
    entry = get_entry(v, 0)
    set_entry(v, 0, {**entry, "footer_offset": entry["footer_offset"] + 8, "footer_length": entry["footer_length"] - 8})
    tamper.write_version(3, v)
    with pytest.raises(tgb.CorruptObject, match=entry["key"]):
        tamper.read_all()


# --- duplicate or inconsistent step claims --------------------------------------------


def test_two_versions_claiming_the_same_first_step(tamper: Tamper) -> None:
    v = tamper.version(3)
    v["first_step"] = tamper.version(2)["first_step"]
    tamper.write_version(3, v)
    with pytest.raises(ManifestError, match=r"version=3: first_step=1"):  # version 2's (registering takes none)
        tamper.read_all()


def test_first_step_disagreeing_with_predecessor(tamper: Tamper) -> None:
    v = tamper.version(4)
    v["first_step"] = 7
    tamper.write_version(4, v)
    with pytest.raises(ManifestError, match=r"version=4: first_step=7"):
        tamper.read_all()


def test_same_producer_offset_committed_twice_across_versions(tamper: Tamper) -> None:
    v3 = tamper.version(3)
    set_entry(v3, 0, get_entry(tamper.version(1), 0))  # (p0, offset 0) again
    v3["producers"]["p0"]["next_offset"] = 1
    tamper.write_version(3, v3)
    with pytest.raises(ManifestError, match=r"version=3.*'p0'.*offset=0"):
        tamper.read_all()


def test_same_producer_offset_twice_in_one_version(tamper: Tamper) -> None:
    v = tamper.version(3)
    append_entry(v, get_entry(v, 0))
    tamper.write_version(3, v)
    with pytest.raises(ManifestError, match=r"version=3.*offset=2"):  # version 3 holds offset 2, twice
        tamper.read_all()


def test_version_number_mismatch(tamper: Tamper) -> None:
    """A version copied into another slot (replayed object) is refused."""
    tamper.write_version(3, tamper.path(version_key(2)).read_bytes())
    with pytest.raises(ManifestError, match=r"version=3: object says version=2"):
        tamper.read_all()


def test_unknown_fields_and_foreign_format_are_rejected(tamper: Tamper) -> None:
    v = tamper.version(3)
    v["format"] = "tgb-manifest/99"
    tamper.write_version(3, v)
    with pytest.raises(ManifestError, match="version=3.*format"):
        tamper.read_all()


def test_errors_are_tgb_errors_not_crashes(tamper: Tamper) -> None:
    """Garbage in every metadata slot: a TGBError each time, never another exception type."""
    for key, payload in [(version_key(3), b"\xff\xfe garbage"), (DATASET_KEY, b"null"),
                         (SNAPSHOT_HINT_KEY, b'{"format": "tgb-manifest/1", "version": "x"}')]:
        original = tamper.path(key).read_bytes() if tamper.path(key).exists() else None
        tamper.write(key, payload)
        with pytest.raises(TGBError):
            tamper.read_all()
        if original is None:
            os.unlink(tamper.path(key))
        else:
            tamper.write(key, original)
