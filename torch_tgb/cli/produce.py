"""``tgb produce NS``: a producer from the command line.

Writes global batches of ``input_ids``/``labels`` (next-token shifted) into
NS as producer ``--producer-id``, from a synthetic token stream (default) or
a flat token file (``--tokens FILE``, a ``.npy`` array or raw ``--dtype``
binary). Resumes where this producer id left off, so rerunning the same
command after a crash continues the stream exactly once.
"""

from __future__ import annotations

import argparse

from torch_tgb.cli._common import add_json_flag, add_storage_option_flag

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "produce",
        help="write synthetic or file-backed token batches into a namespace",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("ns", metavar="NS", help="namespace URL or local directory")
    p.add_argument("--producer-id", default="cli", help="stable producer id (default 'cli')")
    p.add_argument("--steps", type=int, default=100, help="global batches to write, offsets 0..steps-1")
    p.add_argument("--global-batch", type=int, default=8, help="sequences per global batch (default 8)")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per sequence (default 128)")
    p.add_argument("--dp", type=int, default=1, help="data-parallel slices (default 1)")
    p.add_argument("--cp", type=int, default=1, help="context-parallel chunks (default 1)")
    p.add_argument("--vocab-size", type=int, default=50257, help="synthetic token range (default 50257)")
    p.add_argument("--seed", type=int, default=0, help="synthetic stream seed (batch i depends on seed, i only)")
    p.add_argument("--tokens", metavar="FILE", default=None, help="flat token file (.npy or raw binary)")
    p.add_argument("--dtype", default="uint16", help="dtype of a raw --tokens file (default uint16)")
    p.add_argument("--commit-policy", default="dac", help="dac | naive | fixed:K | incr | aimd (default dac)")
    p.add_argument("--max-lag", type=int, default=None, help="pause while this many steps ahead of the safe boundary")
    p.add_argument("--rate", type=float, default=None, help="at most this many batches per second")
    p.add_argument("--seal", action="store_true", help="seal the namespace when done (end of stream)")
    p.add_argument(
        "--stats-interval",
        type=float,
        default=None,
        metavar="SECONDS",
        help="log the producer's stats every SECONDS through logging (shown with -v)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics on 127.0.0.1:PORT while producing (needs prometheus_client)",
    )
    add_json_flag(p)
    add_storage_option_flag(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from torch_tgb.cli._produce_impl import produce

    return produce(args)
