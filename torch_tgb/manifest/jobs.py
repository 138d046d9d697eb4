"""Jobs of declared shards: the record a namespace is created with, and the pure rules on it.

A *job* is the set of producers whose work together is the namespace's
stream: ``shards`` shards of one ``prefix`` (shard ``i`` is producer
``<prefix>-shard<i:05d>-of<shards:05d>``, whoever runs it), or an explicit set
of producer ids. It is declared by the version that registers the
namespace's first producer (its start commits a version carrying ``"job"``), so it is
manifest state like any other: written with the same conditional create,
folded by every reader, kept in every snapshot. From then on (``fold``,
``manifest/_state.py``):

- only the job's producers (and the operator's sealer, :data:`SEALER_ID`)
  may appear in a version;
- a shard marked ``done`` stays done: no new epoch, no entry, no other mark;
- a version after which every declared shard is ``done`` is sealed, and a
  version that seals has every declared shard ``done`` -- unless the
  sealer writes it (``tgb seal --force``, an operator's decision).

So the seal means "every declared shard finished", whatever the order the
shards ran and finished in (docs/protocol.md, *Jobs of declared shards*).
Everything here is a pure function of the record and a producers' map.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from torch_tgb.errors import ManifestError
from torch_tgb.manifest._checks import validate_producer_id
from torch_tgb.manifest._json import Fields

__all__ = [
    "MAX_SHARDS",
    "SEALER_ID",
    "JobSpec",
    "describe_missing",
    "missing_shards",
    "parse_shard_producer_id",
    "seals",
    "shard_producer_id",
    "shard_status",
]

#: the producer id under which an operator's seal (``tgb seal``) is committed
SEALER_ID = "tgb-seal"
#: most shards a job may declare (a snapshot holds one producer state per shard)
MAX_SHARDS = 65536

_SHARD_ID = re.compile(r"^(?P<prefix>.+)-shard(?P<index>\d{5,})-of(?P<count>\d{5,})$")


class _Marked(Protocol):
    @property
    def status(self) -> str: ...


def shard_producer_id(prefix: str, index: int, count: int) -> str:
    """The stable producer id of shard ``index`` of ``count``: ``<prefix>-shard00003-of00008``."""
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} is outside 0..{count - 1}")
    return f"{prefix}-shard{index:05d}-of{count:05d}"


def parse_shard_producer_id(producer_id: str) -> tuple[str, int, int] | None:
    """``(prefix, index, count)`` of a shard producer id, or ``None`` for any other id."""
    m = _SHARD_ID.match(producer_id)
    if m is None:
        return None
    return m["prefix"], int(m["index"]), int(m["count"])


@dataclass(frozen=True)
class JobSpec:
    """The producers a namespace's job declares: ``shards`` shards of ``prefix``, or explicit ``producers``.

    Build it with :meth:`sharded` or :meth:`of`. Its JSON (in the version that
    declares it and in every snapshot) is ``{"prefix", "shards"}`` or
    ``{"producers": [...]}``.
    """

    prefix: str | None = None
    shards: int | None = None
    producers: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if (self.producers is None) == (self.prefix is None or self.shards is None):
            if self.producers is None:
                raise ValueError("a job is prefix= and shards=, or producers=")
            raise ValueError("a job is prefix= and shards=, or producers=, not both")
        if self.producers is not None:
            if not self.producers or len(self.producers) > MAX_SHARDS:
                raise ValueError(f"a job declares 1..{MAX_SHARDS} producers, got {len(self.producers)}")
            if len(set(self.producers)) != len(self.producers):
                raise ValueError(f"a job's producers must be distinct, got {list(self.producers)}")
            for pid in self.producers:
                validate_producer_id(pid)
                if pid == SEALER_ID:
                    raise ValueError(f"{SEALER_ID!r} is the operator's sealer, not a producer of a job")
            return
        shards = self.shards
        if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
            raise ValueError(f"shards={shards!r} must be an int in 1..{MAX_SHARDS}")
        assert self.prefix is not None
        validate_producer_id(shard_producer_id(self.prefix, shards - 1, shards))

    @classmethod
    def sharded(cls, prefix: str, shards: int) -> JobSpec:
        """``shards`` shards whose producer ids are ``shard_producer_id(prefix, i, shards)``."""
        return cls(prefix=prefix, shards=shards)

    @classmethod
    def of(cls, producers: Iterable[str]) -> JobSpec:
        """An explicit set of producer ids (kept sorted)."""
        return cls(producers=tuple(sorted(producers)))

    def producer_ids(self) -> tuple[str, ...]:
        """Every declared producer id, in shard order."""
        if self.producers is not None:
            return self.producers
        assert self.prefix is not None and self.shards is not None
        return tuple(shard_producer_id(self.prefix, i, self.shards) for i in range(self.shards))

    def producer_id(self, index: int) -> str:
        """The producer id of shard ``index`` (``0 <= index < size``)."""
        if self.producers is not None:
            if not 0 <= index < len(self.producers):
                raise ValueError(f"shard index {index} is outside 0..{len(self.producers) - 1}")
            return self.producers[index]
        assert self.prefix is not None and self.shards is not None
        return shard_producer_id(self.prefix, index, self.shards)

    @property
    def size(self) -> int:
        """How many producers the job declares."""
        return len(self.producers) if self.producers is not None else int(self.shards or 0)

    def __contains__(self, producer_id: object) -> bool:
        if not isinstance(producer_id, str):
            return False
        if self.producers is not None:
            return producer_id in self.producers
        parsed = parse_shard_producer_id(producer_id)
        return parsed is not None and parsed[0] == self.prefix and parsed[2] == self.shards and \
            producer_id == shard_producer_id(parsed[0], parsed[1], parsed[2])

    def label(self, producer_id: str) -> str:
        """How messages name a member: ``shard 3/8`` (and its id), or the explicit id."""
        if self.producers is None:
            parsed = parse_shard_producer_id(producer_id)
            if parsed is not None:
                return f"shard {parsed[1]}/{parsed[2]}"
        return f"producer {producer_id!r}"

    def describe(self) -> str:
        if self.producers is not None:
            return f"a job of {len(self.producers)} producers ({', '.join(self.producers[:8])}" \
                   f"{', ...' if len(self.producers) > 8 else ''})"
        return f"job {self.prefix!r} of {self.shards} shards"

    def to_json(self) -> dict[str, Any]:
        if self.producers is not None:
            return {"producers": list(self.producers)}
        return {"prefix": self.prefix, "shards": self.shards}

    @classmethod
    def from_json(cls, obj: object, *, what: str) -> JobSpec:
        f = Fields(obj, what=f"{what} job")
        try:
            if isinstance(obj, dict) and "producers" in obj:
                names = f.array("producers")
                f.done()
                if not all(isinstance(n, str) for n in names):
                    raise ValueError("producers must be strings")
                return cls.of(names)
            job = cls.sharded(f.string("prefix"), f.integer("shards", minimum=1))
            f.done()
            return job
        except ValueError as e:
            if isinstance(e, ManifestError):
                raise
            raise ManifestError(f"{what}: invalid job {obj!r}: {e}") from e


def shard_status(job: JobSpec, producers: Mapping[str, _Marked]) -> dict[str, str]:
    """Each declared producer's progress: ``done``, ``running`` (open), ``stopped`` (closed), ``not started``."""
    out = {}
    for pid in job.producer_ids():
        state = producers.get(pid)
        if state is None:
            out[pid] = "not started"
        else:
            out[pid] = {"open": "running", "closed": "stopped"}.get(state.status, state.status)
    return out


def missing_shards(job: JobSpec, producers: Mapping[str, _Marked]) -> list[str]:
    """The declared producers not marked ``done``, in shard order."""
    return [pid for pid in job.producer_ids() if (s := producers.get(pid)) is None or s.status != "done"]


def seals(job: JobSpec, producers: Mapping[str, _Marked]) -> bool:
    """Whether a version leaving ``producers`` behind must seal: every declared shard is done."""
    return not missing_shards(job, producers)


def describe_missing(job: JobSpec, producers: Mapping[str, _Marked], *, limit: int = 8) -> str:
    """``shard 1/4 (running), shard 3/4 (not started)``: what a seal still waits for."""
    status = shard_status(job, producers)
    missing = [pid for pid in job.producer_ids() if status[pid] != "done"]
    text = ", ".join(f"{job.label(pid)} ({status[pid]})" for pid in missing[:limit])
    return text + (f" and {len(missing) - limit} more" if len(missing) > limit else "")
