"""Object stores: one small interface, atomic create-if-absent on every backend.

Backends: :class:`LocalStore` (a directory), :class:`MemoryStore` (this
process), :class:`FsspecStore` (S3 and other fsspec URLs), :class:`GCSStore`
(``gs://``, extra ``gcs``), :class:`AzureBlobStore` (``az://``, ``abfs://``,
extra ``azure``). Wrappers:
:class:`RetryingStore` (backoff + jitter), :class:`FaultyStore` and
:class:`LatencyStore` (tests, benchmarks), :class:`HotTierStore` (a node-local cache of a remote
namespace's TGB objects, :func:`with_hot_tier`), :class:`NodeSharedStore` (the reader processes of a node
share their manifest reads, :func:`with_node_share`); :class:`StoreWrapper` and
:class:`ForwardingStore` are the bases for one's own. :func:`open_store` picks (by the URL's scheme, in
the :data:`STORES` registry, which a package extends with one registration) and wraps.
"""

from torch_tgb.storage._azure import AzureBlobStore
from torch_tgb.storage._base import CachingStore, ObjectInfo, ObjectStore, PartialObject, RangeFailure, RangeRequest
from torch_tgb.storage._gcs import GCSStore
from torch_tgb.storage._keys import validate_key, validate_prefix
from torch_tgb.storage._open import STORES, StoreFactory, open_store
from torch_tgb.storage._wrapper import ForwardingStore, StoreWrapper
from torch_tgb.storage.capabilities import CAPABILITIES_KEY, ensure_conditional_writes
from torch_tgb.storage.faulty import FaultPlan, FaultRates, FaultyStore
from torch_tgb.storage.fsspec_store import FsspecStore
from torch_tgb.storage.hot_tier import HotTierStore, with_hot_tier
from torch_tgb.storage.latency import LatencyStore
from torch_tgb.storage.local import LocalStore
from torch_tgb.storage.memory import MemoryStore
from torch_tgb.storage.node_share import NodeSharedStore, with_node_share
from torch_tgb.storage.retry import RetryingStore, RetryPolicy

__all__ = [
    "AzureBlobStore",
    "CAPABILITIES_KEY",
    "CachingStore",
    "FaultPlan",
    "FaultRates",
    "FaultyStore",
    "ForwardingStore",
    "FsspecStore",
    "GCSStore",
    "HotTierStore",
    "LatencyStore",
    "LocalStore",
    "MemoryStore",
    "NodeSharedStore",
    "ObjectInfo",
    "ObjectStore",
    "PartialObject",
    "RangeFailure",
    "RangeRequest",
    "RetryPolicy",
    "RetryingStore",
    "STORES",
    "StoreFactory",
    "StoreWrapper",
    "ensure_conditional_writes",
    "open_store",
    "validate_key",
    "validate_prefix",
    "with_hot_tier",
    "with_node_share",
]
