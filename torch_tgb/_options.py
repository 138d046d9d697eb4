"""Options objects: frozen dataclasses whose fields may also be passed as keyword arguments."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = ["with_fields"]

_T = TypeVar("_T")


def with_fields(value: _T, settings: Mapping[str, object], what: str) -> _T:
    """``value`` (a dataclass) with ``settings`` (field name -> value) replacing fields.

    An unknown name is a TypeError naming ``what`` and the fields there are.
    """
    if not settings:
        return value
    fields = {f.name for f in dataclasses.fields(value)}  # type: ignore[arg-type]  # a dataclass instance
    unknown = sorted(set(settings) - fields)
    if unknown:
        raise TypeError(f"unknown {what} option(s) {unknown}; {type(value).__name__} has {sorted(fields)}")
    changes: dict[str, Any] = dict(settings)
    return dataclasses.replace(value, **changes)  # type: ignore[type-var]  # a dataclass instance
