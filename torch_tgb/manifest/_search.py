"""Searches over version numbers: the newest version, the version holding a step, a step range's entries.

Pure functions of a read callback, so the searches are tested without a
store. Above the GC boundary versions exist without holes (v+1 is only
written by someone who read v), so existence is monotone there; and a
version's ``first_step`` is the number of steps committed before it, so
step -> version is a binary search on ``first_step`` (O(log n) reads cold).
"""

from __future__ import annotations

from collections.abc import Callable

from torch_tgb.errors import ManifestError, ObjectNotFound
from torch_tgb.manifest.records import GCBoundary, TGBEntry, Version

__all__ = ["collect_entries", "find_version", "probe_near", "probe_newest", "search_step"]


def probe_newest(low: int, exists: Callable[[int], bool]) -> int:
    """The newest version at or above ``low`` (which exists, or is 0): probe +1, +2, +4, ..., then bisect the gap."""
    if not exists(low + 1):
        return low
    good, step = low + 1, 1
    while True:
        step *= 2
        if exists(low + step):
            good = low + step
        else:
            bad = low + step
            break
    while bad - good > 1:
        mid = (good + bad) // 2
        if exists(mid):
            good = mid
        else:
            bad = mid
    return good


def probe_near(known: int, guess: int, exists: Callable[[int], bool]) -> int:
    """The newest version, given that ``known`` exists (or is 0) and a ``guess`` of it above ``known``.

    A committer's guess comes from the rate at which others commit: when it is
    right, two existence checks (``guess`` and ``guess + 1``) settle it;
    otherwise the search gallops on from ``guess`` or bisects down to
    ``known``, as :func:`probe_newest` does.
    """
    if guess <= known:
        return probe_newest(known, exists)
    if exists(guess):
        return guess if not exists(guess + 1) else probe_newest(guess + 1, exists)
    good, bad = known, guess
    while bad - good > 1:
        mid = (good + bad) // 2
        if exists(mid):
            good = mid
        else:
            bad = mid
    return good


def find_version(step: int, low: int, high: int, read: Callable[[int], Version], *, where: str) -> Version | None:
    """The version of ``low..high`` that adds ``step``; ``None`` if ``step`` lies past version ``high``.

    ``read`` may raise :class:`~torch_tgb.errors.ObjectNotFound` (a version
    reclaimed meanwhile): the caller starts again from the new boundary.
    """
    top = read(high)
    if step >= top.stop_step:
        return None
    # invariant: first_step(low) <= step < stop_step(high); find largest v with first_step <= step
    bottom = read(low)
    if bottom.first_step > step:
        raise ManifestError(f"{where}{step=} lies below version={low}, the oldest kept (GC boundary)")
    # Steps usually spread evenly over versions: interpolate on first_step, bisecting every other probe so the
    # worst case stays O(log n). ``top_stop``: stop_step of version ``high`` (that of v-1 is first_step of v).
    guess, top_stop = True, top.stop_step
    while low < high and step >= bottom.stop_step:
        if guess:
            mid = low + 1 + (step - bottom.first_step) * (high - low) // max(1, top_stop - bottom.first_step)
            mid = min(high, max(low + 1, mid))
        else:
            mid = (low + high + 1) // 2
        guess = not guess
        probe = read(mid)
        if probe.first_step <= step:
            low, bottom = mid, probe
        else:
            high, top_stop = mid - 1, probe.first_step
    found = read(low)
    if not found.first_step <= step < found.stop_step:
        raise ManifestError(
            f"{where}manifest version={found.number} covers steps [{found.first_step}, "
            f"{found.stop_step}) but binary search for {step=} ended there: first_step not monotone"
        )
    return found


def search_step(
    step: int, *, boundary: Callable[[], GCBoundary], high: Callable[[int], int], read: Callable[[int], Version],
    where: str,
) -> Version | None:
    """The version that adds ``step``, searched between the GC boundary and ``high(low)``; ``None``: not committed.

    A concurrent reclamation may move the boundary under the search (a read
    meets :class:`~torch_tgb.errors.ObjectNotFound`): it starts again from
    the new boundary, up to three times.
    """
    for _ in range(3):
        floor = boundary()
        if step < floor.step:
            raise ManifestError(f"{where}{step=} is reclaimed (GC boundary step={floor.step})")
        low = max(1, floor.version)
        top = high(low)
        if top < low:
            return None
        try:
            return find_version(step, low, top, read, where=where)
        except ObjectNotFound:
            continue
    return None


def collect_entries(
    version: Version, start_step: int, stop_step: int, latest: int, read: Callable[[int], Version], *, where: str,
    seen: Callable[[Version], None] | None = None,
) -> list[TGBEntry]:
    """Entries of steps ``start_step .. stop_step - 1`` from ``version`` (which holds ``start_step``) on.

    Stops at ``latest``: the result may hold fewer steps than asked for.
    ``seen`` is called with each version read, in order (the reader's continuity check).
    """
    out: list[TGBEntry] = []
    step = start_step
    while True:
        if seen is not None:
            seen(version)
        out.extend(version.entries[step - version.first_step : stop_step - version.first_step])
        step = version.stop_step
        if step >= stop_step or version.number >= latest:
            return out
        following = read(version.number + 1)
        if following.first_step != version.stop_step:
            raise ManifestError(
                f"{where}manifest version={following.number}: first_step={following.first_step}, "
                f"expected {version.stop_step}"
            )
        version = following
