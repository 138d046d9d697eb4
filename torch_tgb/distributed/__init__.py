"""Distributed helpers of the consumer: the cross-rank consistency check, agreement on skipped steps, and one
read per TP/PP group (``GroupBroadcast``).

Rank resolution (``Mesh.from_env``, ``Mesh.from_device_mesh``) lives in
``torch_tgb.layout``.
"""

from torch_tgb.distributed.broadcast import GroupBroadcast, groups_of
from torch_tgb.distributed.consistency import ConsistencyChecker, keys_digest

__all__ = ["ConsistencyChecker", "GroupBroadcast", "groups_of", "keys_digest"]
