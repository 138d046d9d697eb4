"""``tgb.produce``'s default config: a run writes segment objects, a paced stream one object per batch."""

from __future__ import annotations

from tests.producer._pipeline_nodes import CountingNode
from tests.producer.test_pipeline import store  # noqa: F401 - the fixture: a fresh MemoryStore
from torch_tgb.layout import Layout
from torch_tgb.manifest import Manifest
from torch_tgb.producer import ProduceOptions, ProducerConfig, produce
from torch_tgb.producer.config import RUN_SEGMENT_BYTES, run_config
from torch_tgb.storage import MemoryStore

LAYOUT = Layout(dp=2, seq_keys=("input_ids",))


def objects(store: MemoryStore) -> list[str]:
    m = Manifest(store)
    return [e.key for e in m.entries(0, m.head().num_steps)]


def test_a_run_writes_segments_by_default(store) -> None:
    produce(store, CountingNode(12), producer_id="p0", layout=LAYOUT, seal=True, progress=False)
    keys = objects(store)
    assert len(keys) == 12 and len(set(keys)) == 1  # one segment holds all twelve TGBs


def test_a_paced_stream_writes_one_object_per_batch(store) -> None:
    produce(store, CountingNode(4), producer_id="p0", layout=LAYOUT, seal=True, progress=False, rate=1000.0)
    keys = objects(store)
    assert len(keys) == 4 and len(set(keys)) == 4


def test_a_config_given_is_kept(store) -> None:
    produce(store, CountingNode(4), producer_id="p0", layout=LAYOUT, seal=True, progress=False,
            config=ProducerConfig())
    assert len(set(objects(store))) == 4
    assert ProduceOptions().config is None
    assert run_config(None, rate=None).segment_bytes == RUN_SEGMENT_BYTES
    assert run_config(None, rate=2.0) == ProducerConfig()
