"""The section of docs/benchmarks.md that ``provenance_cost.py`` and ``lineage_lookup.py`` measure (issue 47)."""

from __future__ import annotations

from statistics import median
from typing import Any


def _cost(r: dict[str, Any]) -> list[str]:
    lines = [f"**At rest and on ingest** (`provenance_cost.py`{' --quick' if r['docs'] < 10_000 else ''}: "
             f"{r['docs']:,} documents BFD-packed into {r['rows']:,} rows of 2048 tokens, {r['document_pieces']:,} "
             "document pieces, dp 8, produced with and without provenance in interleaved rounds):", "",
             "| | bytes per document-in-row |", "|---|---:|",
             f"| provenance in the TGBs | {r['bytes_per_piece_tgbs']:.1f} |",
             f"| lineage index | {r['bytes_per_piece_index']:.1f} |",
             f"| total (budget 50) | {r['bytes_per_piece_total']:.1f} |", ""]
    if "median_off" not in r:  # a result of the first version: the fastest runs only
        return lines + [f"Ingest: fastest run {min(r['seconds_off']):.2f} s off, {min(r['seconds_on']):.2f} s on "
                        f"({r['overhead_fastest']:+.1%}).", ""]
    rows = ["| ingest, provenance off → on | median off | median on | overhead of the medians | "
            "median of the rounds' ratios | rounds' ratios (spread) |", "|---|---:|---:|---:|---:|---|"]
    for what, off, on, key in (("wall (s)", r["seconds_off"], r["seconds_on"], "overhead_per_round"),
                               ("CPU, all threads (s)", r.get("cpu_off"), r.get("cpu_on"), "cpu_overhead_per_round")):
        if not off:
            continue
        ratios = r[key]
        rows.append(f"| {what} | {median(off):.2f} | {median(on):.2f} | {median(on) / median(off) - 1:+.1%} | "
                    f"{median(ratios):+.1%} | {min(ratios):+.1%} .. {max(ratios):+.1%} ({len(ratios)} rounds) |")
    return lines + rows + [""]


def _lookup(r: dict[str, Any]) -> list[str]:
    one, batch = r["one_record"], r["ten_thousand_records"]
    return [f"**Lookups** (`lineage_lookup.py`: an index of {r['steps']:,} steps × {r['rows']} rows × {r['spans']} "
            f"record(s) = {r['entries']:,} entries in {r['levels']} level(s) + {r['deltas']} deltas; "
            f"{r['model']}):", "",
            "| lookup | seconds | store requests |", "|---|---:|---:|",
            f"| one record ({len(one)} lookups) | {min(o['seconds'] for o in one):.3f} .. "
            f"{max(o['seconds'] for o in one):.3f} | {max(o['requests'] for o in one)} |",
            f"| {batch['records']:,} records in one batch | {batch['seconds']:.2f} | {batch['requests']} |", "",
            "Goal (issue 47): one record in 10^6 steps × 64 rows in ≤ 2 s and ≤ 20 requests; 10^4 records in "
            "one pass.",
            ""]


def provenance_section(cost: dict[str, Any] | None, lookup: dict[str, Any] | None) -> list[str]:
    """``## 11.``: provenance's bytes and ingest overhead, lineage lookups; says what to run where one is missing."""
    lines = ["## 11. Provenance and lineage (`provenance_cost.py`, `lineage_lookup.py`)", "",
             "Design and what each figure means: docs/provenance.md.", ""]
    lines += _cost(cost) if cost else ["No `provenance_cost.json`: run `tgb bench provenance_cost`.", ""]
    lines += _lookup(lookup) if lookup else ["No `lineage_lookup.json`: run `tgb bench lineage_lookup`.", ""]
    return lines
