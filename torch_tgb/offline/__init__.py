"""Offline corpora: pack, shuffle and commit pre-tokenised data as a sealed namespace.

``write_dataset`` streams documents (``sources.TokenFile`` over an array, or
any document node) through the producer's stages
(``datapipes.document_batches``: ``Pack`` -> ``GlobalBatches``) into
``tgb.produce``; ``convert_llmbatch`` commits through a ``Producer``. The
pure building blocks (``pack_bfd``, ``pack_rows``, ``permutation``, ...) live in
``torch_tgb.transforms``; they and ``document_batches`` are re-exported here.
"""

from torch_tgb.format.llmbatch import LLMBatchReader, write_llmbatch
from torch_tgb.datapipes.produce.batches import Batching, document_batches
from torch_tgb.offline.convert import convert_llmbatch
from torch_tgb.offline.dataset import as_documents, build_rows, write_dataset
from torch_tgb.transforms.packing import IGNORE_INDEX, pack_bfd, pack_rows, packing_efficiency
from torch_tgb.transforms.shuffle import block_shuffle_order, permutation

__all__ = [
    "IGNORE_INDEX",
    "Batching",
    "LLMBatchReader",
    "as_documents",
    "block_shuffle_order",
    "build_rows",
    "convert_llmbatch",
    "document_batches",
    "pack_bfd",
    "pack_rows",
    "packing_efficiency",
    "permutation",
    "write_dataset",
    "write_llmbatch",
]
