"""Pure transforms: the logic of the producer- and reader-side pipeline stages.

Functions of their arguments only (numpy/torch in, numpy/torch or plain Python
out): no I/O, no torchdata, no torch_tgb layer above ``errors``. The
``torchdata.nodes`` stages in ``datapipes/`` and the offline writers in
``offline/`` call into these, and tests hit them directly with hypothesis.

- ``shuffle``: permutations and ZeroBatch block-shuffle orders of (size, seed, epoch).
- ``packing``: BFD and concat packing of documents into rows, with document masks and ``cu_seqlens``.
- ``attention``: block-diagonal causal masks (dense for SDPA, ``BlockMask`` for flex_attention).
- ``balance``: row costs and equal-count partitions into dp slices (round robin, greedy LPT, Karmarkar–Karp),
  registered by name in ``BALANCERS``.
- ``balancer``: ``Balancer``, the pure plan of a global batch's rows over dp ranks x micro-batches.
- ``mixing``: mixture weight schedules over steps and the deterministic draw of a source.
- ``reweight``: mixture weights from per-domain losses (DoReMi's exponentiated gradient).
- ``partition``: permutation-then-partition of source units over shards, seeded window shuffles.
- ``media``: image and video decoding from bytes, sizes bounded by the header before decoding.
- ``vision``: resolutions and their schedules over steps, resize, patchify, image-token splicing.
- ``vlm_balance``: encoder + backbone costs of VLM rows, balance over dp ranks x micro-batches.
- ``audio``, ``audio_features``: audio decoding + resampling from bytes; log-mel features, audio token counts.
- ``bucketing``: shape-bucket keys, edges (given or learned), the order of bucketed batches, bucket resize.
- ``sample_keys``: samples' keys as a ragged uint8 field of a row, and back.
"""

from torch_tgb.transforms.attention import document_block_mask, document_mask, flatten_cu_seqlens
from torch_tgb.transforms.audio import AUDIO_EXTS, decode_audio
from torch_tgb.transforms.audio_features import LogMel, audio_token_count, mel_filters
from torch_tgb.transforms.balance import (
    BALANCERS,
    BalanceMethod,
    balance,
    balance_greedy,
    balance_kk,
    balance_round_robin,
    max_cost,
    part_costs,
    row_costs,
)
from torch_tgb.transforms.balancer import (
    Balancer,
    PhasedCost,
    Plan,
    RowCost,
    imbalance,
    plan_imbalances,
    price_lengths,
    price_rows,
)
from torch_tgb.transforms.bucketing import (
    BUCKET_KEYS,
    BucketResize,
    bucket_of,
    edges_between,
    learn_edges,
    next_bucket,
    plan_bucket_batches,
)
from torch_tgb.transforms.mixing import (
    Schedule,
    WeightsLike,
    as_schedule,
    check_weights,
    constant,
    draw_source,
    linear,
    parse_weights,
    piecewise,
)
from torch_tgb.transforms.packing import (
    IGNORE_INDEX,
    PACKERS,
    Span,
    cu_seqlens,
    pack,
    pack_bfd,
    pack_concat,
    pack_rows,
    packing_efficiency,
)
from torch_tgb.transforms.reweight import exponentiated_gradient
from torch_tgb.transforms.partition import partition_bounds, shard_assignment, window_permutation
from torch_tgb.transforms.sample_keys import SAMPLE_KEYS, decode_sample_keys, encode_sample_keys
from torch_tgb.transforms.shuffle import block_shuffle_order, permutation
from torch_tgb.transforms.vision import (
    Resolution,
    image_token_count,
    patchify,
    resolution_schedule,
    splice_image_tokens,
    target_size,
    unpatchify,
)
from torch_tgb.transforms.vlm_balance import (
    VLMCost,
    balance_vector,
    encoder_costs,
    micro_batch_plan,
    simulated_step_time,
)

__all__ = [
    "AUDIO_EXTS",
    "BALANCERS",
    "BUCKET_KEYS",
    "BalanceMethod",
    "Balancer",
    "BucketResize",
    "IGNORE_INDEX",
    "LogMel",
    "PACKERS",
    "PhasedCost",
    "Plan",
    "Resolution",
    "RowCost",
    "SAMPLE_KEYS",
    "Schedule",
    "Span",
    "VLMCost",
    "WeightsLike",
    "as_schedule",
    "audio_token_count",
    "balance",
    "balance_greedy",
    "balance_kk",
    "balance_round_robin",
    "balance_vector",
    "block_shuffle_order",
    "bucket_of",
    "check_weights",
    "constant",
    "cu_seqlens",
    "decode_audio",
    "decode_sample_keys",
    "document_block_mask",
    "document_mask",
    "draw_source",
    "edges_between",
    "encode_sample_keys",
    "encoder_costs",
    "exponentiated_gradient",
    "flatten_cu_seqlens",
    "image_token_count",
    "imbalance",
    "learn_edges",
    "linear",
    "max_cost",
    "mel_filters",
    "micro_batch_plan",
    "next_bucket",
    "pack",
    "pack_bfd",
    "pack_concat",
    "pack_rows",
    "packing_efficiency",
    "parse_weights",
    "part_costs",
    "partition_bounds",
    "patchify",
    "permutation",
    "piecewise",
    "plan_bucket_batches",
    "plan_imbalances",
    "price_lengths",
    "price_rows",
    "resolution_schedule",
    "row_costs",
    "shard_assignment",
    "simulated_step_time",
    "splice_image_tokens",
    "target_size",
    "unpatchify",
    "window_permutation",
]
