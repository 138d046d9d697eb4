"""A loopback Azure Blob emulator (Azurite) for tests and benchmarks.

Azurite is an npm package, so pip cannot install it. :func:`azurite_binary`
finds ``azurite-blob`` (``$TGB_AZURITE``, then ``PATH``, then the torch_tgb
cache ``$TGB_CACHE_DIR`` or ``~/.cache/torch_tgb``); :func:`install_azurite`
puts it into that cache with ``npm install`` (what ``.ci/run`` does, and
what the ``azurite_server`` test fixture does on first use when npm is
there). ``python -m torch_tgb.testing.azurite`` installs and prints the path.

The cache is shared by every process of the machine, so the install is
atomic and checked:

* npm installs into a temporary directory next to the target
  (``.azurite-tmp-*``); the result is checked (below) and marked complete,
  and only then renamed onto ``azurite/``. An install that fails or is
  killed half way never leaves a target behind, only a temporary directory
  that the next installer removes.
* Installers take ``azurite.lock`` (``flock``) and look again once they hold
  it: of two concurrent installers one runs npm, the other uses its result.
* A cached install is used only if it checks out: ``azurite-blob`` and the
  file it links to exist, ``node_modules/azurite/package.json`` names
  ``azurite`` at :data:`AZURITE_VERSION`, and the completion marker is there
  (an install made before markers existed must run ``azurite-blob
  --version`` once instead). One that does not (a corrupt or older install)
  is not found by :func:`azurite_binary`, and :func:`install_azurite`
  replaces it.

Azurite enforces ``If-None-Match: *`` (a second create gets 409). The account
is Azurite's documented development account; its key is public, not a secret.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from torch_tgb.testing._emulator import LoopbackServer

__all__ = ["AZURITE_VERSION", "AzuriteServer", "azurite_binary", "install_azurite", "install_problem"]

AZURITE_VERSION = "3.37.0"
_ACCOUNT = "devstoreaccount1"
# Azurite's well-known development key (published in its README), not a credential
_DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def cache_dir() -> Path:
    return Path(os.environ.get("TGB_CACHE_DIR") or Path.home() / ".cache" / "torch_tgb") / "azurite"


_BIN = Path("node_modules") / ".bin" / "azurite-blob"
_PACKAGE = Path("node_modules") / "azurite" / "package.json"
#: written into an install once it is complete and checked (before it is renamed into place)
_MARKER = ".tgb-installed"
_TMP_PREFIX = ".azurite-tmp-"
_NPM_TIMEOUT = 900.0  # seconds: an npm that hangs must not hold the install lock forever
_VERSION_TIMEOUT = 120.0  # seconds for ``azurite-blob --version`` (node starts slowly on a loaded machine)


def azurite_binary() -> Path | None:
    """``azurite-blob`` from ``$TGB_AZURITE``, ``PATH`` or a checked install in the cache; None if there is none."""
    explicit = os.environ.get("TGB_AZURITE")
    if explicit:
        return Path(explicit) if Path(explicit).exists() else None
    found = shutil.which("azurite-blob")
    if found:
        return Path(found)
    target = cache_dir()
    return target / _BIN if install_problem(target) is None else None


def install_problem(root: Path) -> str | None:
    """What is wrong with the Azurite install under ``root`` (None: complete, the right version, runs)."""
    binary = root / _BIN
    if not binary.exists():  # follows the link: a dangling one is missing too
        return f"no {_BIN}" if not binary.is_symlink() else f"{_BIN} points to a missing file"
    if not binary.is_file() or binary.stat().st_size == 0:
        return f"{_BIN} is empty or not a file"
    try:
        package = json.loads((root / _PACKAGE).read_text())
    except (OSError, ValueError) as e:
        return f"{_PACKAGE} is missing or incomplete ({e})"
    if not isinstance(package, dict) or (package.get("name"), package.get("version")) != ("azurite", AZURITE_VERSION):
        found = package.get("version") if isinstance(package, dict) else None
        return f"{_PACKAGE} is not azurite {AZURITE_VERSION} (version {found!r})"
    marker = root / _MARKER
    if marker.is_file() and marker.read_text().strip() == AZURITE_VERSION:
        return None
    problem = _runs(binary)  # an install from before markers (or one being checked): run it once
    if problem is None:
        _write_marker(root)
    return problem


def _runs(binary: Path) -> str | None:
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=_VERSION_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{binary} --version failed: {e}"
    if done.returncode != 0 or AZURITE_VERSION not in done.stdout:
        return f"{binary} --version exited {done.returncode}: {(done.stdout + done.stderr).strip()[-300:]!r}"
    return None


def _write_marker(root: Path) -> None:
    try:
        with tempfile.NamedTemporaryFile("w", dir=root, prefix=_MARKER, delete=False) as f:
            f.write(AZURITE_VERSION)
        os.chmod(f.name, 0o644)  # the cache may be shared by several users
        os.replace(f.name, root / _MARKER)
    except OSError:
        pass  # a read-only cache: the check runs again next time


def install_azurite() -> Path:
    """Install Azurite into the cache with npm (once; atomically; a broken install replaced); ``azurite-blob``."""
    found = azurite_binary()
    if found is not None:
        return found
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("Azurite needs node and npm (https://nodejs.org) to be installed")
    target = cache_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.parent / "azurite.lock"):
        problem = install_problem(target)  # another installer may have finished while we waited
        if problem is None:
            return target / _BIN
        for stale in target.parent.glob(f"{_TMP_PREFIX}*"):  # installers that died (we hold the lock)
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=target.parent))
        try:
            _npm_install(npm, tmp)
            problem_now = install_problem(tmp)
            if problem_now is not None:
                raise RuntimeError(f"npm installed azurite@{AZURITE_VERSION} into {tmp}, but {problem_now}")
            _replace(target, tmp, why=problem)  # install_problem marked it complete
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target / _BIN


def _npm_install(npm: str, prefix: Path) -> None:
    try:
        done = subprocess.run(
            [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--silent",
             f"azurite@{AZURITE_VERSION}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=_NPM_TIMEOUT,
        )
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"npm install azurite@{AZURITE_VERSION} did not finish in {_NPM_TIMEOUT:.0f} s") from e
    if done.returncode != 0:
        output = done.stderr.strip()[-500:] or "no output"
        raise RuntimeError(f"npm install azurite@{AZURITE_VERSION} exited {done.returncode}: {output}")


def _replace(target: Path, installed: Path, *, why: str) -> None:
    """Rename ``installed`` onto ``target``; a broken ``target`` is renamed aside first, then deleted."""
    aside = None
    if target.exists() or target.is_symlink():
        print(f"torch_tgb: replacing the Azurite install in {target}: {why}", file=sys.stderr)
        aside = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=target.parent)) / "old"
        os.rename(target, aside)
    os.rename(installed, target)  # one step: readers see no install or a whole one
    if aside is not None:
        shutil.rmtree(aside.parent, ignore_errors=True)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        yield


class AzuriteServer(LoopbackServer):
    """Azurite's blob service with one container, in memory, on a free loopback port."""

    scheme = "az"

    def __init__(self, container: str = "tgb-test", *, binary: Path | None = None) -> None:
        super().__init__(container, "azurite")
        self.binary = binary

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self._process.port}/{_ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={_ACCOUNT};AccountKey={_DEV_KEY};"
            f"BlobEndpoint={self.endpoint_url};"
        )

    def start(self) -> AzuriteServer:
        binary = self.binary or azurite_binary()
        if binary is None:
            raise RuntimeError("azurite is not installed: python -m torch_tgb.testing.azurite")

        def command(port: int) -> list[str]:
            return [
                str(binary), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence",
                "--silent", "--skipApiVersionCheck", "--disableTelemetry", "--loose",
            ]

        self._process.start(command, f"/{_ACCOUNT}?comp=list")
        from azure.storage.blob import BlobServiceClient

        with BlobServiceClient.from_connection_string(self.connection_string) as service:
            service.create_container(self.container)
        return self

    @property
    def storage_options(self) -> dict[str, Any]:
        return {"connection_string": self.connection_string}


if __name__ == "__main__":
    print(install_azurite())
    sys.exit(0)
