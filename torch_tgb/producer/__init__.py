"""Producers: append TGBs, commit them to the manifest log under a commit policy."""

from torch_tgb.producer.config import ProducerConfig
from torch_tgb.producer.options import ProduceOptions, ProduceSettings
from torch_tgb.producer.pipeline import ProduceReport, produce
from torch_tgb.producer.policies import (
    COMMIT_POLICIES,
    AIMDPolicy,
    CommitPolicy,
    DACConfig,
    DACPolicy,
    FixedPolicy,
    IncrPolicy,
    NaivePolicy,
    make_policy,
)
from torch_tgb.producer.producer import Producer, object_key
from torch_tgb.producer.stats import ProducerStats

__all__ = [
    "AIMDPolicy",
    "COMMIT_POLICIES",
    "CommitPolicy",
    "DACConfig",
    "DACPolicy",
    "FixedPolicy",
    "IncrPolicy",
    "NaivePolicy",
    "ProduceOptions",
    "ProduceReport",
    "ProduceSettings",
    "Producer",
    "ProducerConfig",
    "ProducerStats",
    "make_policy",
    "object_key",
    "produce",
]
