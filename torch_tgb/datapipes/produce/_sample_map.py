"""SampleMap: the base of the per-sample media stages, with their bad-input policy and counters.

A stage maps each sample (a document dict) to a new one with ``_apply``.
``_apply`` raises :class:`~torch_tgb.errors.SourceError` (usually a
``MediaError`` with a ``reason``) for a sample it cannot use;
``on_error="skip"`` drops that sample and counts it under its reason,
``"raise"`` stops with the error, naming the sample's ``__key__``. Any other
exception is a bug and propagates.

State: the source's state under ``"source"`` (a map buffers nothing: the
next sample is the source's next) and the counters under ``"counts"``
(restored, so a resumed producer reports totals; ``inputs``, the samples
pulled from the source, is also the step clock of ``ResizeImages``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchdata.nodes import BaseNode

from torch_tgb._on_error import OnError, check_on_error
from torch_tgb.errors import MediaError, SourceError

__all__ = ["MediaStats", "SampleMap"]

Document = dict[str, Any]


@dataclass(frozen=True)
class MediaStats:
    """A media stage's work since it started (restored with its state)."""

    #: samples pulled from the source
    inputs: int = 0
    #: samples passed on
    samples: int = 0
    #: images (or clips) handled in the samples passed on
    items: int = 0
    #: samples dropped under ``on_error="skip"``
    skipped: int = 0
    #: the skips by reason (``corrupt``, ``too_large``, ``format``, ...): metrics ``skipped_by_reason_<reason>``
    skipped_by_reason: dict[str, int] = field(default_factory=dict)


class SampleMap(BaseNode[Document]):
    """Maps samples one by one; see the module docstring."""

    SOURCE_KEY = "source"
    COUNTS_KEY = "counts"

    def __init__(self, source: BaseNode[Any], *, on_error: OnError = "skip") -> None:
        super().__init__()
        check_on_error(on_error, where=type(self).__name__)
        self.source = source
        self.on_error = on_error
        self._counts: dict[str, int] = {}
        self._reasons: dict[str, int] = {}

    def _apply(self, doc: Document) -> Document:
        raise NotImplementedError

    def _items(self, doc: Document) -> int:
        """Images or clips in a mapped sample (for the counters)."""
        return 0

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(initial_state)
        state = initial_state or {}
        self.source.reset(state.get(self.SOURCE_KEY))
        counts = dict(state.get(self.COUNTS_KEY, {}))
        self._reasons = {str(k): int(v) for k, v in counts.pop("skipped_by_reason", {}).items()}
        self._counts = {k: int(counts.get(k, 0)) for k in ("inputs", "samples", "items", "skipped")}

    def get_state(self) -> dict[str, Any]:
        return {self.SOURCE_KEY: self.source.state_dict(),
                self.COUNTS_KEY: {**self._counts, "skipped_by_reason": dict(self._reasons)}}

    @property
    def inputs(self) -> int:
        """Samples pulled from the source so far (before this one is mapped)."""
        return self._counts.get("inputs", 0)

    def next(self) -> Document:
        while True:
            doc = next(self.source)
            try:
                out = self._apply(doc)
            except SourceError as e:
                self._counts["inputs"] += 1
                if self.on_error == "raise":
                    raise type(e)(*_with_where(e, doc)) from e
                reason = e.reason if isinstance(e, MediaError) else "error"
                self._counts["skipped"] += 1
                self._reasons[reason] = self._reasons.get(reason, 0) + 1
                continue
            self._counts["inputs"] += 1
            self._counts["samples"] += 1
            self._counts["items"] += self._items(out)
            return out

    def stats(self) -> MediaStats:
        c = self._counts
        return MediaStats(inputs=c.get("inputs", 0), samples=c.get("samples", 0), items=c.get("items", 0),
                          skipped=c.get("skipped", 0), skipped_by_reason=dict(self._reasons))


def _with_where(e: SourceError, doc: Document) -> tuple[Any, ...]:
    where = f"{type(e).__name__} in sample {doc.get('__key__')!r}"
    url = doc.get("__url__")
    message = f"{url}: {where}: {e}" if url else f"{where}: {e}"
    return (message, e.reason) if isinstance(e, MediaError) else (message,)
