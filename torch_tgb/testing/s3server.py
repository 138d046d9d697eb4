"""A loopback S3 server (moto) for tests and benchmarks.

:class:`MotoS3Server` starts moto's ``ThreadedMotoServer`` on ``127.0.0.1``
with a free port, creates one bucket and hands out namespaces in it, each
as ``(url, storage_options)`` ready for :func:`torch_tgb.storage.open_store`.
Credentials are dummies and the endpoint is loopback, so nothing leaves the
machine. moto is slow (~150 small GETs/s on 2 cores): keep S3 tests small.
"""

from __future__ import annotations

import copy
import itertools
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from moto.server import ThreadedMotoServer

__all__ = ["DUMMY_AWS_ENV", "MotoS3Server", "dummy_aws_env", "moto_s3_server"]

#: environment that keeps botocore from looking for real credentials or endpoints
DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}


@contextmanager
def dummy_aws_env() -> Iterator[None]:
    """Set :data:`DUMMY_AWS_ENV` for the duration of the block, then restore."""
    saved = {name: os.environ.get(name) for name in DUMMY_AWS_ENV}
    os.environ.update(DUMMY_AWS_ENV)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class MotoS3Server:
    """One moto S3 server with one bucket, on a free loopback port.

    By default the server runs in threads of this process (cheap to start,
    right for tests). ``separate_process=True`` runs ``python -m moto.server``
    instead, so server and client do not share one GIL (for benchmarks).
    """

    def __init__(self, bucket: str = "tgb-test", *, separate_process: bool = False) -> None:
        self.bucket = bucket
        self.separate_process = separate_process
        self._server: ThreadedMotoServer | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self.endpoint_url = ""

    def start(self) -> MotoS3Server:
        if self.separate_process:
            self._start_process()
        else:
            from moto.server import ThreadedMotoServer

            # one INFO line per request would flood captured test logs
            logging.getLogger("werkzeug").setLevel(logging.WARNING)
            server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            server.start()
            host, port = server.get_host_and_port()
            self._server = server
            self.endpoint_url = f"http://{host}:{port}"
        self._create_bucket()
        return self

    def _start_process(self, tries: int = 3, timeout: float = 60.0) -> None:
        for _ in range(tries):  # the free port may be taken between probe and bind
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env={**os.environ, **DUMMY_AWS_ENV},
            )
            deadline = time.monotonic() + timeout
            while process.poll() is None and time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                except OSError:
                    time.sleep(0.1)
                    continue
                self._process = process
                self.endpoint_url = f"http://127.0.0.1:{port}"
                return
            process.kill()
            process.wait()
        raise RuntimeError(f"moto server process did not start on 127.0.0.1 after {tries} tries")

    def _create_bucket(self) -> None:
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        client.create_bucket(Bucket=self.bucket)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None

    @property
    def storage_options(self) -> dict[str, Any]:
        """fsspec/s3fs options pointing at this server (a fresh copy each time)."""
        return copy.deepcopy(
            {
                "endpoint_url": self.endpoint_url,
                "key": "testing",
                "secret": "testing",
                "client_kwargs": {"region_name": "us-east-1"},
            }
        )

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}"

    def namespace(self, name: str | None = None) -> tuple[str, dict[str, Any]]:
        """A fresh, empty namespace: ``(url, storage_options)`` under a unique prefix."""
        with self._lock:
            n = next(self._counter)
        prefix = f"{name or 'ns'}-{n:05d}-{uuid.uuid4().hex[:8]}"
        return f"{self.url}/{prefix}", self.storage_options

    def __enter__(self) -> MotoS3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def moto_s3_server(bucket: str = "tgb-test", *, separate_process: bool = False) -> Iterator[MotoS3Server]:
    """Dummy AWS environment + a started :class:`MotoS3Server`; stopped on exit."""
    with dummy_aws_env(), MotoS3Server(bucket, separate_process=separate_process) as server:
        yield server
