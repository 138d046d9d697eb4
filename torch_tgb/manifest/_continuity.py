"""A reader's check that producers' offsets continue from version to version (format 2).

A format-1 reader folds every version onto the full producers' state, so a
version appending an offset twice is refused by ``fold``. A format-2 reader
does not hold that state (the newest version names it through the table),
so it checks what the versions it reads in order say themselves: each
version's delta gives its writer's ``next_offset`` after it, so the writer's
entries in the next version it appears in must start there, and its epoch
never goes back. A reader that follows the log (the poller, ``entries()``
over consecutive versions) sees every version of its window; a gap in what
it reads (a jump, a shuffled epoch) restarts the check from the next one.
The writers' own check is the committer's (it reads its bucket before it
writes): this one is defence in depth against a log written by a buggy or
hostile writer.
"""

from __future__ import annotations

import threading

from torch_tgb.errors import ManifestError
from torch_tgb.manifest.records import Version

__all__ = ["Continuity"]

#: most producers whose last offsets a reader remembers (a job of 65,536 shards fits)
MAX_TRACKED = 1 << 17


class Continuity:
    """Producers' ``(epoch, next_offset)`` after the last version seen in order. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version = -1  # the last version seen; -1: none
        self._offsets: dict[str, tuple[int, int]] = {}

    def see(self, version: Version, *, where: str = "") -> None:
        """Check ``version`` against the versions seen before it, if it follows the last one; then record it."""
        if version.table is None:
            return  # format 1: fold checks it
        with self._lock:
            if version.number == self._version:
                return
            if version.number != self._version + 1:
                self._offsets.clear()
            if self._offsets:  # nothing known before it (a first read, a jump): nothing to check it against
                self._check(version, where)
            for pid, state in version.producers.items():
                self._offsets[pid] = (state.epoch, state.next_offset)
            if len(self._offsets) > MAX_TRACKED:
                self._offsets.clear()
            self._version = version.number

    def _check(self, version: Version, where: str) -> None:
        what = f"{where}manifest version={version.number}"
        first: dict[str, int] = {}
        for entry in version.entries:
            first.setdefault(entry.producer, entry.offset)
        for pid, offset in first.items():
            known = self._offsets.get(pid)
            if known is not None and offset != known[1]:
                raise ManifestError(
                    f"{what}: producer {pid!r} appends offset={offset}, but the versions before it left its "
                    f"next_offset={known[1]}"
                )
        for pid, state in version.producers.items():
            known = self._offsets.get(pid)
            if known is not None and (state.epoch < known[0] or state.next_offset < known[1]):
                raise ManifestError(
                    f"{what}: producer {pid!r} goes back from epoch={known[0]}, next_offset={known[1]} "
                    f"to epoch={state.epoch}, next_offset={state.next_offset}"
                )
