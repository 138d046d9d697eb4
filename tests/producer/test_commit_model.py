"""The discrete-event commit model (``benchmarks/_commit_model.py``), small: counts only, never timed.

It runs the package's own ``DACPolicy``; its request costs are checked
against the real ``Committer`` on a counting store. ``benchmarks/dac_scale.py``
runs it at N = 8-1,024 and validates it against real producers.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
if not (BENCHMARKS / "_commit_model.py").exists():
    pytest.skip("benchmarks/ is not in this checkout", allow_module_level=True)
sys.path.insert(0, str(BENCHMARKS))

from _commit_model import CapAfterJitterDAC, ModelConfig, simulate, simulate_registration  # noqa: E402

from torch_tgb.manifest import Committer, Manifest  # noqa: E402
from torch_tgb.manifest._backoff import Backoff  # noqa: E402
from torch_tgb.producer import DACConfig, DACPolicy  # noqa: E402
from torch_tgb.storage import MemoryStore  # noqa: E402
from torch_tgb.testing.counting import CountingStore  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "manifest"))
from _manifest_helpers import commit  # noqa: E402


def test_64_producers_started_together_stay_within_the_conflict_budget() -> None:
    """W = 40 ms: DAC asks for ~49 s gaps, above the old fixed 30 s cap; started together they do not stay in step."""
    config = ModelConfig(producers=64, warmup_s=120.0, window_s=1200.0, rebase="constant")
    after = simulate(config, lambda i: DACPolicy(seed=i))
    assert after["attempts"] > 800
    assert after["conflict_rate"] <= DACConfig().epsilon_c + 0.05, after
    # the same run under the old rule (capped after the jitter) is far over: the check has teeth
    before = simulate(config, lambda i: CapAfterJitterDAC(DACConfig(jitter=0.2), seed=i))
    assert before["conflict_rate"] > DACConfig().epsilon_c + 0.05, before


def test_request_costs_match_the_committer() -> None:
    """One producer: 6 requests per commit (registration check, missing-version probe, its bucket, create, boundary
    LIST + GET), 3 more per snapshot. (The model charges format 1's 5: a format-2 commit also writes the writer's
    bucket.)"""
    store = CountingStore(MemoryStore(f"model-{uuid.uuid4().hex}"))
    committer = Committer(Manifest(store), "p0")
    committer.start()  # registration: no version
    store.reset()
    for _ in range(32):  # versions 1..32: snapshots at 16 and 32
        commit(committer, 1)
    real = store.total / 32
    modelled = simulate(ModelConfig(producers=1, window_s=320.0, rebase="per_version"), lambda i: DACPolicy(seed=i))
    assert real == pytest.approx(6 + 2 * 3 / 32, abs=0.1)  # + the hint read of the first refresh (no rate yet)
    assert modelled["requests_per_commit"] == pytest.approx(5 + 3 / 16, abs=0.1)
    store.inner.destroy()


def test_registration_attempts_grow_linearly_with_backoff_quadratically_without() -> None:
    for n in (16, 64):
        at_once = simulate_registration(n, backoff=Backoff(0.0, 0.0), rebase="constant", overhead_s=0.0)
        assert at_once["attempts"] == n * (n + 1) // 2  # every round, every producer left tries the same slot
        noisy = simulate_registration(n, backoff=Backoff(0.0, 0.0), rebase="constant", seed=n)
        assert noisy["attempts"] >= n * n // 4
        backed_off = simulate_registration(n, backoff=Backoff(), rebase="constant", seed=n)
        assert backed_off["attempts_per_producer"] <= 8, backed_off
