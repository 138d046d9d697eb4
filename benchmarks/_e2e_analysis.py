"""The model of ``end_to_end.py`` and its verdicts: bounds from S and D, ratios, goals, the projection.

Per step the trainer's work costs S CPU seconds (one thread: it cannot use a
second core) and the producers' D. A node of ``n`` cores gives at most ``n``
CPU seconds per second. So:

- colocated, trainer and data on T: ``x·S <= 1`` and ``x·(S + D) <= |T|``,
  i.e. at most ``min(1/S, |T|/(S + D))`` steps/s (``1/(S + D)`` at |T| = 1);
- disaggregated, trainer on T and producers on P: ``min(1/S, |P|/D)``;
- equal total CPU (both setups on T ∪ P): both ``min(1/S, (|T| + |P|)/(S + D))``.

The ideal ratio disaggregated/colocated at |T| = 1 is ``(S + D)·min(1/S, |P|/D)``:
at most ``1 + D/S``, and ``(S + D)/max(S, D)`` at |P| = 1, largest (2) where D = S.
The goals are judged on this one-D model, as issue 29 states it. D is a
producer's whole cost (pipeline + ``append``), which (a)'s workers do not
pay in full: they skip the TGB write (and pass the batch through the
DataLoader's queue instead). So the results also carry the per-side model,
(a) charged the pipeline alone (``D_pipeline``): ``(S + D_pipeline)·min(1/S, |P|/D)``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from _common import spread

#: seed 000 §7.2: (Local, BatchWeave) steps/s and the gain the paper states
PAPER = {"GR00T": (1.15, 3.09, 2.68), "HoloAssist": (0.029, 0.222, 7.73), "BEHAVIOR-1K": (0.227, 1.17, 5.17)}
PROJECTION_P = (4, 16, 32)
#: "S dominates" (issue 29's wait goal): D/S below this; near D = S neither does, and one producer that only
#: just keeps up makes the trainer wait at every hiccup, which the crossover goal judges instead
S_DOMINATES = 0.8


def colocated_bound(s: float, d: float, t: int = 1) -> float:
    return min(1 / s, t / (s + d))


def disaggregated_bound(s: float, d: float, p: int = 1) -> float:
    return min(1 / s, p / d)


def crossover(points: dict[int, float], factor: int, near: float = 1.25) -> int | None:
    """The resolution where D/S = 1: a measured one whose D/S is within ``near``x of 1 (the closest), else one
    (a multiple of ``factor``) interpolated log-log between the measured points around it; None outside them.

    At D/S = 1.25 the ideal gain at |T| = |P| = 1 is 1.8 instead of 2: close enough to test the peak without
    a fourth resolution in a sweep that must fit in 15 minutes."""
    close = [r for r, x in points.items() if 1 / near <= x <= near]
    if close:
        return min(close, key=lambda r: abs(math.log(points[r])))
    res = sorted(points)
    for lo, hi in zip(res, res[1:]):
        a, b = math.log(points[lo]), math.log(points[hi])
        if a == 0:
            return lo
        if a * b < 0:
            x = math.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * a / (a - b))
            return max(factor, round(x / factor) * factor)
    return None


def _med(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def per_resolution(cal: list[dict[str, Any]], runs: dict[str, list[dict[str, Any]]], *, t: int,
                   p: int) -> dict[str, Any]:
    """Medians (min–max) over rounds of every setup, the bounds of each round and the side-by-side ratios."""
    rounds = len(cal)
    s = [c["S_s"] for c in cal]
    d = [c["D_s"] for c in cal]
    d_pipe = [c.get("D_pipeline_s") or c["D_s"] for c in cal]
    out: dict[str, Any] = {
        "S_s": spread(s), "S_read_s": spread([c["S_read_s"] for c in cal]), "D_s": spread(d),
        "D_over_S": spread([di / si for si, di in zip(s, d)]),
        "bound_colocated": spread([colocated_bound(si, di, t) for si, di in zip(s, d)]),
        "bound_disaggregated": spread([disaggregated_bound(si, di, p) for si, di in zip(s, d)]),
        "bound_equal_total": spread([colocated_bound(si, di, t + p) for si, di in zip(s, d)]),
        "ideal_ratio": spread([disaggregated_bound(si, di, p) / colocated_bound(si, di, t) for si, di in zip(s, d)]),
        # each side charged what it runs: (a)'s workers the pipeline alone (no TGB write), (b) the pipeline + append
        "bound_colocated_pipeline": spread([colocated_bound(si, dp, t) for si, dp in zip(s, d_pipe)]),
        "ideal_ratio_per_side": spread([disaggregated_bound(si, di, p) / colocated_bound(si, dp, t)
                                        for si, di, dp in zip(s, d, d_pipe)]),
        "setups": {},
    }
    bounds = {"colocated": [colocated_bound(si, di, t) for si, di in zip(s, d)],
              "disaggregated": [disaggregated_bound(si, di, p) for si, di in zip(s, d)],
              "shared": [colocated_bound(si, di, t + p) for si, di in zip(s, d)]}
    for name, rows in runs.items():
        kind = "shared" if name.endswith("_shared") else "colocated" if name.startswith("a") else "disaggregated"
        row = {key: spread([r[key] for r in rows if r.get(key) is not None and not _nan(r[key])])
               for key in ("steps_per_s", "step_p50_ms", "step_p95_ms", "wait_ms_per_step", "wait_fraction",
                           "cpu_T_s_per_step", "cores_T_busy_s_per_step", "bytes_per_step", "first_step_s",
                           "D_run_s", "compute_ms_per_step", "compute_cpu_ms_per_step", "reader_cpu_ms_per_step")}
        row["ratio_to_bound"] = spread([r["steps_per_s"] / b for r, b in zip(rows, bounds[kind]) if r["steps_per_s"]])
        row["errors"] = [r["error"] for r in rows if r.get("error")]
        row["exactly_once"] = all(r.get("exactly_once", {}).get("ok", False) for r in rows)
        out["setups"][name] = row
    best_a = [max(runs[a][i]["steps_per_s"] for a in ("a0", "a1", "a2") if a in runs) for i in range(rounds)]
    ratios: dict[str, Any] = {}
    for name in ("b", "c", "b_ahead"):
        if name in runs:
            r = [runs[name][i]["steps_per_s"] / best_a[i] for i in range(rounds)]
            ideal = [disaggregated_bound(si, di, p) / colocated_bound(si, di, t) for si, di in zip(s, d)]
            ratios[f"{name}_over_best_a"] = spread(r)
            ratios[f"{name}_over_best_a_over_ideal"] = spread([x / y for x, y in zip(r, ideal)])
            per_side = [disaggregated_bound(si, di, p) / colocated_bound(si, dp, t) for si, di, dp in zip(s, d, d_pipe)]
            ratios[f"{name}_over_best_a_over_ideal_per_side"] = spread([x / y for x, y in zip(r, per_side)])
            for a in ("a0", "a1", "a2"):
                if a in runs:
                    ratios[f"{name}_over_{a}"] = spread([runs[name][i]["steps_per_s"] / runs[a][i]["steps_per_s"]
                                                         for i in range(rounds)])
    if "b_shared" in runs:
        shared_a = [max(runs[a][i]["steps_per_s"] for a in ("a1_shared", "a2_shared") if a in runs)
                    for i in range(rounds)]
        ratios["b_shared_over_best_a_shared"] = spread([runs["b_shared"][i]["steps_per_s"] / shared_a[i]
                                                        for i in range(rounds)])
    if "b_zstd" in runs and "b" in runs:  # the same producers and trainer, the patches stored compressed
        ratios["b_zstd_over_b"] = spread([runs["b_zstd"][i]["steps_per_s"] / runs["b"][i]["steps_per_s"]
                                          for i in range(rounds)])
    out["ratios"] = ratios
    out["compressed"] = compressed(cal)
    return out


def compressed(cal: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The calibration's two reads on T of the same batches, plain and stored compressed (rounds alternate which
    goes first): the trainer's steps/s fed by its reader (wall; and CPU of the process, decoding included), the
    decoding's CPU per step, the producer's CPU per step and the bytes at rest."""
    cal = [c for c in cal if c.get("S_read_zstd_s")]
    if not cal:
        return None
    return {
        "reader_zstd_over_plain": spread([c["S_read_wall_s"] / c["S_read_zstd_wall_s"] for c in cal]),
        "reader_zstd_over_plain_cpu": spread([c["S_read_s"] / c["S_read_zstd_s"] for c in cal]),
        "S_read_wall_s": spread([c["S_read_wall_s"] for c in cal]),
        "S_read_zstd_wall_s": spread([c["S_read_zstd_wall_s"] for c in cal]),
        "decode_cpu_ms_per_step": spread([(c["S_read_zstd_s"] - c["S_read_s"]) * 1e3 for c in cal]),
        "D_zstd_s": spread([c["D_zstd_s"] for c in cal]),
        "at_rest_ratio": spread([c["at_rest_bytes_per_step"] / c["at_rest_zstd_bytes_per_step"] for c in cal]),
    }


def quiet_rounds(runs: dict[str, list[dict[str, Any]]], cal: list[dict[str, Any]], *, t: int, p: int,
                 max_foreign: float) -> dict[str, Any]:
    """The figures of (b) and (c) from the rounds in which no run of (a) or (b) had other jobs above
    ``max_foreign`` cores: what this run says about a quiet machine (other jobs only ever slow a run down,
    so a disturbed round is dropped whole, never one setup of it)."""
    rounds = len(cal)
    judged = [n for n in ("a0", "a1", "a2", "b") if n in runs]
    quiet = [i for i in range(rounds) if all((runs[n][i].get("foreign_cores") or 0.0) <= max_foreign
                                             for n in judged)]
    out: dict[str, Any] = {"rounds": quiet, "max_foreign": max_foreign}
    s = {i: cal[i]["S_s"] for i in range(rounds)}
    d = {i: cal[i]["D_s"] for i in range(rounds)}
    ratios = [runs["b"][i]["steps_per_s"] / max(runs[a][i]["steps_per_s"] for a in ("a0", "a1", "a2") if a in runs)
              for i in quiet]
    ideal = [disaggregated_bound(s[i], d[i], p) / colocated_bound(s[i], d[i], t) for i in quiet]
    out["b_over_best_a"] = spread(ratios) if quiet else None
    out["b_over_best_a_over_ideal"] = spread([x / y for x, y in zip(ratios, ideal)]) if quiet else None
    for name in ("b", "c"):  # each on its own: its runs that other jobs left alone
        if name in runs:
            own = [i for i in range(rounds) if (runs[name][i].get("foreign_cores") or 0.0) <= max_foreign]
            out[f"{name}_rounds"] = own
            out[f"{name}_over_bound"] = spread([runs[name][i]["steps_per_s"] / disaggregated_bound(s[i], d[i], p)
                                                for i in own]) if own else None
    return out


def _nan(x: Any) -> bool:
    return isinstance(x, float) and math.isnan(x)


def goals(summary: dict[int, dict[str, Any]], crossover_res: int | None,
          crash: dict[str, Any] | None) -> dict[str, Any]:
    """Issue 29's goals, each with the numbers it was judged on."""
    def med(x: dict[str, Any]) -> float:
        return x.get("median", float("nan"))

    bound = {f"{name}@{r}": med(s["setups"][name]["ratio_to_bound"]) for r, s in summary.items()
             for name in ("b", "c") if name in s["setups"]}
    s_dominated = {r: s for r, s in summary.items() if med(s["D_over_S"]) < S_DOMINATES}
    waits = {f"{name}@{r}": med(s["setups"][name]["wait_fraction"]) for r, s in s_dominated.items()
             for name in ("b", "c") if name in s["setups"]}
    ideal = {f"b@{r}": med(s["ratios"].get("b_over_best_a_over_ideal", {})) for r, s in summary.items()}
    per_side = {f"b@{r}": med(s["ratios"].get("b_over_best_a_over_ideal_per_side", {})) for r, s in summary.items()}
    out: dict[str, Any] = {
        "disaggregated_at_least_0.9_of_bound": {"values": bound, "met": all(v >= 0.9 for v in bound.values())},
        "wait_at_most_5pct_where_S_dominates": {"values": waits, "met": bool(waits) and all(v <= 0.05 for v in
                                                                                          waits.values()),
                                                "where": f"D/S < {S_DOMINATES}"},
        "b_over_a_at_least_0.9_of_ideal": {"values": ideal, "met": all(v >= 0.9 for v in ideal.values()),
                                           "per_side_model": per_side,
                                           "per_side_met": all(v >= 0.9 for v in per_side.values())},
    }
    if crossover_res is not None and crossover_res in summary:
        x = med(summary[crossover_res]["ratios"].get("b_over_best_a", {}))
        out["crossover_ratio_at_least_1.7"] = {"resolution": crossover_res, "value": x, "met": x >= 1.7}
    else:
        out["crossover_ratio_at_least_1.7"] = {"resolution": None, "met": False,
                                               "why": "no resolution of the sweep has D = S between its neighbours"}
    if crash:
        judged = {name: crash[name] for name in ("b", "c") if name in crash}
        out["killed_producer_loses_nothing"] = {
            "met": bool(judged) and all(row.get("killed") and row.get("survived") and row.get("exactly_once", {})
                                        .get("ok") for row in judged.values()),
            "samples_lost": sum(row.get("exactly_once", {}).get("missing", 0) for row in judged.values()),
            "survived": {name: row.get("survived") for name, row in judged.items()},
            "killed_while_producing": {name: bool(row.get("killed")) for name, row in judged.items()}}
    return out


def projection(summary: dict[int, dict[str, Any]], t: int = 1) -> list[dict[str, Any]]:
    """The model fed with the measured S and D (medians) for |P| = 4, 16, 32 producer cores per trainer node."""
    rows = []
    for r, s in sorted(summary.items()):
        si, di = med_of(s["S_s"]), med_of(s["D_s"])
        row = {"resolution": r, "S_s": si, "D_s": di, "colocated": colocated_bound(si, di, t),
               "cap": 1 + di / si}
        for p in PROJECTION_P:
            row[f"P{p}"] = disaggregated_bound(si, di, p)
            row[f"ratio_P{p}"] = disaggregated_bound(si, di, p) / colocated_bound(si, di, t)
        rows.append(row)
    return rows


def med_of(x: dict[str, Any]) -> float:
    return float(x["median"])


def exactly_once(captions: list[list[str]], expected: set[str], checks: dict[str, str],
                 recompute: Any = None, *, complete: bool = True) -> dict[str, Any]:
    """Every expected sample delivered once (by caption), and sampled patches equal to a recomputation.

    ``complete=False`` (a run that stops before its data ends: (a)'s workers have shards the trainer never
    takes): no sample twice and none from outside ``expected``, but not all of them."""
    seen = [c for step in captions for c in step]
    unique = set(seen)
    out = {"delivered": len(seen), "unique": len(unique), "expected": len(expected),
           "missing": len(expected - unique), "unexpected": len(unique - expected)}
    if recompute is not None and checks:
        out["checked_images"] = len(checks)
        out["images_match_recomputation"] = all(recompute(cap) == dig for cap, dig in checks.items())
    out["complete_expected"] = complete
    whole = out["delivered"] == out["expected"] and not out["missing"] if complete else True
    out["ok"] = (out["delivered"] == out["unique"] and not out["unexpected"] and whole
                 and out.get("images_match_recomputation", True))
    return out
