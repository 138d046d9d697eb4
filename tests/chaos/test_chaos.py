"""Seeded SIGKILL chaos: producers, consumers and a reclaimer killed and restarted.

See ``_driver.py`` for what a trial does and checks. Default: 30 plain trials
and 10 trials with every process behind a FaultyStore; ``--long`` gives 10x.
"""

from __future__ import annotations

import pytest
from _driver import TrialConfig, Zygote, run_trial

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _config(long: bool) -> TrialConfig:
    return TrialConfig(offsets=60, kill_budget=15) if long else TrialConfig()


@pytest.mark.chaos_trials(30)
def test_sigkill_chaos(zygote: Zygote, chaos_seed: int, tmp_path, chaos_long: bool) -> None:
    report = run_trial(zygote, chaos_seed, str(tmp_path), faulty=False, config=_config(chaos_long))
    assert report.steps == 2 * _config(chaos_long).offsets
    print(report)


@pytest.mark.chaos_trials(10, base=1000)
def test_sigkill_chaos_faulty_store(zygote: Zygote, chaos_seed: int, tmp_path, chaos_long: bool) -> None:
    report = run_trial(zygote, chaos_seed, str(tmp_path), faulty=True, config=_config(chaos_long))
    assert report.steps == 2 * _config(chaos_long).offsets
    print(report)
