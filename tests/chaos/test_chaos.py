"""Seeded SIGKILL chaos: producers, consumers and a reclaimer killed and restarted.

See ``_driver.py`` for what a trial does and checks. Default: 30 plain trials
and 10 trials with every process behind a FaultyStore; ``--long`` gives 10x
the trials and longer ones. ``TGB_CHAOS_REPORT=path`` appends each trial's
figures as a JSON line (used for docs/reliability.md).
"""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
from _driver import TrialConfig, TrialFailure, Zygote, known_bug, run_trial

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _config(long: bool) -> TrialConfig:
    return TrialConfig(offsets=60, kill_budget=15) if long else TrialConfig()


def _run(zygote: Zygote, seed: int, tmp_path, long: bool, faulty: bool) -> None:
    config = _config(long)
    record: dict = {"seed": seed, "faulty": faulty}
    try:
        report = run_trial(zygote, seed, str(tmp_path), faulty=faulty, config=config)
    except TrialFailure as e:
        bug = known_bug(e)
        record.update(failed=str(e).splitlines()[0], known_bug=bug)
        _save(record)
        if bug is not None:
            pytest.xfail(f"known bug {bug} (see .helpers/bugs.md):\n{e}")
        raise
    record.update({f.name: getattr(report, f.name) for f in dataclasses.fields(report)})
    record["kills"] = dict(report.kills)
    record["faults"] = dict(report.faults)
    _save(record)
    print(report)
    assert report.steps == 2 * config.offsets


def _save(record: dict) -> None:
    path = os.environ.get("TGB_CHAOS_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record, default=str) + "\n")


@pytest.mark.chaos_trials(30)
def test_sigkill_chaos(zygote: Zygote, chaos_seed: int, tmp_path, chaos_long: bool) -> None:
    _run(zygote, chaos_seed, tmp_path, chaos_long, faulty=False)


@pytest.mark.chaos_trials(10, base=1000)
def test_sigkill_chaos_faulty_store(zygote: Zygote, chaos_seed: int, tmp_path, chaos_long: bool) -> None:
    _run(zygote, chaos_seed, tmp_path, chaos_long, faulty=True)
