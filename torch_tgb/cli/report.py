"""``tgb report NS --png FILE``: a run's timeline as a picture, from what the namespace records.

Four panels: steps committed over time with the checkpoints' steps (what the
trainer consumed) and the GC boundary; the producers' lead (steps committed
ahead of the newest checkpoint) against ``--max-lag`` where given; storage
(bytes of the TGBs committed, cumulative, beside what is stored now after
reclamation); and per step the tokens and samples of each TGB with their
imbalance (a step's tokens over the mean). ``--json`` prints the series.
Only kept versions have a history: the Reclaimer deletes the log below the
GC boundary.
"""

from __future__ import annotations

import argparse
from typing import Any

from torch_tgb.cli._common import CommandError, add_json_flag, add_storage_option_flag

__all__ = ["add_parser", "draw", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="a namespace's timeline (committed, consumed, lead, storage, per-step tokens) as a PNG and series",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("ns", metavar="NS", help="namespace URL or local directory")
    p.add_argument("--png", default=None, metavar="FILE", help="draw the timeline into this PNG (needs matplotlib)")
    p.add_argument("--max-lag", type=int, default=None, metavar="K",
                   help="the producers' --max-lag, drawn as the bound of the lead (not recorded in the namespace)")
    p.add_argument("--no-sizes", action="store_true", help="skip listing the namespace for the bytes stored now")
    add_json_flag(p)
    add_storage_option_flag(p)
    p.set_defaults(run=run)


def _summary(timeline: Any, s: dict[str, Any], stored: int | None) -> dict[str, Any]:
    versions = timeline.versions
    span = (versions[-1]["time"] - versions[0]["time"]) if len(versions) > 1 else 0.0
    steps = versions[-1]["stop_step"] - versions[0]["first_step"] if versions else 0
    tokens = sum(v["tokens"] for v in versions)
    return {
        "versions": len(versions), "first_version": timeline.first_version,
        "steps": versions[-1]["stop_step"] if versions else 0, "seconds": round(span, 3),
        "tgbs_per_s": round(steps / span, 3) if span > 0 else None,
        "tokens_per_s": round(tokens / span, 1) if span > 0 else None,
        "checkpoints": len(timeline.watermarks), "lead_now": s["lead"][-1][1] if s["lead"] else None,
        "bytes_committed": s["bytes_committed"][-1][1] if s["bytes_committed"] else 0,
        "bytes_stored": stored, "gc_step": timeline.gc_step, "sealed": timeline.sealed,
        "max_imbalance": max(s["imbalance"], default=1.0),
    }


def draw(path: str, s: dict[str, Any], summary: dict[str, Any], title: str) -> None:
    """The four panels into ``path`` (PNG)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise CommandError("--png needs matplotlib: pip install -e '.[bench]'") from e
    fig, axes = plt.subplots(2, 2, figsize=(12, 7.5))
    (steps_ax, lead_ax), (bytes_ax, per_step_ax) = axes

    def xy(points: list[list[float]]) -> tuple[list[float], list[float]]:
        return [p[0] for p in points], [p[1] for p in points]

    end = max([p[0] for p in s["committed"] + s["consumed"]], default=0.0)
    committed = s["committed"] + ([[end, s["committed"][-1][1]]] if s["committed"] else [])
    steps_ax.step(*xy(committed), where="post", marker=".", label="committed (TGB steps)")
    if s["consumed"]:
        steps_ax.plot(*xy(s["consumed"]), "o-", label="consumed (checkpoint step)")
    if s["gc_step"]:
        steps_ax.axhline(s["gc_step"], color="gray", ls=":", label=f"GC boundary (step {s['gc_step']})")
    steps_ax.set(title="steps over time", xlabel="seconds", ylabel="step")
    steps_ax.legend(fontsize=8)
    lead_ax.step(*xy(s["lead"]), where="post", label="producer lead (steps ahead of newest checkpoint)")
    if s["max_lag"] is not None:
        lead_ax.axhline(s["max_lag"], color="red", ls="--", label=f"--max-lag {s['max_lag']}")
    lead_ax.set(title="producer lead and lag", xlabel="seconds", ylabel="steps")
    lead_ax.legend(fontsize=8)
    mib = 1 << 20
    t, b = xy(s["bytes_committed"])
    bytes_ax.plot(t, [x / mib for x in b], label="TGB bytes committed (cumulative)")
    if summary["bytes_stored"] is not None:
        bytes_ax.axhline(summary["bytes_stored"] / mib, color="green", ls="--",
                         label="stored now (after reclamation)")
    bytes_ax.set(title="storage", xlabel="seconds", ylabel="MiB")
    bytes_ax.legend(fontsize=8)
    per_step_ax.plot(s["steps"], s["tokens"], ".", ms=3, label="tokens per TGB")
    per_step_ax.set(title=f"per step (max imbalance {summary['max_imbalance']:.2f} x mean)", xlabel="step",
                    ylabel="tokens")
    if any(s["samples"]):
        twin = per_step_ax.twinx()
        twin.plot(s["steps"], s["samples"], ".", ms=3, color="orange", label="samples per TGB")
        twin.set_ylabel("samples")
    per_step_ax.legend(fontsize=8, loc="lower left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    from torch_tgb.cli._common import human_bytes, print_json, require_namespace, storage_options
    from torch_tgb.cli._inspect_impl import storage_usage
    from torch_tgb.cli._timeline import read_timeline, series
    from torch_tgb.storage import open_store

    if args.max_lag is not None and args.max_lag < 1:
        raise CommandError("--max-lag must be at least 1")
    with open_store(args.ns, storage_options(args)) as store:
        require_namespace(store)
        timeline = read_timeline(store)
        stored = None if args.no_sizes else sum(u["bytes"] for u in storage_usage(store).values())
    s = series(timeline, max_lag=args.max_lag)
    summary = _summary(timeline, s, stored)
    if args.png:
        draw(args.png, s, summary, f"tgb report {timeline.namespace}")
    if args.json:
        print_json({"namespace": timeline.namespace, "summary": summary, "series": s, "png": args.png})
        return 0
    rate = summary["tgbs_per_s"]
    print(f"report {timeline.namespace}: {summary['versions']} versions kept (from version "
          f"{summary['first_version']}), {summary['steps']} steps committed"
          + (f" over {summary['seconds']:.1f}s ({rate:.2f} TGBs/s)" if rate else ""))
    print(f"  checkpoints {summary['checkpoints']}, producer lead now "
          f"{summary['lead_now'] if summary['lead_now'] is not None else 'n/a'} steps; GC boundary step "
          f"{summary['gc_step']}")
    stored_text = "not listed" if stored is None else human_bytes(stored)
    print(f"  bytes committed {human_bytes(summary['bytes_committed'])} (kept versions), stored now {stored_text}; "
          f"max per-step imbalance {summary['max_imbalance']:.2f} x mean")
    if args.png:
        print(f"  timeline drawn to {args.png}")
    return 0
