"""Folding versions into the full state, with the checks that span versions.

``fold(state, version)`` is the one place that decides whether version v+1
may follow version v: steps add up, epochs never go back, a producer's
offsets continue where its state said, nothing follows a seal but a
replacement version, and in a namespace of declared shards the job's rules
hold (:func:`check_job`). A replacement version (``_replaced.py``) is the
only one that changes the replacements in effect: format 2, no entries, no
producer, the seal as it was; every other version carries them unchanged.
Readers, snapshot writers and the committer all fold through it, so they
agree.

A format-2 version names the whole state through its producers' table, so
folding it costs O(1) whatever the number of producers or declared shards:
the steps, the seal and the job's rule (on the table's count of declared
shards done) are checked here; each producer's own history is checked by
that producer's committer, which reads its bucket before it writes
(``commit.py``). A format-1 version may be followed by a format-2 one
(a namespace's first commit by this code), never the other way round.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch_tgb.errors import ManifestError
from torch_tgb.manifest.jobs import SEALER_ID, JobSpec, describe_missing, missing_shards
from torch_tgb.manifest._producers import ProducerTable
from torch_tgb.manifest.records import ManifestState, ProducerState, Version

__all__ = ["check_job", "check_replacements", "fold", "state_of"]


def fold(state: ManifestState, version: Version, *, where: str = "") -> ManifestState:
    """The state after applying ``version`` (which must be ``state.version + 1``)."""
    what = f"{where}manifest version={version.number}"
    if version.number != state.version + 1:
        raise ManifestError(f"{what}: cannot follow version={state.version}")
    replaces = check_replacements(state, version, what=what)
    if state.sealed and not replaces:
        raise ManifestError(f"{what}: follows version={state.version}, which sealed the namespace")
    if version.first_step != state.num_steps:
        raise ManifestError(
            f"{what}: first_step={version.first_step}, but {state.num_steps} steps were committed before it"
        )
    if version.table is not None:
        return _fold_table(state, version, what=what)
    if state.table is not None:
        raise ManifestError(f"{what}: a format-1 version cannot follow format-2 version={state.version}")
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
        # one that does not (a mark, a seal) keeps it unless it restates it.
        kept = new.state if (pid in expected or new.state is not None or old is None) else old.state
        skipped = new.skipped if new.skipped is not None or old is None else old.skipped
        producers[pid] = ProducerState(new.epoch, new.next_offset, new.committed_at, kept, status=new.status,
                                       skipped=skipped)
    job = check_job(state, version, producers, what=what)
    return ManifestState(version.number, version.stop_step, version.sealed, producers, job)


def check_replacements(state: ManifestState, version: Version, *, what: str) -> bool:
    """Whether ``version`` is a replacement version; :class:`ManifestError` if it breaks their rules."""
    if version.replaced == state.replaced:
        return False
    if version.replaced is None:
        raise ManifestError(f"{what}: drops the replacements in effect since version={state.replaced.version}"  # type: ignore[union-attr]
                            " (written by a torch_tgb that does not know replacement entries: upgrade it)")
    if (version.table is None or len(version.entries) or version.producers or version.sealed != state.sealed
            or version.replaced.version != version.number or version.job != state.job):
        raise ManifestError(f"{what}: changes the replacements in effect, so it must be a replacement version "
                            "(format 2, no entries, no producer, the seal and job as they were, its own number)")
    return True


def check_job(state: ManifestState, version: Version, after: Mapping[str, ProducerState], *, what: str) -> JobSpec | None:
    """The job after ``version``; :class:`ManifestError` if it breaks a rule of declared shards.

    - ``job`` is declared once, by the version registering the namespace's first producer;
    - only the job's producers (and :data:`SEALER_ID`) appear;
    - a producer marked ``done`` stays as it is (no bump, no entry, no other mark);
    - ``sealed`` exactly when every declared producer is ``done`` after the version,
      except a seal the sealer writes (``tgb seal --force``).
    """
    job = state.job
    if version.job is not None:
        if job is not None:
            raise ManifestError(f"{what}: declares {version.job.describe()}, but the namespace already "
                                f"declares {job.describe()}")
        if state.producers:
            raise ManifestError(f"{what}: declares {version.job.describe()}, but producers "
                                f"{sorted(state.producers)} were registered without one")
        job = version.job
    if job is None:
        return None
    for pid, new in version.producers.items():
        if pid != SEALER_ID and pid not in job:
            raise ManifestError(f"{what}: producer {pid!r} is not one of the declared producers of {job.describe()}")
        old = state.producers.get(pid)
        if old is not None and old.status == "done" and pid != SEALER_ID and new != old:
            raise ManifestError(f"{what}: {job.label(pid)} ({pid!r}) changes after it was marked done "
                                f"(epoch {old.epoch} -> {new.epoch}, next_offset {old.next_offset} -> "
                                f"{new.next_offset}, {new.status}): a finished shard is final")
    complete = not missing_shards(job, after)
    if complete and not version.sealed:
        raise ManifestError(f"{what}: every declared producer of {job.describe()} is done, but the version "
                            "does not seal the namespace")
    if version.sealed and not complete and SEALER_ID not in version.producers:
        raise ManifestError(f"{what}: seals the namespace while {describe_missing(job, after)} of "
                            f"{job.describe()} {'is' if len(missing_shards(job, after)) == 1 else 'are'} not done")
    return job


def _fold_table(state: ManifestState, version: Version, *, what: str) -> ManifestState:
    """Fold a format-2 version (its table is the new producers' state): O(1) in producers and shards."""
    table = version.table
    assert table is not None
    job = state.job if version.job is None else version.job
    if state.job is not None and version.job != state.job:
        raise ManifestError(f"{what}: carries {'no job' if version.job is None else version.job.describe()}, but the "
                            f"namespace declares {state.job.describe()}")
    if job is not None and version.replaced == state.replaced:  # a replacement version changes no mark
        complete = table.declared_done >= job.size
        if complete and not version.sealed:
            raise ManifestError(f"{what}: every declared producer of {job.describe()} is done, but the version "
                                "does not seal the namespace")
        if version.sealed and not complete and SEALER_ID not in version.producers:
            raise ManifestError(f"{what}: seals the namespace while {job.size - table.declared_done} of "
                                f"{job.describe()} are not done")
        for pid in version.producers:
            if pid != SEALER_ID and pid not in job:
                raise ManifestError(f"{what}: producer {pid!r} is not one of the declared producers of "
                                    f"{job.describe()}")
    return ManifestState(version.number, version.stop_step, version.sealed, ProducerTable(table), job, table,
                         version.replaced)


def state_of(version: Version) -> ManifestState:
    """The full state at format-2 ``version``, from the version alone (its table, its job)."""
    table = version.table
    if table is None:
        raise ManifestError(f"manifest version={version.number} is format 1: its state is a fold of the log")
    return ManifestState(version.number, version.stop_step, version.sealed, ProducerTable(table), version.job, table,
                         version.replaced)
