"""The tgb command against the loopback S3, GCS and Azure emulators, options given as --storage-option."""

from __future__ import annotations

import json

import pytest

import torch_tgb.cli.main as cli_main


def _options(opts: dict, prefix: str = "") -> list[str]:
    flags = []
    for name, value in opts.items():
        if isinstance(value, dict):
            flags += _options(value, f"{prefix}{name}.")
        else:
            flags += ["-o", f"{prefix}{name}={value}"]
    return flags


def test_produce_inspect_verify_reclaim_never_print_credentials(cloud_namespace, capsys):
    url, opts = cloud_namespace
    so = _options(opts)
    assert cli_main.main(["produce", url, "--steps", "3", "--global-batch", "2", "--seq-len", "4", "--seal", *so]) == 0
    produced = capsys.readouterr()
    assert cli_main.main(["inspect", url, "--json", *so]) == 0
    out = capsys.readouterr().out
    report = json.loads(out)
    assert report["steps"] == 3 and report["sealed"] is True
    assert report["storage"]["by_area"]["data/"]["objects"] == 1  # tgb produce packs one segment object
    assert cli_main.main(["verify", url, *so]) == 0
    assert cli_main.main(["reclaim", url, *so]) == 0
    captured = capsys.readouterr()
    everything = produced.out + produced.err + out + captured.out + captured.err
    for secret in _secrets(opts):
        assert secret not in everything


def _secrets(opts: dict) -> list[str]:
    if "secret" in opts:  # S3
        return [opts["secret"], f"key={opts['key']}"]
    if "connection_string" in opts:  # Azure: the connection string carries the account key
        return ["AccountKey", opts["connection_string"].split("AccountKey=")[1].split(";")[0]]
    return []  # GCS on the emulator: anonymous


@pytest.mark.s3
def test_wrong_credentials_fail_in_one_line(s3_namespace, capsys):
    url, opts = s3_namespace
    # no endpoint: the namespace cannot be reached on loopback; the error is one line, exit 1
    code = cli_main.main(["inspect", url, "-o", "endpoint_url=http://127.0.0.1:9", "-o", "secret=hunter2",
                          "-o", "key=k", "-o", "client_kwargs.region_name=us-east-1", "--no-sizes"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.startswith("tgb: error:") and err.count("\n") == 1
    assert "hunter2" not in err


@pytest.mark.s3
def test_produce_into_a_missing_bucket_names_it_at_once(s3_server, capsys):
    """Issue 14 (7): 31.6 s of retries, then "delete '_tgb/probe/...': no such object"."""
    _, opts = s3_server.namespace()
    code = cli_main.main(["produce", "s3://no-such-bucket-x/run", "--steps", "1", *_options(opts)])
    err = capsys.readouterr().err
    assert code == 1 and "bucket 'no-such-bucket-x' does not exist" in err and "probe" not in err
