"""Which source group an added actor serves, and which actors go first when the pool shrinks (pure).

Mixture-driven scaling (OVERLORD, seed 004 §5.2): in a fleet planned by
source (``_shard_plan.py``) every actor is dedicated to one group and claims
that group's shards first. When the policy (``_autoscale.py``) grows the
pool, :func:`groups_to_add` gives the new actors to:

1. the **rising** groups first: those holding a source whose weight rises
   ahead (a control record or a schedule step) or whose measured cost per
   batch rose; among them the one furthest below its share;
2. then the group furthest below its share of the pool (``share x actors``,
   the shares from the weights ahead and the costs, ``_shard_plan.shares``);

never to a group with no shard left to run (an actor runs one shard at a
time): with none left anywhere, the actor is undedicated (``None``).
:func:`drop_order` is the reverse for a shrinking pool: groups that do not
rise, furthest above their share first. Ties go to the lower group index:
the same signals always give the same answer.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

__all__ = ["drop_order", "groups_to_add"]


def groups_to_add(
    add: int, *, shares: Sequence[float], actors: Sequence[int], runnable: Sequence[int],
    rising: Collection[int] = (),
) -> list[int | None]:
    """The groups of ``add`` new actors (``None``: no group has a shard for it).

    ``actors[j]``: actors dedicated to group ``j`` now; ``runnable[j]``: its
    shards not yet done (pending or running), which bounds its actors.
    """
    if not len(shares) == len(actors) == len(runnable):
        raise ValueError(f"shares, actors and runnable need one entry per group: {len(shares)}, {len(actors)}, "
                         f"{len(runnable)}")
    have = list(actors)
    total = sum(have) + add
    out: list[int | None] = []
    for _ in range(add):
        open_ = [j for j in range(len(have)) if have[j] < runnable[j]]
        if not open_:
            out.append(None)
            continue
        best = max(open_, key=lambda j: (j in rising, shares[j] * total - have[j], -j))
        have[best] += 1
        out.append(best)
    return out


def drop_order(*, shares: Sequence[float], actors: Sequence[int], rising: Collection[int] = ()) -> list[int]:
    """Groups in the order their actors go: not rising first, then furthest above their share of the pool."""
    total = sum(actors)
    return sorted(range(len(actors)), key=lambda j: (j in rising, shares[j] * total - actors[j], j))
