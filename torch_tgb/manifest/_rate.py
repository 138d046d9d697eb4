"""How fast other producers commit, as one committer sees it: an EMA of versions per second between refreshes.

Format 2 lets a committer skip the versions others wrote since its last
view (``commit.py``), so it no longer sees who committed them; the version
numbers it skips still say how many were written, and when. DAC's
arrival rate of other commits (``producer/dac.py``) comes from here.
"""

from __future__ import annotations

__all__ = ["VersionRate"]


class VersionRate:
    """Versions per second written by others: ``saw(n, now)`` after a refresh that skipped ``n`` versions."""

    def __init__(self, weight: float = 0.3) -> None:
        self.weight = weight
        #: versions per second by others; ``None`` until two refreshes gave a sample
        self.rate: float | None = None
        self._last: float | None = None

    def since(self, now: float) -> float:
        """Seconds since the last refresh (0 before the first)."""
        return 0.0 if self._last is None else max(0.0, now - self._last)

    def saw(self, versions: int, now: float) -> None:
        """``versions`` new versions (others') found at monotonic time ``now``."""
        if self._last is not None and now > self._last:
            sample = versions / (now - self._last)  # the view was our own newest read or write: these are others'
            self.rate = sample if self.rate is None else (1 - self.weight) * self.rate + self.weight * sample
        self._last = now
