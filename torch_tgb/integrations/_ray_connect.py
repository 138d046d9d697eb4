"""Connecting a driver to Ray, failing fast and clearly when the cluster is not there.

``ray.init(address="host:port")`` on an address nobody listens on retries for
minutes; a fleet first checks with a plain TCP connection (a few seconds) and
names the address it could not reach.
"""

from __future__ import annotations

import socket
from types import ModuleType

from torch_tgb.errors import FleetError

__all__ = ["check_reachable", "connect"]


def _host_port(address: str) -> tuple[str, int]:
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise FleetError(f"Ray address {address!r} is not 'host:port', 'ray://host:port', 'auto' or 'local'")
    return host, int(port)


def check_reachable(address: str, *, timeout_s: float) -> None:
    """Raise :class:`FleetError` unless something accepts TCP connections at ``address``."""
    host, port = _host_port(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as e:
        raise FleetError(f"cannot reach the Ray cluster at {address!r} within {timeout_s:g} s: {e}") from e


def connect(ray: ModuleType, address: str | None, *, timeout_s: float) -> bool:
    """Connect to Ray; returns True when this call started the connection (the caller shuts it down).

    ``None``: the running connection, else ``ray.init()`` (which honours
    ``RAY_ADDRESS``, else starts a local cluster); ``"local"``: a new local
    cluster; ``"auto"``: the cluster on this machine; ``host:port`` or
    ``ray://host:port``: that cluster, checked first.
    """
    if address is not None and address not in ("local", "auto"):
        check_reachable(address, timeout_s=timeout_s)
    if ray.is_initialized():
        if address is not None:
            raise FleetError(
                f"Ray is already initialised in this process; pass address=None to use that connection, "
                f"not address={address!r}"
            )
        return False
    if address is None:
        ray.init(include_dashboard=False)
        return True
    if address == "local":
        ray.init(address="local", include_dashboard=False)
        return True
    try:
        ray.init(address=address)
    except (ConnectionError, RuntimeError) as e:
        raise FleetError(f"cannot connect to the Ray cluster at {address!r}: {e}") from e
    return True
