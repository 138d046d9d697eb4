"""The pure part of producer fleets (no Ray): shard producer ids and the driver's shard board."""

from __future__ import annotations

import pytest

from torch_tgb.errors import FleetError
from torch_tgb.integrations._shards import ShardBoard, check_shard_count, parse_shard_producer_id, shard_producer_id
from torch_tgb.manifest import validate_producer_id


def test_shard_ids_are_stable_valid_and_parse_back() -> None:
    pid = shard_producer_id("web-v2", 3, 128)
    assert pid == "web-v2-shard00003-of00128"
    assert validate_producer_id(pid) == pid
    assert parse_shard_producer_id(pid) == ("web-v2", 3, 128)
    assert parse_shard_producer_id("cli") is None
    with pytest.raises(ValueError, match="outside"):
        shard_producer_id("p", 4, 4)


def test_shard_count_is_fixed_per_prefix() -> None:
    ids = [shard_producer_id("fleet", i, 4) for i in range(4)] + ["fleet-seal", shard_producer_id("other", 0, 2)]
    check_shard_count(ids, prefix="fleet", count=4, where="ns")
    check_shard_count(ids, prefix="new", count=9, where="ns")
    with pytest.raises(FleetError, match="num_shards=4, not 8"):
        check_shard_count(ids, prefix="fleet", count=8, where="ns")


def test_board_claims_requeues_and_finishes() -> None:
    board = ShardBoard(prefix="f", count=3)
    assert [board.claim("a"), board.claim("b")] == [0, 1]
    board.requeue(0)  # a died: shard 0 goes first again
    assert board.claim("c") == 0 and board.attempts(0) == 2 and board.worker(0) == "c"
    assert board.claim("a") == 2 and board.claim("a") is None
    for i in range(3):
        board.finish(i)
    assert board.all_done and board.done == 3 and board.pending == board.running == 0
    with pytest.raises(ValueError, match="done, not running"):
        board.requeue(1)
