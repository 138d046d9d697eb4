"""The full ``tgb demo``: producers, a 2-rank consumer with a restart, the reclaimer.

Timeline (all on a local directory, no server)::

    producers p0, p1 (subprocesses: `tgb produce`, DAC)  ──────────────────────►
    consumer ranks 0, 1 (spawned processes): read half ─► save state ─► exit
                 watermark "demo-mid" ─► reclaim (steps below mid)
    consumer ranks 0, 1, restarted from the saved state: read the rest
                 watermark "demo-end", keep the last 2 checkpoints ─► reclaim (still below mid)

The namespace keeps the steps from "demo-mid" on (a rollback to either live
checkpoint stays possible), so ``tgb verify`` afterwards has objects to check.

Every figure in the summary is measured: producer stats come from the
producers' own ``stats()``, consumer figures from the ranks' timings, storage
from listing the namespace, and "exactly once" from comparing the hashes of
the slices each rank received with the slices the producers were asked to
write.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch_tgb.cli._common import CommandError, format_table, human_bytes, plural, print_json
from torch_tgb.errors import TGBError

if TYPE_CHECKING:
    from torch_tgb.storage import ObjectStore

__all__ = ["run_demo"]

_CONSUMER_TIMEOUT_S = 60.0


def _producer_command(args: argparse.Namespace, ns: str, index: int, steps: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch_tgb.cli",
        "produce",
        ns,
        "--producer-id",
        f"p{index}",
        "--steps",
        str(steps),
        "--global-batch",
        str(args.global_batch),
        "--seq-len",
        str(args.seq_len),
        "--dp",
        str(args.ranks),
        "--seed",
        str(args.seed + index),
        "--vocab-size",
        "32000",
        "--commit-policy", "dac",
        "--segment-mb", "0",  # one object per TGB: each is visible at its commit, so the ranks read while it is written
        "--json",
    ]


def _expected_digests(args: argparse.Namespace, per_producer: list[int]) -> list[list[str]]:
    """For each rank, the slice hashes of every batch the producers write (in production order)."""
    from torch_tgb.cli._demo_workers import slice_digest
    from torch_tgb.cli._produce_impl import synthetic_batch

    rows = args.global_batch // args.ranks
    expected: list[list[str]] = [[] for _ in range(args.ranks)]
    for index, count in enumerate(per_producer):
        for offset in range(count):
            batch = synthetic_batch(
                offset, global_batch=args.global_batch, seq_len=args.seq_len, vocab_size=32000, seed=args.seed + index
            )
            for rank in range(args.ranks):
                expected[rank].append(slice_digest(batch["input_ids"][rank * rows : (rank + 1) * rows]))
    return expected


def _run_consumers(
    ns: str,
    root: Path,
    ranks: int,
    steps: int,
    phase: str,
    state_in: str | None,
    compute_s: float,
    producers: list[subprocess.Popen],
    tick: Callable[[], None] = lambda: None,
) -> list[dict[str, Any]]:
    """Start one spawned process per rank and wait for all; a failed producer stops them early.

    ``tick()`` is called while waiting (the bar follows the steps committed).
    """
    from torch_tgb.cli._demo_workers import consume

    ctx = multiprocessing.get_context("spawn")
    procs = []
    for rank in range(ranks):
        state_path = str(root / f"state-{phase}-rank{rank}.json")
        result_path = root / f"result-{phase}-rank{rank}.json"
        result_path.unlink(missing_ok=True)
        source = None if state_in is None else state_in.format(rank=rank)
        proc = ctx.Process(
            target=consume,
            args=(ns, rank, ranks, steps, source, state_path, str(result_path), _CONSUMER_TIMEOUT_S, compute_s),
            name=f"tgb-demo-{phase}-rank{rank}",
        )
        proc.start()
        procs.append((proc, result_path))
    try:
        while any(proc.is_alive() for proc, _ in procs):
            for index, producer in enumerate(producers):
                code = producer.poll()
                if code not in (None, 0):
                    # the consumers would only time out waiting: report the cause instead
                    raise TGBError(f"demo producer p{index} exited with {code}: {_last_line(root, index)}")
            for proc, _ in procs:
                proc.join(timeout=0.1)
            tick()
        results = []
        for proc, result_path in procs:
            if proc.exitcode != 0 or not result_path.exists():
                raise TGBError(f"demo consumer {proc.name} failed with exit code {proc.exitcode} (see its stderr above)")
            results.append(json.loads(result_path.read_text()))
        return results
    finally:
        for proc, _ in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join()


def _last_line(work: Path, index: int) -> str:
    """The last line producer ``index`` wrote to stderr (its one-line `tgb: error: ...`)."""
    try:
        lines = (work / f"producer-p{index}.log").read_text().strip().splitlines()
    except OSError:
        lines = []
    return lines[-1] if lines else "(no output)"


def _stored_bytes(store: ObjectStore) -> tuple[int, int]:
    """(bytes, objects) currently stored in the namespace, by listing it."""
    total = count = 0
    for key in store.list(""):
        try:
            total += store.size(key)
        except TGBError:
            continue  # deleted between list and stat
        count += 1
    return total, count


def _field(stats: dict[str, Any], *names: str) -> float:
    for name in names:
        value = stats.get(name)
        if isinstance(value, (int, float)):
            return float(value)
    return 0.0


def run_demo(args: argparse.Namespace, root: Path) -> int:
    from torch_tgb._progress import progress
    from torch_tgb.checkpoint import Reclaimer, keep_last, record_watermark
    from torch_tgb.manifest import Manifest
    from torch_tgb.storage import open_store

    if args.global_batch % args.ranks:
        raise CommandError(f"--global-batch {args.global_batch} must be divisible by --ranks {args.ranks}")
    ns_dir = root / "ns"
    if ns_dir.exists() and any(ns_dir.iterdir()):
        raise CommandError(f"{ns_dir} is not empty: give `tgb demo` a new directory")
    work = root / "demo"
    work.mkdir(parents=True, exist_ok=True)
    ns = str(ns_dir)
    store = open_store(ns)
    per_producer = [args.steps // args.producers + (1 if i < args.steps % args.producers else 0) for i in range(args.producers)]
    total_steps = sum(per_producer)
    first_half = total_steps // 2
    started = time.perf_counter()

    # the bar counts the steps the ranks read, as far as the producers committed them; its text names the phase
    bar = progress(total=total_steps, desc="tgb demo", unit="step")
    manifest = Manifest(store)
    last_tick = [0.0]

    def phase(text: str) -> None:
        bar.set_description_str(f"tgb demo: {text}")

    def follow(lo: int, hi: int) -> Callable[[], None]:
        def tick() -> None:  # at most 4 head reads a second
            now = time.monotonic()
            if now - last_tick[0] >= 0.25:
                last_tick[0] = now
                done = min(max(manifest.head().num_steps, lo), hi)
                bar.update(done - bar.n)
        return tick

    env = dict(os.environ, TGB_PROGRESS="0")
    # output goes to files, not pipes: nothing can block on a full pipe buffer
    producers = []
    for i, count in enumerate(per_producer):
        with open(work / f"producer-p{i}.json", "w") as out, open(work / f"producer-p{i}.log", "w") as err:
            producers.append(subprocess.Popen(_producer_command(args, ns, i, count), stdout=out, stderr=err, env=env))
    try:
        # phase 1: read the first half while the producers write
        phase(f"1/4 producing; ranks read steps 0..{first_half - 1}")
        phase1 = _run_consumers(ns, work, args.ranks, first_half, "phase1", None, args.compute_ms / 1000, producers,
                                follow(0, first_half))
        bar.update(first_half - bar.n)
        phase("2/4 checkpoint demo-mid, reclaim")
        states = [json.loads((work / f"state-phase1-rank{r}.json").read_text()) for r in range(args.ranks)]
        mid = record_watermark(store, "demo-mid", states)  # every rank's state: the smallest cursor counts
        reclaim_mid = Reclaimer(store).run_once()
        # phase 2: restart every rank from its saved state and read the rest
        phase(f"3/4 ranks restarted from their state; read steps {first_half}..{total_steps - 1}")
        phase2 = _run_consumers(
            ns,
            work,
            args.ranks,
            total_steps - first_half,
            "phase2",
            str(work / "state-phase1-rank{rank}.json"),
            args.compute_ms / 1000,
            producers,
            follow(first_half, total_steps),
        )
        bar.update(total_steps - bar.n)
        producer_reports = []
        for index, proc in enumerate(producers):
            proc.wait(timeout=_CONSUMER_TIMEOUT_S)
            if proc.returncode != 0:
                raise TGBError(f"demo producer p{index} exited with {proc.returncode}: {_last_line(work, index)}")
            producer_reports.append(json.loads((work / f"producer-p{index}.json").read_text()))
    finally:
        for proc in producers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    phase("4/4 checkpoint demo-end, reclaim, verify")
    end_states = [json.loads((work / f"state-phase2-rank{r}.json").read_text()) for r in range(args.ranks)]
    end = record_watermark(store, "demo-end", end_states)
    keep_last(store, 2)  # both checkpoints stay live: the data from demo-mid on is kept for a rollback
    reclaim_end = Reclaimer(store).run_once()
    stored_after, objects_after = _stored_bytes(store)
    wall = time.perf_counter() - started

    # exactly once: every slice each rank received, against every slice written for it
    expected = _expected_digests(args, per_producer)
    seen = [phase1[r]["digests"] + phase2[r]["digests"] for r in range(args.ranks)]
    exact = all(sorted(seen[r]) == sorted(expected[r]) for r in range(args.ranks))
    # same step sequence on every rank: at each step the ranks hold slices of one global batch
    batches = set(zip(*expected))
    aligned = all(step in batches for step in zip(*seen))
    head = Manifest(store).head()
    from torch_tgb.cli._verify_impl import verify_namespace

    verified = verify_namespace(ns)
    bar.close()
    summary = _summary(
        args,
        ns=ns,
        wall=wall,
        total_steps=total_steps,
        mid_step=mid.step,
        end_step=end.step,
        phases=(phase1, phase2),
        producer_reports=producer_reports,
        reclaims=(reclaim_mid, reclaim_end),
        stored=(stored_after, objects_after),
        exact=exact,
        aligned=aligned,
        verified=verified,
        head=head,
    )
    if args.json:
        print_json(summary)
    else:
        print(_render(summary))
        print(STALL_NOTE)
        print(f"next: tgb inspect {ns}   |   tgb verify {ns}   (the steps from the live checkpoint demo-mid on are kept)")
    return 0 if exact and aligned and verified.ok else 1


def _report_dict(report: object) -> dict[str, Any]:
    import dataclasses

    if dataclasses.is_dataclass(report) and not isinstance(report, type):
        return dataclasses.asdict(report)
    return dict(vars(report))


def _summary(args: argparse.Namespace, **m: Any) -> dict[str, Any]:
    phase1, phase2 = m["phases"]
    consumer = phase1 + phase2
    tokens = sum(r["tokens"] for r in consumer)
    # ranks run in parallel: a phase lasts as long as its slowest rank
    loop_s = sum(max(r["loop_s"] for r in phase) for phase in (phase1, phase2))
    wait_s = sum(r["wait_s"] for r in consumer)
    rank_loop_s = sum(r["loop_s"] for r in consumer)
    pstats = [p.get("stats") or {} for p in m["producer_reports"]]
    attempts = sum(_field(s, "commit_attempts", "attempts") for s in pstats)
    successes = sum(_field(s, "commit_successes", "successes", "commits") for s in pstats)
    conflicts = sum(_field(s, "commit_conflicts", "conflicts") for s in pstats)
    produce_s = max((p.get("seconds", 0.0) for p in m["producer_reports"]), default=0.0)
    reclaims = [_report_dict(r) for r in m["reclaims"]]
    reclaimed_bytes = sum(_field(r, "bytes", "bytes_deleted") for r in reclaims)
    reclaimed_objects = sum(_field(r, "objects") + _field(r, "orphans") for r in reclaims)
    reclaimed_versions = sum(_field(r, "versions") for r in reclaims)
    written = sum(_field(s, "bytes_written") for s in pstats)
    stored_after, objects_after = m["stored"]
    head = m["head"]
    return {
        "namespace": m["ns"],
        "wall_s": round(m["wall"], 2),
        "producers": len(m["producer_reports"]),
        "ranks": args.ranks,
        "steps_committed": int(getattr(head, "num_steps", m["total_steps"])) if head is not None else None,
        "manifest_versions": int(getattr(head, "version", 0)) if head is not None else None,
        "steps_read_per_rank": [phase1[r]["steps"] + phase2[r]["steps"] for r in range(args.ranks)],
        "restart_at_step": m["mid_step"],
        "end_step": m["end_step"],
        "exactly_once": m["exact"],
        "ranks_aligned": m["aligned"],
        "verify_ok": m["verified"].ok,
        "verify_problems": [p.render() for p in m["verified"].problems],
        "verified_objects": m["verified"].objects_checked,
        "verified_steps": m["verified"].steps_checked,
        "consumer_tokens": tokens,
        "consumer_tokens_per_s": round(tokens / loop_s, 1) if loop_s > 0 else None,
        "producer_tokens_per_s": round(
            m["total_steps"] * args.global_batch * args.seq_len / produce_s, 1
        ) if produce_s > 0 else None,
        "commit_attempts": int(attempts),
        "commit_successes": int(successes),
        "commit_success_rate": round(successes / attempts, 4) if attempts else None,
        "commit_conflicts": int(conflicts),
        "input_stall_pct": round(100.0 * wait_s / rank_loop_s, 1) if rank_loop_s > 0 else None,
        "simulated_compute_ms_per_step": args.compute_ms,
        "bytes_written_by_producers": int(written),
        "bytes_reclaimed": int(reclaimed_bytes),
        "tgb_objects_reclaimed": int(reclaimed_objects),
        "log_versions_reclaimed": int(reclaimed_versions),
        "bytes_stored_at_end": stored_after,
        "objects_stored_at_end": objects_after,
        "reclaim_reports": reclaims,
        "producer_stats": pstats,
        "consumer_stats": [r.get("stats") or {} for r in consumer],
    }


STALL_NOTE = (
    "input stall: the share of each rank's read loop spent waiting for its next batch (the rest is the "
    "simulated compute). In the demo the producers write while the ranks read, so the ranks often wait for "
    "new commits; a producer fleet that keeps ahead of training brings it towards 0."
)


def _render(s: dict[str, Any]) -> str:
    def opt(value: object, fmt: str = "{}") -> str:
        return "n/a" if value is None else fmt.format(value)

    rows = [
        ("namespace", s["namespace"]),
        ("producers / consumer ranks", f"{s['producers']} / {s['ranks']} (dp={s['ranks']})"),
        ("steps committed", opt(s["steps_committed"])),
        ("manifest versions", opt(s["manifest_versions"])),
        ("steps read per rank", ", ".join(str(n) for n in s["steps_read_per_rank"])),
        ("restart from saved state at", f"step {s['restart_at_step']}"),
        ("every batch exactly once", "yes" if s["exactly_once"] else "NO"),
        ("ranks saw the same step sequence", "yes" if s["ranks_aligned"] else "NO"),
        ("tgb verify after reclaim", f"OK ({plural(s['verified_steps'], 'TGB')} in "
         f"{plural(s['verified_objects'], 'object')}, CRC32C)" if s["verify_ok"]
         else f"{len(s['verify_problems'])} problem(s): {s['verify_problems'][0]}"),
        ("consumer tokens/s (all ranks)", opt(s["consumer_tokens_per_s"], "{:,.0f}")),
        ("producer tokens/s (all)", opt(s["producer_tokens_per_s"], "{:,.0f}")),
        ("commit attempts / successes", f"{s['commit_attempts']} / {s['commit_successes']}"),
        ("commit success rate", opt(s["commit_success_rate"], "{:.1%}")),
        ("commit conflicts", str(s["commit_conflicts"])),
        ("input stall (waiting for data)", opt(s["input_stall_pct"], "{:.1f} % of the read loop") + f" ({s['simulated_compute_ms_per_step']:g} ms simulated compute per step)"),
        ("bytes written by producers", human_bytes(s["bytes_written_by_producers"])),
        ("bytes reclaimed (2 runs)", f"{human_bytes(s['bytes_reclaimed'])}: "
         f"{plural(s['tgb_objects_reclaimed'], 'object')} of TGBs, "
         f"{plural(s['log_versions_reclaimed'], 'log version')}"),
        ("bytes stored at the end", f"{human_bytes(s['bytes_stored_at_end'])} in "
         f"{plural(s['objects_stored_at_end'], 'object')}"),
        ("wall time", f"{s['wall_s']:.1f} s"),
    ]
    return format_table(rows, title="tgb demo summary (all figures measured)")

