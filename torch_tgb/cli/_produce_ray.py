"""``tgb produce --ray ADDRESS --producers N --source ...``: the ``--source`` pipeline as a fleet of Ray actors."""

from __future__ import annotations

import argparse
import functools
from dataclasses import asdict

from torch_tgb.cli._common import CommandError, print_json, storage_options
from torch_tgb.cli._producer_setup import codecs, segments
from torch_tgb.cli._produce_source import source_layout, source_metadata, source_pipeline

__all__ = ["produce_fleet"]


def produce_fleet(args: argparse.Namespace) -> int:
    """Run shards ``0..--shards-1`` of ``--source`` on ``--producers`` actors; print the fleet's summary."""
    if not args.source:
        raise CommandError("--ray runs a --source on a fleet; give --source KIND:WHERE")
    if args.shard is not None:
        raise CommandError("--shard is chosen by the fleet under --ray; use --shards M for the number of shards")
    for flag in ("rate", "stats_interval"):
        if getattr(args, flag) is not None:
            raise CommandError(f"--{flag.replace('_', '-')} is not supported with --ray (a fleet serves its metrics "
                               "with --metrics-port)")
    producers = 2 if args.producers is None else args.producers
    try:
        from torch_tgb.integrations.ray import FleetConfig, produce_on_ray
    except ImportError as e:
        raise CommandError(str(e)) from e
    # only picklable pieces travel to the actors: the parsed arguments and a module-level function
    make_pipeline = functools.partial(source_pipeline, argparse.Namespace(**{k: v for k, v in vars(args).items() if k != "run"}))
    report = produce_on_ray(
        args.ns, make_pipeline, num_producers=producers, num_shards=args.shards, layout=source_layout(args),
        storage_options=storage_options(args), commit_policy=args.commit_policy, max_lag=args.max_lag,
        max_steps=args.steps, seal=args.seal is not False, prefix=args.producer_id, metadata=source_metadata(args),
        address=args.ray, config=segments(args), fleet=FleetConfig(metrics_port=args.metrics_port), codecs=codecs(args),
    )
    if args.json:
        print_json({**asdict(report), "mb_per_s": report.mb_per_s, "commit_success_rate": report.commit_success_rate})
    else:
        print(report.summary())
    return 0
