"""An absurd dp in dataset.json must be refused at once, not planned (issue 13 item 3).

Before: ``Layout`` had no upper bound, consumers did not re-check the
fingerprint of ``dataset.json`` (an edited ``dp`` went unnoticed), and
``ReadPlan.reads`` built ``written.dp // mesh.dp_size`` pieces with an
O(k²) membership check before any footer was read: a consumer hung.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import pytest
from _tamper import Tamper
from _watchdog import within

import torch_tgb as tgb
from torch_tgb.errors import CorruptObject, LayoutError
from torch_tgb.layout import MAX_CP, MAX_DP, MAX_SLICES, Layout, Mesh, plan_reads
from torch_tgb.manifest.keys import DATASET_KEY

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("dp", [2**40, 2**62, MAX_DP + 1])
def test_layout_refuses_absurd_dp(dp: int) -> None:
    with pytest.raises(LayoutError, match="maximum"):
        Layout(dp=dp)
    with pytest.raises(LayoutError, match="maximum"):
        Layout.from_json({"dp": dp})


def test_layout_bounds() -> None:
    assert Layout(dp=MAX_DP).dp == MAX_DP and Layout(cp=MAX_CP).cp == MAX_CP
    with pytest.raises(LayoutError, match="maximum"):
        Layout(cp=2**40)
    with pytest.raises(LayoutError, match=f"maximum {MAX_SLICES}"):
        Layout(dp=MAX_DP, cp=MAX_CP)


def _edit_dataset(tamper: Tamper, *, dp: int, refingerprint: bool) -> None:
    doc = json.loads(tamper.path(DATASET_KEY).read_bytes())
    doc["layout"]["dp"] = dp
    if refingerprint:  # an attacker who also recomputes the fingerprint
        canonical = json.dumps({"layout": doc["layout"], "schema": doc["schema"], "metadata": doc["metadata"]},
                               sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        doc["fingerprint"] = hashlib.sha256(canonical.encode()).hexdigest()
    tamper.write(DATASET_KEY, json.dumps(doc).encode())


def _consume(tamper: Tamper) -> Callable[[], object]:
    return lambda: list(tgb.TGBDataset(tamper.ns, mesh=Mesh(0, 1), timeout=10))


@pytest.mark.parametrize("dp", [2**40, 2**62, 2])
def test_edited_dp_without_its_fingerprint_is_refused(tamper: Tamper, dp: int) -> None:
    _edit_dataset(tamper, dp=dp, refingerprint=False)
    error = within(60, _consume(tamper))
    assert isinstance(error, CorruptObject) and DATASET_KEY in str(error), error


@pytest.mark.parametrize("dp", [2**40, 2**62])
def test_absurd_dp_with_a_matching_fingerprint_is_refused(tamper: Tamper, dp: int) -> None:
    _edit_dataset(tamper, dp=dp, refingerprint=True)
    error = within(60, _consume(tamper))
    assert isinstance(error, CorruptObject) and DATASET_KEY in str(error) and "maximum" in str(error), error


def test_read_plan_is_linear_in_the_pieces_read() -> None:
    """A rank merging all MAX_DP written slices reads MAX_DP pieces, planned without an O(k²) scan."""
    plan = plan_reads(Layout(dp=MAX_DP), Mesh(0, 1), dp_split="merge")
    reads = within(60, lambda: plan.reads(3))
    assert len(reads.pieces) == MAX_DP and len(set(reads.pieces)) == MAX_DP
    assert [seg.piece for part in reads.parts for seg in part] == list(range(MAX_DP))
    one = plan_reads(Layout(dp=MAX_DP), Mesh(5, MAX_DP)).reads(7)
    assert [(p.tgb, p.dp, p.cp) for p in one.pieces] == [(7, 5, 0)]
