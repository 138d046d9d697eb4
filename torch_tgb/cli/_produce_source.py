"""``tgb produce --source KIND:WHERE``: a corpus source, packed into global batches, run by ``tgb.produce``.

Several named sources (``--source NAME=KIND:WHERE``, repeated) are mixed by
``--mix NAME=W,...`` (``datapipes.Mix``, one step = ``--global-batch`` x
``--seq-len`` tokens), packed (``--pack``) and assembled into global batches,
cost-balanced over the dp slices with ``--balance`` (``datapipes.GlobalBatches``).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from torch_tgb._progress import rate_text
from torch_tgb.cli._common import CommandError, argument_errors, print_json, storage_options
from torch_tgb.errors import TGBError

if TYPE_CHECKING:
    import numpy as np
    import torch

    from torch_tgb.datapipes import Batching, GlobalBatches
    from torch_tgb.layout import Layout
    from torch_tgb.sources import UnitSource
    from torch_tgb.sources._inputs import Tokenizer

__all__ = [
    "named_sources", "open_source", "parse_shard", "produce_source", "source_layout",
    "source_metadata", "source_pipeline",
]

def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` -> ``(I, N)`` with ``0 <= I < N``."""
    index, sep, count = text.partition("/")
    try:
        shard = (int(index), int(count))
    except ValueError:
        shard = (-1, 0)
    if not sep or not 0 <= shard[0] < shard[1]:
        raise CommandError(f"--shard {text!r} must be I/N with 0 <= I < N, e.g. 0/2")
    return shard


def _tokenizer(path: str | None) -> Tokenizer | None:
    if path is None:
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise CommandError("--tokenizer needs the 'tokenizers' package (pip install tokenizers)") from e
    try:
        tok = Tokenizer.from_file(path)
    except Exception as e:
        raise CommandError(f"cannot load tokenizer {path!r}: {e}") from e
    return lambda texts: [enc.ids for enc in tok.encode_batch(texts)]


def _specs(args: argparse.Namespace) -> list[str]:
    return [args.source] if isinstance(args.source, str) else list(args.source or [])


def named_sources(args: argparse.Namespace) -> dict[str, str]:
    """``--source [NAME=]KIND:WHERE`` (repeatable) -> ``{name: "KIND:WHERE"}``, checked against ``--mix``.

    One unnamed source gets the name ``""``; several sources must be named,
    uniquely, and need ``--mix``; ``--mix`` needs two or more and must name
    only known sources.
    """
    out: dict[str, str] = {}
    for spec in _specs(args):
        head, sep, _ = spec.partition(":")
        name, eq, kind = head.rpartition("=") if "=" in head else ("", "", head)
        if eq and not name:
            raise CommandError(f"--source {spec!r}: the name before '=' is empty")
        if name in out:
            raise CommandError(f"--source names {name!r} twice" if name else "several --source need names: NAME=KIND:WHERE")
        out[name] = spec[len(name) + 1 :] if eq else spec
    mix = getattr(args, "mix", None)
    if len(out) > 1 and "" in out:
        raise CommandError("several --source need names: --source NAME=KIND:WHERE, one per source")
    if len(out) > 1 and mix is None:
        raise CommandError(f"{len(out)} sources ({', '.join(out)}) need --mix NAME=WEIGHT,... to mix them")
    if mix is not None:
        if len(out) < 2:
            raise CommandError("--mix needs two or more named sources: --source NAME=KIND:WHERE, repeated")
        unknown = sorted(set(_weights(mix)) - set(out))
        if unknown:
            raise CommandError(f"--mix names unknown source(s) {', '.join(unknown)}; sources are {', '.join(out)}")
    return out


def _weights(text: str) -> dict[str, float]:
    from torch_tgb.transforms import parse_weights

    try:
        return parse_weights(text)
    except TGBError as e:
        raise CommandError(f"--mix {text!r}: {e}") from e


def open_source(args: argparse.Namespace, shard: tuple[int, int], spec: str | None = None) -> UnitSource:
    """The source node that ``spec`` (default: the one ``--source``) names, reading shard ``shard``.

    ``KIND`` is looked up in ``sources.kinds.SOURCE_KINDS`` (built-in kinds and
    plugins' alike); its factory gets the flags as a ``SourceArgs``.
    """
    from torch_tgb.sources.kinds import SOURCE_KINDS, SourceArgs, split_spec

    if spec is None:
        (spec,) = named_sources(args).values()
    try:
        kind, where = split_spec(spec)
        factory = SOURCE_KINDS[kind]
        source_args = SourceArgs(shard=shard, seed=args.seed, on_error=getattr(args, "on_error", "raise"),
                                 column=args.column, text_field=args.text_field, tokenizer=_tokenizer(args.tokenizer),
                                 offsets=args.offsets, dtype=args.dtype)
    except ValueError as e:
        raise CommandError(f"--source {spec!r} (KIND:WHERE): {e}") from e
    return factory(where, source_args)


def source_batching(args: argparse.Namespace) -> Batching:
    """How ``--source`` documents become global batches (a ``datapipes.Batching``)."""
    from torch_tgb.datapipes import Batching

    _check_pipeline_flags(args)
    with argument_errors():
        return Batching(
            seq_len=args.seq_len, global_batch_size=args.global_batch, packing=args.packing, rows=args.rows,
            token_dtype=_token_dtype(args), balance=getattr(args, "balance", None), alpha=getattr(args, "alpha", 0.0),
            attention_metadata=getattr(args, "attention_metadata", False),
        )


def _token_dtype(args: argparse.Namespace) -> torch.dtype | None:
    """``--token-dtype``, or uint16 for a 16-bit token file or a vocabulary that fits (--vocab-size), else uint32."""
    import numpy as np
    import torch

    if args.token_dtype is not None:
        return {"uint16": torch.uint16, "uint32": torch.uint32, "int32": torch.int32, "int64": torch.int64}[
            args.token_dtype]
    if args.rows != "tokens":
        return None
    specs = list(named_sources(args).values())
    narrow = all(_source_dtype(args, spec) in (np.dtype("uint16"), np.dtype("uint8")) for spec in specs)
    if narrow or (args.vocab_size is not None and args.vocab_size <= 1 << 16):
        return torch.uint16
    return torch.uint32


def _source_dtype(args: argparse.Namespace, spec: str) -> np.dtype[Any] | None:
    """The stored dtype of a ``token-file:`` source (None for other kinds: their ids come as int64)."""
    import numpy as np

    kind, _, where = spec.partition(":")
    if kind != "token-file":
        return None
    if where.endswith(".npy"):
        try:
            return np.load(where, mmap_mode="r", allow_pickle=False).dtype
        except (OSError, ValueError):
            return None  # the source itself says what is wrong
    return np.dtype(args.dtype)


def source_layout(args: argparse.Namespace) -> Layout:
    """The layout of ``--source`` batches: ``--dp``/``--cp`` over the rows' keys."""
    return source_batching(args).layout(args.dp, args.cp)


def source_metadata(args: argparse.Namespace) -> dict[str, Any]:
    """What ``dataset.json`` records of ``--source`` batches (every producer of a namespace passes the same)."""
    out: dict[str, Any] = {"packing": args.packing, "seq_len": args.seq_len, "rows": args.rows}
    if getattr(args, "mix", None) is not None:
        out["mix"] = _weights(args.mix)
    if getattr(args, "balance", None) is not None:
        out.update(balance=args.balance, alpha=args.alpha)
    return out


def _check_pipeline_flags(args: argparse.Namespace) -> None:
    if getattr(args, "balance", None) is not None and args.packing == "none":
        raise CommandError(f"--balance {args.balance} needs packed rows: --pack bfd or concat, not none")
    if getattr(args, "alpha", 0.0) < 0:
        raise CommandError(f"--alpha must be >= 0, got {args.alpha}")


def source_pipeline(args: argparse.Namespace, shard_index: int, shard_count: int) -> GlobalBatches:
    """Shard ``shard_index`` of ``shard_count`` of ``--source``, packed into global batches.

    A module-level function of picklable arguments, so that ``tgb produce
    --ray`` can build it inside each Ray actor.
    """
    from torch_tgb.datapipes import Mix, document_batches

    _check_pipeline_flags(args)
    shard = (shard_index, shard_count)
    named = named_sources(args)
    nodes = {}
    for name, spec in named.items():
        try:
            nodes[name] = open_source(args, shard, spec)
        except (ValueError, TypeError, ImportError) as e:
            if isinstance(e, TGBError):
                raise
            raise CommandError(f"--source {spec!r}: {e}") from e
    info: dict[str, Any]
    if len(nodes) == 1:
        (docs,) = nodes.values()
        info = {"source": next(iter(named.values())), "shard": list(shard)}
    else:
        weights = _weights(args.mix)
        docs = Mix(nodes, weights, seed=args.seed, exhausted=getattr(args, "mix_exhausted", "renormalize"),
                   tokens_per_step=args.global_batch * args.seq_len)
        info = {"sources": named, "mix": weights, "shard": list(shard)}
    return document_batches(docs, source_batching(args), layout=source_layout(args), info=info)


def produce_source(args: argparse.Namespace) -> int:
    """Pack ``--source`` into global batches and append them with ``tgb.produce``; print a summary.

    With ``--shard I/N`` the run is shard I of a job of N declared shards
    (``tgb.produce(shard=...)``): a rerun of a done shard prints that it is
    complete and exits 0. The bar counts the sources' tokens, rows or samples
    of a known total (``ProduceProgress``); the first Ctrl-C ends the run after
    the TGB in hand, commits, closes the producer and exits 130. Samples the
    stages skipped are counted by reason in the summary and warned about.
    """
    import threading

    from torch_tgb.cli._interrupt import INTERRUPTED_EXIT, stop_on_interrupt
    from torch_tgb.cli._produce_progress import ProduceProgress, skipped_text
    from torch_tgb.cli._producer_setup import codecs, segments, watched
    from torch_tgb.producer import produce
    from torch_tgb.producer._walk import pipeline_nodes, pipeline_skips, pipeline_work

    shard = None if args.shard is None else parse_shard(args.shard)
    layout = source_layout(args)
    pipeline = source_pipeline(args, *(shard or (0, 1)))
    label = f"shard {shard[0]}/{shard[1]}" if shard else f"producer {args.producer_id}"
    nodes = pipeline_nodes(pipeline)  # walked once: the bar asks after every TGB
    bar = ProduceProgress(f"produce {label}", measure=lambda: pipeline_work(pipeline, nodes=nodes),
                          skips=lambda: pipeline_skips(pipeline, nodes=nodes), batches=args.steps,
                          stats_interval=args.stats_interval)

    with stop_on_interrupt(threading.Event(), "the TGB in hand") as stop, argument_errors():
        # argument_errors: a bad --producer-id, --commit-policy or --max-lag
        report = produce(
            args.ns, pipeline, producer_id=None if shard else args.producer_id, shard=shard, job=args.producer_id,
            layout=layout, storage_options=storage_options(args), commit_policy=args.commit_policy,
            max_lag=args.max_lag, max_steps=args.steps, seal=args.seal, metadata=source_metadata(args),
            config=segments(args), rate=args.rate, watch=watched(args, bar), progress=False, on_append=bar.on_append,
            stop=stop, codecs=codecs(args),
        )
    label = f"shard {shard[0]}/{shard[1]}" if shard else f"producer {report.producer_id}"
    counts = pipeline.state_dict() if not report.already_complete else {"rows": None, "tokens": None}
    summary = {
        "ns": args.ns,
        "producer_id": report.producer_id,
        "source": ",".join(_specs(args)),
        "shard": None if shard is None else f"{shard[0]}/{shard[1]}",
        "already_complete": report.already_complete,
        "resumed_at": report.start_offset,
        "written": report.batches,
        "next_offset": report.end_offset,
        "exhausted": report.exhausted,
        "done": report.done or report.already_complete,
        "sealed": report.sealed,
        "interrupted": report.interrupted,
        "rows": counts["rows"],
        "tokens": counts["tokens"],
        "skipped": report.skipped,
        "progress": bar.summary(),
        "seconds": round(report.seconds, 3),
        "stats": report.stats,
    }
    if shard is not None:
        summary["waiting_for"] = [] if report.sealed else _unfinished(args)
    code = INTERRUPTED_EXIT if report.interrupted else 0
    if report.skipped:  # a warning on stderr at the end of a job with skips, --json or not
        print(f"tgb produce: warning: {skipped_text(report.skipped)} by the pipeline's on_error policy; "
              "their counts by reason are in --json (\"skipped\")", file=sys.stderr)
    if args.json:
        print_json(summary)
        return code
    if report.already_complete:
        print(f"{label} already complete (offsets 0..{report.end_offset - 1}); nothing to do"
              + ("; the namespace is sealed" if report.sealed else ""))
        return code
    how = ("interrupted (Ctrl-C)" if report.interrupted else "to the end of the source" if report.exhausted
           else f"up to --steps {args.steps}")
    rate = bar.rate()
    speed = f"; {rate_text(rate, bar.unit)}" if rate else ""
    skips = f"; {skipped_text(report.skipped)}" if report.skipped else "; 0 samples skipped"
    if report.batches:
        print(f"producer {report.producer_id}: wrote offsets {report.start_offset}..{report.end_offset - 1} "
              f"({report.batches} TGBs, {how}) in {report.seconds:.2f}s{speed}{skips}")
    else:
        print(f"producer {report.producer_id}: wrote no TGB ({how}) in {report.seconds:.2f}s{skips}")
    if report.interrupted:
        print(f"{label}: closed (not done): everything appended is committed; rerun the same command to continue "
              f"from offset {report.end_offset}")
    elif report.sealed:
        print(f"{label}: done; the namespace is sealed (end of stream)")
    elif report.done and shard is not None:
        print(f"{label}: done; the namespace is sealed when {', '.join(summary['waiting_for'])} "
              f"{'is' if len(summary['waiting_for']) == 1 else 'are'} done too")
    elif report.done:
        print(f"{label}: done; the namespace is sealed when the producers still running are done too")
    elif shard is not None and report.exhausted:
        print(f"{label}: closed, not done (--no-seal: the stream continues; rerun without --no-seal to mark it done)")
    return code


def _unfinished(args: argparse.Namespace) -> list[str]:
    """The declared shards not done yet, as ``shard i/N (status)`` (one head read)."""
    from torch_tgb.manifest import Manifest
    from torch_tgb.manifest.jobs import shard_status
    from torch_tgb.storage import open_store

    with open_store(args.ns, storage_options(args)) as store:
        head = Manifest(store).head()
    if head.job is None:
        return []
    return [f"{head.job.label(pid)} ({status})" for pid, status in shard_status(head.job, head.producers).items()
            if status != "done"]
