"""The bar and the stats line of ``tgb produce``: work done of a known total, rates, lag, stall, skips.

The bar counts what the work is made of where the total is known before the
run: the tokens of a token file, the rows of Parquet/Lance, the samples of
local tar shards (``SourceWork`` of the pipeline's sources), or the tokens
of the synthetic / ``--tokens`` stream; otherwise TGBs. Its clock starts at
the first TGB appended, so the ETA is the rest of the work at the rate seen
since then (a resumed run starts at the work already done).

``--stats-interval`` adds one short line every N seconds, written above the
bar: share done, rates, TGBs committed and pending, lag (steps ahead of the
readers' safe boundary: what ``--max-lag`` bounds), time paused (stall) and
samples skipped by reason. The raw counters stay in ``--json``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from torch_tgb._progress import bar_logging, count_text, progress, progress_enabled, rate_text, say, share_text

if TYPE_CHECKING:
    from torch_tgb._progress import ProgressBar
    from torch_tgb.producer import Producer
    from torch_tgb.sources._work import SourceWork

__all__ = ["ProduceProgress", "skipped_text"]


def skipped_text(skipped: dict[str, int]) -> str:
    """``{"corrupt": 2, "format": 1}`` -> ``'3 samples skipped (corrupt 2, format 1)'``; ``''`` for none."""
    total = sum(skipped.values())
    if not total:
        return ""
    return f"{total} sample{'s' if total != 1 else ''} skipped ({', '.join(f'{k} {v}' for k, v in skipped.items())})"


@dataclass
class _Seen:
    """What the main thread saw at the last append (the stats thread reads it, never the pipeline)."""

    batches: int = 0
    done: float = 0.0
    skipped: dict[str, int] = field(default_factory=dict)
    at: float = 0.0


class ProduceProgress:
    """One run's bar (drawn on a terminal) and stats lines; use :meth:`watch` as ``produce(watch=...)``.

    ``measure()`` says the work done so far (a ``SourceWork``) or None; it is
    called in the producing thread only. ``per_batch``: the work of one TGB
    when it is fixed (``(tokens, "token")`` of the synthetic stream) and no
    ``measure`` is given; ``batches``: the offsets the producer will hold at
    the end when known (``--steps``: then the bar counts TGBs, or
    ``per_batch`` units, from the producer's resume offset).
    """

    def __init__(
        self,
        label: str,
        *,
        measure: Callable[[], SourceWork | None] | None = None,
        skips: Callable[[], dict[str, int]] | None = None,
        per_batch: tuple[int, str] | None = None,
        batches: int | None = None,
        enabled: bool | None = None,
        stats_interval: float | None = None,
    ) -> None:
        self.label = label
        self._measure, self._skips = measure, skips
        self._per_batch = per_batch
        self._batches_total = batches
        self.enabled = progress_enabled() if enabled is None else enabled
        self.stats_interval = stats_interval
        self._seen = _Seen()
        self._bar: ProgressBar[object] | None = None
        self.unit, self.total = "TGB", None if batches is None else float(batches)
        self._started: float | None = None
        self._start_done = 0.0
        self._last_skips = 0.0
        self._lock = threading.Lock()

    # --- what the bar counts -------------------------------------------------------------

    def _work(self) -> tuple[float, float | None, str]:
        """(done, total, unit) now, in the unit chosen when the run started."""
        if self._measure is not None and self._batches_total is None:
            work = self._measure()
            if work is not None and work.total is not None:
                return float(work.done), float(work.total), work.unit
        if self._per_batch is not None:
            size, unit = self._per_batch
            total = None if self._batches_total is None else float(self._batches_total * size)
            return float(self._seen.batches * size), total, unit
        return float(self._seen.batches), None if self._batches_total is None else float(self._batches_total), "TGB"

    @contextlib.contextmanager
    def watch(self, producer: Producer) -> Iterator[None]:
        """Draw the bar (log lines above it) and run the stats line while the producer is open."""
        self._seen.batches = producer.resume_offset  # counts of TGBs are offsets: a resumed run starts there
        done, self.total, self.unit = self._work()
        self._bar = progress(total=self.total, desc=self.label, unit=self.unit if self.unit != "token" else "tok",
                             enabled=self.enabled, unit_scale=True, smoothing=0, initial=done)
        stop = threading.Event()
        thread = None
        if self.stats_interval:
            thread = threading.Thread(target=self._stats_loop, args=(producer, stop), name="tgb-produce-stats",
                                      daemon=True)
            thread.start()
        try:
            with bar_logging(self.enabled):
                yield
        finally:
            stop.set()
            if thread is not None:
                thread.join()
                say(self.stats_line(producer))
            self._bar.close()

    def on_append(self, offset: int) -> None:
        """Called after each TGB appended (``produce(on_append=...)``): advance the bar."""
        now = time.monotonic()
        self._seen.batches += 1
        done, _, unit = self._work()
        if unit != self.unit:  # the measure changed its unit (it cannot, but never draw nonsense)
            done = float(self._seen.batches)
        bar = self._bar
        if self._started is None:
            # the clock starts at the first TGB: a resumed run's earlier work and the first fill are not timed
            self._started, self._start_done = now, done
            if bar is not None:
                bar.reset(total=self.total)
                bar.initial = bar.n = done
                bar.refresh()
        elif bar is not None:
            bar.update(done - bar.n)
        if self._skips is not None and now - self._last_skips >= 1.0:
            self._last_skips = now
            with self._lock:
                self._seen.skipped = self._skips()
        with self._lock:
            self._seen.done, self._seen.at = done, now

    # --- the stats line --------------------------------------------------------------------

    def rate(self) -> float | None:
        """Work per second since the first TGB, in :attr:`unit`."""
        with self._lock:
            done, at = self._seen.done, self._seen.at
        if self._started is None or at <= self._started:
            return None
        return (done - self._start_done) / (at - self._started)

    def skipped(self) -> dict[str, int]:
        if self._skips is not None:
            self._seen.skipped = self._skips()
        return dict(self._seen.skipped)

    def summary(self) -> dict[str, Any]:
        """The figures of the bar, for ``--json``."""
        rate = self.rate()
        return {"unit": self.unit, "done": self._seen.done, "total": self.total,
                "rate_per_s": None if rate is None else round(rate, 3)}

    def stats_line(self, producer: Producer) -> str:
        """One short line: share done, rate, ETA, TGBs committed/pending, lag, stall, skips."""
        stats = producer.stats()
        with self._lock:
            done, skipped = self._seen.done, dict(self._seen.skipped)
        parts = []
        rate = self.rate()
        unit = "TGB" if self.unit == "TGB" else self.unit
        if self.total:
            share = f"{share_text(done, self.total)} of {count_text(self.total, unit)}"
            if rate:
                remaining = max(0.0, self.total - done) / rate
                share += f", ETA {_interval(remaining)}"
            parts.append(share)
        else:
            parts.append(count_text(done, unit))
        if rate is not None:
            parts.append(rate_text(rate, unit))
        parts.append(f"{stats.committed_offsets} TGBs committed, {stats.pending} pending")
        lag = _lag(producer, stats.committed_steps)
        if lag is not None:
            parts.append(lag)
        paused = stats.paused_for_lag_s + stats.paused_for_backpressure_s
        parts.append(f"stall {paused:.1f} s" + (" (paused for --max-lag)" if stats.paused_for_lag else ""))
        parts.append(skipped_text(skipped) or "0 skipped")
        return f"{self.label}: " + " | ".join(parts)

    def _stats_loop(self, producer: Producer, stop: threading.Event) -> None:
        assert self.stats_interval is not None
        while not stop.wait(self.stats_interval):
            try:
                say(self.stats_line(producer))
            except Exception as e:  # noqa: BLE001 - a stats line must never stop a producer
                say(f"{self.label}: stats unavailable: {e!r}")


def _interval(seconds: float) -> str:
    from tqdm import tqdm

    return str(tqdm.format_interval(seconds))


def _lag(producer: Producer, committed_steps: int) -> str | None:
    """``'lag 12 steps'`` ahead of the readers' safe boundary, or that no reader has checkpointed."""
    from torch_tgb.manifest.watermarks import live_checkpoints

    try:
        live = live_checkpoints(producer.store)
    except Exception:  # noqa: BLE001 - the line goes without it
        return None
    if not live:
        return "lag: no checkpoint yet"
    return f"lag {committed_steps - min(m.step for m in live)} steps"
