"""``Registry``: one registration per name, unknown names listed, plugins found lazily by entry-point group."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests._plugin_pkg.install import write_dist
from torch_tgb._registry import Registry
from torch_tgb.errors import RegistryError

GROUP = "torch_tgb_tests.things"


def test_a_name_is_registered_once_unless_replaced() -> None:
    things: Registry[int] = Registry("thing")
    assert things.register("a", 1) == 1
    with pytest.raises(RegistryError, match="thing 'a' is registered already.*replace=True"):
        things.register("a", 2)
    things.register("a", 3, replace=True)
    assert things["a"] == 3 and "a" in things and list(things) == ["a"] and len(things) == 1


@pytest.mark.parametrize("name", ["", " a", 3])
def test_a_bad_name_is_refused(name: object) -> None:
    with pytest.raises(RegistryError, match="non-empty string"):
        Registry("thing").register(name, 1)  # type: ignore[arg-type]


def test_an_unknown_name_lists_the_known_ones() -> None:
    things: Registry[int] = Registry("thing", group=GROUP)
    things.register("b", 1)
    things.register("a", 2)
    with pytest.raises(RegistryError, match=rf"unknown thing 'c'; choose from a, b \(or install .*'{GROUP}'\)"):
        things["c"]
    with pytest.raises(ValueError):  # a RegistryError is a ValueError, as the checks it replaced raised
        things.unregister("c")
    things.unregister("a")
    assert things.names() == ("b",)


def test_register_as_a_decorator_and_coerce() -> None:
    things: Registry[tuple[str, object]] = Registry("thing", coerce=lambda obj: ("coerced", obj))

    @things.register("f")
    def f() -> int:
        return 1

    assert f() == 1 and things["f"] == ("coerced", f)


def _on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, points: dict[str, str]) -> None:
    write_dist(tmp_path / name, name, "1.0", {GROUP: points})
    monkeypatch.syspath_prepend(str(tmp_path / name))


def test_an_entry_point_is_read_only_when_asked_and_loaded_once(tmp_path, monkeypatch) -> None:
    things: Registry[object] = Registry("thing", group=GROUP)
    things.register("builtin", 0)
    assert things["builtin"] == 0 and things._scanned is None  # a registered name never reads the group
    _on_path(tmp_path, monkeypatch, "dist-a", {"joiner": "os.path:join"})
    import os.path

    assert things.names() == ("builtin", "joiner")
    assert things["joiner"] is os.path.join and things["joiner"] is os.path.join
    assert things.names() == ("builtin", "joiner")  # loaded: not a clash with itself


def test_an_entry_point_may_not_take_a_registered_name(tmp_path, monkeypatch) -> None:
    things: Registry[object] = Registry("thing", group=GROUP)
    things.register("join", 0)
    _on_path(tmp_path, monkeypatch, "dist-b", {"join": "os.path:join"})
    with pytest.raises(RegistryError, match="thing 'join': entry point 'os.path:join' of distribution 'dist-b'.*"
                                            "registered already"):
        things.names()


def test_two_distributions_may_not_declare_one_name(tmp_path, monkeypatch) -> None:
    things: Registry[object] = Registry("thing", group=GROUP)
    _on_path(tmp_path, monkeypatch, "dist-c", {"x": "os.path:join"})
    _on_path(tmp_path, monkeypatch, "dist-d", {"x": "os.path:split"})
    with pytest.raises(RegistryError, match="thing 'x' is declared twice.*uninstall one"):
        things["x"]


def test_a_broken_plugin_is_named(tmp_path, monkeypatch) -> None:
    things: Registry[object] = Registry("thing", group=GROUP)
    _on_path(tmp_path, monkeypatch, "dist-e", {"gone": "no_such_module_for_tgb:thing"})
    with pytest.raises(RegistryError, match="thing 'gone' from entry point 'no_such_module_for_tgb:thing'.*"
                                            "ModuleNotFoundError"):
        things["gone"]
    assert "no_such_module_for_tgb" not in sys.modules
