"""How much of its shard a source has read: the total and the progress of a producer's bar.

A source measures its work in the best unit it knows the total of before
reading: tokens (a token file), records (rows of Parquet/Lance row groups,
samples of local tar shards counted from their headers, files) or, failing
those, its units (tar shards). The total of an epoch is worked out once per
epoch; what is done comes from the source's counters and position, which
its state restores, so a resumed run starts where the last one stopped.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch_tgb.sources._base import UnitSource

__all__ = ["WORK_RECORD_UNITS", "SourceWork", "epoch_records", "measure_work"]

#: a shard of more units than this is measured in units, not records (summing their lengths would be slow)
WORK_RECORD_UNITS = 100_000


@dataclasses.dataclass(frozen=True)
class SourceWork:
    """How much of its shard a source has read: ``done`` of ``total`` ``unit`` (for progress bars and ETAs).

    ``unit`` names what is counted (``"token"``, ``"row"``, ``"sample"``,
    ``"tar"``, ...); ``total`` is None where it is unknown (``epochs=None``).
    ``done`` counts from the first epoch read and is restored with the state,
    so a resumed producer's bar starts where the last one stopped. The total
    is the current epoch's times the epochs (shards may differ slightly from
    one epoch to the next).
    """

    done: int
    total: int | None
    unit: str


def epoch_records(source: UnitSource) -> tuple[int | None, str]:
    """(records of the shard in one epoch, ``"record"``) where every unit's count is known, else ``(units, "unit")``."""
    units = source._assignment()
    if 0 < len(units) <= WORK_RECORD_UNITS:
        lengths = [source._unit_records(int(u)) for u in units]
        if all(n is not None for n in lengths):
            return sum(n for n in lengths if n is not None), "record"
    return len(units), "unit"


def measure_work(source: UnitSource) -> SourceWork:
    """``source``'s work done and its total, in the kind its ``_epoch_work`` chose (cached per epoch)."""
    cached = source._work_cache
    if cached is None or cached[0] != source._epoch:
        cached = source._work_cache = (source._epoch, *source._epoch_work())
    _, per_epoch, kind = cached
    if kind == "token":
        done, name = source._tokens_out, "token"
    elif kind == "record":
        done, name = source._records_out + source._skipped, source.RECORD_NAME
    else:
        assigned = len(source._assignment())
        epochs_done = source._epoch - source.first_epoch
        done, name = epochs_done * assigned + min(source._pos, assigned), source.UNIT_NAME
    total = None if per_epoch is None or source.epochs is None else per_epoch * source.epochs
    return SourceWork(done=int(done), total=total, unit=name)
