"""Bounded JSON for metadata objects: size and depth limits, typed field access.

Every manifest object is read by every rank, so a reader must never be made to
allocate without bound or recurse without bound by what it finds in storage.
Parsing failures become :class:`ManifestError` naming the object.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NoReturn

from torch_tgb.errors import ManifestError

__all__ = ["MAX_DATASET_BYTES", "MAX_DEPTH", "MAX_METADATA_BYTES", "dump_json", "load_json", "Fields"]

#: largest metadata object (a version, a snapshot or one of its parts) a reader accepts
MAX_METADATA_BYTES = 8 * 1024 * 1024
#: largest ``_tgb/dataset.json`` a reader accepts (every rank reads it at start)
MAX_DATASET_BYTES = 1024 * 1024
#: deepest nesting of containers a reader accepts (real objects need 4)
MAX_DEPTH = 16


def dump_json(value: Mapping[str, Any]) -> bytes:
    """Canonical compact JSON (sorted keys) so equal content gives equal bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def load_json(
    data: bytes, *, what: str, max_bytes: int = MAX_METADATA_BYTES, flat: str | None = None,
    max_depth: int = MAX_DEPTH,
) -> dict[str, Any]:
    """Parse ``data`` as a JSON object; ``what`` names it in errors.

    Containers nested deeper than ``max_depth`` (:data:`MAX_DEPTH`) are refused, except inside
    the top-level field ``flat``: its caller checks each of its items to be an
    object of scalars (a version's thousands of entries, not walked twice).
    """
    if len(data) > max_bytes:
        raise ManifestError(f"{what}: {len(data)} bytes exceeds the metadata limit of {max_bytes}")
    try:
        value = json.loads(data, parse_constant=_reject_constant)
    except RecursionError as e:
        raise ManifestError(f"{what}: JSON nested too deeply") from e
    except (ValueError, UnicodeDecodeError) as e:
        raise ManifestError(f"{what}: not valid JSON: {e}") from e
    if not isinstance(value, dict):
        raise ManifestError(f"{what}: expected a JSON object, got {type(value).__name__}")
    # a path nests no deeper than the brackets that open containers, counted with any inside strings
    if not isinstance(data, bytes) or data.count(b"[") + data.count(b"{") > max_depth:
        _check_depth(value if flat is None else {k: v for k, v in value.items() if k != flat}, what, max_depth)
    return value


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"non-finite number {name} is not allowed")


def _check_depth(value: object, what: str, max_depth: int) -> None:
    # Iterative walk: a recursive one could itself be driven into RecursionError.
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            raise ManifestError(f"{what}: JSON nested deeper than {max_depth} levels")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item if isinstance(v, (dict, list)))


class Fields:
    """Typed, exhaustive access to one JSON object's fields.

    ``done()`` rejects fields nobody asked for, so a typo or a foreign object
    fails loud instead of being half-understood.
    """

    def __init__(self, obj: object, *, what: str) -> None:
        if not isinstance(obj, dict):
            raise ManifestError(f"{what}: expected an object, got {type(obj).__name__}")
        self._obj: dict[str, Any] = obj
        self._seen: set[str] = set()
        self.what = what

    def _get(self, name: str, default: object, required: bool) -> object:
        self._seen.add(name)
        if name not in self._obj:
            if required:
                raise ManifestError(f"{self.what}: missing field {name!r}")
            return default
        return self._obj[name]

    def integer(self, name: str, *, minimum: int = 0, default: int | None = None) -> int:
        value = self._get(name, default, default is None)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ManifestError(f"{self.what}: field {name!r} must be an integer, got {value!r}")
        if value < minimum:
            raise ManifestError(f"{self.what}: field {name!r}={value} must be >= {minimum}")
        return value

    def number(self, name: str, *, default: float | None = None) -> float:
        value = self._get(name, default, default is None)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ManifestError(f"{self.what}: field {name!r} must be a number, got {value!r}")
        return float(value)

    def string(self, name: str, *, default: str | None = None) -> str:
        value = self._get(name, default, default is None)
        if not isinstance(value, str):
            raise ManifestError(f"{self.what}: field {name!r} must be a string, got {value!r}")
        return value

    def boolean(self, name: str, *, default: bool | None = None) -> bool:
        value = self._get(name, default, default is None)
        if not isinstance(value, bool):
            raise ManifestError(f"{self.what}: field {name!r} must be true or false, got {value!r}")
        return value

    def array(self, name: str) -> list[Any]:
        value = self._get(name, None, True)
        if not isinstance(value, list):
            raise ManifestError(f"{self.what}: field {name!r} must be a list, got {type(value).__name__}")
        return value

    def optional_array(self, name: str) -> list[Any] | None:
        """A list field that may be absent (``None``); present, it must be a list."""
        if name not in self._obj:
            self._seen.add(name)
            return None
        return self.array(name)

    def mapping(self, name: str, *, default: dict[str, Any] | None = None) -> dict[str, Any]:
        value = self._get(name, default, default is None)
        if not isinstance(value, dict):
            raise ManifestError(f"{self.what}: field {name!r} must be an object, got {type(value).__name__}")
        return value

    def optional_mapping(self, name: str) -> dict[str, Any] | None:
        """An object field that may be absent (``None``); present, it must be an object."""
        if name not in self._obj:
            self._seen.add(name)
            return None
        return self.mapping(name)

    def has(self, name: str) -> bool:
        """Whether the object has field ``name`` (objects of two kinds that share a key space)."""
        return name in self._obj

    def done(self) -> None:
        extra = sorted(set(self._obj) - self._seen)
        if extra:
            raise ManifestError(f"{self.what}: unknown field(s) {extra}")
