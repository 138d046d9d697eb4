"""Why section 3's end-to-end goals were met or missed, from the run's own figures: where (b)'s step goes against
its bound, and for each goal missed the part that exceeds the model most and the next step."""

from __future__ import annotations

from typing import Any

from _report_common import med, rng


def _parts(s: dict[str, Any]) -> dict[str, float] | None:
    """(b)'s step (ms, medians) cut into the model's S and what exceeds it: the wait for data, the time the
    trainer was off its core during the step (other processes ran), the step's own CPU beyond S, the loop,
    and the producer's CPU per step during the run beyond its calibration."""
    b = s["setups"].get("b")
    if not b or not med(b["steps_per_s"]):
        return None
    step = 1e3 / med(b["steps_per_s"])
    wall, cpu = med(b["compute_ms_per_step"]), med(b["compute_cpu_ms_per_step"])
    wait = med(b["wait_ms_per_step"])
    d, d_run = med(s["D_s"]) * 1e3, med(b.get("D_run_s")) * 1e3
    return {"step": step, "bound": 1e3 / med(s["bound_disaggregated"]), "S": med(s["S_s"]) * 1e3,
            "D": d, "D_run": d_run, "wait": wait, "wall": wall, "cpu": cpu,
            "preempted": max(0.0, wall - cpu), "slower": max(0.0, cpu - med(s["S_s"]) * 1e3),
            "loop": max(0.0, step - wait - wall), "producer": max(0.0, d_run - d) if d_run == d_run else 0.0}


def where_time_goes(r: dict[str, Any], summ: dict[int, Any], res: list[int]) -> list[str]:
    """Where (b)'s step goes against its bound max(S, D/|P|), from the trainer's own per-step timings."""
    lines = ["**Where the time goes** (the trainer process on T in (b), medians per step, against its bound "
             "max(S, D/|P|)):", ""]
    for x in res:
        v = _parts(summ[x])
        if v is None:
            continue
        lines.append(f"- {x}: step {v['step']:.0f} ms against a bound of {v['bound']:.0f} ms (S {v['S']:.0f}, D "
                     f"{v['D']:.0f}; the producer's D during the run {v['D_run']:.0f}) = waiting {v['wait']:.0f} ms "
                     f"+ the training step {v['wall']:.0f} ms (its own CPU {v['cpu']:.0f} ms, {v['cpu'] - v['S']:+.0f} "
                     f"against S alone; off the core {v['preempted']:.0f} ms) + the rest of the loop (reading the "
                     f"slice, this benchmark's checks) {v['loop']:.0f} ms.")
    return [*lines, ""] if len(lines) > 2 else []


#: the advice for the part of (b)'s step that exceeds the model most
ADVICE = {
    "producer": "the producer costs more CPU per step during the run than alone (D during the run above D): "
                "its core is shared with something, or its appends wait on the file system. Next step: profile a "
                "producer during a run at that resolution.",
    "preempted": "the trainer was off its core during its step: in (b) nothing of the run's own shares T with it, "
                 "so other jobs on this shared machine ran there (the table of rounds other jobs left alone shows "
                 "the figures without them). Next step: run where nothing else runs, or on a lent GPU machine.",
    "slower": "the training step's own CPU exceeds S measured alone on T: the producer's core and the trainer's "
              "share the L3 and memory bandwidth (on a VM perhaps one physical core). Next step: measure S with a "
              "producer busy on P (S under load) and feed the model that.",
    "loop": "the loop around the step costs: reading the slice (checksums, copies into tensors) and this "
            "benchmark's bookkeeping (digests of every row). Next step: take the digests off the timed loop and "
            "profile the read path at this resolution's batch size.",
}


NAMES = {"producer": "the producer's CPU beyond its calibration", "preempted": "time off the core during the step",
         "slower": "the step's CPU beyond S", "loop": "the loop around the step"}


def _largest_excess(r: dict[str, Any]) -> tuple[str, float, int]:
    """The part of (b)'s step beyond the model that is largest, as a share of the step, and where."""
    best = ("loop", 0.0, 0)
    for x, s in r["summary"].items():
        v = _parts(s)
        if v is None:
            continue
        for k in ADVICE:
            if v[k] / v["step"] > best[1]:
                best = (k, v[k] / v["step"], int(x))
    return best


def _why(name: str, r: dict[str, Any]) -> str:
    """Why a goal was missed, from this run's figures, and the next step."""
    g = r["goals"][name]
    summ = {int(k): v for k, v in r["summary"].items()}
    if name == "disaggregated_at_least_0.9_of_bound":
        out = []
        for key, value in g["values"].items():
            setup, x = key.split("@")
            if value >= 0.9:
                continue
            row = summ[int(x)]["setups"][setup]
            d, d_run = med(summ[int(x)]["D_s"]) * 1e3, med(row.get("D_run_s")) * 1e3
            text = (f"{key} at {value:.2f}: its producer's CPU per step during the run {d_run:.0f} ms against D "
                    f"{d:.0f} alone")
            if setup == "c":
                text += (" (per round: " + ", ".join(f"{run['D_run_s'] * 1e3:.0f}" for run in r["runs"][x]["c"]
                                                    if run.get("D_run_s")) + " ms)")
            out.append(text)
        only_c = all(key.startswith("c@") for key, v in g["values"].items() if v < 0.9)
        if only_c:
            return ("; ".join(out) + ". (b), the same producer without Ray, is within 0.9 of its bound there: the "
                    "gap is Ray's. The fleet's own processes (GCS, raylet, the driver polling every 0.1 s) share "
                    "P with the actor, and where D dominates P is the bound. Next step: Ray's control plane on a "
                    "core of its own, or a producer node of more cores, where it is a smaller share.")
        part, share, x = _largest_excess(r)
        return ("; ".join(out) + f". Of (b)'s step, the largest part beyond the model is {NAMES[part]} "
                f"({share:.0%} of a step at {x}): {ADVICE[part]}")
    if name == "wait_at_most_5pct_where_S_dominates":
        part, share, x = _largest_excess(r)
        return (f"(b)'s step: the largest part beyond the model is {NAMES[part]} ({share:.0%} of a step at {x}): "
                f"{ADVICE[part]}")
    if name == "b_over_a_at_least_0.9_of_ideal":
        parts = []
        for key, value in g["values"].items():
            x = int(key.split("@")[1])
            if value >= 0.9:
                continue
            s = summ[x]
            best_a = max(("a0", "a1", "a2"), key=lambda a: med(s["setups"][a]["steps_per_s"]))
            cal = [c for c in r["calibration"][str(x)] if c.get("D_pipeline_s")]
            write = (med(s["D_s"]) - sorted(c["D_pipeline_s"] for c in cal)[len(cal) // 2]) * 1e3 if cal else 0.0
            parts.append(f"at {x}, (b) runs at {rng(s['setups']['b']['ratio_to_bound'])}× its bound and the best "
                         f"(a) (`{best_a}`) at {rng(s['setups'][best_a]['ratio_to_bound'])}× its own: "
                         + ("(a) beats the one-D model: it does not pay the TGB write that D counts "
                            f"({write:.0f} ms a step)" if med(s["setups"][best_a]["ratio_to_bound"]) > 1 else
                            "(a) is within its bound, so the gap is (b)'s"))
        per_side = g.get("per_side_model") or {}
        model_line = ("Charged what each side runs ((a) the pipeline alone), (b)/(a) reaches "
                      + ", ".join(f"{k} {v:.2f}" for k, v in per_side.items()) + " of that ideal ("
                      + ("≥ 0.9 everywhere" if g.get("per_side_met") else "below 0.9 somewhere") + "). "
                      if per_side else "")
        return ("; ".join(parts) + ". " + model_line + "Next step: cheaper appends (the TGB write and commit "
                "per step are the disaggregated side's own cost) narrow the gap in either model.")
    if name == "crossover_ratio_at_least_1.7":
        x = g.get("resolution")
        if x is None:
            return g.get("why", "no resolution with D = S")
        s = summ[x]
        return (f"at {x} (D/S {rng(s['D_over_S'])}) (b) runs at {rng(s['setups']['b']['ratio_to_bound'])}× its "
                f"bound; the ideal there is {rng(s['ideal_ratio'])}.")
    if name == "killed_producer_loses_nothing":
        return (f"{g.get('samples_lost')} samples lost, killed while producing {g.get('killed_while_producing')}, "
                f"ran to its end {g.get('survived')}: see the failure table.")
    return ""


def goal_verdict(r: dict[str, Any]) -> list[str]:
    """Met or not, and for each goal missed, why (from this run's figures) and the next step."""
    missed = [name for name, g in r["goals"].items() if not g["met"]]
    if r.get("quick"):
        return ["**Verdict.** Quick mode: the goals above are computed to show the pipeline end to end, not "
                "judged (tiny images on a tiny model say nothing about speed).", ""]
    met = [name.replace("_", " ") for name, g in r["goals"].items() if g["met"]]
    head = (f"**Verdict.** Met: {'; '.join(met) or 'none'}. The GPU variant was not run (no GPU machine lent). "
            + ("Every goal this machine can test is met." if not missed else "Not met:"))
    return [head, "", *[f"- {name.replace('_', ' ')}: {_why(name, r)}" for name in missed], ""]
