"""Reclaiming segment objects: one is deleted only when every TGB in it is below the safe step.

Property: for any segment size, commit pattern and checkpoint cursor, a pass
keeps every object that holds a step at or above the safe step (a reader
resumed there reads every remaining step), and deletes every object whose
TGBs all lie below it.
"""

from __future__ import annotations

import uuid

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.checkpoint import Reclaimer, record_watermark
from torch_tgb.consumer import TGBDataset
from torch_tgb.layout import Layout, Mesh
from torch_tgb.manifest import Manifest
from torch_tgb.producer import Producer, ProducerConfig
from torch_tgb.storage import MemoryStore


@settings(max_examples=15, deadline=None)
@given(
    steps=st.integers(1, 12),
    segment_tgbs=st.integers(1, 5),
    commit_every=st.integers(1, 4),
    safe_fraction=st.floats(0, 1),
    second_pass=st.booleans(),
)
def test_reclaim_never_deletes_a_segment_a_live_checkpoint_needs(
    steps, segment_tgbs, commit_every, safe_fraction, second_pass
) -> None:
    store = MemoryStore(f"rs-{uuid.uuid4().hex}")
    try:
        with Producer(store, producer_id="p", layout=Layout(dp=2), commit_policy=f"fixed:{commit_every}",
                      config=ProducerConfig(segment_tgbs=segment_tgbs)) as p:
            for offset in range(steps):
                p.append({"x": torch.full((2, 3), offset, dtype=torch.int32)}, offset=offset)
            p.close(seal=True)
        entries = Manifest(store).entries(0, steps)
        safe = int(round(safe_fraction * steps))
        record_watermark(store, "ck", {"tgb_cursor": {"step": safe, "version": 1}})
        with Reclaimer(store, grace_period=3600) as reclaimer:
            reclaimer.run_once()
            if second_pass:
                reclaimer.run_once()
        present = set(store.list("data/"))
        needed = {e.key for e in entries[safe:]}
        assert needed <= present  # nothing a live checkpoint resumes into is gone
        assert not {e.key for e in entries[:safe]} - needed & present  # wholly-consumed segments are gone
        ds = TGBDataset(store, mesh=Mesh(1, 2), prefetch=0)
        ds.load_state_dict({"tgb_cursor": {"step": safe, "version": 1}})
        got = [int(b["x"][0, 0]) for b in ds]
        assert got == list(range(safe, steps))
    finally:
        store.destroy()


def _one_segment(store, *, seal: bool, close: bool = True) -> Producer:
    p = Producer(store, producer_id="p", layout=Layout(dp=2), commit_policy="fixed:1",
                 config=ProducerConfig(segment_tgbs=2))
    for offset in range(2):
        p.append({"x": torch.full((2, 3), offset, dtype=torch.int32)}, offset=offset)
    if close:
        p.close(seal=seal)
    else:
        p.flush()
    record_watermark(store, "ck", {"tgb_cursor": {"step": 2, "version": 1}})  # both TGBs consumed
    with Reclaimer(store, grace_period=3600) as reclaimer:
        reclaimer.run_once()
    return p


def test_a_consumed_segment_is_deleted_once_its_producer_can_name_it_no_more():
    """Its last TGB at the head: kept while its incarnation is open, deleted once sealed or closed."""
    for seal, close, kept in ((True, True, False), (False, True, False), (False, False, True)):
        store = MemoryStore(f"rs-{uuid.uuid4().hex}")
        try:
            producer = _one_segment(store, seal=seal, close=close)
            assert bool(store.list("data/")) is kept, (seal, close)
            producer.close()
        finally:
            store.destroy()
