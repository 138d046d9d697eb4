"""Registration outside the log: one created-once object per producer incarnation (docs/protocol.md, *Registering*).

An incarnation of producer ``P`` registers by creating
``_tgb/epochs/<P>/<e>.json`` with ``put_if_absent`` for the first epoch ``e``
above the one the log holds for ``P`` that no other incarnation claimed:
one conditional write per incarnation (plus one per incarnation that claimed
an epoch since ``P``'s last commit and never committed), whatever the number
of producers registering at once. Registrations of different producers
never contend: they write different keys.

A committer of epoch ``e`` checks, before each create of a version, that
``<P>/<e+1>`` does not exist (:func:`newer_claimed`): a newer incarnation
stops an older one at its next attempt, and its own first commit puts its
epoch in the log, which fences the older one there for good. The content
(the claimer's token) settles a create whose reply was lost.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable

from torch_tgb.errors import AmbiguousWriteError, CorruptObject, ObjectNotFound, StorageError
from torch_tgb.manifest.keys import EPOCH_PREFIX, epoch_key
from torch_tgb.manifest.records import ManifestState
from torch_tgb.storage import ObjectStore

__all__ = ["EPOCH_FORMAT", "claim_epoch", "claimant", "newer_claimed", "registered_unlogged"]

EPOCH_FORMAT = "tgb-epoch/1"
#: a registration object is a few dozen bytes; anything larger is not ours
_MAX_BYTES = 4096


def claim_epoch(store: ObjectStore, producer_id: str, after: int, token: str, *, where: str = "",
                retries: int = 8) -> int:
    """Create the registration object of the first unclaimed epoch above ``after``; that epoch.

    ``token`` identifies this incarnation: an object found holding it is
    ours (a create whose acknowledgement was lost). Claims by other
    incarnations are stepped over one by one.
    """
    epoch = after + 1
    unanswered = 0
    while True:
        data = json.dumps({"format": EPOCH_FORMAT, "producer": producer_id, "epoch": epoch, "token": token,
                           "time": time.time()}, sort_keys=True).encode()
        created: bool | None
        try:
            created = store.put_if_absent(epoch_key(producer_id, epoch), data)
        except AmbiguousWriteError:
            created = None
        if created:
            return epoch
        holder = claimant(store, producer_id, epoch, where=where)
        if holder == token:
            return epoch  # it landed: the acknowledgement was lost
        if holder is None:
            unanswered += 1
            if unanswered > retries:
                raise StorageError(f"{where}registration of producer {producer_id!r} epoch={epoch} "
                                   f"({epoch_key(producer_id, epoch)!r}): no definite reply after {retries} retries")
            continue  # it did not land: the same claim again
        epoch += 1  # another incarnation holds it: the next one


def claimant(store: ObjectStore, producer_id: str, epoch: int, *, where: str = "") -> str | None:
    """The token of the incarnation that claimed ``epoch`` (``None``: unclaimed); refuses a malformed object."""
    key = epoch_key(producer_id, epoch)
    try:
        data = store.get_range(key, 0, _MAX_BYTES + 1)
    except ObjectNotFound:
        return None
    try:
        if len(data) > _MAX_BYTES:
            raise ValueError(f"{len(data)} bytes")
        record = json.loads(data)
        ok = (isinstance(record, dict) and record.get("format") == EPOCH_FORMAT
              and record.get("producer") == producer_id and record.get("epoch") == epoch
              and isinstance(record.get("token"), str))
    except ValueError as e:
        raise CorruptObject(f"{where}{key!r} is not a registration object ({e}): delete it and restart "
                            f"producer {producer_id!r}") from e
    if not ok:
        raise CorruptObject(f"{where}{key!r} is not the registration of producer {producer_id!r} epoch={epoch} "
                            f"(format {EPOCH_FORMAT}): delete it and restart the producer")
    return str(record["token"])


def newer_claimed(store: ObjectStore, producer_id: str, epoch: int) -> bool:
    """Whether an incarnation newer than ``epoch`` registered (one existence check)."""
    return store.exists(epoch_key(producer_id, epoch + 1))


_EPOCH_NAME = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]{0,127})/([0-9]{10})\.json")


def registered_unlogged(store: ObjectStore, logged_epoch: Callable[[str], int], *, but: str) -> list[str]:
    """The producers (other than ``but``) with a registration newer than the epoch the log holds for them.

    ``logged_epoch(pid)``: ``pid``'s epoch in the view (0 if absent). One
    LIST of ``_tgb/epochs/`` (a page per 1,000 registrations): what a ``done``
    mark in a namespace without declared shards reads before it seals, so
    that a producer that started but has not committed yet holds the seal
    back, as one whose epoch the log holds does.
    """
    newest: dict[str, int] = {}
    for key in store.list(EPOCH_PREFIX):
        match = _EPOCH_NAME.fullmatch(key[len(EPOCH_PREFIX):])
        if match is not None and match.group(1) != but:
            pid, epoch = match.group(1), int(match.group(2))
            newest[pid] = max(epoch, newest.get(pid, 0))
    return sorted(pid for pid, epoch in newest.items() if epoch > logged_epoch(pid))


def starting(store: ObjectStore, state: ManifestState, *, but: str) -> list[str]:
    """Without declared shards: the producers (other than ``but``) registered on ``store`` but not in ``state``'s
    log yet. They hold a seal back as open ones do (a plain ``tgb seal``, a ``done`` mark that would seal)."""
    if state.job is not None:
        return []

    def logged(pid: str) -> int:
        producer = state.producers.get(pid)
        return 0 if producer is None else producer.epoch

    return registered_unlogged(store, logged, but=but)
