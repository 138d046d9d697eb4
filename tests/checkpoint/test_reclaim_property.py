"""Property test: random commits, watermarks, retirements, orphans and reclaimer passes.

Invariants checked after every operation:
- nothing at or above the safe boundary is deleted: every live checkpoint resumes
  (a fresh reader finds its steps in the log, with their objects);
- a pass moves the GC boundary exactly to the smallest live cursor (in the
  version holding it, or the end of the newest version; never back), and
  every object below it is gone — also inside the boundary version — so data
  reachable only from retired checkpoints is removed by the next pass;
- orphans survive passes within the grace period and go after it.
"""

from __future__ import annotations

import time
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _lifecycle import Namespace, assert_resumable
from torch_tgb.checkpoint import Reclaimer, live_checkpoints, record_watermark, retire
from torch_tgb.errors import ManifestError
from torch_tgb.manifest import Manifest
from torch_tgb.storage import MemoryStore

OPS = st.one_of(
    st.tuples(st.just("commit"), st.integers(1, 4)),
    st.tuples(st.just("restart")),
    st.tuples(st.just("watermark"), st.floats(0, 1)),
    st.tuples(st.just("stale_watermark")),
    st.tuples(st.just("retire"), st.integers(0, 10)),
    st.tuples(st.just("reclaim"), st.booleans()),
    st.tuples(st.just("orphan")),
)


class Model:
    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.ns = Namespace(store)
        self.versions = [(0, 0, 0)]  # (number, first_step, stop_step); registration writes no version
        self.gc = (0, 0)  # (version, step)
        self.live: dict[str, int] = {}
        self.orphans: set[str] = set()
        self.reclaimer = Reclaimer(store)

    def _add_version(self, n: int) -> None:
        first = self.ns.num_steps - n
        self.versions.append((self.versions[-1][0] + 1, first, first + n))

    def apply(self, op: tuple) -> None:
        kind = op[0]
        if kind == "commit":
            self.ns.commit(op[1], size=8)
            self._add_version(op[1])
        elif kind == "restart":
            self.ns.restart()  # registers: no version
        elif kind == "watermark":
            low = self.gc[1]
            step = low + int(op[1] * (self.ns.num_steps - low))
            cid = f"ck-{uuid.uuid4().hex[:8]}"
            record_watermark(self.store, cid, {"tgb_cursor": {"step": step, "version": 1}})
            self.live[cid] = step
        elif kind == "stale_watermark":
            if self.gc[1] > 0:
                try:
                    record_watermark(self.store, "stale", {"tgb_cursor": {"step": self.gc[1] - 1}})
                except ManifestError:
                    pass
                else:
                    raise AssertionError("a watermark below the GC boundary was accepted")
                assert not self.store.exists("_tgb/watermarks/stale.json")
        elif kind == "retire":
            if self.live:
                cid = sorted(self.live)[op[1] % len(self.live)]
                retire(self.store, cid)
                del self.live[cid]
        elif kind == "orphan":
            self.orphans.add(self.ns.orphan(size=8))
        elif kind == "reclaim":
            self._reclaim(late=op[1])

    def _reclaim(self, *, late: bool) -> None:
        reclaimer = Reclaimer(self.store, clock=lambda: time.time() + 7200, sweep_interval=0) if late else self.reclaimer
        report = reclaimer.run_once()
        if self.live:
            safe = min(self.live.values())
            if safe >= self.ns.num_steps:
                number, _, stop = self.versions[-1]
            else:
                number, _, stop = max(v for v in self.versions if v[1] <= safe < v[2])
            step = min(safe, stop)
            if safe > self.gc[1] and (number, step) > self.gc:
                self.gc = (number, step)
        assert (report.boundary_version, report.boundary_step) == self.gc
        assert Manifest(self.store).gc_boundary().step == self.gc[1]
        gone = [k for k in self.ns.keys[: self.gc[1]] if self.store.exists(k)]
        assert not gone, f"objects below the boundary survived a pass: {gone[:3]}"
        assert not self.store.list(f"_tgb/log/{0:020d}")
        if late:
            assert not any(self.store.exists(k) for k in self.orphans)
            self.orphans.clear()
        else:
            assert all(self.store.exists(k) for k in self.orphans)

    def check(self) -> None:
        assert {m.checkpoint_id: m.step for m in live_checkpoints(self.store)} == self.live
        for step in set(self.live.values()):
            assert_resumable(self.store, step, self.ns.keys)
        assert all(self.store.exists(k) for k in self.ns.keys[self.gc[1] :])  # nothing above the boundary lost


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, min_size=1, max_size=30))
def test_random_lifecycle(ops):
    store = MemoryStore(f"prop-{uuid.uuid4().hex}")
    try:
        model = Model(store)
        for op in ops:
            model.apply(op)
            model.check()
        # eventually: with one live checkpoint at the end (after every step), a pass removes every object
        model.apply(("watermark", 1.0))
        for cid in list(model.live)[:-1]:
            model.apply(("retire", sorted(model.live).index(cid)))
        model.apply(("reclaim", True))
        model.check()
        assert model.gc[1] == model.ns.num_steps
        assert store.list("data/") == []
    finally:
        store.destroy()
