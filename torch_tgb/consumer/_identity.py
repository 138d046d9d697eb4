"""What a reader read: the namespace's identity, the manifest versions, the replacements it applied.

Every reader state carries ``tgb_source`` (:data:`SOURCE_KEY`)::

    {"namespace": "s3://bucket/run1", "dataset": "<sha256 of dataset.json>",
     "versions": [opened, newest], "replaced": view}

``dataset`` identifies the namespace's dataset.json (its layout, schema,
metadata, fingerprint and creation time: two namespaces created apart
differ); ``versions`` is the range of manifest versions the reader read
(the newest one when it opened, the newest one it had seen); ``replaced``
the *view version*: the replacement entries of excisions (docs/provenance.md)
in effect at that version are the ones it applied to every step it read. A
checkpoint of a run therefore says which data it saw.

The view is fixed when an iteration starts (:func:`pin_view`): the newest
version at open, the smallest among the ranks when a process group is
initialised in the process that opens (the ranks then read every step under
the same replacements), and handed by ``tgb.DataLoader`` to its workers. An
excision committed later applies from the next iteration (a restart, a
resume): a step is never read under two views by the ranks of one job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch.utils.data import get_worker_info

from torch_tgb.consumer.options import ReaderOptions
from torch_tgb.manifest import Manifest

if TYPE_CHECKING:
    from torch_tgb.consumer._open_cache import KnownNamespace

__all__ = ["SOURCE_KEY", "ReadSource", "agree_min", "loader_view", "merge_sources", "pin_view"]

SOURCE_KEY = "tgb_source"


def agree_min(value: int) -> int:
    """The smallest ``value`` over the ranks of the initialised process group (``value`` itself without one)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return value
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def pin_view(manifest: Manifest, given: int | None, *, options: ReaderOptions, known: KnownNamespace | None = None
             ) -> int:
    """Fix the replacements ``manifest`` applies for this iteration; returns the view version.

    In a DataLoader worker, ``given``: the view its loader fixed. Else the
    newest version; the smallest over the ranks when they read in lockstep
    anyway (``check_consistency``, ``on_corrupt="skip_step"``: a collective
    where every rank iterates, never one that some ranks would skip).
    ``known``: what earlier readers in this process learnt of the namespace
    (a version's replacements are immutable: read once per process).
    """
    worker = get_worker_info() is not None
    version = given if worker and given is not None else manifest.latest_version()
    if worker and given is not None and version < manifest.gc_boundary().version:
        version = manifest.latest_version()  # the loader's view was reclaimed since: there is no older one to read
    if not worker and (options.check_consistency or options.on_corrupt == "skip_step"):
        version = agree_min(version)
    if version <= 0:
        replaced = None
    elif known is not None:
        replaced = known.replaced_at(version, lambda: manifest.read_version(version).replaced)
    else:
        replaced = manifest.read_version(version).replaced
    manifest.replacements.pin(version, replaced)
    return version


def loader_view(dataset: Any) -> int:
    """The view a ``tgb.DataLoader`` fixes once for all its workers (a ``TGBDataset``'s namespace, opened here)."""
    store, manifest, _ = dataset._open()
    try:
        return pin_view(manifest, None, options=dataset.options)
    finally:
        if store is not dataset.ns:  # a store handed in belongs to the caller
            store.close()


@dataclass
class ReadSource:
    """What a reader read: its namespace, dataset.json's identity, the view of its iteration, and the view a
    ``tgb.DataLoader`` fixed for its workers (``pin``)."""

    namespace: str
    identity: str | None = None
    view: int | None = None
    pin: int | None = None

    def state(self, newest: int) -> dict[str, Any] | None:
        """The ``tgb_source`` of a reader whose newest version seen is ``newest`` (None before it opened)."""
        if self.identity is None or self.view is None:
            return None
        return {"namespace": self.namespace, "dataset": self.identity, "versions": [self.view, max(self.view, newest)],
                "replaced": self.view}


def merge_sources(states: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """One ``tgb_source`` for several reader states (a loader's workers): the widest range, the oldest view."""
    found = [s[SOURCE_KEY] for s in states if isinstance(s.get(SOURCE_KEY), Mapping)]
    if not found:
        return None
    first = dict(found[0])
    first["versions"] = [min(int(s["versions"][0]) for s in found), max(int(s["versions"][1]) for s in found)]
    first["replaced"] = min(int(s["replaced"]) for s in found)
    return first
