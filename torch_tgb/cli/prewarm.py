"""``tgb prewarm NS``: fill a node's hot tier with the slices its ranks will read, before the run.

Reads steps A:B of the namespace for each rank given, exactly as those ranks'
readers will (same footers, same slice ranges, same mesh), with every
slice's CRC32C checked against the TGB footer, and stores the bytes in
--cache-dir: the directory the job's readers get as ReaderOptions(cache_dir=...).
Ranks read in parallel, each with many range reads in flight. Ranks that
differ only in TP/PP read the same slices and are fetched once.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import re
import time
from types import ModuleType
from typing import TYPE_CHECKING

from torch_tgb.cli._common import CommandError, add_json_flag, add_storage_option_flag

if TYPE_CHECKING:
    from torch_tgb._progress import ProgressBar
    from torch_tgb.layout import Mesh

__all__ = ["add_parser", "parse_mesh", "parse_ranks", "parse_size", "parse_steps", "run"]

_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 10**3, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6, "mib": 1 << 20,
               "g": 1 << 30, "gb": 10**9, "gib": 1 << 30, "t": 1 << 40, "tb": 10**12, "tib": 1 << 40}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prewarm",
        help="fill a node's hot tier (--cache-dir) with the slices its ranks will read",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("ns", metavar="NS", help="namespace URL (gs://, az://, s3://, ...)")
    p.add_argument("--mesh", required=True, metavar="dp=N,cp=N[,tp=N,pp=N]",
                   help="the training job's parallel degrees (cp, tp, pp default to 1)")
    p.add_argument("--ranks", default="all", metavar="LIST",
                   help="global ranks on this node, e.g. 0-7 or 0,1,8-9 (default: all ranks of the mesh)")
    p.add_argument("--steps", default=":", metavar="A:B",
                   help="TGB steps [A, B) to fetch; A defaults to 0, B to the last committed step (default ':')")
    p.add_argument("--cache-dir", required=True, help="the hot tier directory the readers will use")
    p.add_argument("--cache-bytes", type=parse_size, default=None, metavar="SIZE",
                   help="bound of the hot tier, e.g. 200GiB (default: 80%% of the free space in --cache-dir)")
    p.add_argument("--parallel", type=int, default=16, help="range reads in flight per rank (default 16)")
    add_json_flag(p)
    add_storage_option_flag(p)
    p.set_defaults(run=run)


def parse_size(text: str) -> int:
    """``"200GiB"`` → bytes (binary and decimal units, case-insensitive)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 500MiB, 200GiB, 1TB)")
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def parse_mesh(text: str) -> dict[str, int]:
    """``"dp=4,cp=2"`` → ``{"dp": 4, "cp": 2, "tp": 1, "pp": 1}``."""
    degrees = {"dp": 0, "cp": 1, "tp": 1, "pp": 1}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or name not in degrees or not value.isdigit() or int(value) < 1:
            raise CommandError(f"--mesh: expected dp=N,cp=N[,tp=N,pp=N] with N >= 1, got {part!r}")
        degrees[name] = int(value)
    if degrees["dp"] < 1:
        raise CommandError("--mesh needs dp=N")
    return degrees


def parse_ranks(text: str, world: int) -> list[int]:
    """``"0-3,8"`` → ``[0, 1, 2, 3, 8]``; ``"all"`` → every rank of the world."""
    if text.strip() == "all":
        return list(range(world))
    ranks: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if match is None:
            raise CommandError(f"--ranks: expected a list like 0-3,8, got {part!r}")
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if first > last or last >= world:
            raise CommandError(f"--ranks: {part!r} is outside the mesh's {world} ranks (0-{world - 1})")
        ranks.update(range(first, last + 1))
    return sorted(ranks)


def parse_steps(text: str) -> tuple[int, int | None]:
    """``"A:B"`` → ``(A, B)``; either side may be empty (``(0, None)``)."""
    match = re.fullmatch(r"\s*(\d*)\s*:\s*(\d*)\s*", text)
    if match is None:
        raise CommandError(f"--steps: expected A:B (TGB steps, B exclusive), got {text!r}")
    start = int(match.group(1) or 0)
    stop = int(match.group(2)) if match.group(2) else None
    if stop is not None and stop < start:
        raise CommandError(f"--steps: {text!r} ends before it starts")
    return start, stop


def run(args: argparse.Namespace) -> int:
    import torch_tgb as tgb
    from torch_tgb._progress import progress
    from torch_tgb.cli._common import argument_errors, format_table, human_bytes, print_json, storage_options
    from torch_tgb.consumer.options import ReaderOptions
    from torch_tgb.cursor import CURSOR_KEY, Cursor
    from torch_tgb.errors import CorruptObject
    from torch_tgb.manifest import Manifest
    from torch_tgb.storage import HotTierStore, open_store

    degrees = parse_mesh(args.mesh)
    world = degrees["dp"] * degrees["cp"] * degrees["tp"] * degrees["pp"]
    ranks = parse_ranks(args.ranks, world)
    start, stop = parse_steps(args.steps)
    with argument_errors():
        store = open_store(args.ns, storage_options(args))
        tier = HotTierStore(store, args.cache_dir, cache_bytes=args.cache_bytes)
    if store.local_path("_tgb/dataset.json") is not None:
        raise CommandError(f"{store.url} is on a local disk: readers use no hot tier for it, nothing to prewarm")
    head = Manifest(store).head()
    stop = head.num_steps if stop is None else min(stop, head.num_steps)  # only what is committed
    meshes = sorted({_mesh(tgb, degrees, rank, world) for rank in ranks}, key=lambda m: (m.dp_rank, m.cp_rank))  # TP/PP peers read the same slices
    steps = max(0, stop - start)
    options = ReaderOptions(verify="always", stop_step=stop, footer_lookahead=max(32, args.parallel))
    started = time.monotonic()

    def warm(mesh: Mesh, bar: ProgressBar[object]) -> int:
        ds = tgb.TGBDataset(tier, mesh=mesh, prefetch=args.parallel, options=options)
        ds.load_state_dict({CURSOR_KEY: Cursor(start).to_json()})
        n = 0
        for _ in ds:  # the reader's own requests: the footers and slices this rank will ask for
            n += 1
            bar.update(1)
        return n

    with progress(total=steps * len(meshes), desc="prewarm", unit="rank-step") as bar:
        try:
            with concurrent.futures.ThreadPoolExecutor(max(1, len(meshes))) as pool:
                delivered = sum(pool.map(lambda m: warm(m, bar), meshes)) if steps else 0
        except CorruptObject:
            tier.forget()  # bytes that failed their CRC must not stay trusted by their trailer
            raise
    seconds = time.monotonic() - started
    c = dict(tier.counters)
    report = {
        "namespace": store.url, "cache_dir": tier.cache_dir, "cache_bytes": tier.cache_bytes,
        "steps": [start, stop], "ranks": ranks, "slices_read_by": len(meshes), "rank_steps": delivered,
        "fetched_bytes": c["fill_bytes"], "entries_filled": c["fills"], "already_cached": c["hits"],
        "fill_errors": c["fill_errors"], "seconds": round(seconds, 3),
    }
    if args.json:
        print_json(report)
    else:
        rate = c["fill_bytes"] / seconds if seconds > 0 else 0.0
        print(format_table([
            ("namespace", store.url),
            ("steps", f"{start}:{stop} ({steps} steps; {head.num_steps} committed)"),
            ("ranks", f"{len(ranks)} ({len(meshes)} distinct dp x cp slices)"),
            ("fetched", f"{human_bytes(c['fill_bytes'])} in {c['fills']} entries, {human_bytes(rate)}/s"),
            ("already cached", f"{c['hits']} entries"),
            ("cache", f"{tier.cache_dir} (bound {human_bytes(tier.cache_bytes)})"),
        ], title="tgb prewarm"))
        if c["fill_errors"]:
            print(f"warning: {c['fill_errors']} entries could not be stored (see the warning above); "
                  "readers will fetch them from the store")
    return 0


def _mesh(tgb: ModuleType, degrees: dict[str, int], rank: int, world: int) -> Mesh:
    return tgb.Mesh.from_env(dp=degrees["dp"], cp=degrees["cp"], tp=degrees["tp"], pp=degrees["pp"],
                             rank=rank, world_size=world)
