"""Replacement entries in the manifest (manifest/_replaced.py, replace.py, _state.py): the fold rules, the
carry-forward by every committer, and what readers apply."""

from __future__ import annotations

import dataclasses
import uuid

import numpy as np
import pytest

from torch_tgb.errors import ManifestError
from torch_tgb.layout import Layout
from torch_tgb.manifest import Manifest
from torch_tgb.manifest._replaced import BUCKET_STEPS, ReplacedBucket, ReplacedRef, Superseded
from torch_tgb.manifest._state import fold
from torch_tgb.manifest.replace import Replacement, ReplacementConflict, commit_replacements
from torch_tgb.producer import Producer
from torch_tgb.storage import MemoryStore
import torch


def _namespace(steps: int = 6, seal: bool = True) -> MemoryStore:
    store = MemoryStore(f"replaced-{uuid.uuid4().hex}")
    with Producer(store, producer_id="p", layout=Layout(dp=1), commit_policy="naive") as p:
        for k in range(steps):
            p.append({"x": torch.full((2, 3), k)}, offset=k)
        p.flush()
        if seal:
            p.close(seal=True)
    return store


def _copy_of(manifest: Manifest, step: int, tag: str):
    entry = manifest.entry(step)
    data = manifest.store.get(entry.key)
    key = f"data/tgb-excise/{tag}.tgb"
    manifest.store.put(key, data)
    return Replacement(step, dataclasses.replace(entry, key=key), base=entry.key)


def test_a_replacement_version_follows_a_seal_and_readers_apply_it() -> None:
    store = _namespace()
    manifest = Manifest(store)
    before = manifest.entries(0, 6)
    number = commit_replacements(manifest, [_copy_of(manifest, 2, "a"), _copy_of(manifest, 4, "b")],
                                 [(before[2].key, 2), (before[4].key, 4)])
    fresh = Manifest(store)
    head = fresh.head()
    assert head.version == number and head.sealed and head.num_steps == 6 and head.replaced.steps == 2
    after = fresh.entries(0, 6)
    assert [e.key for e in after] == [e.key if i not in (2, 4) else f"data/tgb-excise/{'a' if i == 2 else 'b'}.tgb"
                                      for i, e in enumerate(before)]
    assert fresh.entry(4).key == "data/tgb-excise/b.tgb"
    pinned = Manifest(store)  # a reader pinned to the version before sees the originals
    pinned.replacements.pin(number - 1, None)
    assert [e.key for e in pinned.entries(0, 6)] == [e.key for e in before]


def test_committers_carry_the_replacements_and_no_version_may_drop_them() -> None:
    store = _namespace(seal=False)
    manifest = Manifest(store)
    commit_replacements(manifest, [_copy_of(manifest, 1, "a")], [])
    with Producer(store, producer_id="q", layout=Layout(dp=1), commit_policy="naive") as q:
        q.append({"x": torch.zeros(2, 3, dtype=torch.int64)}, offset=0)
    head = Manifest(store).head()
    assert head.replaced is not None and head.replaced.steps == 1 and head.num_steps == 7
    version = Manifest(store).read_version(head.version)
    with pytest.raises(ManifestError, match="drops the replacements"):
        fold(dataclasses.replace(head, version=head.version), dataclasses.replace(
            version, number=head.version + 1, first_step=head.num_steps, replaced=None))


def test_a_replacement_version_appends_nothing_and_changes_no_producer() -> None:
    store = _namespace()
    manifest = Manifest(store)
    commit_replacements(manifest, [_copy_of(manifest, 1, "a")], [])
    head = Manifest(store).head()
    prior = Manifest(store).state_at(head.version - 1)
    version = Manifest(store).read_version(head.version)
    for bad in (dataclasses.replace(version, sealed=False),
                dataclasses.replace(version, replaced=dataclasses.replace(version.replaced, version=1))):
        with pytest.raises(ManifestError, match="must be a replacement version"):
            fold(prior, bad)
    assert fold(prior, version).replaced == version.replaced


def test_a_step_replaced_meanwhile_is_a_conflict_and_bad_steps_are_refused() -> None:
    store = _namespace()
    manifest = Manifest(store)
    stale = _copy_of(manifest, 3, "a")
    commit_replacements(Manifest(store), [_copy_of(Manifest(store), 3, "b")], [])
    with pytest.raises(ReplacementConflict):
        commit_replacements(Manifest(store), [stale], [])
    with pytest.raises(ManifestError, match="cannot replace steps"):
        commit_replacements(Manifest(store), [dataclasses.replace(stale, step=99)], [])


def test_buckets_round_trip_and_refuse_steps_outside() -> None:
    bucket = ReplacedBucket.empty(2)
    manifest = Manifest(_namespace())
    entry = manifest.entry(1)
    full = bucket.with_replacements({2 * BUCKET_STEPS + 5: entry}, version=9,
                                    superseded=[Superseded("data/p/x.tgb", 9, 1.5, 3)])
    again = ReplacedBucket.decode(full.encode(), bucket=2, what="b")
    assert again.entry(2 * BUCKET_STEPS + 5) == entry and again.superseded == full.superseded
    assert np.array_equal(again.by, [9])
    with pytest.raises(ManifestError):
        ReplacedBucket.decode(full.encode(), bucket=3, what="b")
    ref = ReplacedRef(((2, "9-abcdef12"),), 9, 1, 1)
    assert ReplacedRef.from_json(ref.to_json(), what="r") == ref
