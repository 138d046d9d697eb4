"""The one error hierarchy of torch_tgb.

Every error a user can see is a :class:`TGBError`. Where a builtin says the
same thing (a missing object is a ``FileNotFoundError``, a malformed input a
``ValueError``) the error subclasses it too, so generic handlers keep working.
Messages name the namespace, key, version or step concerned; the original
cause is chained with ``raise ... from e``.
"""

from __future__ import annotations

__all__ = [
    "AmbiguousWriteError",
    "CommitConflict",
    "ConditionalWriteUnsupported",
    "ConsistencyError",
    "CorruptObject",
    "DataTimeout",
    "FencedError",
    "FleetError",
    "FrameworkError",
    "InvalidKey",
    "JobMismatch",
    "LayoutError",
    "ManifestError",
    "MediaError",
    "MissingExtra",
    "MixtureError",
    "NamespaceNotFound",
    "NamespaceSealed",
    "ObjectNotFound",
    "ProvenanceError",
    "RegistryError",
    "SchemaMismatch",
    "ShardComplete",
    "SourceError",
    "StorageError",
    "StorageFull",
    "TGBError",
    "TransientStorageError",
]


class TGBError(Exception):
    """Base class of every error raised by torch_tgb."""


# --- storage -----------------------------------------------------------------


class StorageError(TGBError, OSError):
    """An object-store operation failed permanently (or after all retries)."""


class ObjectNotFound(StorageError, FileNotFoundError):
    """The key does not exist in the namespace."""


class NamespaceNotFound(ObjectNotFound):
    """The namespace cannot exist there: a missing bucket, or a local path whose parent directory is missing.

    A reader may start before the first producer of an *existing* place
    (an empty directory, a bucket), so those wait; a typo does not.
    """


class InvalidKey(StorageError, ValueError):
    """A key is not a safe relative path inside the namespace."""


class StorageFull(StorageError):
    """The store refused a write for lack of space (ENOSPC, quota)."""


class TransientStorageError(StorageError):
    """A failure that may go away on retry: timeout, 5xx, throttling, 409."""


class AmbiguousWriteError(TransientStorageError):
    """A write whose outcome is unknown: the request was sent, no reply came.

    The write may or may not have landed. Callers of ``put_if_absent`` must
    read the key back and compare content before deciding (the "lost
    acknowledgement" case of the commit protocol).
    """


class ConditionalWriteUnsupported(StorageError):
    """The store does not honour create-if-absent; it cannot host a namespace."""


class RegistryError(TGBError, ValueError):
    """A name a registry does not know (the error lists those it does), or a name registered twice."""


class MissingExtra(TGBError, ImportError):
    """An optional dependency is not installed; the message names the extra that installs it.

    One line, e.g. ``gs://bucket/ns: GCS needs google-cloud-storage: pip install "torch-tgb[gcs]"``.
    """


# --- format, layout, manifest -----------------------------------------------


class CorruptObject(TGBError, ValueError):
    """A stored object is malformed, truncated or fails its checksum."""


class SchemaMismatch(TGBError, ValueError):
    """A producer's or consumer's layout/schema disagrees with the namespace."""


class LayoutError(TGBError, ValueError):
    """A batch cannot be cut by a Layout, or a Mesh cannot read a Layout."""


class ManifestError(TGBError, ValueError):
    """A manifest version, snapshot or dataset.json is malformed or inconsistent."""


class MixtureError(TGBError, ValueError):
    """Mixture weights or a schedule are invalid (negative, all zero, unknown source) at some step."""


class NamespaceSealed(ManifestError):
    """The namespace is sealed (its stream has ended): no producer may start or commit there."""


class JobMismatch(ManifestError):
    """A producer does not belong to the namespace's job of declared shards (another shard count, prefix or id)."""


class ShardComplete(TGBError):
    """This producer's shard of a declared job is already done: rerunning it is a no-op.

    ``producer_id``, ``next_offset`` (its offsets are ``0 .. next_offset - 1``)
    and ``sealed`` (whether the namespace is sealed) say what the rerun found.
    """

    def __init__(self, message: str, *, producer_id: str = "", next_offset: int = 0, sealed: bool = False) -> None:
        super().__init__(message)
        self.producer_id = producer_id
        self.next_offset = next_offset
        self.sealed = sealed


class ControlConflict(ManifestError):
    """A control record cannot take effect at the step asked for: the producers have passed it (names the step)."""


class ConsistencyError(ManifestError):
    """Ranks of one job disagree on the step sequence (``check_consistency=True``)."""


class SourceError(TGBError, ValueError):
    """A data source cannot be read: wrong file type, missing column, bad dtype, corrupt record.

    The message names the file (and the unit and record where known).
    """


class MediaError(SourceError):
    """An image or video cannot be used: empty, corrupt or truncated, too large, of a format not allowed.

    ``reason`` is a short fixed word (``"empty"``, ``"corrupt"``, ``"too_large"``,
    ``"zero_size"``, ``"format"``, ...) under which the stages count skips.
    """

    def __init__(self, message: str, reason: str = "corrupt") -> None:
        super().__init__(message)
        self.reason = reason

    def __reduce__(self) -> tuple[type[MediaError], tuple[str, str]]:  # keeps the reason across processes
        return (type(self), (str(self), self.reason))


# --- protocol ------------------------------------------------------------------


class CommitConflict(TGBError):
    """Another producer committed the version we tried to write.

    No public call raises it: a conflict is the normal outcome of racing
    producers, reported as ``AttemptResult.conflict`` by
    ``manifest.Committer.attempt`` and retried by the producer after a rebase
    (counted in ``ProducerStats.conflicts``). The name stays public (API.md) for
    code that drives ``Committer.attempt`` itself and turns a conflict into an
    exception.
    """


class FencedError(TGBError):
    """A newer incarnation of this producer_id exists; this one must stop."""


class DataTimeout(TGBError, TimeoutError):
    """No new step became visible within the consumer's timeout."""


class FrameworkError(TGBError, RuntimeError):
    """A training framework would use a TGB loader in a way that trains wrong data; the message says what to use.

    Raised before the first wrong batch: accelerate re-sharding a TGB dataset that
    already reads one rank's slice, a skip on top of a restored position, a
    framework restoring a loader's position after it started reading.
    """


class ProvenanceError(TGBError, ValueError):
    """Provenance is missing, malformed or cannot answer: a row without it, a record no source names,
    a lineage index that does not cover the namespace, rows an excision cannot rewrite."""


# --- fleets ---------------------------------------------------------------------


class FleetError(TGBError):
    """A producer fleet (``torch_tgb.integrations``) cannot start or cannot finish; names the shard."""
