"""The TGB object format: one immutable object per global batch.

Byte layout (little-endian throughout; full spec in ``docs/format.md``)::

    offset 0 ┌──────────────────────────────────────────────┐
             │ slice (dp=0, cp=0): tensor 0 │ pad │ tensor 1 … │  tensors at 64-byte aligned offsets
             ├─ zero padding to a multiple of 4096 ──────────┤
             │ slice (dp=0, cp=1)                            │  slices dp-major: (0,0) (0,1) … (1,0) …
             ├───────────────────────────────────────────────┤
             │ …                                             │
             │ slice (dp=D-1, cp=C-1)                        │
             ├─ zero padding to a multiple of 64 ────────────┤  footer_offset
             │ footer: header 32 B │ meta JSON │ slice table │
             │         tensor table │ dims                   │  footer_length bytes
             ├───────────────────────────────────────────────┤
             │ trailer 24 B: footer_length u64 │ footer CRC32C u32 │
             │               format_version u32 │ magic "\\x89TGB\\r\\n\\x1a\\n" │
    size     └──────────────────────────────────────────────┘

Every slice starts on a 4096-byte boundary so a memory-mapped object yields
page-aligned tensors with no copy; each tensor carries its own CRC32C.
"""

from torch_tgb.format._codecs import CODECS, Codec, parse_codec
from torch_tgb.format._contract import Contract
from torch_tgb.format._dtypes import (
    DTYPES, KEEP, WIDEN, DType, IntegerCast, cast_integers, cast_tensor, is_integer, narrowing_problem,
)
from torch_tgb.format._footer import (
    V3_SLICE_ALIGN,
    FORMAT_VERSION,
    FORMAT_VERSIONS,
    SLICE_ALIGN,
    TENSOR_ALIGN,
    TRAILER_MAGIC,
    TRAILER_SIZE,
    Footer,
    SliceInfo,
    TensorInfo,
    footer_from_records,
    parse_footer,
)
from torch_tgb.format._records import meta_range, record_range, record_width
from torch_tgb.format._padding import check_padding, padding_ranges
from torch_tgb.format._reader import (
    READ_MODES,
    READ_WHOLE_BELOW,
    VERIFY_POLICIES,
    SliceReader,
    SliceRun,
    decode_slice,
    read_footer,
    read_slice,
    verify_policy,
    writable,
)
from torch_tgb.format._run import FooterRun, parse_footer_run
from torch_tgb.format._segment_index import (
    INDEX_TAIL_READ,
    INDEX_TRAILER_SIZE,
    MAX_INDEX_BYTES,
    SegmentIndex,
    encode_segment_index,
    parse_index_trailer,
    read_segment_index,
    segment_index,
)
from torch_tgb.format._schema import check_schema, coded_keys, ragged_keys, schema_fingerprint, schema_of
from torch_tgb.format._spec import CODEC_VERSION, MAX_FOOTER_BYTES
from torch_tgb.format._writer import SliceData, TGBObject, check_codecs, encode_batch, encode_tgb, write_tgb

__all__ = [
    "CODECS",
    "CODEC_VERSION",
    "DTYPES",
    "FORMAT_VERSION",
    "FORMAT_VERSIONS",
    "INDEX_TAIL_READ",
    "INDEX_TRAILER_SIZE",
    "MAX_FOOTER_BYTES",
    "MAX_INDEX_BYTES",
    "READ_MODES",
    "READ_WHOLE_BELOW",
    "SLICE_ALIGN",
    "V3_SLICE_ALIGN",
    "TENSOR_ALIGN",
    "TRAILER_MAGIC",
    "TRAILER_SIZE",
    "Codec",
    "Contract",
    "DType",
    "Footer",
    "FooterRun",
    "SegmentIndex",
    "SliceData",
    "SliceInfo",
    "SliceReader",
    "SliceRun",
    "TGBObject",
    "TensorInfo",
    "VERIFY_POLICIES",
    "WIDEN",
    "IntegerCast",
    "KEEP",
    "cast_integers",
    "cast_tensor",
    "check_codecs",
    "check_padding",
    "check_schema",
    "coded_keys",
    "decode_slice",
    "encode_segment_index",
    "encode_batch",
    "encode_tgb",
    "is_integer",
    "narrowing_problem",
    "padding_ranges",
    "ragged_keys",
    "footer_from_records",
    "meta_range",
    "parse_codec",
    "parse_footer",
    "parse_footer_run",
    "record_range",
    "record_width",
    "parse_index_trailer",
    "read_footer",
    "read_segment_index",
    "read_slice",
    "schema_fingerprint",
    "schema_of",
    "segment_index",
    "verify_policy",
    "writable",
    "write_tgb",
]
