"""The Azurite install in the shared cache: atomic, checked before use, repaired, one npm run for many installers.

A fake ``npm`` (a small script first on ``PATH``) stands in for the registry, so
these tests need no network: it writes what ``npm install azurite`` writes (a
``package.json``, the ``azurite-blob`` link and the file it points to, which
answers ``--version``), or stops half way and exits 1, as an interrupted or
failing install does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torch_tgb.testing import azurite
from torch_tgb.testing.azurite import AZURITE_VERSION, azurite_binary, install_azurite, install_problem

pytestmark = pytest.mark.timeout(120)

FAKE_NPM = textwrap.dedent(f"""\
    #!{sys.executable}
    import json, os, sys, time
    from pathlib import Path

    with open(os.environ["FAKE_NPM_LOG"], "a") as log:
        log.write(" ".join(sys.argv[1:]) + "\\n")
    mode = os.environ.get("FAKE_NPM_MODE", "ok")
    prefix = Path(sys.argv[sys.argv.index("--prefix") + 1])
    package = prefix / "node_modules" / "azurite"
    main = package / "dist" / "src" / "blob" / "main.js"
    main.parent.mkdir(parents=True, exist_ok=True)
    (prefix / "node_modules" / ".bin").mkdir(parents=True, exist_ok=True)
    (prefix / "node_modules" / ".bin" / "azurite-blob").symlink_to("../azurite/dist/src/blob/main.js")
    if mode == "slow":
        time.sleep(2)
    version = os.environ.get("FAKE_NPM_VERSION", "{AZURITE_VERSION}")
    text = json.dumps({{"name": "azurite", "version": version}})
    if mode == "half":  # killed while extracting: a truncated package.json, an empty entry point
        (package / "package.json").write_text(text[:12])
        main.touch()
        sys.exit(1)
    (package / "package.json").write_text(text)
    main.write_text("#!/bin/sh\\necho " + version + "\\n")
    main.chmod(0o755)
""")


@pytest.fixture
def npm(tmp_path, monkeypatch):
    """A fake npm first (and alone) on PATH, an empty cache; returns the file npm's calls are logged in."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "npm").write_text(FAKE_NPM)
    (bin_dir / "npm").chmod(0o755)
    log = tmp_path / "npm.log"
    log.touch()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("TGB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FAKE_NPM_LOG", str(log))
    monkeypatch.delenv("TGB_AZURITE", raising=False)
    monkeypatch.delenv("FAKE_NPM_MODE", raising=False)
    return log


def _calls(log: Path) -> int:
    return len(log.read_text().splitlines())


def _target() -> Path:
    return azurite.cache_dir()


def _leftovers() -> list[str]:
    return sorted(p.name for p in _target().parent.glob(".azurite-tmp-*"))


def _runs(binary: Path) -> str:
    return subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True).stdout.strip()


def _fake_install(root: Path, *, mode: str, version: str = AZURITE_VERSION) -> None:
    """What the fake npm leaves in ``root`` (an install made by hand, without the tool under test)."""
    subprocess.run([str(Path(os.environ["PATH"]) / "npm"), "install", "--prefix", str(root)],
                   env={**os.environ, "FAKE_NPM_MODE": mode, "FAKE_NPM_VERSION": version}, check=False)


def test_an_interrupted_install_leaves_no_target_and_the_next_one_succeeds(npm, monkeypatch):
    monkeypatch.setenv("FAKE_NPM_MODE", "half")
    with pytest.raises(RuntimeError, match="npm install azurite@.* exited 1"):
        install_azurite()
    assert not _target().exists() and _leftovers() == []  # nothing a later run could mistake for an install
    assert azurite_binary() is None
    monkeypatch.setenv("FAKE_NPM_MODE", "ok")
    binary = install_azurite()
    assert binary == _target() / "node_modules" / ".bin" / "azurite-blob"
    assert _runs(binary) == AZURITE_VERSION and _calls(npm) == 2 and _leftovers() == []
    assert install_azurite() == binary and _calls(npm) == 2  # found: no npm run


@pytest.mark.parametrize("damage", ["half", "empty dir", "dangling link", "older version"])
def test_a_corrupt_or_older_install_in_the_cache_is_found_wanting_and_replaced(npm, damage):
    target = _target()
    target.mkdir(parents=True)
    if damage == "half":
        _fake_install(target, mode="half")
    elif damage == "dangling link":
        _fake_install(target, mode="ok")
        (target / "node_modules" / "azurite" / "dist" / "src" / "blob" / "main.js").unlink()
    elif damage == "older version":
        _fake_install(target, mode="ok", version="3.30.0")
    npm.write_text("")
    assert install_problem(target) is not None
    assert azurite_binary() is None  # never handed to a test as if it worked
    binary = install_azurite()
    assert _runs(binary) == AZURITE_VERSION and install_problem(target) is None
    assert _calls(npm) == 1 and _leftovers() == []


def test_a_complete_install_from_before_the_marker_is_kept_after_one_run(npm):
    target = _target()
    target.mkdir(parents=True)
    _fake_install(target, mode="ok")
    npm.write_text("")
    assert not (target / ".tgb-installed").exists()
    assert install_azurite() == target / "node_modules" / ".bin" / "azurite-blob"
    assert _calls(npm) == 0 and (target / ".tgb-installed").read_text() == AZURITE_VERSION


def test_the_temporary_directory_of_a_killed_installer_is_removed(npm):
    stale = _target().parent / ".azurite-tmp-dead"
    (stale / "node_modules").mkdir(parents=True)
    install_azurite()
    assert not stale.exists() and _leftovers() == []


def test_an_npm_that_succeeds_without_installing_azurite_leaves_no_target(npm, tmp_path):
    (tmp_path / "bin" / "npm").write_text(f"#!{sys.executable}\nimport sys\nsys.exit(0)\n")
    with pytest.raises(RuntimeError, match="but no node_modules/.bin/azurite-blob"):
        install_azurite()
    assert not _target().exists() and _leftovers() == []


def test_concurrent_installers_run_npm_once(npm, monkeypatch):
    monkeypatch.setenv("FAKE_NPM_MODE", "slow")
    code = "from torch_tgb.testing.azurite import install_azurite; print(install_azurite())"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    outs = [p.communicate(timeout=100)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert set(outs) == {str(_target() / "node_modules" / ".bin" / "azurite-blob")}
    assert _calls(npm) == 1 and _leftovers() == []
