"""Token-efficient rows read back exactly as stored per-token arrays: labels, positions, documents, key selection.

Two namespaces hold the same packed rows (``transforms.pack_rows`` of one
corpus): ``stored`` with the per-token arrays of the old layout (input_ids,
labels, document_ids, position_ids, cu_seqlens), ``efficient`` with each token
once (``Layout.labels_from``: the row's tokens and the one after them) and the
rows' ``seq_lens``. Every mesh, split and read path must deliver the same
tensors from both.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torch_tgb import Layout, Mesh, TGBDataset, write_dataset
from torch_tgb.errors import CorruptObject, SchemaMismatch
from torch_tgb.producer import Producer, ProducerConfig
from torch_tgb.storage import MemoryStore
from torch_tgb.transforms import pack, pack_rows

SEQ = 16
ROWS = 8
STEPS = 4
DERIVED = ("labels", "position_ids", "document_ids", "cu_seqlens")


def corpus_rows() -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Packed rows of a fixed corpus, their span lengths (ragged values) and row offsets."""
    rng = np.random.default_rng(0)
    docs = rng.integers(1, 30, size=40)
    offsets = np.concatenate([[0], np.cumsum(docs)]).astype(np.int64)
    flat = (np.arange(offsets[-1]) % 997 + 3).astype(np.int64)
    bins = pack(docs, SEQ, "bfd")[: STEPS * ROWS]
    assert len(bins) == STEPS * ROWS
    rows = pack_rows(flat, offsets, bins, SEQ, attention_metadata=True)
    lengths = np.array([end - start for row in bins for _, start, end in row], dtype=np.int32)
    row_offsets = np.concatenate([[0], np.cumsum([len(row) for row in bins])]).astype(np.int64)
    return rows, lengths, row_offsets


def efficient_batch(rows: dict[str, np.ndarray], lengths: np.ndarray, row_offsets: np.ndarray, step: int) -> dict:
    sl = slice(step * ROWS, (step + 1) * ROWS)
    ids = rows["input_ids"][sl]
    nxt = np.zeros((ROWS, 1), dtype=np.int64)  # the token after a packed row: its label is masked anyway
    return {
        "input_ids": torch.from_numpy(np.concatenate([ids, nxt], axis=1)).to(torch.uint16),
        "seq_lens": [torch.from_numpy(lengths[row_offsets[r] : row_offsets[r + 1]]) for r in range(sl.start, sl.stop)],
        "sid": torch.arange(sl.start, sl.stop),
    }


def stored_batch(rows: dict[str, np.ndarray], step: int) -> dict:
    sl = slice(step * ROWS, (step + 1) * ROWS)
    out = {k: torch.from_numpy(rows[k][sl]) for k in ("input_ids", "labels", "document_ids", "position_ids", "cu_seqlens")}
    out["input_ids"] = out["input_ids"].to(torch.uint16)
    out["sid"] = torch.arange(sl.start, sl.stop)
    return out


WRITTEN = [(dp, cp, order) for dp in (1, 2) for cp in (1, 2) for order in ("contiguous", "zigzag") if cp > 1 or order == "contiguous"]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> dict:
    rows, lengths, row_offsets = corpus_rows()
    out = {}
    for dp, cp, order in WRITTEN:
        base = tmp_path_factory.mktemp(f"te-{dp}-{cp}-{order}")
        for kind in ("stored", "efficient"):
            keys = ("input_ids", "labels", "document_ids", "position_ids") if kind == "stored" else ("input_ids",)
            layout = Layout(dp=dp, cp=cp, seq_keys=keys, cp_order=order,
                            labels_from="input_ids" if kind == "efficient" else None)
            with Producer(str(base / kind), producer_id="p", layout=layout, config=ProducerConfig(segment_tgbs=2)) as p:
                for step in range(STEPS):
                    batch = efficient_batch(rows, lengths, row_offsets, step) if kind == "efficient" else stored_batch(rows, step)
                    p.append(batch, offset=step)
                p.close(seal=True)
        out[(dp, cp, order)] = (str(base / "stored"), str(base / "efficient"))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(written=st.sampled_from(WRITTEN), reader=st.sampled_from([(1, 1), (2, 1), (2, 2), (4, 1), (1, 2), (4, 2)]),
       rank=st.integers(0, 7), split=st.sampled_from(["merge", "spread"]), runs=st.booleans(),
       dtype=st.sampled_from([None, torch.int64, torch.int32]))
def test_the_efficient_layout_reads_as_the_stored_one(pairs, written, reader, rank, split, runs, dtype) -> None:
    dp, cp = reader
    r = rank % (dp * cp)
    mesh = Mesh(r // cp, dp, r % cp, cp)
    stored_ns, efficient_ns = pairs[written]
    kw = {"dp_split": split, "runs": runs, "dtype": dtype, "prefetch": 0}
    try:
        old = list(TGBDataset(stored_ns, mesh=mesh, **kw))
    except Exception as e:  # an inexpressible cp re-split fails alike on both
        with pytest.raises(type(e)):
            list(TGBDataset(efficient_ns, mesh=mesh, derive=DERIVED, **kw))
        return
    new = list(TGBDataset(efficient_ns, mesh=mesh, derive=DERIVED, **kw))
    assert len(new) == len(old) > 0
    for a, b in zip(old, new):
        for key in ("input_ids", "labels", "document_ids", "position_ids", "cu_seqlens", "sid"):
            assert b[key].dtype == a[key].dtype, key
            assert torch.equal(a[key], b[key]), key


def test_labels_are_two_views_of_the_stored_tokens_without_a_cast(pairs) -> None:
    """No masking asked: input_ids and labels share the stored bytes (the bare one-token shift)."""
    _, ns = pairs[(1, 1, "contiguous")]
    b = next(iter(TGBDataset(ns, mesh=Mesh(0, 1), derive=())))
    assert b["input_ids"].untyped_storage().data_ptr() == b["labels"].untyped_storage().data_ptr()
    assert torch.equal(b["labels"][:, :-1], b["input_ids"][:, 1:])


@pytest.mark.parametrize("keys", [None, ("input_ids", "labels")])
def test_a_widening_cast_casts_the_rows_once_for_both_views(tmp_path, keys) -> None:
    """uint16 rows read as int64 with derive=(): one copy of the rows, input_ids and labels two views of it.

    The run path (a local namespace) casts the rows as it reads them; the step
    path delivers the same values. The default (masked labels) never shares
    memory between the two: writing -100 into labels must not touch input_ids.
    """
    tokens = (np.arange(6 * 4 * SEQ) % 50_000).astype(np.uint16)
    ns = str(tmp_path / "ns")
    write_dataset(ns, tokens, layout=Layout(dp=1), seq_len=SEQ, global_batch_size=4, packing="none", progress=False)
    kw = {"mesh": Mesh(0, 1), "dtype": torch.int64, "derive": (), "keys": keys}
    by_run = list(TGBDataset(ns, **kw))
    by_step = list(TGBDataset(ns, runs=False, prefetch=0, **kw))
    assert len(by_run) == len(by_step) == 6
    for a, b in zip(by_run, by_step):
        assert a.keys() == b.keys() and (keys is None or set(a) == set(keys))
        assert a["input_ids"].dtype == a["labels"].dtype == torch.int64
        assert a["input_ids"].untyped_storage().data_ptr() == a["labels"].untyped_storage().data_ptr()
        assert torch.equal(a["labels"][:, :-1], a["input_ids"][:, 1:])
        for key in a:
            assert torch.equal(a[key], b[key]), key
    masked = next(iter(TGBDataset(ns, mesh=Mesh(0, 1), dtype=torch.int64)))
    assert masked["input_ids"].untyped_storage().data_ptr() != masked["labels"].untyped_storage().data_ptr()
    assert bool((masked["labels"][:, -1] == -100).all())


def test_keys_reads_only_what_it_delivers(pairs) -> None:
    """keys=(input_ids, labels): one range per slice spanning the tensors they need, nothing else delivered."""
    stored, efficient = pairs[(1, 1, "contiguous")]
    store = MemoryStore("te-keys")
    from torch_tgb.storage import LocalStore

    src = LocalStore(efficient)
    for key in src.list(""):
        store.put(key, src.get(key))
    full = TGBDataset(store, mesh=Mesh(0, 1), prefetch=0)
    assert sum(1 for _ in full) == STEPS
    few = TGBDataset(store, mesh=Mesh(0, 1), prefetch=0, keys=("input_ids", "labels"))
    got = list(few)
    assert all(set(b) == {"input_ids", "labels"} for b in got)
    a, b = full.stats(), few.stats()
    assert b.data_requests == a.data_requests == STEPS  # still one range read per slice
    assert b.useful_bytes < a.useful_bytes and b.bytes_read < a.bytes_read  # sid is not read
    with pytest.raises(SchemaMismatch, match="neither stored nor derivable"):
        next(iter(TGBDataset(stored, mesh=Mesh(0, 1), keys=("seq_lens",))))
    store.close()


def test_masked_labels_need_a_signed_dtype(pairs) -> None:
    _, ns = pairs[(1, 1, "contiguous")]
    with pytest.raises(ValueError, match="-100"):
        next(iter(TGBDataset(ns, mesh=Mesh(0, 1), dtype=torch.uint16)))
    b = next(iter(TGBDataset(ns, mesh=Mesh(0, 1), dtype=torch.uint16, derive=())))
    assert b["labels"].dtype == torch.uint16  # the bare shift: nothing to mask


def test_layout_json_names_labels_from_only_when_set() -> None:
    """Namespaces without labels_from keep their dataset.json; with it, readers before it refuse the field."""
    assert "labels_from" not in Layout(dp=2, seq_keys=("input_ids",)).to_json()
    layout = Layout(dp=2, seq_keys=("input_ids",), labels_from="input_ids")
    assert Layout.from_json(layout.to_json()) == layout
    with pytest.raises(Exception, match="labels_from"):
        Layout(dp=1, seq_keys=("input_ids", "labels"), labels_from="input_ids")


@pytest.mark.parametrize("runs", [True, False])
@pytest.mark.parametrize("bad", [[SEQ - 2, 3], [-1, 2], [0] * (SEQ + 1)], ids=["too many tokens", "negative", "too many sequences"])
def test_stored_lengths_that_cannot_be_the_rows_are_a_corrupt_object(tmp_path, runs, bad) -> None:
    """seq_lens are untrusted bytes: lengths that do not fit their row fail the step by name, on either read path.

    (Unchecked, a row's -100s would land on the next row's labels.) The bare
    shift does not use them and reads as written.
    """
    ns = str(tmp_path / "ns")
    layout = Layout(dp=1, seq_keys=("input_ids",), labels_from="input_ids")
    with Producer(ns, producer_id="p", layout=layout) as p:
        for step in range(2):
            lens = [[SEQ], bad] if step == 1 else [[SEQ], [SEQ]]
            p.append({"input_ids": torch.ones(2, SEQ + 1, dtype=torch.uint16),
                      "seq_lens": [torch.tensor(n, dtype=torch.int32) for n in lens]}, offset=step)
        p.close(seal=True)
    kw = {"mesh": Mesh(0, 1), "runs": runs, "prefetch": 0}
    for derive in (("labels",), ("position_ids",), ("cu_seqlens",)):
        it = iter(TGBDataset(ns, derive=derive, **kw))
        assert next(it)["input_ids"].shape == (2, SEQ)  # step 0 is sound
        with pytest.raises(CorruptObject, match=r"step=1: .*'seq_lens'.*row 1"):
            next(it)
    assert len(list(TGBDataset(ns, derive=(), **kw))) == 2


@pytest.mark.parametrize("runs", [True, False])
def test_keys_derived_from_rows_alike_are_fresh_tensors_every_step(tmp_path, runs) -> None:
    """Unpacked rows have the same lengths every step (the reader derives them once): a step that writes
    into what it got must not change what the next step gets."""
    tokens = (np.arange(3 * 4 * SEQ + 1) % 50_000).astype(np.uint16)
    ns = str(tmp_path / "ns")
    write_dataset(ns, tokens, layout=Layout(dp=1), seq_len=SEQ, global_batch_size=4, packing="none", progress=False)
    got = iter(TGBDataset(ns, mesh=Mesh(0, 1), runs=runs, prefetch=0, derive=DERIVED))
    first = next(got)
    want = {k: first[k].clone() for k in ("labels", "position_ids", "document_ids", "cu_seqlens")}
    assert torch.equal(want["position_ids"], torch.arange(SEQ).expand(4, SEQ))
    for t in want:
        first[t].fill_(-7)
    second = next(got)
    assert torch.equal(second["labels"] == -100, want.pop("labels") == -100)  # the tokens differ, the ends do not
    for name, tensor in want.items():
        assert torch.equal(second[name], tensor), name


@pytest.mark.parametrize("runs", [True, False])
def test_a_float_dtype_that_would_round_ids_is_refused(tmp_path, runs) -> None:
    """dtype=float16 over a 50k vocabulary rounds ids past 2048: refused by name; float32 holds them exactly."""
    tokens = (np.arange(2 * 4 * SEQ + 1) * 997 % 50_000).astype(np.uint16)
    ns = str(tmp_path / "ns")
    write_dataset(ns, tokens, layout=Layout(dp=1), seq_len=SEQ, global_batch_size=4, packing="none", progress=False)
    kw = {"mesh": Mesh(0, 1), "runs": runs, "prefetch": 0}
    for dtype in (torch.float16, torch.bfloat16):
        with pytest.raises(SchemaMismatch, match=r"'input_ids'.*would round"):
            next(iter(TGBDataset(ns, dtype=dtype, **kw)))
    exact = next(iter(TGBDataset(ns, dtype=torch.float32, **kw)))
    ids = next(iter(TGBDataset(ns, dtype=torch.int64, **kw)))
    assert exact["input_ids"].dtype == exact["labels"].dtype == torch.float32
    assert torch.equal(exact["input_ids"].long(), ids["input_ids"]) and torch.equal(exact["labels"].long(), ids["labels"])
