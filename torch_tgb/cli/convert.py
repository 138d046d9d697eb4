"""``tgb convert SRC NS``: turn an LLMBATCH file into a sealed TGB namespace.

The file's batches are committed through the manifest log like any
producer's, cut by ``--dp``/``--cp``, and the namespace is sealed.
"""

from __future__ import annotations

import argparse

from torch_tgb.cli._common import CommandError, add_json_flag, add_storage_option_flag, print_json, storage_options

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "convert",
        help="convert an LLMBATCH file into a sealed TGB namespace",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("src", metavar="SRC", help="LLMBATCH file (local path)")
    p.add_argument("ns", metavar="NS", help="destination namespace URL or local directory")
    p.add_argument("--dp", type=int, default=1, help="data-parallel slices per batch (default 1)")
    p.add_argument("--cp", type=int, default=1, help="context-parallel chunks per slice (default 1)")
    p.add_argument(
        "--seq-keys",
        default="input_ids,labels",
        help="comma-separated tensors with a sequence dimension, split by --cp (default input_ids,labels)",
    )
    add_json_flag(p)
    add_storage_option_flag(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.dp < 1 or args.cp < 1:
        raise CommandError(f"--dp and --cp must be at least 1, got dp={args.dp} cp={args.cp}")
    from torch_tgb.layout import Layout
    from torch_tgb.offline import convert_llmbatch

    seq_keys = tuple(k for k in args.seq_keys.split(",") if k)
    layout = Layout(dp=args.dp, cp=args.cp, seq_keys=seq_keys)
    result = convert_llmbatch(args.src, args.ns, layout=layout, storage_options=storage_options(args))
    summary = {"src": args.src, "ns": args.ns, "dp": args.dp, "cp": args.cp, "result": result}
    if args.json:
        print_json(summary)
    else:
        r = result if isinstance(result, dict) else {}
        shape = f"{r.get('batches', '?')} TGBs of {r.get('batch_size', '?')}x{r.get('seq_len', '?')} tokens"
        resumed = f", resumed at batch {r['resumed_at']}" if r.get("resumed_at") else ""
        print(f"converted {args.src} -> {args.ns} (dp={args.dp}, cp={args.cp}): {shape}{resumed}; sealed")
    return 0
