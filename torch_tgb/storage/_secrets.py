"""Which storage options are secrets: the one list the stores and the ``tgb`` command share.

An option is secret when its name contains one of :data:`SECRET_OPTION_NAMES`
(case-insensitive), at any nesting depth (``client_kwargs.aws_secret_access_key``).
Stores strip the values of secret options (and URL user info) from every
error message; the command line never prints any option value at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

__all__ = ["SECRET_OPTION_NAMES", "is_secret_option", "option_names", "secret_values"]

#: substrings of option names whose values are secrets
SECRET_OPTION_NAMES = (
    "auth", "connection_string", "credential", "key", "passwd", "password", "sas", "secret", "session", "signature",
    "token",
)


def is_secret_option(name: str) -> bool:
    lowered = str(name).lower()
    return any(s in lowered for s in SECRET_OPTION_NAMES)


def option_names(options: Mapping[str, Any] | None, prefix: str = "") -> list[str]:
    """The dotted names of ``options`` (``client_kwargs.region_name``), never their values."""
    names: list[str] = []
    for name, value in (options or {}).items():
        if isinstance(value, Mapping):
            names.extend(option_names(value, f"{prefix}{name}."))
        else:
            names.append(f"{prefix}{name}")
    return names


def secret_values(url: str, options: Mapping[str, Any]) -> tuple[str, ...]:
    """Strings that must never appear in an error message: URL user info, secret options' values."""
    found: list[str] = []
    userinfo = urlsplit(url).netloc.rpartition("@")[0]
    if userinfo:
        found.extend(part for part in (userinfo, *userinfo.split(":")) if len(part) >= 3)

    def walk(value: object, secret: bool) -> None:
        if isinstance(value, Mapping):
            for name, inner in value.items():
                walk(inner, secret or is_secret_option(name))
        elif secret and isinstance(value, str) and len(value) >= 3:
            found.append(value)

    walk(options, False)
    return tuple(sorted(set(found), key=len, reverse=True))
