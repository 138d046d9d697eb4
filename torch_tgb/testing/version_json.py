"""Reading and editing one entry of a version's JSON in either manifest format (for tests that tamper with logs).

Format 1 writes ``entries`` as a list of objects, format 2 as columns
(``manifest/_entries.py``); a test that plants a hostile field goes through
these so it exercises whichever format the code under test wrote.
"""

from __future__ import annotations

from typing import Any

__all__ = ["append_entry", "entry_count", "get_entry", "get_entry_field", "set_entry", "set_entry_field"]

_NAMED = {"key": ("key", "keys"), "producer": ("pid", "pids")}


def entry_count(version: dict[str, Any]) -> int:
    entries = version["entries"]
    return len(entries) if isinstance(entries, list) else len(entries["offset"])


def get_entry_field(version: dict[str, Any], index: int, field: str) -> Any:
    """Field ``field`` of entry ``index`` (``key``, ``size``, ``footer_length``, ...)."""
    entries = version["entries"]
    if isinstance(entries, list):
        return entries[index][field]
    if field in _NAMED:
        column, names = _NAMED[field]
        return entries[names][entries[column][index]]
    if field not in entries:  # a column written versions ago did not exist yet
        return 0
    return entries[field][index]


def set_entry_field(version: dict[str, Any], index: int, field: str, value: Any) -> None:
    """Set field ``field`` of entry ``index`` to ``value`` (a key or producer id only for that entry)."""
    entries = version["entries"]
    if isinstance(entries, list):
        if field in ("start", "object_size", "slice_record", "control") and not value:
            entries[index].pop(field, None)  # format 1 omits them when 0
        else:
            entries[index][field] = value
        return
    if field in _NAMED:
        column, names = _NAMED[field]
        entries[names].append(value)
        entries[column][index] = len(entries[names]) - 1
        return
    if field not in entries:  # an optional column (all 0) the version does not write
        if not value:
            return
        entries[field] = [0] * len(entries["offset"])
    entries[field][index] = value


#: every field of an entry, as format 1 names them
FIELDS = ("key", "size", "footer_offset", "footer_length", "producer", "offset", "samples", "tokens", "start",
          "object_size", "slice_record", "control")


def get_entry(version: dict[str, Any], index: int) -> dict[str, Any]:
    """Entry ``index`` as a format-1 object (every field; ``start``/``object_size`` 0 when absent)."""
    entries = version["entries"]
    if isinstance(entries, list):
        return {"start": 0, "object_size": 0, "slice_record": 0, "control": 0, **entries[index]}
    return {field: get_entry_field(version, index, field) for field in FIELDS}


def set_entry(version: dict[str, Any], index: int, entry: dict[str, Any]) -> None:
    """Replace entry ``index`` by ``entry`` (a :func:`get_entry` object)."""
    for field, value in entry.items():
        set_entry_field(version, index, field, value)


def append_entry(version: dict[str, Any], entry: dict[str, Any]) -> None:
    """Append ``entry`` (a :func:`get_entry` object) to the version's entries."""
    entries = version["entries"]
    if isinstance(entries, list):
        entries.append(dict(entry))
        return
    for column in ("key", "pid", *(f for f in FIELDS if f not in ("key", "producer"))):
        if column in entries:  # an optional column absent stays absent unless the entry sets it
            entries[column].append(0)
    set_entry(version, len(entries["offset"]) - 1, entry)
