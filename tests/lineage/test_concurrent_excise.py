"""Excisions while producers commit and readers read: every step a reader gets is one whole TGB (the original
or its replacement, never a mix, never a missing object), every step once, in order."""

from __future__ import annotations

import threading
import time

import pytest
import torch

import torch_tgb as tgb
from tests.lineage._corpus import corpus, produce, record, same
from torch_tgb.format import decode_slice, writable
from torch_tgb.lineage import excise
from torch_tgb.lineage._read import footer_of
from torch_tgb.manifest import Manifest
from torch_tgb.storage import open_store

KEYS = ("input_ids", "seq_lens", "provenance")
STEPS = 40


def _slice(store, entry, dp: int) -> dict[str, torch.Tensor]:
    footer = footer_of(store, entry)
    info = footer.slice(dp, 0)
    data = writable(store.get_range(entry.key, info.start, info.end))
    return decode_slice(data, info, base_offset=info.start, key=entry.key)


@pytest.mark.timeout(300)
def test_excise_under_a_producer_and_readers_never_yields_a_partial_step(tmp_path) -> None:
    path, idx, _ = corpus(tmp_path, docs=400)
    ns = str(tmp_path / "ns")
    done = threading.Event()
    errors: list[BaseException] = []

    def producer() -> None:
        try:
            produce(ns, path, idx, max_steps=STEPS, rate=25.0, seal=True, segment_tgbs=2)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
        finally:
            done.set()

    got: dict[int, list[dict[str, torch.Tensor]]] = {0: [], 1: []}

    def reader(rank: int) -> None:
        try:
            while not (tmp_path / "ns" / "_tgb" / "dataset.json").exists():
                time.sleep(0.01)
            ds = tgb.TGBDataset(ns, mesh=tgb.Mesh(rank, 2), keys=KEYS, timeout=60, prefetch=2)
            for batch in ds:
                got[rank].append({k: v.clone() for k, v in batch.items()})
                time.sleep(0.01)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=producer)] + [threading.Thread(target=reader, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    excised = []
    while not done.is_set() and len(excised) < 6:
        time.sleep(0.2)
        manifest = Manifest(open_store(ns)) if (tmp_path / "ns" / "_tgb").exists() else None
        if manifest is None or manifest.latest_version() == 0 or manifest.head().num_steps < 4:
            continue
        batch0 = _slice(manifest.store, manifest.entry(manifest.head().num_steps - 2), 0)
        rec = int(batch0["provenance"][0, 1])
        report = excise(ns, [record(path, rec)])
        excised.append((report.version, rec, Manifest(open_store(ns)).state_at(report.version).num_steps))
    for t in threads:
        t.join(240)
    assert not errors, errors
    assert len(excised) >= 2
    store = open_store(ns)
    manifest = Manifest(store)
    originals = {}
    for number in range(1, manifest.latest_version() + 1):
        v = manifest.read_version(number)
        for i, e in enumerate(v.entries):
            originals[v.first_step + i] = e
    assert all(v is not None for v, _, _ in excised)
    for rank in (0, 1):
        assert len(got[rank]) == STEPS  # every step once
        for step, batch in enumerate(got[rank]):
            old = _slice(store, originals[step], rank)
            new = _slice(store, manifest.entry(step), rank)  # the entry in effect now
            keep = {k: batch[k] for k in ("input_ids", "seq_lens", "provenance", "seq_lens_offsets",
                                            "provenance_offsets")}
            whole = [{k: s[k][..., : keep[k].shape[-1]] if k == "input_ids" else s[k] for k in keep}
                     for s in (old, new)]
            assert same(keep, whole[0]) or same(keep, whole[1]), f"rank {rank} step {step}: neither TGB"
    from torch_tgb.lineage import verify_deny

    for _, rec, committed in excised:  # every step committed before the excision lost the record; a piece of it
        left = verify_deny(ns, [record(path, rec)]).found  # packed into a later step may come after (BFD chunks)
        assert all(step >= committed for _, step, _, _ in left), (rec, committed, left)
