"""The registration that registration objects replaced: an epoch bump committed as a log version (benchmarks only).

``LogBumpCommitter.start`` is ``Committer.start`` as it was before
``manifest/_epochs.py``: refresh, bump the epoch in a version with no
entries, and after a lost slot wait (``Backoff``) and bump over the winner.
It exists so that ``registration.py`` measures before and after side by
side in one run.
"""

from __future__ import annotations

import time

from torch_tgb.manifest import Committer, ProducerState
from torch_tgb.manifest._backoff import Backoff


class LogBumpCommitter(Committer):
    """A committer whose ``start()`` commits an epoch bump as a version (the old registration)."""

    registration_backoff: Backoff = Backoff()

    def start(self) -> ProducerState:
        self._reset_view()
        conflicts = 0
        while True:
            self.refresh()
            self._check_startable()
            current = self.state
            self.epoch = (0 if current is None else current.epoch) + 1
            now = time.time()
            mine = ProducerState(self.epoch, self.next_offset, now, status="open",
                                 skipped=None if current is None else current.skipped)
            candidate = self._candidate((), mine, pipeline=current, sealed=False, now=now,
                                        declares=self.job if self.view.job is None else None)
            if self._write(candidate, read_at=time.monotonic()).committed:
                state = self.state
                assert state is not None
                return state
            conflicts += 1
            self.registration_backoff.wait(conflicts)
