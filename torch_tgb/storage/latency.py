"""``LatencyStore``: a *model* of a remote object store on top of a fast one.

Every call waits one round-trip time plus its payload divided by a per-stream
bandwidth, then runs on the inner store. Waits of concurrent calls overlap,
as independent HTTP streams do, so ``get_ranges`` with ``max_in_flight``
requests in flight shows the speed-up a real object store would give. It
models neither server-side throttling nor a shared link limit.

Benchmarks that use it must say so: :meth:`LatencyStore.describe` returns
the line to print ("model: ..."). ``local_path`` is ``None`` so reads cannot
bypass the model through mmap.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from torch_tgb.errors import TGBError
from torch_tgb.storage._base import Buffer, ObjectInfo, ObjectStore
from torch_tgb.storage._wrapper import StoreWrapper

__all__ = ["LatencyStore"]


class LatencyStore(StoreWrapper):
    """Wraps ``inner``; each call costs ``rtt + payload / bandwidth`` seconds.

    ``rtt`` in seconds, ``bandwidth`` in bytes/second per stream (0 = unlimited).
    """

    def __init__(
        self,
        inner: ObjectStore,
        *,
        rtt: float = 0.020,
        bandwidth: float = 100e6,
        max_in_flight: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rtt < 0 or bandwidth < 0:
            raise ValueError(f"LatencyStore needs rtt >= 0 and bandwidth >= 0, got {rtt=}, {bandwidth=}")
        super().__init__(inner)
        self.rtt = rtt
        self.bandwidth = bandwidth
        self.max_in_flight = max_in_flight or inner.max_in_flight
        self._sleep = sleep

    def describe(self) -> str:
        bw = f"{self.bandwidth / 1e6:g} MB/s per stream" if self.bandwidth else "unlimited bandwidth"
        return (
            f"model: LatencyStore over {type(self.inner).__name__}, rtt={self.rtt * 1e3:g} ms, {bw}, "
            f"{self.max_in_flight} streams in flight (a simulation, not a measured remote store)"
        )

    def seconds(self, nbytes: int) -> float:
        """Modelled duration of one call moving ``nbytes``."""
        return self.rtt + (nbytes / self.bandwidth if self.bandwidth else 0.0)

    def _wait(self, nbytes: int) -> None:
        self._sleep(self.seconds(nbytes))

    def get(self, key: str) -> bytes:
        try:
            data = self.inner.get(key)
        except TGBError:
            self._wait(0)  # a 404 or an error reply costs a round trip too
            raise
        self._wait(len(data))
        return data

    def get_range(self, key: str, start: int, end: int) -> bytes:
        try:
            data = self.inner.get_range(key, start, end)
        except TGBError:
            self._wait(0)
            raise
        self._wait(len(data))
        return data

    def stat(self, key: str) -> ObjectInfo:
        self._wait(0)
        return self.inner.stat(key)

    def exists(self, key: str) -> bool:
        self._wait(0)
        return self.inner.exists(key)

    def list(self, prefix: str = "") -> list[str]:
        self._wait(0)
        return self.inner.list(prefix)

    def put(self, key: str, data: Buffer) -> None:
        self._wait(memoryview(data).nbytes)
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: Buffer) -> bool:
        self._wait(memoryview(data).nbytes)
        return self.inner.put_if_absent(key, data)

    def delete(self, keys: str | Iterable[str]) -> None:
        self._wait(0)
        self.inner.delete(keys)

    def local_path(self, key: str) -> str | None:
        return None  # force reads through the model

    def __repr__(self) -> str:
        return f"LatencyStore({self.inner!r}, rtt={self.rtt}, bandwidth={self.bandwidth})"
