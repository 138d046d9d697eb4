"""A third-party package extends torch_tgb by entry points alone: a store scheme, a balance method, a source kind
and a commit policy from ``tests/_plugin_pkg`` (installed into a temporary directory, nothing downloaded)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests._plugin_pkg.install import install
from torch_tgb import datapipes
from torch_tgb.cli import main as cli_main
from torch_tgb.errors import RegistryError
from torch_tgb.layout import Layout
from torch_tgb.producer import COMMIT_POLICIES, make_policy
from torch_tgb.sources.kinds import SOURCE_KINDS, SourceArgs, open_kind
from torch_tgb.storage import STORES, open_store
from torch_tgb.transforms import BALANCERS

PLUGIN_NAMES = ((STORES, "myscheme"), (BALANCERS, "mine"), (SOURCE_KINDS, "counting"), (COMMIT_POLICIES, "every2"))


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The plugin installed and on ``sys.path``; its entries unregistered and its module forgotten afterwards."""
    monkeypatch.syspath_prepend(str(install(tmp_path / "site")))
    yield
    for registry, name in PLUGIN_NAMES:
        try:
            registry.unregister(name)
        except RegistryError:
            pass  # declared, never loaded
    sys.modules.pop("tgb_plugin_demo", None)


def _batches(balance: str | None) -> datapipes.GlobalBatches:
    docs = open_kind("counting:16", SourceArgs())
    return datapipes.document_batches(docs, seq_len=6, global_batch_size=8, layout=Layout(dp=2), balance=balance)


def test_without_the_plugin_its_names_are_unknown_and_the_error_lists_the_others() -> None:
    with pytest.raises(RegistryError, match=r"unknown store scheme 'myscheme'.*file.*memory"):
        STORES["myscheme"]
    with pytest.raises(ValueError, match=r"unknown balance method 'mine'; choose from greedy, kk, round_robin"):
        datapipes.Batching(seq_len=4, global_batch_size=2, balance="mine")


def test_open_store_opens_the_plugins_scheme(plugin: None) -> None:
    assert "myscheme" in STORES.names()
    store = open_store("myscheme://a")
    assert type(store.inner).__name__ == "MySchemeStore"  # type: ignore[attr-defined]
    store.put("k", b"v")
    assert open_store("myscheme://a").get("k") == b"v"  # one store per name, as memory:// keeps it


def test_global_batches_balance_with_the_plugins_method(plugin: None) -> None:
    plain, mine = next(iter(_batches(None))), next(iter(_batches("mine")))
    # reverse_round_robin over 8 rows in 2 parts: rows 7-0, 7-2, ... to slice 0, the rest to slice 1
    assert mine["row_index"].tolist() == [1, 3, 5, 7, 0, 2, 4, 6]
    assert torch.equal(mine["input_ids"], plain["input_ids"][mine["row_index"]])


def test_the_plugins_source_kind_and_commit_policy(plugin: None) -> None:
    docs = list(open_kind("counting:4", SourceArgs()))
    assert sorted(d["tokens"].tolist() for d in docs) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    assert make_policy("every2").name == "fixed2"


def test_tgb_produce_takes_the_plugins_names(plugin: None, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The command line's choices read the registries: --source, --balance and --commit-policy of the plugin."""
    ns = str(tmp_path / "ns")
    code = cli_main.main(["produce", ns, "--source", "counting:32", "--balance", "mine", "--commit-policy", "every2",
                          "--global-batch", "4", "--seq-len", "6", "--dp", "2", "--json"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads(capsys.readouterr().out)
    assert summary["tokens"] == 96 and summary["exhausted"]
    with pytest.raises(SystemExit):
        cli_main.main(["produce", ns, "--balance", "nope"])
    assert "choose from 'greedy', 'kk', 'mine', 'round_robin', 'vector'" in capsys.readouterr().err
