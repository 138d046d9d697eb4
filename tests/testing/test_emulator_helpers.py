"""The emulator helpers of torch_tgb.testing without starting an emulator (the fast subset's check of them).

The emulators themselves run in the gcs/azure-marked tests; here: the
precondition check's verdicts on a store that keeps its conditional create
and on one that does not, free loopback ports, and where the binaries are
looked for.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from torch_tgb.testing._emulator import free_port
from torch_tgb.testing.azurite import azurite_binary, cache_dir
from torch_tgb.testing.gcsserver import fake_gcs_binary
from torch_tgb.testing.precondition_check import check


def _store(conditional: bool):
    objects: dict[str, bytes] = {}
    lock = threading.Lock()

    def create(name: str, data: bytes) -> bool:
        with lock:
            if conditional and name in objects:
                return False
            objects[name] = data
            return True

    return create, objects.__getitem__


def test_the_precondition_check_tells_a_conditional_create_from_an_overwrite():
    assert check(*_store(conditional=True)) == {"first_create": True, "second_create_refused": True,
                                                "content_kept": True, "race_winners": 1, "holds": True}
    broken = check(*_store(conditional=False), writers=4)
    assert broken["holds"] is False and broken["second_create_refused"] is False and broken["race_winners"] == 4


def test_free_port_is_a_bindable_loopback_port():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
    assert 0 < port < 65536


def test_the_binaries_are_looked_for_where_the_docs_say(tmp_path, monkeypatch):
    monkeypatch.setenv("TGB_CACHE_DIR", str(tmp_path))
    assert cache_dir() == tmp_path / "azurite"
    fake = tmp_path / "azurite-blob"
    fake.write_text("")
    monkeypatch.setenv("TGB_AZURITE", str(fake))
    assert azurite_binary() == fake
    monkeypatch.setenv("TGB_AZURITE", str(tmp_path / "missing"))
    assert azurite_binary() is None
    found = fake_gcs_binary()
    assert found is None or (isinstance(found, Path) and found.exists())
