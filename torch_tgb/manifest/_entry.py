"""``TGBEntry``: one committed TGB in the manifest log, and its JSON form.

An entry validates on parse: every field present with its type, the object
key inside ``data/`` of the namespace, the footer inside the TGB's bytes.
A well-formed entry (the common case) is decoded by a fast path that
accepts exactly what the field-by-field path accepts.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any, cast

from torch_tgb.errors import InvalidKey, ManifestError
from torch_tgb.format import MAX_FOOTER_BYTES
from torch_tgb.manifest._checks import validate_producer_id
from torch_tgb.manifest._json import Fields
from torch_tgb.storage import validate_key

__all__ = ["DATA_PREFIX", "TGBEntry", "check_data_key", "check_producer"]

DATA_PREFIX = "data/"
#: the narrowest version-3 slice record: a slice row, one tensor row, its CRCs (format/_records.py)
MIN_SLICE_RECORD = 72


@dataclass(frozen=True)
class TGBEntry:
    """One committed TGB. Its step is its position in the log, not stored.

    A TGB occupies bytes ``[start, size)`` of object ``key``: ``size`` is
    where the TGB ends (its trailer's last byte + 1), so
    ``footer_offset + footer_length + TRAILER_SIZE == size`` always holds and
    every offset in its footer is absolute within the object. A one-TGB
    object has ``start == 0`` and ``size`` = the object's size (the only form
    older writers produce: their entries parse unchanged). A *segment*
    object holds several consecutive TGBs of one producer; ``object_size``
    records its total size (``None``: the object is exactly ``size`` bytes).
    ``start`` and ``object_size`` are written to JSON only when they differ
    from those defaults.
    """

    key: str
    size: int
    footer_offset: int
    footer_length: int
    producer: str
    offset: int
    samples: int = 0
    tokens: int = 0
    start: int = 0
    object_size: int | None = None
    #: the width of the TGB's version-3 slice records (0: an older footer, read whole): a rank reads its own
    #: slice's record at ``footer_offset + 32 + index * slice_record`` (``format/_records.py``)
    slice_record: int = 0
    #: the version of the control record in force when the TGB was made (0: none, the mixture's own schedule;
    #: ``manifest/control.py``): which record shaped it, for audits and replays
    control: int = 0

    @property
    def length(self) -> int:
        """Bytes of this TGB (its share of the object)."""
        return self.size - self.start

    @property
    def total_size(self) -> int:
        """Size of the whole object holding this TGB."""
        return self.size if self.object_size is None else self.object_size

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key": self.key,
            "size": self.size,
            "footer_offset": self.footer_offset,
            "footer_length": self.footer_length,
            "producer": self.producer,
            "offset": self.offset,
            "samples": self.samples,
            "tokens": self.tokens,
        }
        if self.start:
            out["start"] = self.start
        if self.object_size is not None:
            out["object_size"] = self.object_size
        if self.slice_record:
            out["slice_record"] = self.slice_record
        if self.control:
            out["control"] = self.control
        return out

    @classmethod
    def from_json(cls, obj: object, *, what: str) -> TGBEntry:
        entry = _entry_fast(obj)  # the common, well-formed case without per-field bookkeeping
        if entry is None:
            entry = cls._from_fields(obj, what=what)  # anything else: checked field by field, worded
        entry.validate(what=what)
        return entry

    @classmethod
    def from_json_list(cls, items: Sequence[object], *, what: str) -> tuple[TGBEntry, ...]:
        """:meth:`from_json` of each item (a version's ``entries``); an error names ``what`` and the item's index.

        The message is only formatted for an item that fails: a version holds
        up to thousands of entries, and each reader decodes every one.
        """
        out = []
        try:
            for obj in items:
                entry = _entry_fast(obj)
                if entry is None:
                    break
                entry.validate(what=what)
                out.append(entry)
            else:
                return tuple(out)
        except ManifestError:
            pass
        # an item left the fast path: decode them all field by field, an error worded with its item's index
        return tuple(cls.from_json(obj, what=f"{what} entry {i}") for i, obj in enumerate(items))

    @classmethod
    def _from_fields(cls, obj: object, *, what: str) -> TGBEntry:
        f = Fields(obj, what=what)
        entry = cls(
            key=f.string("key"),
            size=f.integer("size"),
            footer_offset=f.integer("footer_offset"),
            footer_length=f.integer("footer_length"),
            producer=f.string("producer"),
            offset=f.integer("offset"),
            samples=f.integer("samples", default=0),
            tokens=f.integer("tokens", default=0),
            start=f.integer("start", default=0),
            object_size=f.integer("object_size", default=0) or None,  # no object has 0 bytes
            slice_record=f.integer("slice_record", default=0),
            control=f.integer("control", default=0),
        )
        f.done()
        return entry

    def validate(self, *, what: str) -> None:
        """Raise :class:`ManifestError` unless the entry is well-formed and inside the namespace."""
        if not _names_ok(self.key, self.producer):  # checked once per distinct pair; worded here
            check_data_key(self.key, what=what)
            check_producer(self.producer, what=what)
        if self.footer_length > MAX_FOOTER_BYTES:
            raise ManifestError(
                f"{what}: footer_length={self.footer_length} exceeds {MAX_FOOTER_BYTES} bytes (key {self.key!r})"
            )
        if not (0 <= self.start <= self.footer_offset) or (
            self.object_size is not None and self.object_size < self.size
        ):
            raise ManifestError(
                f"{what}: TGB [{self.start}, {self.size}) with footer at {self.footer_offset} does not fit "
                f"in object {self.key!r} of {self.total_size} bytes"
            )
        if self.slice_record and not MIN_SLICE_RECORD <= self.slice_record <= self.footer_length:
            raise ManifestError(
                f"{what}: slice_record={self.slice_record} cannot be a slice record of a footer of "
                f"{self.footer_length} bytes (key {self.key!r})"
            )
        if self.footer_offset + self.footer_length > self.size:
            raise ManifestError(
                f"{what}: footer [{self.footer_offset}, {self.footer_offset + self.footer_length}) "
                f"lies outside the object's {self.size} bytes (key {self.key!r})"
            )


def check_data_key(key: str, *, what: str) -> None:
    """:class:`ManifestError` unless ``key`` is a valid object key inside ``data/`` of the namespace."""
    try:
        validate_key(key)
    except InvalidKey as e:
        raise ManifestError(f"{what}: {e}") from e
    if not key.startswith(DATA_PREFIX):
        raise ManifestError(f"{what}: key {key!r} is outside {DATA_PREFIX!r} of the namespace")


def check_producer(producer: str, *, what: str) -> None:
    """:class:`ManifestError` unless ``producer`` is a valid producer id."""
    try:
        validate_producer_id(producer)
    except ValueError as e:
        raise ManifestError(f"{what}: {e}") from e


@functools.lru_cache(maxsize=1024)
def _names_ok(key: str, producer: str) -> bool:
    """Whether ``key`` is a valid key inside ``data/`` and ``producer`` a valid producer id (as ``validate`` checks).

    Entries of one segment share their key and producer: the checks run once per pair, not once per entry
    (:meth:`TGBEntry.validate` words what is wrong when this says False).
    """
    try:
        validate_key(key)
        validate_producer_id(producer)
    except (InvalidKey, ValueError):
        return False
    return key.startswith(DATA_PREFIX)


_ENTRY_FIELDS = frozenset(f.name for f in fields(TGBEntry))  # the JSON keys are the field names (to_json)
_REQUIRED = frozenset(f.name for f in fields(TGBEntry) if f.default is MISSING)
_DEFAULTS = {f.name: f.default for f in fields(TGBEntry) if f.default is not MISSING}
_STRINGS = frozenset({"key", "producer"})
_new = object.__new__


def _entry_fast(obj: object) -> TGBEntry | None:
    """A :class:`TGBEntry` from a well-formed JSON object, or ``None`` (the field-by-field path decides).

    Accepts exactly what ``TGBEntry._from_fields`` accepts and nothing more
    (``tests/manifest/test_entry_decode.py`` holds the two paths to that), so
    only error wording lives in the slow path. The entry's fields are the
    object's own values, set at once (a frozen dataclass's ``__init__`` sets
    them one ``object.__setattr__`` at a time: most of a decode).
    """
    if type(obj) is not dict or not _REQUIRED <= obj.keys() <= _ENTRY_FIELDS:
        return None
    for name, value in obj.items():
        if name in _STRINGS:
            if type(value) is not str:
                return None
        elif type(value) is not int or value < 0:
            return None
    entry = _new(TGBEntry)
    fields_ = entry.__dict__
    fields_.update(_DEFAULTS)
    fields_.update(obj)
    if not fields_["object_size"]:  # 0: absent (no object has 0 bytes)
        fields_["object_size"] = None
    return cast(TGBEntry, entry)
