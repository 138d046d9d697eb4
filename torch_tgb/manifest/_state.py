"""Folding versions into the full state, with the checks that span versions.

``fold(state, version)`` is the one place that decides whether version v+1
may follow version v: steps add up, epochs never go back, a producer's
offsets continue where its state said, nothing follows a seal. Readers,
snapshot writers and the committer all fold through it, so they agree.
"""

from __future__ import annotations

from torch_tgb.errors import ManifestError
from torch_tgb.manifest.records import ManifestState, ProducerState, Version

__all__ = ["fold"]


def fold(state: ManifestState, version: Version, *, where: str = "") -> ManifestState:
    """The state after applying ``version`` (which must be ``state.version + 1``)."""
    what = f"{where}manifest version={version.number}"
    if version.number != state.version + 1:
        raise ManifestError(f"{what}: cannot follow version={state.version}")
    if state.sealed:
        raise ManifestError(f"{what}: follows version={state.version}, which sealed the namespace")
    if version.first_step != state.num_steps:
        raise ManifestError(
            f"{what}: first_step={version.first_step}, but {state.num_steps} steps were committed before it"
        )
    producers = dict(state.producers)
    expected: dict[str, int] = {}
    for entry in version.entries:
        if entry.producer not in expected:
            before = producers.get(entry.producer)
            start = 0 if before is None else before.next_offset
            if entry.offset != start:
                raise ManifestError(
                    f"{what}: producer {entry.producer!r} appends offset={entry.offset}, "
                    f"but its committed state says next_offset={start}"
                )
            expected[entry.producer] = entry.offset
    for pid, new in version.producers.items():
        old = producers.get(pid)
        if old is not None and (new.epoch < old.epoch or new.next_offset < old.next_offset):
            raise ManifestError(
                f"{what}: producer {pid!r} goes back from epoch={old.epoch}, next_offset={old.next_offset} "
                f"to epoch={new.epoch}, next_offset={new.next_offset}"
            )
        if pid not in expected and old is not None and new.next_offset != old.next_offset:
            raise ManifestError(
                f"{what}: producer {pid!r} moves next_offset {old.next_offset} -> {new.next_offset} "
                "without appending entries"
            )
        if pid not in expected and old is None and new.next_offset != 0:
            raise ManifestError(f"{what}: new producer {pid!r} starts at next_offset={new.next_offset} without entries")
        # The pipeline state belongs to next_offset: a version that appends replaces it,
        # one that does not (epoch bump, seal) keeps it unless it restates it.
        kept = new.state if (pid in expected or new.state is not None or old is None) else old.state
        producers[pid] = ProducerState(new.epoch, new.next_offset, new.committed_at, kept, status=new.status)
    return ManifestState(version.number, version.stop_step, version.sealed, producers)
