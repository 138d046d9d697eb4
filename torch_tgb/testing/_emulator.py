"""Run a storage emulator as a child process on a free loopback port, and hand out namespaces on it."""

from __future__ import annotations

import abc
import itertools
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ["EmulatorProcess", "LoopbackServer", "free_port"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class EmulatorProcess:
    """One emulator process; ``start`` retries on a port taken between probe and bind."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, command: Callable[[int], Sequence[str]], ready_path: str, *, tries: int = 3,
              timeout: float = 60.0, env: dict[str, str] | None = None) -> None:
        """Run ``command(port)`` until ``http://127.0.0.1:<port><ready_path>`` answers (any HTTP status)."""
        last = ""
        for _ in range(tries):
            port = free_port()
            process = subprocess.Popen(
                list(command(port)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                env={**os.environ, **(env or {})},
            )
            deadline = time.monotonic() + timeout
            while process.poll() is None and time.monotonic() < deadline:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}{ready_path}", timeout=2).close()
                except urllib.error.HTTPError:
                    pass  # it answered: up
                except OSError:
                    time.sleep(0.1)
                    continue
                self.port, self._process = port, process
                return
            process.kill()
            _, err = process.communicate()
            last = err.decode(errors="replace").strip()[-500:]
        raise RuntimeError(f"{self.name} did not start on 127.0.0.1 after {tries} tries: {last or 'no output'}")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


_Server = TypeVar("_Server", bound="LoopbackServer")


class LoopbackServer(abc.ABC):
    """An emulator with one bucket or container; ``namespace()`` hands out fresh prefixes in it."""

    #: URL scheme of its namespaces ("gs", "az")
    scheme = ""

    def __init__(self, container: str, name: str) -> None:
        self.container = container
        self._process = EmulatorProcess(name)
        self._counter = itertools.count()
        self._lock = threading.Lock()

    @abc.abstractmethod
    def start(self) -> LoopbackServer: ...

    @property
    @abc.abstractmethod
    def storage_options(self) -> dict[str, Any]: ...

    def stop(self) -> None:
        self._process.stop()

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.container}"

    def namespace(self, name: str | None = None) -> tuple[str, dict[str, Any]]:
        """A fresh, empty namespace: ``(url, storage_options)`` under a unique prefix."""
        with self._lock:
            n = next(self._counter)
        return f"{self.url}/{name or 'ns'}-{n:05d}-{uuid.uuid4().hex[:8]}", self.storage_options

    def __enter__(self: _Server) -> _Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
