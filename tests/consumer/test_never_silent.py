"""Issue 14 (1, 7): a reader never waits silently; a missing bucket fails at open."""

from __future__ import annotations

import logging

import pytest
from _support import LAYOUT, produce

import torch_tgb as tgb
from torch_tgb.consumer import ReaderOptions
from torch_tgb.datapipes.read.poller import PollPolicy
from torch_tgb.errors import DataTimeout, ObjectNotFound

FAST = ReaderOptions(poll=PollPolicy(min_interval=0.01, max_interval=0.02, warn_every=0.05))
MESH = tgb.Mesh(0, 2, 0, 2)


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_missing_local_namespace_warns_naming_the_path_then_times_out(tmp_path, caplog):
    missing = tmp_path / "typo"
    ds = tgb.TGBDataset(str(missing), mesh=MESH, timeout=0.3, options=FAST)
    with caplog.at_level(logging.WARNING), pytest.raises(DataTimeout, match="no TGB namespace there"):
        next(iter(ds))
    warned = [m for m in _messages(caplog) if "waiting" in m]
    assert warned and str(missing) in warned[0] and "mistyped path" in warned[0]


def test_waiting_for_a_step_warns_with_step_version_and_open_producers(tmp_path, caplog):
    ns = str(tmp_path / "ns")
    produce(ns, 2, seal=False)  # p0 closed, not done: the stream is not sealed
    ds = tgb.TGBDataset(ns, mesh=MESH, timeout=0.3, options=FAST)
    it = iter(ds)
    next(it), next(it)
    with caplog.at_level(logging.WARNING), pytest.raises(DataTimeout) as info:
        next(it)
    warned = [m for m in _messages(caplog) if "waiting" in m]
    assert warned, "no warning while waiting"
    for text in (warned[0], str(info.value)):
        assert ns in text and "step=2" in text and "last version seen" in text
        assert "p0 closed" in text and "every producer is closed" in text


def test_a_producer_still_open_is_named_open(tmp_path, caplog):
    ns = str(tmp_path / "ns")
    p = tgb.Producer(ns, producer_id="p0", layout=LAYOUT, commit_policy="naive")
    try:
        from _support import make_batch

        p.append(make_batch(0), offset=0)
        p.flush()
        ds = tgb.TGBDataset(ns, mesh=MESH, timeout=0.2, options=FAST)
        it = iter(ds)
        next(it)
        with pytest.raises(DataTimeout) as info:
            next(it)
        assert "p0 open" in str(info.value) and "every producer is closed" not in str(info.value)
    finally:
        p.close()


def test_warnings_can_be_turned_off(tmp_path, caplog):
    quiet = ReaderOptions(poll=PollPolicy(min_interval=0.01, max_interval=0.02, warn_every=None))
    ds = tgb.TGBDataset(str(tmp_path / "none"), mesh=MESH, timeout=0.1, options=quiet)
    with caplog.at_level(logging.WARNING), pytest.raises(DataTimeout):
        next(iter(ds))
    assert not [m for m in _messages(caplog) if "waiting" in m]


def test_poll_policy_rejects_a_non_positive_warning_interval():
    with pytest.raises(ValueError):
        PollPolicy(warn_every=0)


def test_missing_bucket_fails_at_open(s3_server):
    _, options = s3_server.namespace()
    ds = tgb.TGBDataset("s3://no-such-bucket-x/ns", mesh=MESH, storage_options=options, timeout=30)
    with pytest.raises(ObjectNotFound, match="bucket 'no-such-bucket-x' does not exist"):
        next(iter(ds))


def test_producer_on_a_missing_bucket_fails_at_once_naming_it(s3_server):
    _, options = s3_server.namespace()
    with pytest.raises(ObjectNotFound, match="bucket 'no-such-bucket-x' does not exist"):
        tgb.Producer("s3://no-such-bucket-x/ns", producer_id="p0", layout=LAYOUT, storage_options=options)
