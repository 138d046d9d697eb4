"""Distributed helpers of the consumer: the cross-rank consistency check.

Rank resolution (``Mesh.from_env``, ``Mesh.from_device_mesh``) lives in
``torch_tgb.layout``.
"""

from torch_tgb.distributed.consistency import ConsistencyChecker, keys_digest

__all__ = ["ConsistencyChecker", "keys_digest"]
