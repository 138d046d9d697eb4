"""Key validation: every key must name something inside the namespace."""

from __future__ import annotations

import re

from torch_tgb.errors import InvalidKey

__all__ = ["validate_key", "validate_prefix"]

_MAX_KEY_LENGTH = 1024
# Path segments are plain names: no control characters, no backslashes (a
# Windows-style separator would be a second route out of the namespace).
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f\\]")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def validate_key(key: object, *, namespace: str = "") -> str:
    """Return ``key`` if it is a safe relative key, else raise :class:`InvalidKey`.

    Rejected: non-strings, empty keys, absolute paths, URLs (``s3://...``,
    ``file:...``), ``.`` or ``..`` segments, empty segments (``a//b``), a
    trailing slash, control characters and backslashes, and keys longer
    than 1024 characters.
    """
    where = f"namespace {namespace!r}: " if namespace else ""
    if not isinstance(key, str):
        raise InvalidKey(f"{where}key must be a string, got {type(key).__name__}: {key!r}")
    if not key or len(key) > _MAX_KEY_LENGTH:
        raise InvalidKey(f"{where}key {key[:80]!r} must have 1 to {_MAX_KEY_LENGTH} characters")
    if key.startswith("/") or key.startswith("~") or _SCHEME.match(key):
        raise InvalidKey(f"{where}key {key!r} must be relative to the namespace, not absolute or a URL")
    if _BAD_CHARS.search(key):
        raise InvalidKey(f"{where}key {key!r} contains a control character or backslash")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidKey(f"{where}key {key!r} has an empty, '.' or '..' path segment")
    return key


def validate_prefix(prefix: object, *, namespace: str = "") -> str:
    """Like :func:`validate_key` but allows ``""`` and a trailing ``/``."""
    if prefix == "":
        return ""
    if isinstance(prefix, str) and prefix.endswith("/"):
        validate_key(prefix[:-1], namespace=namespace)
        return prefix
    return validate_key(prefix, namespace=namespace)
