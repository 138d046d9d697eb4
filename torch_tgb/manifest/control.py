"""Control records: the trainer steers the producers' mixture through the namespace, replayably.

Objects (see docs/protocol.md, "Control records")::

    _tgb/control/mix.json                 {"format": "tgb-control/1", "block": B}       conditional create, once
    _tgb/control/mix/<start:020d>.json    the block of producer steps [start, start + B), start = b * B:
                                          a record  {"format", "block", "step": k, "weights": {...}, "note", "by", "time"}
                                          or a claim {"format", "block", "claimed_by", "time"}: no change in it
    _tgb/control/trainer.json             the trainer's latest status (a plain put; fleets read it to scale)

**Why blocks.** A record must take effect at the same producer step in every
run, a restarted one included, so a producer may not produce a step before it
knows every record that could apply there. Both sides meet on one object per
block, each with a conditional create: a producer entering block ``b`` reads
its object, or creates a *claim* (no record in this block) if there is none;
the trainer creates the *record* of block ``b``. Whoever creates the object
first decides the block for everyone, for good (objects are immutable). A
trainer that finds its block claimed (the producers have passed it) moves the
record to the first free block after (:meth:`ControlChannel.set_mix` returns
the step it got) or, with ``later=False``, raises :class:`ControlConflict`.

**Versions.** Records are numbered 1, 2, ... in step order (the order
producers meet them); version 0 is "no record yet" (the ``Mix`` schedule).
Each TGB's manifest entry carries the version in force when it was made
(``TGBEntry.control``).
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from torch_tgb.errors import ControlConflict, ManifestError, ObjectNotFound, TGBError
from torch_tgb.manifest._json import Fields, dump_json, load_json
from torch_tgb.manifest._search import probe_newest
from torch_tgb.storage import ObjectStore, open_store

__all__ = [
    "CONTROL_PREFIX",
    "DEFAULT_BLOCK",
    "MIX_CONFIG_KEY",
    "MIX_PREFIX",
    "TRAINER_KEY",
    "ControlChannel",
    "ControlConflict",
    "MixRecord",
    "TrainerStatus",
    "mix_block_key",
]

CONTROL_PREFIX = "_tgb/control/"
MIX_CONFIG_KEY = "_tgb/control/mix.json"
MIX_PREFIX = "_tgb/control/mix/"
TRAINER_KEY = "_tgb/control/trainer.json"
_FORMAT = "tgb-control/1"
#: producer steps per control block: a producer reads (or claims) one object per block
DEFAULT_BLOCK = 16
#: most bytes of a control object a reader accepts (weights of a few hundred sources)
_MAX_BYTES = 256 << 10
#: most sources one record may weigh
MAX_SOURCES = 4096


def mix_block_key(start: int) -> str:
    """The object of the block of producer steps starting at ``start`` (a multiple of the block size)."""
    return f"{MIX_PREFIX}{start:020d}.json"


def _check_weights(weights: Mapping[str, Any], *, what: str) -> dict[str, float]:
    """Weights as the manifest floor can judge them: names, finite non-negative numbers, not all zero.

    Whether the names are the producers' sources is for the ``Mix`` to say
    (``transforms.check_weights``); ``ControlChannel.set_mix(sources=)`` checks it before writing.
    """
    if not isinstance(weights, Mapping) or not weights:
        raise ManifestError(f"{what}: weights must be a non-empty mapping name -> weight, got {weights!r}")
    if len(weights) > MAX_SOURCES:
        raise ManifestError(f"{what}: {len(weights)} weights exceed {MAX_SOURCES} sources")
    out = {}
    for name, value in weights.items():
        if not isinstance(name, str) or not name:
            raise ManifestError(f"{what}: a source name must be a non-empty string, got {name!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ManifestError(f"{what}: weight of {name!r} must be a finite number >= 0, got {value!r}")
        out[name] = float(value)
    if not any(out.values()):
        raise ManifestError(f"{what}: weights are all zero: {out}")
    return out


@dataclass(frozen=True)
class MixRecord:
    """New mixture ``weights`` from producer step ``step`` on (until the next record)."""

    step: int
    weights: Mapping[str, float]
    note: str = ""
    by: str = ""
    time: float = 0.0

    def to_json(self, block: int) -> dict[str, Any]:
        return {"format": _FORMAT, "block": block, "step": self.step, "weights": dict(self.weights),
                "note": self.note[:1000], "by": self.by, "time": self.time}


@dataclass(frozen=True)
class TrainerStatus:
    """What the trainer last reported: its step, the fraction of wall time it waited for data, when."""

    step: int
    stall: float
    time: float
    by: str = ""
    #: anything else the trainer wants fleets or dashboards to see (numbers only)
    extra: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"format": _FORMAT, "step": self.step, "stall": self.stall, "time": self.time, "by": self.by,
                "extra": dict(self.extra)}


def parse_block(data: bytes, *, start: int, block: int, what: str) -> MixRecord | None:
    """The record in a block's object, or ``None`` for a claim; :class:`ManifestError` for anything else."""
    f = Fields(load_json(data, what=what, max_bytes=_MAX_BYTES), what=what)
    if f.string("format") != _FORMAT:
        raise ManifestError(f"{what}: not a control record (format {_FORMAT!r} expected)")
    if f.integer("block") != start:
        raise ManifestError(f"{what}: the object names block {f.integer('block')}, its key block {start}")
    if f.has("claimed_by"):  # a claim: the block holds no record
        f.string("claimed_by")
        f.number("time", default=0.0)
        f.done()
        return None
    step = f.integer("step")
    if not start <= step < start + block:
        raise ManifestError(f"{what}: record step={step} lies outside its block [{start}, {start + block})")
    record = MixRecord(step, _check_weights(f.mapping("weights"), what=what), f.string("note", default=""),
                       f.string("by", default=""), f.number("time", default=0.0))
    f.done()
    return record


class ControlChannel:
    """The namespace's control records: the trainer writes them, producers (``Mix(control=)``) read them.

    ``ns`` is a namespace URL or an open store (``storage_options`` open a URL).
    ``block``: producer steps per control block, fixed for the namespace by
    whoever opens its channel first (``None``: the namespace's, or
    :data:`DEFAULT_BLOCK`); a different one is refused. Picklable (a Ray actor
    builds its pipeline with it): the store is opened where it is used.
    """

    def __init__(self, ns: str | ObjectStore, *, storage_options: Mapping[str, Any] | None = None,
                 block: int | None = None) -> None:
        if block is not None and (isinstance(block, bool) or not isinstance(block, int) or block < 1):
            raise ValueError(f"block={block!r} must be an int >= 1")
        self.ns = ns
        self.storage_options = dict(storage_options or {})
        self._block = block
        self._fixed: int | None = None
        self._store: ObjectStore | None = ns if isinstance(ns, ObjectStore) else None

    def __getstate__(self) -> dict[str, Any]:
        if isinstance(self.ns, ObjectStore):
            raise TypeError("a ControlChannel over an open store cannot be pickled: pass the namespace URL")
        return {**self.__dict__, "_store": None}

    @property
    def store(self) -> ObjectStore:
        if self._store is None:
            self._store = open_store(self.ns, self.storage_options or None)
        return self._store

    @property
    def url(self) -> str:
        return self.store.url

    def close(self) -> None:
        """Close a store this channel opened (one handed in stays open)."""
        if self._store is not None and not isinstance(self.ns, ObjectStore):
            self._store.close()
            self._store = None

    # --- the block size --------------------------------------------------------------

    @property
    def block(self) -> int:
        """Producer steps per block, as the namespace fixes it (created with this channel's ``block`` if new)."""
        if self._fixed is None:
            self._fixed = self._read_block_size()
        return self._fixed

    def _read_block_size(self) -> int:
        what = f"{self.url}/{MIX_CONFIG_KEY}"
        want = self._block or DEFAULT_BLOCK
        if not self.store.put_if_absent(MIX_CONFIG_KEY, dump_json({"format": _FORMAT, "block": want})):
            f = Fields(load_json(self.store.get(MIX_CONFIG_KEY), what=what, max_bytes=_MAX_BYTES), what=what)
            if f.string("format") != _FORMAT:
                raise ManifestError(f"{what}: not a control configuration")
            have = f.integer("block", minimum=1)
            f.done()
            if self._block is not None and have != self._block:
                raise ManifestError(f"{what}: the namespace's control block is {have} steps, this channel asks "
                                    f"block={self._block}: leave block out, or pass {have}")
            return have
        return want

    # --- producers ----------------------------------------------------------------------

    def read_block(self, index: int, *, claimant: str) -> MixRecord | None:
        """The record of block ``index`` (``None``: none, and now none can come), claiming it if it is new.

        Call it before producing any step of the block: once this returns, the
        block's content is fixed for every producer and every rerun.
        """
        if index < 0:
            raise ValueError(f"block index {index} must be >= 0")
        start = index * self.block
        key = mix_block_key(start)
        claim = {"format": _FORMAT, "block": start, "claimed_by": claimant[:200], "time": time.time()}
        try:
            data = self.store.get(key)
        except ObjectNotFound:
            if self.store.put_if_absent(key, dump_json(claim)):
                return None
            data = self.store.get(key)  # the trainer's record (or another producer's claim) won the race
        return parse_block(data, start=start, block=self.block, what=f"{self.url}/{key}")

    # --- the trainer --------------------------------------------------------------------

    def set_mix(
        self, weights: Mapping[str, float], *, step: int, note: str = "", sources: list[str] | None = None,
        later: bool = True,
    ) -> MixRecord:
        """Write new mixture ``weights`` from producer step ``step`` on; returns the record as written.

        Call it from one process (rank 0). If the producers have already entered
        that step's block, the record goes to the first free block after it
        (its ``step`` says where) unless ``later=False``, which raises
        :class:`ControlConflict`. ``sources``: the producers' source names, to
        refuse a name they do not have now rather than stop them later.
        """
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step={step!r} must be an int >= 0")
        what = f"{self.url}: control record at {step=}"
        weights = _check_weights(weights, what=what)
        if sources is not None:
            unknown = sorted(set(weights) - set(sources))
            if unknown:
                raise ManifestError(f"{what}: weights name {unknown}, which are not sources {sorted(sources)}")
        by = socket.gethostname()
        index = step // self.block
        first = index
        while True:
            start = index * self.block
            record = MixRecord(max(step, start), weights, note, by, time.time())
            if self.store.put_if_absent(mix_block_key(start), dump_json(record.to_json(start))):
                return record
            if not later:
                raise ControlConflict(
                    f"{what}: block [{start}, {start + self.block}) already holds a claim or a record (the "
                    "producers have reached it): pass a later step, or later=True to take the first free block"
                )
            # every block the producers passed exists: find the first missing one after this one
            index = probe_newest(index, lambda b: self.store.exists(mix_block_key(b * self.block))) + 1
            if index - first > 1 << 40:  # pragma: no cover - a namespace of absurd length
                raise TGBError(f"{what}: no free control block found")

    def mix_records(self) -> list[tuple[int, MixRecord]]:
        """Every record with its version (1, 2, ... in step order): one LIST, a read per block object."""
        out: list[tuple[int, MixRecord]] = []
        keys = sorted(k for k in self.store.list(MIX_PREFIX) if k.endswith(".json"))
        for key in keys:
            name = key[len(MIX_PREFIX) : -len(".json")]
            if not name.isdigit():
                continue
            start = int(name)
            try:
                data = self.store.get(key)
            except ObjectNotFound:
                continue
            record = parse_block(data, start=start, block=self.block, what=f"{self.url}/{key}")
            if record is not None:
                out.append((len(out) + 1, record))
        return out

    def report_trainer(self, *, step: int, stall: float, extra: Mapping[str, float] | None = None) -> TrainerStatus:
        """Publish the trainer's step and stall fraction (0..1) for autoscaling fleets; overwrites the last."""
        if not 0.0 <= stall <= 1.0 or not math.isfinite(stall):
            raise ValueError(f"stall={stall!r} must be a fraction in [0, 1]")
        status = TrainerStatus(int(step), float(stall), time.time(), socket.gethostname(),
                               {k: float(v) for k, v in (extra or {}).items()})
        self.store.put(TRAINER_KEY, dump_json(status.to_json()))
        return status

    def trainer_status(self) -> TrainerStatus | None:
        """The trainer's last report, or ``None`` if it never reported."""
        try:
            data = self.store.get(TRAINER_KEY)
        except ObjectNotFound:
            return None
        what = f"{self.url}/{TRAINER_KEY}"
        f = Fields(load_json(data, what=what, max_bytes=_MAX_BYTES), what=what)
        if f.string("format") != _FORMAT:
            raise ManifestError(f"{what}: not a trainer status")
        extra = f.mapping("extra", default={})
        status = TrainerStatus(f.integer("step"), f.number("stall"), f.number("time"), f.string("by", default=""),
                               {str(k): float(v) for k, v in extra.items() if isinstance(v, (int, float))})
        f.done()
        return status
