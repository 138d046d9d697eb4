"""What every ``tgb produce`` path sets up around its producer: the segment config, the codecs and the observers."""

from __future__ import annotations

import argparse
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from torch_tgb.cli._common import CommandError

if TYPE_CHECKING:
    from torch_tgb.cli._produce_progress import ProduceProgress
    from torch_tgb.observability import HasStats
    from torch_tgb.producer import Producer
    from torch_tgb.producer.config import ProducerConfig

__all__ = ["codecs", "observed", "segments", "watched"]


@contextlib.contextmanager
def observed(producer: HasStats, args: argparse.Namespace) -> Iterator[None]:
    """The raw stats line through logging and/or a Prometheus endpoint for the duration of the run.

    ``--stats-interval``: the short, readable line is the run's
    ``ProduceProgress``' (on stderr, above the bar); the raw counters go to
    the ``torch_tgb.stats`` logger at DEBUG (``tgb -vv``), and are in ``--json``.
    """
    from torch_tgb.observability import as_source

    reporter = server = collector = None
    source = as_source(producer, role="producer", id=args.producer_id)
    if args.stats_interval:
        from torch_tgb.observability import StatsReporter

        reporter = StatsReporter([source], interval=args.stats_interval, level=logging.DEBUG).start()
    if args.metrics_port is not None:
        from torch_tgb.observability import TGBCollector, start_metrics_server

        collector = TGBCollector([source])
        server, port = start_metrics_server(args.metrics_port)
        logging.getLogger("torch_tgb.cli").warning("serving metrics on http://127.0.0.1:%d/metrics", port)
    try:
        yield
    finally:
        if reporter is not None:
            reporter.stop()
        if server is not None:
            server.shutdown()
            server.server_close()
        if collector is not None:
            collector.unregister()


def watched(
    args: argparse.Namespace, progress: ProduceProgress
) -> Callable[[Producer], contextlib.AbstractContextManager[None]]:
    """``produce(watch=...)`` of a ``tgb produce`` run: its bar and stats line, and :func:`observed`."""

    @contextlib.contextmanager
    def watch(producer: Producer) -> Iterator[None]:
        with observed(producer, args), progress.watch(producer):
            yield

    return watch


def segments(args: argparse.Namespace) -> ProducerConfig:
    """Bulk runs pack ~64 MiB segment objects; ``--rate`` (a stream) writes one object per batch."""
    from torch_tgb.producer.config import ProducerConfig

    mb = args.segment_mb if args.segment_mb is not None else (0 if args.rate else 64)
    if mb < 0:
        raise CommandError(f"--segment-mb {mb} must be >= 0")
    if mb == 0:
        return ProducerConfig()
    return ProducerConfig.bulk(segment_bytes=max(1, int(mb * (1 << 20))))


def codecs(args: argparse.Namespace) -> dict[str, str]:
    """``--codec KEY=SPEC`` (repeatable) as ``{KEY: SPEC}``: those keys stored compressed (``Producer(codecs=)``)."""
    out = {}
    for item in args.codec or ():
        key, sep, spec = item.partition("=")
        if not sep or not key or not spec:
            raise CommandError(f"--codec {item!r}: expected KEY=SPEC, e.g. input_ids=zstd")
        out[key] = spec
    return out
