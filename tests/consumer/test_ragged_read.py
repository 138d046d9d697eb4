"""Ragged keys end to end: any row lengths, any written and read dp x cp, segments, both read paths, resume.

Every global batch carries ``sid`` (a dense id per row), ``input_ids`` (a seq key)
and ``pix``, a ragged key whose row ``r`` holds ``n_r`` items (``n_r`` may be 0) of
3 bytes derived from the row's id. A reader must deliver, on every rank, rows
whose ``pix[offs[r]:offs[r+1]]`` equal what was appended for ``sid[r]``; over the
dp ranks of a cp rank, every row of every complete step exactly once, also when
a read stops anywhere and resumes under another world size.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torch_tgb import DataLoader, Layout, Mesh, TGBDataset
from torch_tgb.cursor import cursor_of
from torch_tgb.consumer._passes import steps_left
from torch_tgb.errors import LayoutError
from torch_tgb.producer import Producer, ProducerConfig

N_STEPS = 5
ROWS = 8  # global batch size
SEQ = 8


def lengths(step: int) -> list[int]:
    """Items per row of ``step``: zeros included, a different pattern every step."""
    return [(step * 7 + r * 3) % 5 if (step + r) % 4 else 0 for r in range(ROWS)]


def row_items(sid: int, n: int) -> torch.Tensor:
    return (torch.arange(n * 3, dtype=torch.int64).reshape(n, 3) + sid * 11).to(torch.uint8)


def make_batch(step: int) -> dict:
    sids = torch.arange(ROWS, dtype=torch.int64) + step * ROWS
    return {
        "sid": sids,
        "input_ids": sids[:, None] * 100 + torch.arange(SEQ),
        "pix": [row_items(int(s), n) for s, n in zip(sids, lengths(step))],
    }


WRITTEN = [(dp, cp, seg) for dp in (1, 2, 4) for cp in (1, 2) for seg in (1, 3)]


@pytest.fixture(scope="module")
def namespaces(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, int, int], str]:
    out = {}
    for dp, cp, seg in WRITTEN:
        ns = str(tmp_path_factory.mktemp(f"ragged-{dp}-{cp}-{seg}") / "ns")
        layout = Layout(dp=dp, cp=cp, seq_keys=("input_ids",))
        with Producer(ns, producer_id="p", layout=layout, config=ProducerConfig(segment_tgbs=seg)) as p:
            for step in range(N_STEPS):
                p.append(make_batch(step), offset=step)
            p.close(seal=True)
        out[(dp, cp, seg)] = ns
    return out


def check_rows(batch: dict[str, torch.Tensor]) -> list[int]:
    """The row ids of a delivered batch, after checking every row's ragged items against what was appended."""
    offs, pix = batch["pix_offsets"], batch["pix"]
    assert offs.dtype == torch.int64 and int(offs[0]) == 0 and len(offs) == len(batch["sid"]) + 1
    assert pix.dtype == torch.uint8 and int(offs[-1]) == pix.shape[0]
    sids = batch["sid"].tolist()
    for r, sid in enumerate(sids):
        step, row = divmod(sid, ROWS)
        assert torch.equal(pix[offs[r] : offs[r + 1]], row_items(sid, lengths(step)[row]))
    return sids


def read(ns: str, mesh: Mesh, split: str, runs: bool, *, stop: int | None = None, state: dict | None = None):
    ds = TGBDataset(ns, mesh=mesh, dp_split=split, prefetch=0, runs=runs)
    if state is not None:
        ds.load_state_dict(state)
    sids: list[int] = []
    delivered = 0  # steps
    if stop != 0:
        for b in ds:
            sids += check_rows(b)
            delivered += 1
            if stop is not None and delivered == stop:
                break
    return sids, ds.state_dict(), delivered


READERS = [(dp, cp) for dp in (1, 2, 4, 8) for cp in (1, 2)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    written=st.sampled_from(WRITTEN),
    before=st.sampled_from(READERS),
    after=st.sampled_from(READERS),
    split=st.sampled_from(["merge", "spread"]),
    runs=st.booleans(),
    fraction=st.floats(0, 1),
)
def test_every_ragged_row_exactly_once_under_any_mesh_and_resume(namespaces, written, before, after, split, runs,
                                                                fraction) -> None:
    ns = namespaces[written]
    dp_a, cp_a = before
    dp_b, cp_b = after
    # phase A on mesh A: each rank stops after the same number of steps and saves its state
    stop = int(fraction * read(ns, Mesh(0, dp_a), split, runs)[2])
    seen: Counter[int] = Counter()
    states = []
    for rank in range(dp_a):
        for c in range(cp_a):
            sids, state, _ = read(ns, Mesh(rank, dp_a, c, cp_a), split, runs, stop=stop)
            if c == 0:
                seen.update(sids)
                states.append(state)
    cursor = cursor_of(states)
    k = max(1, dp_b // written[0])  # TGBs one step of mesh B consumes
    m = max(1, written[0] // dp_b) if split == "spread" else 1  # steps of mesh B one TGB makes
    try:
        if steps_left(cursor, N_STEPS, tgbs_per_step=k, steps_per_tgb=m) == 0:
            return  # no step of this pass left for mesh B: it reads the next pass (tests/consumer/test_passes.py)
    except LayoutError:
        pass  # the reader raises it too, below
    # phase B on mesh B, every rank from the saved states (the canonical cursor is the same in all)
    try:
        for rank in range(dp_b):
            for c in range(cp_b):
                sids, _, _ = read(ns, Mesh(rank, dp_b, c, cp_b), split, runs, state=states[0])
                if c == 0:
                    seen.update(sids)
    except LayoutError:
        assert not cursor.at_boundary()  # only a cursor inside a TGB can be inexpressible
        return
    assert all(n == 1 for n in seen.values()), "a row delivered twice"
    # every row of the steps both phases cover: [0, cursor) and whole steps of mesh B after it
    end = cursor.step + (N_STEPS - cursor.step) // k * k
    assert set(seen) == set(range(end * ROWS)) | {s for s in seen if s // ROWS == cursor.step}


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_delivers_ragged_keys_through_workers(namespaces, workers) -> None:
    """Ragged values and offsets cross from workers as one shared buffer; an integer dtype cast leaves them alone."""
    ns = namespaces[(2, 1, 3)]
    loader = DataLoader(ns, mesh=Mesh(1, 2), num_workers=workers, dtype=torch.int32)
    sids = []
    for b in loader:
        assert b["input_ids"].dtype == torch.int32 and b["sid"].dtype == torch.int32
        assert b["pix"].dtype == torch.uint8 and b["pix_offsets"].dtype == torch.int64
        sids += check_rows({**b, "sid": b["sid"].long()})
    assert sorted(sids) == [s for s in range(N_STEPS * ROWS) if s % ROWS >= ROWS // 2]


def test_cp_ranks_get_the_whole_ragged_rows_of_their_dp_part(namespaces) -> None:
    """Ragged keys are repeated in every cp slice: each cp rank of a dp rank gets the same rows and items."""
    ns = namespaces[(2, 2, 1)]
    firsts = [next(iter(TGBDataset(ns, mesh=Mesh(0, 2, c, 2), prefetch=0))) for c in range(2)]
    assert torch.equal(firsts[0]["pix"], firsts[1]["pix"]) and torch.equal(firsts[0]["pix_offsets"], firsts[1]["pix_offsets"])
    assert not torch.equal(firsts[0]["input_ids"], firsts[1]["input_ids"])  # the seq key is split
