"""``tgb produce NS``: a producer from the command line.

Writes global batches of ``input_ids``/``labels`` (next-token shifted) into
NS as producer ``--producer-id``: from a corpus (``--source
token-file:PATH|webdataset:URLS|lance:URI|parquet:PATHS``, or several
``--source NAME=KIND:WHERE`` mixed by ``--mix NAME=W,...``; packed into rows
(``--pack``), optionally cost-balanced over the dp slices (``--balance``),
and committed with its reading position, so a rerun after a crash reads on
from the last committed batch), from a synthetic token stream (default) or
from a flat token file cut into rows (``--tokens FILE``, a ``.npy`` array or
raw ``--dtype`` binary). Resumes where this producer id left off, so rerunning
the same command after a crash continues the stream exactly once. With
``--shard I/N`` the namespace declares a job of N shards: each shard is
marked done when its source is exhausted, the last one done seals, and a
rerun of a done shard exits 0 at once.
"""

from __future__ import annotations

import argparse

from torch_tgb.cli._common import RegistryChoices, add_json_flag, add_storage_option_flag

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "produce",
        help="write synthetic or file-backed token batches into a namespace",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("ns", metavar="NS", help="namespace URL or local directory")
    p.add_argument("--producer-id", default="cli",
                   help="stable producer id (default 'cli'); with --shard or --ray, the job's name: shard I of N is "
                   "producer '<--producer-id>-shard<I>-of<N>'")
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="stop when this producer id has written offsets 0..steps-1 (default: until --source/--tokens ends; "
        "100 batches of the endless synthetic stream, said on stderr)",
    )
    p.add_argument(
        "--source",
        default=None,
        action="append",
        metavar="[NAME=]KIND:WHERE",
        help="read documents from token-file:PATH (.npy or raw --dtype .bin), webdataset:URLS (tar shards, "
        "{a..b} ranges or comma-separated), lance:URI or parquet:PATHS (files or directories, comma-separated), "
        "or a kind a plugin registers in sources.kinds.SOURCE_KINDS; repeat as NAME=KIND:WHERE with --mix to mix several (--offsets/--column/--tokenizer apply to all)",
    )
    p.add_argument("--mix", default=None, metavar="NAME=W,...",
                   help="mix the named --source by these relative weights, drawn per document "
                   "(deterministic given --seed; one step = --global-batch x --seq-len tokens)")
    p.add_argument("--mix-exhausted", choices=("stop", "renormalize", "cycle"), default="renormalize",
                   help="--mix: when a source ends, renormalize over the rest and read every source to its end "
                   "(default), stop the stream, or cycle the source")
    p.add_argument("--offsets", default=None, metavar="FILE", help="token-file: document offsets (.npy/.idx of int64)")
    p.add_argument(
        "--column",
        default=None,
        help="token column (lance: 'tokens', parquet: 'input_ids') or webdataset .npy member ('tokens.npy'); "
        "a text column of lance/parquet needs --tokenizer",
    )
    p.add_argument("--text-field", default=None, help="webdataset: a UTF-8 text member to tokenize (needs --tokenizer)")
    p.add_argument("--tokenizer", default=None, metavar="FILE", help="a Hugging Face tokenizers JSON file (local)")
    p.add_argument("--on-error", type=_on_error, default="raise", metavar="{raise,skip}",
                   help="--source: a corrupt record (an unreadable .npy member, an empty tar, a text the tokenizer "
                   "refuses) stops the run (raise) or is skipped and counted (the summary's 'skipped' by reason)")
    p.add_argument("--shard", default=None, metavar="I/N",
                   help="--source: run shard I of a job of N declared shards (the source's shard I of N, as producer "
                   "'<--producer-id>-shard<I>-of<N>'); the namespace is sealed when every shard is done, a rerun of a "
                   "done shard exits 0, another N is refused")
    p.add_argument("--pack", "--packing", dest="packing", choices=("bfd", "concat", "none"), default="bfd",
                   help="--source: best-fit-decreasing packing with document ids (default), concat (documents in "
                   "order, cut at row ends, with document ids) or none (concat-and-chunk, input_ids/labels only)")
    p.add_argument("--balance", choices=RegistryChoices("torch_tgb.transforms.balance:BALANCERS"), default=None,
                   metavar="METHOD",
                   help="--source: permute the rows of every global batch over the --dp slices to even out their "
                   "cost (sum of len^2 + alpha*len per document; greedy, kk (Karmarkar-Karp), round_robin or a "
                   "method a plugin registers in transforms.BALANCERS); batches then also carry row_index and "
                   "row_cost (default: no balancing)")
    p.add_argument("--alpha", type=float, default=0.0,
                   help="--balance: weight of the token-linear cost next to attention's len^2 (default 0)")
    p.add_argument("--attention-metadata", action="store_true",
                   help="--source with --pack bfd/concat: rows also carry cu_seqlens and max_seqlen for varlen attention")
    p.add_argument("--global-batch", type=int, default=8, help="sequences per global batch (default 8)")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per sequence (default 128)")
    p.add_argument("--dp", type=int, default=1, help="data-parallel slices (default 1)")
    p.add_argument("--cp", type=int, default=1, help="context-parallel chunks (default 1)")
    p.add_argument("--vocab-size", type=int, default=None,
                   help="token ids are < this: the synthetic stream's range (default 50257); with --source, 65536 "
                   "or less stores ids as uint16")
    p.add_argument("--rows", choices=("tokens", "arrays"), default="tokens",
                   help="--source rows: tokens (each token once at its width, seq_lens; readers derive labels, "
                   "default) or arrays (input_ids, labels, document_ids, position_ids, as older namespaces)")
    p.add_argument("--token-dtype", choices=("uint16", "uint32", "int32", "int64"), default=None,
                   help="--source: the stored token ids' dtype (default: uint16 for a 16-bit token file or "
                   "--vocab-size <= 65536, else uint32; int64 with --rows arrays)")
    p.add_argument("--seed", type=int, default=0,
                   help="synthetic stream seed (batch i depends on seed, i only); --source: shuffle seed")
    p.add_argument("--tokens", metavar="FILE", default=None, help="flat token file (.npy or raw binary)")
    p.add_argument("--dtype", default="uint16", help="dtype of a raw --tokens file (default uint16)")
    p.add_argument("--commit-policy", default="dac",
                   help="dac | naive | fixed:K | incr | aimd | a plugin's name in producer.COMMIT_POLICIES (default dac)")
    p.add_argument("--max-lag", type=int, default=None, help="pause while this many steps ahead of the safe boundary")
    p.add_argument("--rate", type=float, default=None, help="at most this many batches per second")
    p.add_argument(
        "--seal",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="mark this producer done when finished: the namespace is sealed (end of stream) once no producer is "
        "still running. A --shard or --ray shard is marked done when its source is exhausted without it, and the "
        "last shard done seals; --no-seal there: the stream continues (the shard only closes)",
    )
    p.add_argument(
        "--segment-mb",
        type=float,
        default=None,
        metavar="MB",
        help="pack consecutive batches into segment objects of about MB MiB (default 64; with --rate "
        "one object per batch, so each is visible at its commit); 0: one object per batch",
    )
    p.add_argument(
        "--codec",
        action="append",
        default=None,
        metavar="KEY=SPEC",
        help="store KEY compressed at rest, e.g. input_ids=zstd or pixel_values=zstd:1+delta:3x14x14 "
        "(repeatable; needs the compress extra; docs/multimodal.md, 'Compression at rest')",
    )
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
    fleet = p.add_argument_group("producer fleets on Ray (needs --source and the ray extra)")
    fleet.add_argument("--ray", default=None, metavar="ADDRESS",
                       help="run --source as a fleet of Ray actors: 'local' (a local Ray), 'auto' or HOST:PORT; "
                       "shard i of --shards is producer '<--producer-id>-shard<i>-of<n>', the same as --shard i/n; "
                       "sealed when every shard is done unless --no-seal")
    fleet.add_argument("--producers", type=int, default=None, metavar="N", help="Ray actors (default 2)")
    fleet.add_argument("--shards", type=int, default=None, metavar="M",
                       help="shards, fixed for a namespace (default --producers); more than the most actors you "
                       "will ever run")
    add_json_flag(p)
    add_storage_option_flag(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from torch_tgb.cli._produce_impl import produce

    return produce(args)


def _on_error(text: str) -> str:
    """``--on-error``: one of the ``on_error`` words (the old ``skip_and_count`` is refused, naming ``skip``)."""
    from torch_tgb._on_error import check_on_error

    try:
        return check_on_error(text, where="--on-error")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
