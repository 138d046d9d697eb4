"""A producer that disagrees with the namespace (dtype, vocab fingerprint, layout) fails at startup.

"Startup" means before it writes or commits any batch: in ``Producer.__init__``
when it can know (layout, metadata, a ``schema=`` given), otherwise at the
first ``append`` before the object is written. Never after batches landed.
"""

from __future__ import annotations

import pytest
import torch

import torch_tgb as tgb
from torch_tgb.manifest import Manifest
from torch_tgb.storage import open_store

LAYOUT = tgb.Layout(dp=2, seq_keys=("ids",))
META = {"vocab_size": 32000, "tokenizer": "bpe-v1"}


def batch(dtype: torch.dtype = torch.int64, seq: int = 8) -> dict[str, torch.Tensor]:
    return {"ids": torch.zeros(4, seq, dtype=dtype)}


@pytest.fixture
def ns(tmp_path) -> str:
    path = str(tmp_path / "ns")
    with tgb.Producer(path, producer_id="p0", layout=LAYOUT, metadata=META) as p:
        p.append(batch(), offset=0)
    return path


def _committed_by(ns: str, producer: str) -> tuple[int, list[str]]:
    """(steps committed by ``producer``, its objects under data/)."""
    store = open_store(ns)
    m = Manifest(store)
    head = m.head()
    steps = sum(1 for e in m.entries(0, head.num_steps) if e.producer == producer)
    return steps, store.list(f"data/{producer}/")


@pytest.mark.parametrize("other", [tgb.Layout(dp=4, seq_keys=("ids",)), tgb.Layout(dp=2), tgb.Layout(dp=2, cp=2, seq_keys=("ids",))],
                         ids=["dp", "seq_keys", "cp"])
def test_layout_drift_fails_at_startup(ns: str, other: tgb.Layout) -> None:
    with pytest.raises(tgb.SchemaMismatch) as info:
        tgb.Producer(ns, producer_id="p1", layout=other, metadata=META)
    assert "fingerprint" in str(info.value) and "p1" in str(info.value)
    assert _committed_by(ns, "p1") == (0, [])


def test_dtype_drift_with_declared_schema_fails_at_startup(ns: str) -> None:
    schema = {"ids": {"dtype": "int32", "shape": [8]}}
    with pytest.raises(tgb.SchemaMismatch, match="fingerprint"):
        tgb.Producer(ns, producer_id="p1", layout=LAYOUT, metadata=META, schema=schema)
    assert _committed_by(ns, "p1") == (0, [])


def test_dtype_drift_fails_before_the_first_write(ns: str) -> None:
    p = tgb.Producer(ns, producer_id="p1", layout=LAYOUT, metadata=META)
    with pytest.raises(tgb.SchemaMismatch, match=r"'ids'.*int32"):
        p.append(batch(torch.int32), offset=0)
    p.abort()
    assert _committed_by(ns, "p1") == (0, [])


def test_shape_drift_fails_before_the_first_write(ns: str) -> None:
    p = tgb.Producer(ns, producer_id="p1", layout=LAYOUT, metadata=META)
    with pytest.raises(tgb.SchemaMismatch):
        p.append(batch(seq=9), offset=0)
    p.abort()
    assert _committed_by(ns, "p1") == (0, [])


def test_metadata_drift_fails_at_startup(ns: str) -> None:
    """bugs.md B1 (fixed): the vocab-size fingerprint is compared in Producer.__init__."""
    with pytest.raises(tgb.SchemaMismatch, match="fingerprint"):
        tgb.Producer(ns, producer_id="p1", layout=LAYOUT, metadata={**META, "vocab_size": 50000})
    assert _committed_by(ns, "p1") == (0, [])


def test_same_schema_joins(ns: str) -> None:
    """Control: an agreeing producer joins and commits."""
    with tgb.Producer(ns, producer_id="p1", layout=LAYOUT, metadata=dict(META)) as p:
        p.append(batch(), offset=0)
    assert _committed_by(ns, "p1")[0] == 1
