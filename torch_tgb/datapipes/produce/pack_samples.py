"""PackSamples: multimodal samples into rows of ``seq_len`` backbone tokens, with their ragged pixels.

A sample (as ``SpliceImageTokens`` yields it) has ``"tokens"``, its
backbone sequence with image tokens already in place, and ragged fields
(``"pixel_values"`` ``[n, D]``, ``"image_grid_thw"`` ``[k, 3]``, ...). A
window of samples is packed by total tokens with best-fit decreasing
(``transforms.pack_bfd``); a sample is never split (its image tokens and its
patches must stay in one row), so a sample longer than ``seq_len`` is a bad
input (``on_error``: ``"skip"`` counts it as ``too_long``, ``"raise"``
stops).

A row has the dense fields of ``Pack`` (``input_ids``, ``labels``,
``document_ids``, ``position_ids`` ``[seq_len]``; ``cu_seqlens``
``[seq_len + 1]`` and ``max_seqlen`` ``[1]`` with ``attention_metadata``),
where ``labels`` is also ``-100`` wherever the next token is one of
``label_ignore_ids`` (image tokens are inputs, not targets); and each ragged
field as the concatenation, in the row's span order, of its samples' values:
row ``r``'s image ``i`` is the ``i``-th run of image tokens in its
``input_ids``. ``ragged_keys`` lists them for ``GlobalBatches`` (which
passes them to ``Producer.append`` as ragged keys).

With provenance (on when the source names its records) a row also has
``provenance`` (a span per sample) and ``provenance_counts`` (int32
``[samples, K]``: each sample's entries in each media key, by name:
``transforms.provenance.media_keys``), which ``tgb excise`` needs to take a
sample's pixels out with its tokens; a trainer's default batch has neither.

``sample_keys=True`` adds the ragged uint8 field ``sample_keys``: the row's
samples' ``__key__`` (``transforms.encode_sample_keys``: UTF-8, each ended
by a NUL, in the row's sample order), so a trainer can audit which samples it
got (``transforms.decode_sample_keys``); off by default (it costs the keys'
bytes in every TGB).

State: ``Pack``'s (this is a ``Pack`` with another window packer): the
source's state at the start of the current window and the rows of it already
yielded; a restore re-reads and re-packs the window. ``stats()``: rows,
samples, tokens, patches, skipped and packing efficiency.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torchdata.nodes import BaseNode

from torch_tgb._on_error import OnError, check_on_error
from torch_tgb.datapipes.produce.pack import Pack, PackStats
from torch_tgb.errors import MediaError
from torch_tgb.transforms import IGNORE_INDEX, SAMPLE_KEYS, encode_sample_keys, pack_bfd, pack_rows
from torch_tgb.transforms.provenance import COUNTS_KEY, PROVENANCE_KEY, PROVENANCE_KEYS, media_keys, span_provenance

__all__ = ["RAGGED_KEYS", "PackSamples", "SamplePackStats"]

#: the ragged fields a sample may carry, in the order rows list them
RAGGED_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw")


@dataclass(frozen=True)
class SamplePackStats(PackStats):
    """``PackStats`` (``documents`` are samples, ``tokens`` text and image tokens, ``splits`` always 0) plus:"""

    #: patches packed (all ragged ``pixel_values*`` rows)
    patches: int = 0
    #: samples longer than ``seq_len`` dropped under ``on_error="skip"``
    skipped: int = 0


class PackSamples(Pack):
    """Packs multimodal samples into rows; see the module docstring."""

    #: the reason its skips are counted under in a produce report
    SKIP_REASON = "too_long"

    def __init__(
        self,
        source: BaseNode[Any],
        seq_len: int,
        *,
        window: int = 256,
        pad_id: int = 0,
        label_ignore_ids: Sequence[int] = (),
        ragged_keys: Sequence[str] | None = None,
        attention_metadata: bool = True,
        on_error: OnError = "skip",
        sample_keys: bool = False,
    ) -> None:
        super().__init__(source, seq_len, window=window, pad_id=pad_id, attention_metadata=attention_metadata)
        check_on_error(on_error, where="PackSamples")
        self.label_ignore_ids = tuple(int(i) for i in label_ignore_ids)
        self._ragged = None if ragged_keys is None else tuple(ragged_keys)
        self._counted: tuple[str, ...] = ()  # the media keys provenance counts per sample (COUNTS_KEY)
        self.on_error = on_error
        self.sample_keys = bool(sample_keys)
        self._counts = dict.fromkeys(("rows", "documents", "tokens", "splits", "patches", "skipped"), 0)

    @property
    def ragged_keys(self) -> tuple[str, ...]:
        """The ragged fields of the rows (given, or those of ``RAGGED_KEYS`` the first sample has; + ``sample_keys``
        and ``provenance`` when asked for)."""
        media = self._ragged if self._ragged is not None else ("pixel_values", "image_grid_thw")
        media = tuple(k for k in media if k not in (SAMPLE_KEYS, *PROVENANCE_KEYS))
        keys = (*media, SAMPLE_KEYS) if self.sample_keys else media
        return (*keys, PROVENANCE_KEY, COUNTS_KEY) if self.provenance else keys

    def stats(self) -> SamplePackStats:
        c = self._counts
        efficiency = c["tokens"] / (c["rows"] * self.seq_len) if c["rows"] else 1.0
        return SamplePackStats(packing_efficiency=efficiency, **c)

    def _fill(self) -> None:
        samples: list[dict[str, Any]] = []
        for sample in self.source:
            n = int(sample["tokens"].numel())
            if n > self.seq_len:
                if self.on_error == "raise":
                    raise MediaError(f"PackSamples: sample {sample.get('__key__')!r} has {n} tokens > "
                                     f"seq_len={self.seq_len}; it cannot be split", "too_long")
                self._counts["skipped"] += 1
                continue
            samples.append(sample)
            if len(samples) >= self.window:
                break
        if not samples:
            return
        if self._ragged is None:
            self._ragged = tuple(k for k in RAGGED_KEYS if k in samples[0])
        self._counted = media_keys(self._ragged)
        docs = [s["tokens"].reshape(-1).numpy() for s in samples]
        lengths = np.array([len(d) for d in docs], dtype=np.int64)
        bins = pack_bfd(lengths, self.seq_len)  # no sample exceeds seq_len: none is split
        tokens = np.concatenate(docs)
        rows = pack_rows(tokens, np.concatenate([[0], np.cumsum(lengths)]), bins, self.seq_len, pad_id=self.pad_id,
                         dtype=tokens.dtype, attention_metadata=self.attention_metadata)
        if self.label_ignore_ids:
            rows["labels"][np.isin(rows["labels"], self.label_ignore_ids)] = IGNORE_INDEX
        self._counts["rows"] += len(bins)
        self._counts["documents"] += len(samples)
        self._counts["tokens"] += int(lengths.sum())
        ids = np.asarray([self._doc_id(sample) for sample in samples], dtype=np.int64) if self.provenance else None
        for r, row in enumerate(bins):
            out: dict[str, Any] = {name: torch.from_numpy(np.ascontiguousarray(a[r])) for name, a in rows.items()}
            if ids is not None:
                doc, start, end = (np.asarray(c, dtype=np.int64) for c in zip(*row)) if row else (np.zeros(0, np.int64),) * 3
                out[PROVENANCE_KEY] = torch.from_numpy(span_provenance(ids, doc, start, end - start))
            if ids is not None:  # each sample's entries in each media key: what an excision takes out with it
                counts = [[int(self._ragged_value(samples[doc], k).shape[0]) for k in self._counted]
                          for doc, _, _ in row]
                out[COUNTS_KEY] = torch.tensor(counts, dtype=torch.int32).reshape(len(row), len(self._counted))
            for key in self._ragged:
                if key == SAMPLE_KEYS:
                    continue  # made below from the samples' keys
                parts = [self._ragged_value(samples[doc], key) for doc, _, _ in row]
                out[key] = torch.cat(parts) if parts else self._empty(samples[0], key)
                if key.startswith("pixel_values"):
                    self._counts["patches"] += int(out[key].shape[0])
            if self.sample_keys:
                out[SAMPLE_KEYS] = encode_sample_keys([samples[doc].get("__key__") for doc, _, _ in row])
            self._rows.append(out)

    def _ragged_value(self, sample: dict[str, Any], key: str) -> torch.Tensor:
        if key not in sample:
            raise MediaError(f"PackSamples: sample {sample.get('__key__')!r} has no {key!r} (ragged keys "
                             f"{list(self.ragged_keys)} must be in every sample)", "schema")
        return sample[key]

    def _empty(self, like: dict[str, Any], key: str) -> torch.Tensor:
        value = self._ragged_value(like, key)
        return value.new_zeros((0, *value.shape[1:]))
