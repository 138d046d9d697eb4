"""The `tgb` entry point: help on every subcommand, exit codes, one-line errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

import torch_tgb.cli.main as cli_main
from tests.cli.conftest import tgb_cli
from torch_tgb.cli._common import CommandError, parse_storage_options
from torch_tgb.errors import ObjectNotFound


@pytest.mark.parametrize("command", [None, *cli_main.SUBCOMMANDS])
def test_help_exits_zero(command, capsys):
    argv = ["--help"] if command is None else [command, "--help"]
    with pytest.raises(SystemExit) as exc:
        cli_main.main(argv)
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "usage: tgb" in out
    if command is not None:
        assert command in out


def test_every_subcommand_takes_storage_option():
    parser = cli_main.build_parser()
    for name in cli_main.SUBCOMMANDS:
        argv = [name, "x", "y"] if name == "convert" else [name, "x"]
        if name in ("demo", "bench"):
            argv = [name]
        if name == "prewarm":
            argv = [name, "x", "--mesh", "dp=1", "--cache-dir", "c"]
        args = parser.parse_args([*argv, "--storage-option", "anon=true", "-o", "a.b=1"])
        assert args.storage_option == ["anon=true", "a.b=1"]


def test_no_subcommand_is_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        cli_main.main([])
    assert exc.value.code == 2


def test_tgb_error_is_one_line_exit_1(monkeypatch, capsys):
    def boom(args):
        raise ObjectNotFound("memory://x: no object 'a'\nsecond line")

    parser = cli_main.build_parser()
    monkeypatch.setattr(cli_main, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["inspect"].set_defaults(run=boom)
    assert cli_main.main(["inspect", "memory://x"]) == 1
    err = capsys.readouterr().err
    assert err == "tgb: error: memory://x: no object 'a' second line\n"


def test_refused_input_is_one_line_exit_1(monkeypatch, capsys):
    def boom(args):
        raise ValueError("prefetch must be >= 0, got -1")

    parser = cli_main.build_parser()
    monkeypatch.setattr(cli_main, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["inspect"].set_defaults(run=boom)
    assert cli_main.main(["inspect", "memory://x"]) == 1
    assert capsys.readouterr().err == "tgb: error: prefetch must be >= 0, got -1\n"


def test_unexpected_error_exit_2(monkeypatch, capsys):
    def boom(args):
        raise RuntimeError("kaput")

    parser = cli_main.build_parser()
    monkeypatch.setattr(cli_main, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["inspect"].set_defaults(run=boom)
    assert cli_main.main(["inspect", "memory://x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "RuntimeError: kaput" in err[0]


def test_storage_options_parsing():
    opts = parse_storage_options(
        ["endpoint_url=http://127.0.0.1:9000", "anon=false", "client_kwargs.region_name=eu", "max_concurrency=8"]
    )
    assert opts == {
        "endpoint_url": "http://127.0.0.1:9000",
        "anon": False,
        "client_kwargs": {"region_name": "eu"},
        "max_concurrency": 8,
    }


def test_storage_option_errors_never_echo_values():
    with pytest.raises(CommandError) as exc:
        parse_storage_options(["novalue"])
    assert "novalue" in str(exc.value)  # the key is named
    with pytest.raises(CommandError) as exc:
        parse_storage_options(["a=s3cr3t", "a.b=x"])
    assert "s3cr3t" not in str(exc.value)


def test_verbose_logs_option_names_never_values(tmp_path):
    """Issue 14: ``-v`` printed endpoint_url; no option value may reach the log (installed ``tgb``)."""
    from tests.cli.conftest import write_namespace

    ns = write_namespace(tmp_path / "ns")
    proc = tgb_cli("-v", "inspect", ns, "-o", "endpoint_url=http://e.example:1", "-o", "client_kwargs.aws_session_token=t0k3n")
    # (a local directory refuses the options, exit 1: the log line comes first)
    assert "storage options: endpoint_url, client_kwargs.aws_session_token" in proc.stderr
    assert "e.example" not in proc.stderr + proc.stdout and "t0k3n" not in proc.stderr + proc.stdout


def test_one_list_of_secret_option_names():
    from torch_tgb.storage._secrets import is_secret_option, secret_values

    for name in ("key", "secret", "aws_session_token", "password", "sas_token", "Authorization", "signature"):
        assert is_secret_option(name), name
    assert not is_secret_option("endpoint_url") and not is_secret_option("region_name")
    found = secret_values("s3://u:pw123@b/x", {"key": "AKIA1", "client_kwargs": {"aws_session_token": "tok"}, "anon": "yes"})
    assert set(found) == {"u:pw123", "pw123", "AKIA1", "tok"}


def test_console_script_runs_as_module():
    proc = subprocess.run([sys.executable, "-m", "torch_tgb.cli", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert proc.stdout.startswith("tgb (torch_tgb)")
