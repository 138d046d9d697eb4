"""Step lookup: which version added a step, and the entries of a step range.

A version's ``first_step`` is the number of steps committed before it, so
step -> version is a binary search on ``first_step`` over version numbers
(O(log n) version reads, cold).
"""

from __future__ import annotations

from torch_tgb.errors import ManifestError, ObjectNotFound
from torch_tgb.manifest._log import LogReader
from torch_tgb.manifest.records import GCBoundary, TGBEntry, Version

__all__ = ["StepLookup"]


class StepLookup(LogReader):
    """The step-indexed reads of :class:`~torch_tgb.manifest.Manifest`."""

    def version_of_step(self, step: int, *, latest: int | None = None) -> Version:
        """The version that added ``step``: binary search on ``first_step``, O(log n) reads."""
        if step < 0:
            raise ValueError(f"{self.where}{step=} must be >= 0")
        for _ in range(3):  # a concurrent reclamation may move the boundary under us
            boundary = self.gc_boundary()
            if step < boundary.step:
                raise ManifestError(f"{self.where}{step=} is reclaimed (GC boundary step={boundary.step})")
            low = max(1, boundary.version)
            high = latest if latest is not None else self._upper_bound_for(step, boundary, low)
            if high < low:
                break
            try:
                top = self.read_version(high)
                if step >= top.stop_step:
                    break
                # invariant: first_step(low) <= step < stop_step(high); find largest v with first_step <= step
                if self.read_version(low).first_step > step:
                    raise ManifestError(
                        f"{self.where}{step=} lies below version={low}, the oldest kept (GC boundary)"
                    )
                while low < high:
                    mid = (low + high + 1) // 2
                    if self.read_version(mid).first_step <= step:
                        low = mid
                    else:
                        high = mid - 1
                found = self.read_version(low)
            except ObjectNotFound:
                continue
            if not found.first_step <= step < found.stop_step:
                raise ManifestError(
                    f"{self.where}manifest version={found.number} covers steps [{found.first_step}, "
                    f"{found.stop_step}) but binary search for {step=} ended there: first_step not monotone"
                )
            return found
        raise ManifestError(f"{self.where}{step=} is not committed (newest version {self._known_latest})")

    def _upper_bound_for(self, step: int, boundary: GCBoundary, low: int) -> int:
        """A version at or after the one holding ``step``: the hinted snapshot if it covers
        ``step`` (a cold reader then skips probing for the newest version), else the newest."""
        with self._lock:
            cold = self._known_latest == 0
        if cold:
            hint = self._read_hint()
            if hint >= low:
                snapshot = self.read_snapshot(hint)
                if snapshot is not None and step < snapshot.num_steps:
                    return hint
        return self.latest_version()

    def entry(self, step: int) -> TGBEntry:
        """The TGB entry of ``step``."""
        version = self.version_of_step(step)
        return version.entries[step - version.first_step]

    def entries(self, start_step: int, stop_step: int) -> list[TGBEntry]:
        """Entries of steps ``start_step .. stop_step - 1`` that are committed (may be fewer)."""
        if stop_step <= start_step:
            return []
        latest = self.latest_version()
        try:
            version = self.version_of_step(start_step, latest=latest)
        except ManifestError:
            if latest == 0 or start_step >= self._stop_of(latest):
                return []
            raise
        out: list[TGBEntry] = []
        step = start_step
        while True:
            out.extend(version.entries[step - version.first_step : stop_step - version.first_step])
            step = version.stop_step
            if step >= stop_step or version.number >= latest:
                return out
            following = self.read_version(version.number + 1)
            if following.first_step != version.stop_step:
                raise ManifestError(
                    f"{self.where}manifest version={following.number}: first_step={following.first_step}, "
                    f"expected {version.stop_step}"
                )
            version = following

    def _stop_of(self, number: int) -> int:
        return self.read_version(number).stop_step if number > 0 else 0
