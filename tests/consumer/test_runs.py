"""The run path (datapipes.read.local_runs) reads exactly what the step-by-step pipeline reads.

For any segment size, any mesh and dp split, any stop point and a resume from
there: the same tensors, the same state after every step, and the same
continuation. Also: where the run path applies, corrupt bytes inside a run,
statistics, and a stream still being written.
"""

from __future__ import annotations

import os
import threading

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.consumer._support import LAYOUT, make_batch, open_reader
from torch_tgb.consumer import TGBDataset
from torch_tgb.consumer import ReaderOptions
from torch_tgb.consumer._paths import RunPath
from torch_tgb.datapipes.read.local_runs import LocalRuns
from torch_tgb.errors import CorruptObject
from torch_tgb.layout import Mesh
from torch_tgb.manifest import Manifest
from torch_tgb.producer import Producer, ProducerConfig
from torch_tgb.storage import open_store

N_STEPS = 12
SEGMENTS = (1, 3, 8)
TOPOLOGIES = [(dp, cp) for dp in (1, 2, 4) for cp in (1, 2, 4)]


def batch(offset: int) -> dict[str, torch.Tensor]:
    """make_batch, with fewer samples in steps 5..6: a change of shape inside a segment ends a run.

    ``sample_id`` is stored as int32, so an int64 read widens it as the slice is read (``SliceRun.cast_with``)
    while an int32 read narrows ``input_ids`` (the step's cast, which looks at the values).
    """
    out = make_batch(offset, batch=4 if offset in (5, 6) else 8)
    return {**out, "sample_id": out["sample_id"].to(torch.int32)}


def produce(ns: str, segment_tgbs: int, n: int = N_STEPS, *, seal: bool = True, start: int = 0) -> None:
    with Producer(ns, producer_id="p0", layout=LAYOUT, commit_policy="fixed:4",
                  config=ProducerConfig(segment_tgbs=segment_tgbs)) as p:
        for offset in range(start, start + n):
            p.append(batch(offset), offset=offset)
        p.flush()
        if seal:
            p.close(seal=True)


@pytest.fixture(scope="module")
def namespaces(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    out = {}
    for k in SEGMENTS:
        out[k] = str(tmp_path_factory.mktemp(f"seg{k}"))
        produce(out[k], k)
    return out


def read(ns: str, mesh: Mesh, split: str, runs: bool, *, state=None, stop: int | None = None, shuffle: bool = False,
         dtype: torch.dtype | None = None):
    """Batches and the state after each; with the reader kind that delivered them.

    ``shuffle``: two block-shuffled epochs (blocks of 4 TGBs) instead of the stream. ``dtype``: the integer cast.
    """
    epochs = {"shuffle": True, "block_size": 4, "seed": 3, "epochs": 2} if shuffle else {}
    ds = TGBDataset(ns, mesh=mesh, dp_split=split, prefetch=0, options=ReaderOptions(runs=runs, dtype=dtype), **epochs)
    if state is not None:
        ds.load_state_dict(state)
    out, states, kinds = [], [], set()
    if stop == 0:
        return out, states, kinds
    for b in ds:
        kinds.add(type(ds.path).__name__)
        out.append(b)
        states.append(ds.state_dict())
        if stop is not None and len(out) == stop:
            break
    return out, states, kinds


def same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(x[k].dtype == y[k].dtype and torch.equal(x[k], y[k]) for k in x)
        for x, y in zip(a, b)
    )


def without_stats(states: list[dict]) -> list[dict]:
    return [{k: v for k, v in s.items() if k != "stats"} for s in states]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    segment=st.sampled_from(SEGMENTS),
    topology=st.sampled_from(TOPOLOGIES),
    split=st.sampled_from(["merge", "spread"]),
    rank=st.integers(0, 15),
    fraction=st.floats(0, 1),
    shuffle=st.booleans(),
    dtype=st.sampled_from([None, torch.int32, torch.int64]),
)
def test_the_run_path_reads_and_resumes_exactly_as_the_step_path(namespaces, segment, topology, split, rank,
                                                                  fraction, shuffle, dtype) -> None:
    dp, cp = topology
    r = rank % (dp * cp)
    mesh = Mesh(r // cp, dp, r % cp, cp)
    ns = namespaces[segment]
    steps, step_states, _ = read(ns, mesh, split, runs=False, shuffle=shuffle, dtype=dtype)
    batches, states, kinds = read(ns, mesh, split, runs=True, shuffle=shuffle, dtype=dtype)
    assert same(batches, steps)
    assert without_stats(states) == without_stats(step_states)
    # the run path serves every mesh whose steps read slices of their own TGB only: the written dp, or fewer
    # dp ranks merging slices, with any cp split; more dp ranks, or a spread, take the step path
    own_tgb = dp == LAYOUT.dp or (dp < LAYOUT.dp and split == "merge")
    assert kinds == ({"RunPath"} if own_tgb else {"StepPath"})
    # stop anywhere inside the pass, resume from the state: the rest is the step path's rest (a state taken
    # after the pass's last step starts the next pass: tests/consumer/test_passes.py)
    k = min(int(fraction * len(steps)), len(steps) - 1)
    head, head_states, _ = read(ns, mesh, split, runs=True, stop=k, shuffle=shuffle, dtype=dtype)
    assert same(head, steps[:k])
    state = head_states[-1] if k else read(ns, mesh, split, runs=True, stop=1, shuffle=shuffle)[1][0]
    rest, _, _ = read(ns, mesh, split, runs=True, state=state, shuffle=shuffle, dtype=dtype)
    if not k:
        rest = steps[:1] + rest
    assert same(rest, steps[k:])


def test_runs_follow_segments_and_shapes(namespaces) -> None:
    """One run per stretch of TGBs that share an object and a footer shape (steps 5..6 are smaller)."""
    ns = namespaces[8]  # objects hold steps 0..7 and 8..11
    ds = TGBDataset(ns, mesh=Mesh(0, 2, 0, 2), prefetch=0)
    store = open_store(ns)
    runs = open_reader(ds, store, LAYOUT)
    assert isinstance(runs, LocalRuns)
    assert [(run.first_step, len(run)) for run in runs] == [(0, 5), (5, 2), (7, 1), (8, 4)]
    stats = runs.stats.snapshot()
    assert stats.footer_requests == stats.data_requests == N_STEPS


@pytest.mark.parametrize("topology", [(1, 1), (1, 4), (2, 1), (2, 4)])
def test_a_remapped_mesh_reads_in_runs_with_the_step_paths_counters(namespaces, topology) -> None:
    """dp merged and cp re-split: runs join several slices per step; requests and bytes as the step path counts them."""
    dp, cp = topology
    mesh = Mesh(dp - 1, dp, cp - 1, cp)
    counters = {}
    for runs in (False, True):
        ds = TGBDataset(namespaces[3], mesh=mesh, prefetch=0, options=ReaderOptions(runs=runs))
        n = sum(1 for _ in ds)
        s = ds.stats()
        counters[runs] = (n, s.steps, s.data_requests, s.footer_requests, s.bytes_read, s.useful_bytes)
    assert counters[True] == counters[False]
    # each step reads every slice whose tokens it needs: 2/dp dp slices times the written cp slices it overlaps
    assert counters[True][2] == N_STEPS * (LAYOUT.dp // dp) * LAYOUT.cp // min(cp, LAYOUT.cp)


def test_step_count_and_requests_per_step_in_stats(namespaces) -> None:
    ds = TGBDataset(namespaces[8], mesh=Mesh(1, 2, 1, 2), prefetch=0)
    it = iter(ds)
    for _ in range(3):
        next(it)
    assert ds.stats().steps == 3  # counted per delivered step, not per run
    rest = list(it)
    s = ds.stats()
    assert s.steps == 3 + len(rest) == N_STEPS
    assert s.requests_per_step == 2.0 and s.read_amplification >= 1.0


def _flip_payload_byte(ns: str, step: int) -> None:
    entry = Manifest(open_store(ns)).entries(step, step + 1)[0]
    path = os.path.join(ns, entry.key)
    with open(path, "r+b") as f:
        f.seek(entry.start + 100)  # inside slice (0, 0)'s first tensor
        b = f.read(1)
        f.seek(entry.start + 100)
        f.write(bytes([b[0] ^ 0xFF]))


@pytest.mark.parametrize("mesh", [Mesh(0, 2, 0, 2), Mesh(0, 1, 0, 1)], ids=["written", "joined"])
@pytest.mark.parametrize("where", ["payload", "footer"])
def test_a_corrupt_tgb_inside_a_run_fails_naming_its_step(tmp_path, where, mesh) -> None:
    ns = str(tmp_path / "ns")
    produce(ns, 8, n=8)
    entry = Manifest(open_store(ns)).entries(3, 4)[0]
    if where == "payload":
        _flip_payload_byte(ns, 3)
    else:
        with open(os.path.join(ns, entry.key), "r+b") as f:
            f.seek(entry.footer_offset + entry.footer_length - 3)  # a byte of the tables
            b = f.read(1)
            f.seek(entry.footer_offset + entry.footer_length - 3)
            f.write(bytes([b[0] ^ 0x01]))
    ds = TGBDataset(ns, mesh=mesh, prefetch=0)
    got = []
    with pytest.raises(CorruptObject, match="step=3") as e:
        for b in ds:
            assert isinstance(ds.path, RunPath)
            got.append(b)
    assert len(got) == 3  # steps 0..2 were delivered, nothing after the corrupt one
    assert ("CRC32C mismatch" in str(e.value)) and (("tensor" in str(e.value)) == (where == "payload"))
    assert ds.step == 3


def test_a_live_stream_is_read_in_runs_as_it_is_committed(tmp_path) -> None:
    ns = str(tmp_path / "ns")
    produce(ns, 4, n=4, seal=False)
    got: list[dict] = []
    ds = TGBDataset(ns, mesh=Mesh(0, 2, 0, 2), prefetch=0, timeout=60)

    def consume() -> None:
        got.extend(ds)

    reader = threading.Thread(target=consume)
    reader.start()
    with Producer(ns, producer_id="p0", layout=LAYOUT, commit_policy="fixed:4",
                  config=ProducerConfig(segment_tgbs=4)) as p:
        for offset in range(4, N_STEPS):
            p.append(batch(offset), offset=offset)
        p.close(seal=True)
    reader.join(60)
    assert not reader.is_alive()
    expected, _, _ = read(ns, Mesh(0, 2, 0, 2), "merge", runs=False)
    assert len(got) == N_STEPS and same(got, expected)


def test_a_bad_footer_location_inside_a_run_fails_at_its_own_step(tmp_path) -> None:
    """The run path delivers the steps before the bad entry, then raises naming its step.

    (The step path raises at the same step but may raise earlier: its first
    footer fetch looks ahead over upcoming steps.)
    """
    import json

    from torch_tgb.errors import ManifestError
    from torch_tgb.testing.version_json import entry_count, get_entry_field, set_entry_field

    ns = str(tmp_path / "ns")
    produce(ns, 8, n=8)
    store = open_store(ns)
    manifest = Manifest(store)
    for number in range(1, manifest.latest_version() + 1):
        path = os.path.join(ns, manifest.version_key(number))  # in the namespace's key layout
        v = json.loads(open(path, "rb").read())
        if v["first_step"] <= 5 < v["first_step"] + entry_count(v):
            i = 5 - v["first_step"]
            set_entry_field(v, i, "footer_length", get_entry_field(v, i, "footer_length") + 1)  # no longer ends its TGB
            open(path, "wb").write(json.dumps(v).encode())
    for runs in (True, False):
        ds = TGBDataset(ns, mesh=Mesh(0, 2, 0, 2), prefetch=0, options=ReaderOptions(runs=runs))
        got = []
        with pytest.raises(ManifestError, match="step=5"):
            for b in ds:
                got.append(b)
        assert len(got) == 5 if runs else len(got) <= 5


def test_a_corrupt_first_step_of_a_later_run_leaves_the_position_after_the_last_delivered(tmp_path) -> None:
    ns = str(tmp_path / "ns")
    produce(ns, 4, n=8)  # objects hold steps 0..3 and 4..7: step 4 starts the second run
    _flip_payload_byte(ns, 4)
    ds = TGBDataset(ns, mesh=Mesh(0, 2, 0, 2), prefetch=0)
    got = []
    with pytest.raises(CorruptObject, match="step=4"):
        for b in ds:
            got.append(b)
    assert len(got) == 4 and ds.step == 4
    assert ds.state_dict()["tgb_cursor"]["step"] == 4
