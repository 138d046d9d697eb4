"""Commit a known, finite sequence of global batches as a sealed namespace, resumably.

Shared by ``write_dataset`` and ``convert_llmbatch``: batch ``i`` is producer
offset ``i``. A rerun after a crash resumes at the committed offset; a rerun
after success finds the namespace sealed with all ``num_batches`` batches of
this producer and does nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from torch_tgb.errors import ManifestError

if TYPE_CHECKING:
    from torch_tgb.layout import Layout
    from torch_tgb.storage import ObjectStore

__all__ = ["commit_batches"]


def _already_sealed(store: ObjectStore, producer_id: str, num_batches: int) -> bool:
    from torch_tgb.manifest import Manifest

    head = Manifest(store).head()
    if not head.sealed:
        return False
    state = head.producers.get(producer_id)
    if state is not None and state.next_offset == num_batches:
        return True
    done = None if state is None else state.next_offset
    raise ManifestError(
        f"{store.url}: namespace is sealed, but producer {producer_id!r} committed {done} of "
        f"{num_batches} batches; write into a new namespace"
    )


def commit_batches(
    ns: str | ObjectStore,
    make_batch: Callable[[int], Mapping[str, torch.Tensor]],
    num_batches: int,
    *,
    layout: Layout,
    producer_id: str,
    storage_options: Mapping[str, Any] | None,
    metadata: Mapping[str, Any],
    commit_policy: str,
    progress: bool | None,
    desc: str,
) -> int:
    """Append ``make_batch(i)`` for every uncommitted ``i`` and seal; returns the offset it resumed at."""
    from torch_tgb._progress import progress as progress_bar
    from torch_tgb.producer import Producer, ProducerConfig
    from torch_tgb.storage import ObjectStore, open_store

    store = ns if isinstance(ns, ObjectStore) else open_store(ns, dict(storage_options or {}))
    try:
        if _already_sealed(store, producer_id, num_batches):
            return num_batches
        with Producer(
            store, producer_id=producer_id, layout=layout, commit_policy=commit_policy, metadata=dict(metadata),
            # 64 MiB segments: written in place locally; other stores hold two in memory while one uploads
            config=ProducerConfig.bulk(),
        ) as producer:
            start = producer.resume_offset
            with progress_bar(total=num_batches, initial=start, desc=desc, unit="batch", enabled=progress) as bar:
                for i in range(start, num_batches):
                    producer.append(make_batch(i), offset=i)
                    bar.update(1)
            producer.close(seal=True)
        return start
    finally:
        if store is not ns:
            store.close()
