"""CountingStore's report: S3 requests by key class and request type, and the bytes they returned."""

from __future__ import annotations

import json
import uuid

import pytest

from torch_tgb.errors import ObjectNotFound
from torch_tgb.storage import MemoryStore, RangeRequest
from torch_tgb.testing.counting import KEY_CLASSES, REQUEST_TYPES, CountingStore, key_class, merge_reports


@pytest.fixture
def store():
    inner = MemoryStore(f"counting-{uuid.uuid4().hex}")
    yield CountingStore(inner)
    inner.destroy()


def test_key_classes():
    assert [key_class(k) for k in (
        "_tgb/log/00000000000000000001.json", "_tgb/snapshots/00000000000000000016.json", "_tgb/snapshot_hint.json",
        "_tgb/gc_boundary/", "_tgb/gc_boundary.json", "_tgb/dataset.json", "data/p0/a.tgb",
        "_tgb/watermarks/c1.json", "_tgb/retired/c1", "_tgb/capabilities", "elsewhere",
    )] == ["log", "snapshot", "hint", "boundary", "boundary", "dataset", "data", "watermark", "watermark",
           "other", "other"]


def test_requests_by_class_and_type(store):
    store.put("data/p0/a.tgb", b"x" * 100)
    store.put_if_absent("_tgb/log/00000000000000000001.json", b"{}")
    for i in range(1500):
        store.inner.put(f"_tgb/gc_boundary/{i:05d}", b"")
    assert store.get_range("data/p0/a.tgb", 10, 40) == b"x" * 30
    store.get_ranges([RangeRequest("data/p0/a.tgb", 0, 8), RangeRequest("data/p0/a.tgb", 50, 60)])
    assert store.get("_tgb/log/00000000000000000001.json") == b"{}"
    with pytest.raises(ObjectNotFound):
        store.get_range("_tgb/log/00000000000000000002.json", 0, 10)  # a 404 is a request too
    assert store.exists("_tgb/log/00000000000000000001.json") and store.stat("data/p0/a.tgb").size == 100
    assert len(store.list("_tgb/gc_boundary/")) == 1500 and store.list("nothing/") == []
    store.delete([f"_tgb/gc_boundary/{i:05d}" for i in range(1500)] + ["data/p0/a.tgb"])
    report = store.report()
    json.dumps(report)  # plain data
    assert set(report["by_class"]) == set(KEY_CLASSES) and set(report["by_type"]) == set(REQUEST_TYPES)
    data, log, boundary = (report["by_class"][c] for c in ("data", "log", "boundary"))
    assert data["by_type"] == {"GET": 0, "range GET": 3, "HEAD": 1, "LIST": 0, "PUT": 1, "DELETE": 1}
    assert data["bytes"] == 30 + 8 + 10
    assert log["by_type"] == {"GET": 1, "range GET": 1, "HEAD": 1, "LIST": 0, "PUT": 1, "DELETE": 0}
    assert boundary["by_type"]["LIST"] == 2 and boundary["by_type"]["DELETE"] == 2  # pages of 1,000 keys
    assert report["by_class"]["other"]["by_type"]["LIST"] == 1  # an empty LIST is still one request
    assert report["requests"] == sum(report["by_type"].values()) == 6 + 4 + 4 + 1
    assert report["manifest_requests"] == log["requests"] + boundary["requests"]
    assert store.calls["get_range"] == 4 and store.range_reads("data/") == 3  # the old counters stay


def test_reports_add_up(store):
    store.put("data/x", b"abc")
    store.get("data/x")
    one = store.report()
    total = merge_reports([one, one, one])
    assert total["requests"] == 3 * one["requests"] and total["by_class"]["data"]["bytes"] == 9
    store.reset()
    assert store.report()["requests"] == 0 and store.total == 0
