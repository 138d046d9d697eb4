"""The chaos trial on S3, GCS and Azure (loopback emulators): conditional creates, lost acks and kills over HTTP.

Small on purpose (moto serves ~150 small requests/s on 2 cores): 8 offsets
per producer, 3 kills, slower polling. One plain trial and one with every
process behind a FaultyStore.
"""

from __future__ import annotations

import pytest
from _driver import TrialConfig, Zygote, run_trial

pytestmark = [pytest.mark.slow, pytest.mark.s3, pytest.mark.timeout(300)]

CONFIG = TrialConfig(offsets=8, kill_budget=3, every=2, poll_max=0.3, reclaim_interval=0.5, deadline=120.0)


@pytest.mark.parametrize("faulty", [False, True], ids=["plain", "faulty"])
def test_sigkill_chaos_on_s3(zygote: Zygote, s3_namespace, tmp_path, faulty: bool) -> None:
    report = run_trial(zygote, 7 + faulty, str(tmp_path), faulty=faulty, config=CONFIG, s3=s3_namespace)
    print(report)
    assert report.steps == 2 * CONFIG.offsets


@pytest.mark.parametrize("cloud", [pytest.param("gcs", marks=pytest.mark.gcs),
                                   pytest.param("azure", marks=pytest.mark.azure)])
def test_sigkill_chaos_on_gcs_and_azure(zygote: Zygote, request, tmp_path, cloud: str) -> None:
    namespace = request.getfixturevalue(f"{cloud}_namespace")
    report = run_trial(zygote, 11, str(tmp_path), faulty=False, config=CONFIG, s3=namespace)
    print(report)
    assert report.steps == 2 * CONFIG.offsets
