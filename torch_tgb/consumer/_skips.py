"""Skipping corrupt or missing steps by agreement (``ReaderOptions(on_corrupt="skip_step", max_skipped=N)``).

Three parts, one per place a step passes:

- the read path (:class:`Skips`, in the process that reads, a DataLoader
  worker or the trainer's): a step whose TGB it cannot read, or whose TGB a
  marker in the namespace names, gets the verdict SKIP; a new one is marked
  in the namespace (``manifest/skips.py``: first writer wins) so restarts,
  resumes and other world sizes skip it too. Every step handed on carries
  ``SKIP_KEY``: ``[step, verdict]``; a skipped one carries nothing else;
- the gate (:func:`gate`, in the trainer's process): the ranks agree on each
  step's verdict (``distributed/agreement.py``), a step any rank skips is
  dropped on every rank, and the count is checked against ``max_skipped``:
  past it the run stops with :class:`~torch_tgb.errors.CorruptObject`
  naming the steps;
- the statistics: ``skipped_steps`` in the reader's stats and Prometheus.

``on_corrupt="raise"`` (the default) does none of this: the first corrupt
step raises, as it always did.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

import torch

from torch_tgb.datapipes.read import StepBatch
from torch_tgb.distributed.agreement import END, OK, SKIP, StepAgreement
from torch_tgb.errors import CorruptObject, TGBError
from torch_tgb.manifest.skips import SkipRecord, mark_skipped, skipped_steps
from torch_tgb.storage import ObjectStore

__all__ = ["ON_CORRUPT", "SKIP_KEY", "SkipCount", "Skips", "gate"]

log = logging.getLogger(__name__)

ON_CORRUPT = ("raise", "skip_step")
#: the key of ``[step, verdict]`` in every batch a skipping read path hands on (popped by the gate)
SKIP_KEY = "__tgb_skip__"


class Skips:
    """The read path's side: which steps it skips, and the markers it writes. One per reader process."""

    def __init__(self, store: ObjectStore, *, namespace: str) -> None:
        self.store = store
        self.namespace = namespace
        self.known: dict[int, SkipRecord] = skipped_steps(store, where=f"{namespace}: ")

    def verdict(self, batch: StepBatch) -> dict[str, torch.Tensor]:
        """``batch``'s tensors with ``SKIP_KEY``, or only ``SKIP_KEY`` for a step it skips (marked if new)."""
        task = batch.task
        steps = [e.tgb_step for e in task.entries]
        if batch.error is not None:
            self._mark(batch.error, task.entries)
            return {SKIP_KEY: torch.tensor([task.cursor.step, SKIP])}
        if any(s in self.known for s in steps):
            return {SKIP_KEY: torch.tensor([task.cursor.step, SKIP])}
        return {**batch.tensors, SKIP_KEY: torch.tensor([task.cursor.step, OK])}

    def _mark(self, error: TGBError, entries: Any) -> None:
        """Mark the TGB steps the error names (by object key), else every TGB of the step."""
        text = str(error)
        named = [e for e in entries if e.key in text] or list(entries)
        for e in named:
            if e.tgb_step not in self.known:
                mark_skipped(self.store, e.tgb_step, _one_line(text), key=e.key)
                self.known[e.tgb_step] = SkipRecord(e.tgb_step, _one_line(text), e.key)
                log.warning("%s: skipping step %d (TGB step %d): %s", self.namespace, e.tgb_step, e.tgb_step,
                            _one_line(text))


class SkipCount:
    """The gate's side: steps skipped so far (by consumer step), against ``max_skipped``."""

    def __init__(self, *, max_skipped: int, namespace: str) -> None:
        self.max_skipped = max_skipped
        self.namespace = namespace
        self.steps: list[int] = []

    def add(self, step: int) -> None:
        self.steps.append(step)
        if len(self.steps) > self.max_skipped:
            raise CorruptObject(
                f"{self.namespace}: {len(self.steps)} steps skipped as corrupt or missing, over max_skipped="
                f"{self.max_skipped}: steps {self.steps[:20]}{' ...' if len(self.steps) > 20 else ''} "
                "(`tgb verify` the namespace; `tgb inspect` lists the markers)"
            )


def gate(batches: Iterator[Any], count: SkipCount, agreement: StepAgreement) -> Iterator[Any]:
    """``batches`` (each with ``SKIP_KEY``) without the steps any rank skips, ``SKIP_KEY`` popped."""
    for batch in batches:
        marker = batch.pop(SKIP_KEY, None) if isinstance(batch, dict) else None
        if marker is None:  # not from a skipping read path
            yield batch
            continue
        step, mine = (int(x) for x in marker.tolist())
        if agreement.verdict(step, mine) == SKIP:
            count.add(step)
            continue
        yield batch
    agreement.verdict(-1, END)


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text)[:1000]
