"""Credentials given in ``storage_options`` never appear in logs, errors or ``tgb inspect`` output.

A sentinel secret (and access key id) is used against the loopback moto S3
server for a full produce/consume/inspect cycle and for three failures
(missing bucket, wrong secret, unreachable endpoint). Every log record of
every logger at DEBUG, every error message, repr and formatted traceback
chain, and the CLI's stdout/stderr are searched for it.

The access key id is public-ish (botocore's own DEBUG logs print it inside
the SigV4 ``Authorization`` header, which torch_tgb does not control), so it
is checked only in what torch_tgb itself writes; the secret is checked
everywhere.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

import pytest
import torch

import torch_tgb as tgb
from torch_tgb.cli.main import main as tgb_main
from torch_tgb.storage import open_store

pytestmark = [pytest.mark.s3]

SECRET = "sEnTiNeL-SeCrEt-4f1c9b7e2d"
KEY_ID = "AKIASENTINEL7Q2Z"
LAYOUT = tgb.Layout(dp=1)


def _options(base: dict[str, Any], *, secret: str = SECRET, key: str = KEY_ID) -> dict[str, Any]:
    return dict(base, key=key, secret=secret)


def _everything(exc: BaseException) -> str:
    """Message, repr and the whole formatted chain of an exception."""
    return "\n".join([str(exc), repr(exc), *traceback.format_exception(exc)])


def _own_records(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("torch_tgb"))


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = tgb_main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def _storage_flags(opts: dict[str, Any]) -> list[str]:
    flags = []
    for k, v in opts.items():
        if isinstance(v, dict):
            flags += [f"-o{k}.{ik}={iv}" for ik, iv in v.items()]
        else:
            flags.append(f"-o{k}={v}")
    return flags


def test_secret_never_leaks_in_a_full_cycle(s3_namespace, caplog, capsys) -> None:
    url, base = s3_namespace
    opts = _options(base)
    caplog.set_level(logging.DEBUG)
    with tgb.Producer(url, producer_id="p0", layout=LAYOUT, commit_policy="naive", storage_options=opts) as p:
        for offset in range(2):
            p.append({"x": torch.full((2, 2), offset)}, offset=offset)
        p.close(seal=True)
        assert SECRET not in repr(p) and KEY_ID not in repr(p)
    ds = tgb.TGBDataset(url, mesh=tgb.Mesh(0, 1), timeout=30, storage_options=opts)
    assert [int(b["x"][0, 0]) for b in ds] == [0, 1]
    assert SECRET not in repr(ds.state_dict())
    store = open_store(url, opts)
    assert SECRET not in repr(store) and KEY_ID not in store.url
    for verbosity in ([], ["-vv"]):
        code, text = _cli(capsys, *verbosity, "inspect", url, "--json", *_storage_flags(opts))
        assert code == 0, text
        assert '"num_steps"' in text or "steps" in text
        assert SECRET not in text and KEY_ID not in text
    assert caplog.records, "DEBUG logging captured nothing: the check would be vacuous"
    assert SECRET not in caplog.text
    assert KEY_ID not in _own_records(caplog)


def test_missing_bucket_error_hides_the_secret(s3_server, caplog, capsys) -> None:
    caplog.set_level(logging.DEBUG)
    url = "s3://no-such-bucket-sentinel/ns"
    opts = _options(s3_server.storage_options)
    with pytest.raises(tgb.TGBError) as info:
        tgb.Producer(url, producer_id="p0", layout=LAYOUT, storage_options=opts)
    text = _everything(info.value)
    assert "no-such-bucket-sentinel" in text  # the error names what failed
    assert SECRET not in text and KEY_ID not in str(info.value)
    code, out = _cli(capsys, "--debug", "inspect", url, *_storage_flags(opts))
    assert code != 0 and "no-such-bucket-sentinel" in out
    assert SECRET not in out and KEY_ID not in out
    assert SECRET not in caplog.text


def test_unreachable_endpoint_error_hides_the_secret(caplog) -> None:
    caplog.set_level(logging.DEBUG)
    opts = {"endpoint_url": "http://127.0.0.1:9", "key": KEY_ID, "secret": SECRET,
            "config_kwargs": {"connect_timeout": 1, "retries": {"max_attempts": 1}},
            "client_kwargs": {"region_name": "us-east-1"}}
    store = open_store("s3://bucket/ns", opts)
    with pytest.raises(tgb.StorageError) as info:
        store.get("_tgb/dataset.json")
    text = _everything(info.value)
    assert "_tgb/dataset.json" in str(info.value)
    assert SECRET not in text and KEY_ID not in str(info.value)
    assert SECRET not in caplog.text


def test_wrong_secret_error_hides_the_secret(s3_server, monkeypatch, caplog) -> None:
    """moto with authentication on: a real SignatureDoesNotMatch for a known key and a wrong secret."""
    import boto3
    from moto import settings

    iam = boto3.client("iam", endpoint_url=s3_server.endpoint_url, region_name="us-east-1",
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    iam.create_user(UserName="sentinel-user")
    key_id = iam.create_access_key(UserName="sentinel-user")["AccessKey"]["AccessKeyId"]
    caplog.set_level(logging.DEBUG)
    monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    opts = _options(s3_server.storage_options, key=key_id)
    store = open_store(f"{s3_server.url}/wrong-secret", opts)
    with pytest.raises(tgb.StorageError) as info:
        store.put("probe", b"x")
    text = _everything(info.value)
    assert "probe" in str(info.value)
    assert "SignatureDoesNotMatch" in str(info.value) or "denied" in str(info.value)
    assert SECRET not in text
    assert SECRET not in caplog.text
