"""Sealing a namespace by hand: what ``tgb seal`` and a fleet's coordinator do when producers cannot.

See ``commit.py`` for the commit protocol and ``_rules.py`` for who a seal
would cut off.
"""

from __future__ import annotations

from torch_tgb.errors import ManifestError
from torch_tgb.manifest._epochs import starting
from torch_tgb.manifest._rules import unfinished, unfinished_text
from torch_tgb.manifest.commit import Committer
from torch_tgb.manifest.jobs import SEALER_ID
from torch_tgb.manifest.manifest import Manifest

__all__ = ["seal_namespace"]


def seal_namespace(manifest: Manifest, *, force: bool = False) -> int:
    """Seal the namespace now, unless a producer is unfinished; returns the sealing version.

    Without declared shards, for jobs whose producers ran one after another
    (each closed, none ``done``), or that mix ``closed`` and ``done``: the
    seal is committed as producer :data:`SEALER_ID`; refused while a producer
    is still open. With declared shards the last shard's done mark seals by
    itself, so a plain seal is refused while any declared shard is not done.
    Idempotent on a sealed namespace. ``force`` seals anyway: for an operator
    or coordinator that knows better (a process that died after its last
    commit stays marked open), and it records that the sealer sealed; a
    producer still running then meets :class:`NamespaceSealed`.
    """
    head = manifest.head()
    if head.sealed:
        return head.version
    still = unfinished(head) + starting(manifest.store, head, but=SEALER_ID)  # open, or registered and not logged
    if still and not force:
        raise ManifestError(f"{manifest.where}cannot seal at version={head.version}: {unfinished_text(head, still)}")
    committer = Committer(manifest, SEALER_ID)
    committer.start()
    try:
        while True:
            result = committer.attempt([], seal=True, mark="done", refuse_open=not force)
            if result.committed:
                return result.version
    except ManifestError:
        # a producer started meanwhile: leave the sealer "done" so it never holds a later seal back
        while not committer.attempt([], mark="done").committed:
            pass
        raise
