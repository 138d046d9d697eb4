"""What one producer's commit may do, given the view it read: pure functions of the manifest state.

Who may join the namespace, whether a ``done`` mark seals, whom a seal
would cut off, and whether a snapshot already holds a version written into
a reclaimed slot. The :class:`~torch_tgb.manifest.Committer` decides with
these on the rebased view of each attempt (``commit.py``, steps 1 to 4).

In a namespace of declared shards (:mod:`torch_tgb.manifest.jobs`) a
version that marks the last declared shard ``done`` also seals the
namespace; done marks are final, so whichever shard's done mark lands last
sees every other one and seals. The first producer's start declares
the job; a producer outside it gets :class:`JobMismatch`, and a shard that
is already done gets :class:`ShardComplete` at start. Without declared
shards, a version that marks its producer ``done`` while no other producer
in the view is still ``open`` seals, so the last producer to finish ends
the stream and no running producer is ever cut off mid-run.
"""

from __future__ import annotations

from torch_tgb.errors import JobMismatch, ShardComplete
from torch_tgb.manifest.jobs import SEALER_ID, JobSpec, describe_missing, missing_shards
from torch_tgb.manifest.records import ManifestState, Version

__all__ = ["check_joinable", "done_seals", "holds_commit", "marks", "unfinished", "unfinished_text"]


def check_joinable(view: ManifestState, pid: str, ours: JobSpec | None, *, where: str) -> None:
    """Refuse producer ``pid`` (of job ``ours``) outside the namespace's job; :class:`ShardComplete` if finished."""
    job = view.job
    if job is None:
        if ours is None or not _others_exist(view, pid):
            return
        others = sorted(p for p in view.producers if p != SEALER_ID)
        if others:
            raise JobMismatch(
                f"{where}namespace was created without declared shards (producers {others[:8]}): "
                f"{ours.label(pid)} of {ours.describe()} cannot join it; write the job into a new namespace"
            )
        return
    if ours is not None and ours != job:
        raise JobMismatch(
            f"{where}namespace declares {job.describe()}; {pid!r} belongs to {ours.describe()}: "
            "one namespace holds one job (rerun with the namespace's shard count and name, or write into a "
            "new namespace)"
        )
    if pid == SEALER_ID:
        return
    if pid not in job:
        raise JobMismatch(f"{where}producer {pid!r} is not one of the declared producers of {job.describe()}")
    mine = view.producers.get(pid)
    if mine is not None and mine.status == "done":
        offsets = f"offsets 0..{mine.next_offset - 1}" if mine.next_offset else "no offsets"
        raise ShardComplete(
            f"{where}{job.label(pid)} already complete ({offsets}); the namespace is "
            + ("sealed" if view.sealed else f"waiting for {describe_missing(job, view.producers)}"),
            producer_id=pid, next_offset=mine.next_offset, sealed=view.sealed,
        )


def _others_exist(view: ManifestState, pid: str) -> bool:
    """Whether producers other than ``pid`` are registered (format 2: from the table's count, no bucket read)."""
    if view.table is None:
        return any(p != pid for p in view.producers)
    return view.table.producers - (1 if view.producers.get(pid) is not None else 0) > 0


def done_seals(view: ManifestState, pid: str) -> bool:
    """Whether ``pid``'s ``done`` mark on top of ``view`` seals the namespace.

    With declared shards: when every other declared shard is done (done
    marks are final and the view holds every version before the slot
    written, so the last shard to land its done mark always seals).
    Without: when no other producer is still open (nobody else may still commit).
    """
    table = view.table
    mine = view.producers.get(pid) if table is not None else None  # format 2: one bucket, then the counts
    if view.job is not None:
        if table is not None:
            already = mine is not None and mine.status == "done"
            return table.declared_done + (0 if already or pid not in view.job else 1) >= view.job.size
        return not [p for p in missing_shards(view.job, view.producers) if p != pid]
    if table is not None:
        return table.open - (1 if mine is not None and mine.status == "open" else 0) == 0
    return all(s.status != "open" for p, s in view.producers.items() if p != pid)


def holds_commit(snapshot: ManifestState, candidate: Version, pid: str) -> bool:
    """Whether ``snapshot`` (of the GC boundary) already holds what ``candidate`` commits for ``pid``.

    A version that only marks (closed/done) or seals moves no offset: the
    snapshot must also hold the mark and the seal, or the candidate sat in
    a reclaimed slot.
    """
    ours = candidate.producers[pid]
    theirs = snapshot.producers.get(pid)
    return (
        theirs is not None
        and theirs.epoch == ours.epoch
        and theirs.next_offset >= ours.next_offset
        and theirs.status == ours.status
        and (snapshot.sealed or not candidate.sealed)
        and (candidate.job is None or snapshot.job == candidate.job)
    )


def marks(view: ManifestState) -> str:
    """Every producer's mark, for messages: ``a open, b done`` (``none``)."""
    return ", ".join(f"{pid} {s.status}" for pid, s in sorted(view.producers.items())) or "none"


def unfinished(state: ManifestState) -> list[str]:
    """Who a plain seal would cut off: the declared shards not done, or (no job) the producers still open."""
    if state.job is not None:
        return missing_shards(state.job, state.producers)
    return sorted(pid for pid, s in state.producers.items() if s.status == "open" and pid != SEALER_ID)


def unfinished_text(state: ManifestState, pids: list[str]) -> str:
    """Why a seal is refused while ``pids`` (:func:`unfinished`) are not finished."""
    if state.job is not None:
        return (f"{describe_missing(state.job, state.producers)} of {state.job.describe()} "
                f"{'is' if len(pids) == 1 else 'are'} not done: a seal now would leave the stream incomplete "
                "(`tgb seal --force` seals anyway)")
    return (f"producers {pids} are still open (running, or crashed without closing): close or "
            "restart-and-close them first")
