"""``EntryTable``: a version's TGB entries as columns, and their columnar JSON (manifest format 2).

A reader keeps hundreds of parsed versions of up to 8,192 entries each; a
``TGBEntry`` dataclass per entry costs about 1 KB of Python objects, so
entries are held as one ``int64`` array of their numbers (72 bytes an entry
with the key index) and the distinct object keys and producer ids of the
version (a segment's entries share one key). A :class:`TGBEntry` is built
only when one is asked for.

Format 2 writes the same columns as JSON::

    "entries": {"keys": [k0, k1, ...], "pids": [p0, ...],
                "key": [i, ...], "pid": [j, ...], "offset": [...], "start": [...], "size": [...],
                "footer_offset": [...], "footer_length": [...], "object_size": [...],
                "samples": [...], "tokens": [...], "slice_record": [...], "control": [...]}

(``object_size`` 0: the object is exactly ``size`` bytes; ``slice_record`` and
``control`` may be absent, all 0, and ``control`` is written only when an
entry of the version has one). Every column is
checked on parse: integers, non-negative, of equal length, indices in
range, and each entry's byte ranges as :meth:`TGBEntry.validate` checks
them, vectorised.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, cast, overload

import numpy as np

from torch_tgb.errors import ManifestError
from torch_tgb.format import MAX_FOOTER_BYTES
from torch_tgb.manifest._entry import MIN_SLICE_RECORD, TGBEntry, check_data_key, check_producer
from torch_tgb.manifest._json import Fields

__all__ = ["EntryTable"]

#: the numeric columns, in the order of the table's array
COLUMNS = ("offset", "start", "size", "footer_offset", "footer_length", "object_size", "samples", "tokens",
           "slice_record", "control")
#: columns a version may leave out (all 0): written by later writers only
OPTIONAL = ("slice_record", "control")
_OFFSET, _START, _SIZE, _FOOTER_OFFSET, _FOOTER_LENGTH, _OBJECT_SIZE, _SAMPLES, _TOKENS, _RECORD, _CONTROL = \
    range(len(COLUMNS))
_INT64_MAX = (1 << 63) - 1
_new = object.__new__


class EntryTable(Sequence[TGBEntry]):
    """The entries of one version, in step order, as columns. Immutable."""

    __slots__ = ("_keys", "_pids", "_key", "_pid", "_numbers")

    def __init__(self, keys: Sequence[str], pids: Sequence[str], key: np.ndarray, pid: np.ndarray,
                 numbers: np.ndarray) -> None:
        self._keys = tuple(keys)
        self._pids = tuple(pids)
        self._key = key
        self._pid = pid
        self._numbers = numbers
        for array in (key, pid, numbers):
            array.setflags(write=False)

    @classmethod
    def of(cls, entries: Sequence[TGBEntry]) -> EntryTable:
        """The table of ``entries`` (already validated)."""
        if isinstance(entries, EntryTable):
            return entries
        keys: dict[str, int] = {}
        pids: dict[str, int] = {}
        n = len(entries)
        key = np.fromiter((keys.setdefault(e.key, len(keys)) for e in entries), dtype=np.int32, count=n)
        pid = np.fromiter((pids.setdefault(e.producer, len(pids)) for e in entries), dtype=np.int32, count=n)
        numbers = np.array([(e.offset, e.start, e.size, e.footer_offset, e.footer_length, e.object_size or 0,
                             e.samples, e.tokens, e.slice_record, e.control) for e in entries],
                           dtype=np.int64).reshape(n, len(COLUMNS))
        return cls(list(keys), list(pids), key, pid, numbers)

    # --- the Sequence --------------------------------------------------------

    def __len__(self) -> int:
        return len(self._numbers)

    @overload
    def __getitem__(self, index: int) -> TGBEntry: ...

    @overload
    def __getitem__(self, index: slice) -> list[TGBEntry]: ...

    def __getitem__(self, index: int | slice) -> TGBEntry | list[TGBEntry]:
        if isinstance(index, slice):
            return [self._entry(i) for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"entry {index} of {n}")
        return self._entry(index)

    def __iter__(self) -> Iterator[TGBEntry]:
        return (self._entry(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EntryTable):
            return list(self) == list(other)
        if isinstance(other, (tuple, list)):
            return list(self) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"EntryTable({len(self)} entries, {len(self._keys)} objects)"

    def _entry(self, i: int) -> TGBEntry:
        offset, start, size, footer_offset, footer_length, object_size, samples, tokens, record, control = \
            self._numbers[i].tolist()
        entry = _new(TGBEntry)
        entry.__dict__.update(
            key=self._keys[self._key[i]], size=size, footer_offset=footer_offset, footer_length=footer_length,
            producer=self._pids[self._pid[i]], offset=offset, samples=samples, tokens=tokens, start=start,
            object_size=object_size or None, slice_record=record, control=control,
        )
        return cast(TGBEntry, entry)

    # --- columns -------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes held by the table's arrays (its keys and producer ids not counted)."""
        return int(self._numbers.nbytes + self._key.nbytes + self._pid.nbytes)

    def column(self, name: str) -> np.ndarray:
        """One numeric column (read-only), e.g. ``"tokens"``."""
        return cast(np.ndarray, self._numbers[:, COLUMNS.index(name)])

    def producers(self) -> tuple[str, ...]:
        """The producer ids of this version's entries, each once, in order of first entry."""
        return self._pids

    # --- JSON (format 2) -------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"keys": list(self._keys), "pids": list(self._pids),
                               "key": self._key.tolist(), "pid": self._pid.tolist()}
        for c, name in enumerate(COLUMNS):
            if name == "control" and not self._numbers[:, c].any():
                continue  # no control record shaped these TGBs: the version reads as older writers wrote it
            out[name] = self._numbers[:, c].tolist()
        return out

    @classmethod
    def from_json(cls, obj: object, *, what: str) -> EntryTable:
        """Parse and validate columnar entries; a :class:`ManifestError` names ``what`` and the entry."""
        f = Fields(obj, what=f"{what} entries")
        keys, pids = f.array("keys"), f.array("pids")
        if not all(type(k) is str for k in keys) or not all(type(p) is str for p in pids):
            raise ManifestError(f"{what}: entries' keys and pids must be strings")
        key = _ints(f.array("key"), "key", what)
        pid = _ints(f.array("pid"), "pid", what)
        n = len(key)
        columns = [_ints(f.array(name), name, what) for name in COLUMNS if name not in OPTIONAL]
        for name in OPTIONAL:
            values = f.optional_array(name)
            columns.append(_ints(values, name, what) if values is not None else np.zeros(len(key), np.int64))
        f.done()
        if len(pid) != n or any(len(c) != n for c in columns):
            raise ManifestError(f"{what}: entries' columns differ in length")
        if n and (key.max() >= len(keys) or pid.max() >= len(pids)):
            raise ManifestError(f"{what}: an entry names a key or producer index out of range")
        for k in keys:  # once per object and producer: the entries of a segment share them
            check_data_key(k, what=what)
        for p in pids:
            check_producer(p, what=what)
        numbers = np.stack(columns, axis=1) if n else np.empty((0, len(COLUMNS)), dtype=np.int64)
        table = cls(keys, pids, key.astype(np.int32), pid.astype(np.int32), numbers)
        table._check_ranges(what)
        return table

    def _check_ranges(self, what: str) -> None:
        """What :meth:`TGBEntry.validate` checks of each entry's numbers, vectorised; the first bad entry is named."""
        if not len(self):
            return
        v = self._numbers
        start, size, fo, fl, osize = v[:, _START], v[:, _SIZE], v[:, _FOOTER_OFFSET], v[:, _FOOTER_LENGTH], v[:, _OBJECT_SIZE]
        record = v[:, _RECORD]
        bad = (fl > MAX_FOOTER_BYTES) | (start > fo) | ((osize != 0) & (osize < size)) | (fo > size - fl)
        bad |= (record != 0) & ((record < MIN_SLICE_RECORD) | (record > fl))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            self._entry(i).validate(what=f"{what} entry {i}")  # words the error
            raise ManifestError(f"{what} entry {i}: byte ranges do not fit")  # pragma: no cover - validate raised


def _ints(values: list[Any], name: str, what: str) -> np.ndarray:
    """``values`` as int64, each a JSON integer in ``[0, 2**63)`` (no bool, no float)."""
    if not set(map(type, values)) <= {int}:
        raise ManifestError(f"{what}: entries' column {name!r} must hold integers")
    try:
        array = np.asarray(values, dtype=np.int64) if values else np.empty(0, dtype=np.int64)
    except OverflowError as e:
        raise ManifestError(f"{what}: entries' column {name!r} holds an integer out of range") from e
    if len(array) and array.min() < 0:
        raise ManifestError(f"{what}: entries' column {name!r} holds a negative number")
    return array
