"""Watermarks, retirement markers and the safe boundary."""

from __future__ import annotations

import json
import uuid

import pytest

from torch_tgb.manifest.watermarks import (
    Watermark,
    keep_last,
    live_checkpoints,
    record_watermark,
    retire,
    safe_boundary,
    validate_checkpoint_id,
)
from torch_tgb.errors import InvalidKey, ManifestError
from torch_tgb.storage import MemoryStore


@pytest.fixture
def store():
    s = MemoryStore(f"wm-{uuid.uuid4().hex}")
    yield s
    s.destroy()


def state(step: int, version: int = 1, sub_step: int = 0) -> dict:
    return {"tgb_cursor": {"step": step, "version": version, "sub_step": sub_step, "sub_steps": 2}}


def test_no_watermark_means_boundary_zero(store):
    assert safe_boundary(store) == 0
    assert live_checkpoints(store) == []


def test_record_writes_json_with_cursor(store):
    mark = record_watermark(store, "step-10", state(10, version=3))
    data = json.loads(store.get("_tgb/watermarks/step-10.json"))
    assert data["checkpoint_id"] == "step-10"
    assert (data["step"], data["version"], data["sub_step"]) == (10, 3, 0)
    assert data["time"] == pytest.approx(mark.time)
    assert safe_boundary(store) == 10


def test_boundary_is_smallest_live_cursor_and_moves_on_retire(store):
    for step in (10, 20, 30):
        record_watermark(store, f"step-{step}", state(step))
    assert safe_boundary(store) == 10
    retire(store, "step-10")
    assert store.exists("_tgb/retired/step-10")
    assert safe_boundary(store) == 20
    assert [m.checkpoint_id for m in live_checkpoints(store)] == ["step-20", "step-30"]
    retire(store, "step-10")  # idempotent
    retire(store, "step-20")
    retire(store, "step-30")
    assert safe_boundary(store) == 0  # nothing live: nothing may be assumed consumed


def test_smallest_cursor_inside_a_loader_state_found_by_path(store):
    """A multi-worker StatefulDataLoader state: the smallest worker cursor; also for a list of states (every rank's)."""
    workers = {f"worker_{i}": {"worker_id": i, "dataset_state": s} for i, s in enumerate([state(12), state(11, sub_step=1)])}
    loader_state = {"_snapshot": {"_worker_snapshots": workers, "_main_snapshot": {}}, "_steps_since_snapshot": 0}
    mark = record_watermark(store, "ck", loader_state)
    assert (mark.step, mark.sub_step) == (11, 1)
    mark = record_watermark(store, "ck2", [{"dataset_state": state(14)}, state(13)])
    assert mark.step == 13


def test_a_cursor_nested_elsewhere_is_not_searched_for(store):
    """Only the shapes a reader or loader writes count: a cursor buried in another dict is refused, naming them."""
    with pytest.raises(ValueError, match="dataset_state"):
        record_watermark(store, "ck", {"worker_states": [{"ds": state(12)}], "other": 5})


def test_state_without_cursor_fails_loud(store):
    with pytest.raises(ValueError, match="tgb_cursor"):
        record_watermark(store, "ck", {"model": 1})
    assert store.list("_tgb/") == []


def test_retired_id_cannot_be_recorded_again(store):
    record_watermark(store, "ck", state(5))
    retire(store, "ck")
    with pytest.raises(ManifestError, match="retired"):
        record_watermark(store, "ck", state(7))


def test_rerecording_live_id_replaces(store):
    record_watermark(store, "ck", state(5))
    record_watermark(store, "ck", state(9))
    assert safe_boundary(store) == 9


@pytest.mark.parametrize("bad", ["", "a/b", "..", ".hidden", "-x", "x" * 201, "/abs", "a\\b", "s3://x", 3, None])
def test_checkpoint_id_must_be_one_safe_segment(store, bad):
    with pytest.raises(InvalidKey):
        validate_checkpoint_id(bad)
    with pytest.raises(InvalidKey):
        record_watermark(store, bad, state(1))
    with pytest.raises(InvalidKey):
        retire(store, bad)


def test_keep_last_retires_oldest_recorded(store):
    for step in (10, 20, 30, 40):
        record_watermark(store, f"step-{step}", state(step))
    assert keep_last(store, 2) == ["step-10", "step-20"]
    assert [m.checkpoint_id for m in live_checkpoints(store)] == ["step-30", "step-40"]
    assert keep_last(store, 2) == []
    assert safe_boundary(store) == 30
    with pytest.raises(ValueError):
        keep_last(store, -1)


def test_malformed_watermark_fails_loud(store):
    record_watermark(store, "ok", state(3))
    store.put("_tgb/watermarks/bad.json", b"{not json")
    with pytest.raises(ManifestError, match="bad.json"):
        safe_boundary(store)
    store.put("_tgb/watermarks/bad.json", json.dumps({"format": 1, "checkpoint_id": "bad", "step": -1,
                                                      "version": 0, "time": 0}).encode())
    with pytest.raises(ManifestError, match="step"):
        safe_boundary(store)
    # a watermark whose id disagrees with its key is refused too
    other = Watermark("other", 1, 1, 0, 0.0).to_json()
    store.put("_tgb/watermarks/bad.json", json.dumps(other).encode())
    with pytest.raises(ManifestError, match="other"):
        live_checkpoints(store)
