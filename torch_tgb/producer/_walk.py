"""What a producer's pipeline can say about itself: its nodes, the samples they dropped, how far its sources read.

A pipeline is a graph of ``torchdata.nodes`` nodes, each holding the nodes it
reads from as attributes (``GlobalBatches.source``, ``Mix.sources``). These
functions walk that graph by duck typing, so any stage that keeps its inputs
as attributes is found: a node's ``stats()`` may carry ``skipped`` (and
``skipped_by_reason``), a source's ``work()`` says how much of its shard it
has read.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from torch_tgb.sources._work import SourceWork

__all__ = ["pipeline_nodes", "pipeline_skips", "pipeline_work"]

#: containers longer than this (a buffered window of documents) are not searched for nodes
_MAX_CONTAINER = 256


def pipeline_nodes(root: object) -> list[object]:
    """Every node reachable from ``root`` (itself first), each once, depth first."""
    from torchdata.nodes import BaseNode

    seen: set[int] = set()
    out: list[object] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        out.append(node)
        children = [v for v in _values(node) if isinstance(v, BaseNode) and id(v) not in seen]
        stack.extend(reversed(children))
    return out


def _values(node: object) -> Iterator[object]:
    for value in getattr(node, "__dict__", {}).values():
        if isinstance(value, Mapping):
            if len(value) <= _MAX_CONTAINER:
                yield from value.values()
        elif isinstance(value, (list, tuple)):
            if len(value) <= _MAX_CONTAINER:
                yield from value
        else:
            yield value


def pipeline_skips(root: object, *, nodes: list[object] | None = None) -> dict[str, int]:
    """Samples the pipeline's stages dropped so far, by reason (summed over stages), sorted by reason.

    A stage's ``stats().skipped_by_reason`` gives its reasons; a stage that
    only counts ``stats().skipped`` is named by its ``SKIP_REASON`` (a
    source's ``bad_record``, ``PackSamples``' ``too_long``) or its class.
    ``nodes``: the pipeline's nodes when already walked (a caller that asks often).
    """
    out: dict[str, int] = {}
    for node in pipeline_nodes(root) if nodes is None else nodes:
        stats_of = getattr(node, "stats", None)
        if not callable(stats_of):
            continue
        try:
            stats = stats_of()
        except Exception:  # noqa: BLE001 - a stage whose stats fail has nothing to add here
            continue
        reasons = getattr(stats, "skipped_by_reason", None)
        skipped = getattr(stats, "skipped", 0)
        if isinstance(reasons, Mapping) and reasons:
            for reason, n in reasons.items():
                out[str(reason)] = out.get(str(reason), 0) + int(n)
        elif isinstance(skipped, int) and not isinstance(skipped, bool) and skipped > 0:
            reason = str(getattr(node, "SKIP_REASON", type(node).__name__))
            out[reason] = out.get(reason, 0) + skipped
    return dict(sorted(out.items()))


def pipeline_work(root: object, *, nodes: list[object] | None = None) -> SourceWork | None:
    """How far the pipeline has got through its sources' work, summed when they count the same unit; None if unknown.

    Sources read ahead of what is batched (a packer's window can hold a
    whole small file), so where the work is tokens and the last stage counts
    the real tokens it batched (``GlobalBatches.stats().tokens``), that count
    is what is done; otherwise the sources' own position. Sources of
    different units (tokens of one, tars of another) have no common total:
    then the sum is taken in the first one's unit without a total.
    ``nodes``: the pipeline's nodes when already walked (a caller that asks after every batch).
    """
    works = []
    for node in pipeline_nodes(root) if nodes is None else nodes:
        work = getattr(node, "work", None)
        if callable(work):
            try:
                value = work()
            except Exception:  # noqa: BLE001 - progress must never stop a producer
                continue
            if isinstance(value, SourceWork):
                works.append(value)
    if not works:
        return None
    unit = works[0].unit
    same = [w for w in works if w.unit == unit]
    totals = [w.total for w in same]
    total = sum(t for t in totals if t is not None) if len(same) == len(works) and None not in totals else None
    done = sum(w.done for w in same)
    if unit == "token":
        batched = _batched_tokens(root)
        if batched is not None:
            done = min(done, batched)
    return SourceWork(done=done, total=total, unit=unit)


def _batched_tokens(root: object) -> int | None:
    """The real tokens the last stage has put into batches (its ``stats().tokens``), if it counts them."""
    stats_of = getattr(root, "stats", None)
    if not callable(stats_of):
        return None
    try:
        tokens = getattr(stats_of(), "tokens", None)
    except Exception:  # noqa: BLE001 - progress only
        return None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None
