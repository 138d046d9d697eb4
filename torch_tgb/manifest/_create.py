"""Step 3 of a commit: check the candidate as a reader would, create version ``v`` once, learn whether it is ours.

``put_if_absent`` answers True (created), False (the slot is taken: 412) or
raises :class:`AmbiguousWriteError` (no definite reply: it may have landed).
Any answer but True is settled by reading the slot back and comparing
commit tokens (docs/protocol.md, *Lost acknowledgements*).
"""

from __future__ import annotations

from typing import Protocol

from torch_tgb.errors import AmbiguousWriteError, ManifestError, StorageError
from torch_tgb.manifest._json import MAX_METADATA_BYTES
from torch_tgb.manifest._state import fold
from torch_tgb.manifest.records import ManifestState, Version
from torch_tgb.storage import ObjectStore

__all__ = ["create_version", "encode_candidate"]


class _Log(Protocol):
    @property
    def where(self) -> str: ...

    def try_read_version(self, number: int) -> Version | None: ...

    def slot_key(self, number: int) -> str: ...


def create_version(store: ObjectStore, log: _Log, number: int, data: bytes, token: str, *,
                   retries: int) -> tuple[bool, bool]:
    """``(created, recognised)``: whether version ``number`` now holds ``data`` (ours), and whether that was
    learnt by reading our ``token`` back (a lost acknowledgement)."""
    key = log.slot_key(number)
    for _ in range(retries):
        created: bool | None
        try:
            created = store.put_if_absent(key, data)
        except AmbiguousWriteError:
            created = None
        if created:
            return True, False
        # 412 / False or no reply: the slot is taken -- by us (lost ack) or by another writer?
        existing = log.try_read_version(number)
        if existing is None:
            if created is None:
                continue  # our write did not land: same bytes, same slot
            return False, False  # taken and gone again: only a reclamation deletes versions
        return existing.token == token, existing.token == token
    raise StorageError(f"{log.where}manifest version={number}: no definite reply after retries")


def encode_candidate(view: ManifestState, candidate: Version, *, where: str) -> bytes:
    """The bytes of ``candidate``, once it is what every reader accepts after ``view``.

    Valid entries, consecutive offsets, a version that follows the view, and
    JSON within the metadata limit: a writer never writes what would leave a
    namespace no one can read.
    """
    what = f"{where}candidate manifest version={candidate.number}"
    for i, entry in enumerate(candidate.entries):
        entry.validate(what=f"{what} entry {i}")
    candidate.check_offsets(what=what)
    fold(view, candidate, where=where)
    data = candidate.encode()
    if len(data) > MAX_METADATA_BYTES:
        raise ManifestError(
            f"{what}: {len(data)} bytes of JSON ({len(candidate.entries)} entries), over the metadata limit of "
            f"{MAX_METADATA_BYTES}: commit at most MAX_VERSION_ENTRIES entries per version"
        )
    return data
