"""The section of docs/benchmarks.md that ``scale.py`` and ``_scale_discovery.py`` measure: issues 41 and 42."""

from __future__ import annotations

import statistics
from typing import Any

from _report_common import verdict, when

PREFIX_LIMIT = 5500.0


def _rows(scale: dict[str, Any], section: str) -> list[dict[str, Any]]:
    return [r for r in scale["rows"] if r["section"] == section]


def _kb(x: float) -> str:
    return f"{x / 1024:,.1f} KiB" if x < 1 << 20 else f"{x / 2**20:,.1f} MiB"


def _side(row: dict[str, Any], side: str) -> dict[str, Any]:
    return row.get(side) or {}


def _table(lines: list[tuple[str, str, str, str, str]]) -> list[str]:
    out = ["| what | before | after | goal | |", "|---|---|---|---|---|"]
    out += [f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in lines]
    return out


def _read_side(scale: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    rows: list[tuple[str, str, str, str, str]] = []
    for r in _rows(scale, "startup"):
        b, a = _side(r, "before"), _side(r, "after")
        p = r["params"]
        name = f"reader start-up, P = {p['producers']:,} × {p['state_bytes'] // 1024} KiB state"
        rows.append((f"{name}: bytes read", _kb(b["counts"]["bytes"]), _kb(a["counts"]["bytes"]), "≤ 1 MB",
                     verdict(a["counts"]["bytes"] <= 1e6)))
        rows.append((f"{name}: time to first batch (model)", f"{b['seconds_to_first_batch']:.2f} s",
                     f"{a['seconds_to_first_batch']:.2f} s", "≤ 1 s", verdict(a["seconds_to_first_batch"] <= 1)))
        rows.append((f"{name}: anonymous RSS growth", _kb(b["rss_anon_growth"]), _kb(a["rss_anon_growth"]),
                     "≤ +50 MB", verdict(a["rss_anon_growth"] <= 50e6)))
    for r in _rows(scale, "footer"):
        b, a = _side(r, "before"), _side(r, "after")
        rows.append((f"footer bytes per rank-step, dp {r['params']['dp']:,} × cp {r['params']['cp']}",
                     f"{b['footer_bytes_per_rank_step']:,}", f"{a['footer_bytes_per_rank_step']:,}", "≤ 4 KiB",
                     verdict(a["footer_bytes_per_rank_step"] <= 4096)))
    for r in _rows(scale, "versions_memory"):
        b, a = _side(r, "before"), _side(r, "after")
        p = r["params"]
        rows.append((f"reader RSS growth from {a.get('first_mark', 10_000):,} to {p['steps']:,} steps "
                     f"({p['per_version']:,} entries/version)", _kb(b["growth_10k_to_all"]),
                     _kb(a["growth_10k_to_all"]), "≤ +64 MB", verdict(a["growth_10k_to_all"] <= 64 << 20)))
    for r in _rows(scale, "shuffled_manifest"):
        b, a = _side(r, "before"), _side(r, "after")
        ratio = a["steps_per_s"] / b["steps_per_s"] if b else float("nan")
        rows.append(("block-shuffled manifest lookups, steps/s", f"{b.get('steps_per_s', 0):,.0f}",
                     f"{a['steps_per_s']:,.0f} ({ratio:.2f}×)", "≥ 0.95× before", verdict(ratio >= 0.95)))
    for r in _rows(scale, "fold"):
        b, a = _side(r, "before"), _side(r, "after")
        rows.append((f"`fold` per version, {r['params']['shards']:,} declared shards",
                     f"{b['fold_ms_median']:.3f} ms", f"{a['fold_ms_median']:.4f} ms", "≤ 0.1 ms",
                     verdict(a["fold_ms_median"] <= 0.1)))
    for r in _rows(scale, "bytes_at_rest"):
        b, a = _side(r, "before"), _side(r, "after")
        p = r["params"]
        rows.append((f"bytes at rest per uint16 token, dp {p['dp']}, batch {p['batch']}, seq {p['seq']}",
                     f"{b['bytes_per_token']:.2f}", f"{a['bytes_per_token']:.3f}", "≤ 2.2",
                     verdict(a["bytes_per_token"] <= 2.2)))
    for r in _rows(scale, "tp_broadcast"):
        a = _side(r, "after")
        if "broadcast" in a:
            p = r["params"]
            rows.append((f"store requests of a dp {p['dp']} × tp {p['tp']} job, {p['steps']} steps (bytes)",
                         f"{a['plain']['requests']:,} ({_kb(a['plain']['bytes'])}), every rank reads",
                         f"{a['broadcast']['requests']:,} ({_kb(a['broadcast']['bytes'])}), one read per TP group",
                         "÷ TP", verdict(a["broadcast"]["data_requests"] * p["tp"] <= a["plain"]["data_requests"])))
    return rows


def _write_side(scale: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    rows: list[tuple[str, str, str, str, str]] = []
    for r in _rows(scale, "encode"):
        b, a = _side(r, "before"), _side(r, "after")
        p = r["params"]
        goal = p["dp"] * p["cp"] >= 8192
        rows.append((f"producer CPU to cut + encode one TGB, dp {p['dp']:,} × cp {p['cp']}",
                     f"{b['cpu_ms_median']:,.1f} ms", f"{a['cpu_ms_median']:,.1f} ms", "≤ 50 ms" if goal else "",
                     verdict(a["cpu_ms_median"] <= 50) if goal else ""))
    for r in _rows(scale, "state_bytes"):
        b, a = _side(r, "before"), _side(r, "after")
        p = r["params"]
        share = a["metadata_written_per_version"] / (64 << 20)
        rows.append((f"metadata written per version, {p['producers']:,} producers × {p['state_bytes'] // 1024} KiB "
                     "state (share of a 64 MB TGB)", _kb(b["metadata_written_per_version"]),
                     f"{_kb(a['metadata_written_per_version'])} ({share:.3%})", "≤ 1%", verdict(share <= 0.01)))
    for r in _rows(scale, "reclaim"):
        b, a = _side(r, "before"), _side(r, "after")
        p = r["params"]
        rows.append((f"Reclaimer idle pass, {p['live']:,} live one-entry versions: requests",
                     f"{b['idle']['requests']:,}", f"{a['idle']['requests']:,}", "≤ 10",
                     verdict(a["idle"]["requests"] <= 10)))
        rows.append((f"Reclaimer pass reclaiming {p['reclaim']:,} objects: requests per object",
                     f"{b['reclaiming']['requests_per_object']:.2f}", f"{a['reclaiming']['requests_per_object']:.2f}",
                     "≤ 2", verdict(a["reclaiming"]["requests_per_object"] <= 2)))
    for r in _rows(scale, "commit_requests"):
        b, a = _side(r, "before"), _side(r, "after")
        p = r["params"]
        rerun = f"; re-run {r['run_utc']}" if r.get("run_utc") else ""
        rows.append((f"manifest requests per successful commit, N = {p['producers']} real producers ({p['policy']}, "
                     f"conflict rate{rerun})", f"{b['manifest_requests_per_commit']:.1f} ({b['conflict_rate']:.0%})",
                     f"{a['manifest_requests_per_commit']:.1f} ({a['conflict_rate']:.0%})", "≤ 10",
                     verdict(a["manifest_requests_per_commit"] <= 10)))
    return rows


def _discovery(d: dict[str, Any]) -> list[str]:
    runs = d["runs"]
    out = ["", f"**Discovery** (`_scale_discovery.py`; {d.get('model', '')}; {when(d)}): one node of "
           f"{d['ranks_per_node']} reader processes, one new step per second, then idle; their requests summed and "
           "projected to R ranks at 8 per node against one S3 prefix's ~5,500 GET/HEAD per second.", "",
           "| | caught up, req/s per node | × prefix limit at R = 8,192 (goal ≤ 0.5) | idle, req/s per node | "
           "× prefix limit at R = 8,192 (goal ≤ 0.1) | notice latency mean (p95) |", "|---|---|---|---|---|---|"]
    for name in ("before", "after"):
        r = runs.get(name)
        if not r:
            continue
        c, i, lat = r["caught_up"], r["idle"], r["notice_latency_s"]
        cx, ix = c["projected"]["R=8192"]["x_prefix_limit"], i["projected"]["R=8192"]["x_prefix_limit"]
        out.append(f"| {name} | {c['manifest_requests_per_s']:.2f} | {cx:.3f}× ({verdict(cx <= 0.5)}) | "
                   f"{i['manifest_requests_per_s']:.2f} | {ix:.3f}× ({verdict(ix <= 0.1)}) | {lat['mean']} s "
                   f"({lat['p95']} s) |")
    if d.get("layouts"):
        out += ["", *layouts_table(d["layouts"], when=when(d["layouts"]))]
    return out


def layouts_table(layouts: dict[str, Any], *, when: str) -> list[str]:
    """Flat vs spread manifest keys (``_scale_discovery.py --layouts``): prefixes taken, busiest prefix at R = 8,192."""
    s = layouts["summary"]
    out = [f"**Manifest keys spread over prefixes** (`_scale_discovery.py --layouts`; {when}; node share on; "
           f"{layouts['rounds']} rounds interleaved, medians [range]; {layouts['busy_s']:.0f} s caught up at one "
           f"version per second, {layouts['idle_s']:.0f} s idle): the prefixes (key up to its last `/`) the node's "
           "manifest requests went to, and the busiest one's requests projected to R = 8,192 ranks (1,024 nodes) "
           "against one prefix's ~5,500/s. Counts, not times: the shared 2-core box was loaded (load average "
           f"{layouts.get('machine', {}).get('loadavg_at_end', ['?'])[0]:.4g} at the end).", "",
           "| keys | caught up: prefixes | caught up: busiest prefix at R = 8,192 | caught up: busiest log prefix | "
           "idle: prefixes | idle: busiest prefix at R = 8,192 | all manifest requests at R = 8,192, caught up |",
           "|---|---|---|---|---|---|---|"]
    for name in ("flat", "spread"):
        if name not in s:
            continue
        c, i = s[name]["caught_up"], s[name]["idle"]
        busiest = layouts["runs"][name][0]["spread"]["caught_up"]["busiest_prefix"]

        def x(w: dict[str, Any]) -> str:
            lo, hi = w["busiest_x_prefix_limit_R8192_range"]
            return f"{w['busiest_x_prefix_limit_R8192_median']:.3f}× [{lo:.3f}–{hi:.3f}]"

        logs = [max(v for p, v in r["caught_up"]["manifest_by_prefix_per_s"].items() if p.startswith("_tgb/log/"))
                * 8192 / 8 / PREFIX_LIMIT for r in layouts["runs"][name]]  # 8 ranks per node
        out.append(f"| {name} | {c['prefixes_median']:g} | {x(c)} (`{busiest}`) | {statistics.median(logs):.3f}× "
                   f"[{min(logs):.3f}–{max(logs):.3f}] | {i['prefixes_median']:g} | {x(i)} | "
                   f"{c['all_manifest_x_prefix_limit_R8192_median']:.3f}× |")
    return out


def scale_section(scale: dict[str, Any] | None, discovery: dict[str, Any] | None) -> list[str]:
    out = ["## 9. The read side at 8,192 ranks, the write side's bookkeeping (`scale.py`)", ""]
    if scale is None:
        return out + ["No `scale.json` in the results directory: not run (`python benchmarks/scale.py`).", ""]
    out += [f"Issues 41 and 42. {scale['model']}; {when(scale)}, a shared 2-core dev VM. *Before* is revision "
            f"`{scale['base']}` (the last commit before this round's scale work), *after* this checkout: each row "
            "measured on both in one run, each measurement in its own process, counted by the same instrument "
            "(`testing/counting.py`). Counts and bytes are exact; times are the latency model's or process CPU "
            "time, never this box's wall clock.", "", "**Read side**", ""]
    out += _table(_read_side(scale))
    out += ["", "**Write side**", ""]
    out += _table(_write_side(scale))
    if discovery is not None:
        out += _discovery(discovery)
    return out + [""]
