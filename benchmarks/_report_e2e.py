"""Section 3 of docs/benchmarks.md: the end-to-end figure (``end_to_end.json``) and its plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import _e2e_analysis as model
from _report_common import med, rng
from _report_e2e_why import goal_verdict, where_time_goes

SETUP_LABELS = {"a0": "(a) colocated, 0 workers", "a1": "(a) colocated, 1 worker", "a2": "(a) colocated, 2 workers",
                "b": "(b) tgb.produce processes on P", "c": "(c) Ray fleet on P",
                "b_ahead": "(b), the trainer reading ahead on a thread",
                "a1_shared": "(a) 1 worker, T ∪ P", "a2_shared": "(a) 2 workers, T ∪ P",
                "b_shared": "(b) producer, T ∪ P"}


def e2e_section(r: dict[str, Any], plots: Path) -> list[str]:
    if "summary" not in r:
        return ["## 3. End to end (seed 000 §7.2 analogue) (`end_to_end.py`)", "",
                "The committed `end_to_end.json` is from the earlier text workload: run `end_to_end.py` again.", ""]
    summ = {int(k): v for k, v in r["summary"].items()}
    res = sorted(summ)
    nodes, ds, cfg = r["nodes"], r["dataset"], r["config"]
    mach = r.get("machine") or {}
    crossover = r.get("crossover_resolution")
    label = "quick mode (tiny images and model: checks that it runs, says nothing about speed)" if r.get("quick") \
        else f"{cfg['rounds']} interleaved rounds"
    out = ["## 3. End to end: disaggregated producers vs colocated loading (seed 000 §7.2 analogue) (`end_to_end.py`)",
           "",
           f"**What runs.** Nodes are CPU sets of this machine: the trainer's node T = {nodes['T']}, a producer node "
           f"P = {nodes['P']}; every process is pinned (`os.sched_setaffinity`). " + " ".join(
               f"`{k}`: {v}." for k, v in nodes["pinning"].items()),
           "",
           f"**Workload.** A WebDataset of {ds['samples']} image-text samples over {ds['images']} distinct JPEGs of "
           f"{ds['image_mp_min']:.2f}–{ds['image_mp_max']:.2f} MP (mean {ds['image_mp_mean']:.2f} MP, "
           f"{ds['jpeg_kib_mean']:.0f} KiB, q90; {ds['source']}), captions of 140–150 words. Producers (and (a)'s "
           "workers) run `sources.WebDataset` → `DecodeImages` → `ResizeImages` (square side) → `Patchify` (14 px, "
           f"2×2 merge) → `SpliceImageTokens` → `PackSamples` (one sample per row) → `GlobalBatches` of "
           f"{cfg['batch']} rows. Trainer step: {r['model']['describe']}; GFLOP per step: "
           + ", ".join(f"{int(k)}: {v:.1f}" for k, v in sorted(r["model"]["gflop_per_step"].items(),
                                                              key=lambda kv: int(kv[0]))) + ". "
           f"{label}; steps per run (warm-up of {cfg['warmup']} excluded): "
           + ", ".join(f"{int(k)}: {v - cfg['warmup']}" for k, v in sorted(r["steps_per_run"].items(),
                                                                           key=lambda kv: int(kv[0]))) + ".",
           "", _quiet_line(r, mach), "", _machine_line(r), ""]
    out += ["**S, D and the model** (`_e2e_analysis.py`; per round, medians (min–max)): S = the training step's CPU "
            "seconds on batches in memory, alone on T (or S+R where that is smaller: then the step in memory was "
            "disturbed); S+R = the same fed by `tgb.DataLoader` (reading, checksums); "
            "D = a producer's CPU seconds per step alone on P (pipeline + `append`), of which the pipeline alone in "
            "brackets. Colocated at |T| = 1: at most 1/(S+D) steps/s (with |T| cores: min(1/S, |T|/(S+D)), the step "
            "being one thread); disaggregated: min(1/S, |P|/D); equal total CPU (both on T ∪ P): "
            "min(1/S, (|T|+|P|)/(S+D)) for both. One D for both sides, as issue 29 states the model: (a)'s workers "
            "do not write TGBs (D minus the bracketed pipeline part) but pass each batch through the DataLoader's "
            "queue instead, so (a) can land a little above its bound where that write costs more than the queue.",
            "",
            "| resolution | S ms | S+R ms | D ms (pipeline) | D/S | MB per step | colocated bound | disaggregated "
            "bound | ideal (b)/(a) |", "|---|---|---|---|---|---|---|---|---|"]
    for x in res:
        s = summ[x]
        mark = " (D ≈ S)" if x == crossover else ""
        pipe = [c.get("D_pipeline_s") for c in r["calibration"][str(x)] if c.get("D_pipeline_s")]
        pipe_txt = f" ({sorted(pipe)[len(pipe) // 2] * 1e3:.0f})" if pipe else ""
        out.append(f"| {x}{mark} | {rng(s['S_s'], 1e3, 0)} | {rng(s['S_read_s'], 1e3, 0)} | "
                   f"{rng(s['D_s'], 1e3, 0)}{pipe_txt} | {rng(s['D_over_S'])} | "
                   f"{med(s['setups'].get('b', s['setups'].get('a0', {})).get('bytes_per_step')) / 1e6:.1f} | "
                   f"{rng(s['bound_colocated'])} | {rng(s['bound_disaggregated'])} | {rng(s['ideal_ratio'])} |")
    out += ["", *_steps_table(summ, res), "", *_quiet_table(r, res), *_detail_table(summ, res), ""]
    out += _shared_table(summ, res)
    plot(r, plots / "end_to_end.png")
    out += ["![end to end](benchmarks/end_to_end.png)", "",
            "Left: steps/s against training resolution (medians; dashed: the model's bounds from the same run's S "
            "and D). Right: the gain of (b) over the best (a) measured here, the model's projection for 32 producer "
            "cores per trainer node, and seed 000's measured gains. **Scale:** the paper runs 8 trainer nodes of 64 "
            "cores with 8 H200 each against 16–32 producer nodes of 64 cores (GR00T, Qwen3-VL); here one core "
            "trains a tiny CPU model and one core produces, so our absolute steps/s are not comparable, only the "
            "ratios and where they come from. No GPU here: the step is CPU work on T, so colocated workers take "
            "cycles from the step itself; on a GPU node they compete with the step's host thread, its copies and "
            "memory bandwidth (the paper's case), which this figure does not measure.", ""]
    out += _projection(r, res)
    out += _schedule(r)
    out += _crash(r)
    out += _goals(r)
    out += where_time_goes(r, summ, res)
    out += _profile(r)
    out += goal_verdict(r)
    out += ["Re-run (about 15 minutes on 2 cores, more if the quiet gate waits; `--quick` in about a minute):", "",
            "<!-- skip: the full measurement takes about 15 minutes and rewrites the committed results -->",
            "```bash", "tgb bench e2e --results-dir benchmarks/results && tgb bench report", "```", ""]
    return out


def _profile(r: dict[str, Any]) -> list[str]:
    """The trainer process of one (b) run under cProfile: its loop's parts and the functions that cost most."""
    prof = r.get("profile")
    if not prof or not prof.get("top"):
        return []
    total = prof["total_s"] or float("nan")
    run = prof.get("run") or {}
    steps = max(1, (run.get("steps") or 0) - r["config"]["warmup"])
    out = [f"**Profile of the trainer process on T** (one more (b) run at {prof['resolution']}, the trainer under "
           f"`cProfile` over its steady steps; profiling slows Python-level code, so read the shares, not the "
           f"times; {run.get('steps_per_s', float('nan')):.2f} steps/s under the profiler):", "",
           "| part of the loop | s per step | share |", "|---|---|---|"]
    for group, seconds in prof.get("groups", {}).items():
        out.append(f"| {group} | {seconds / steps:.4f} | {seconds / total:.0%} |")
    out += ["", "Most time of their own: " + "; ".join(
        f"`{row['function']}` {row['own_s'] / total:.0%}" for row in prof["top"][:6]) + ".", ""]
    return out


def _machine_line(r: dict[str, Any]) -> str:
    gate = r.get("gate") or {}
    text = f"**Machine.** {r.get('machine_note', 'not recorded')}; GPU: {r.get('gpu', 'not recorded')}."
    if r.get("nodes", {}).get("overlap"):
        text += " One core only: T and P are the same core, so nothing here says anything about speed."
    text += (" Issue 29's GPU variant (the trainer on a lent GPU with T = 2 cores, producers on the other cores) "
             "is section 3b.")
    if gate.get("disturbed"):
        text += (f" **This run was disturbed:** other jobs used more than {r['config']['max_foreign']} core during "
                 f"{gate['disturbed_runs']} of its {gate['runs']} runs"
                 + (f", and the quiet gate spent its {gate['budget_s']:.0f} s budget, after which runs started on a "
                    "busy machine" if gate.get("exhausted") else "")
                 + "; read the figures with the per-run figures of other jobs' CPU above.")
    elif gate.get("quiet_cores") is not None:
        text += (f" Quiet gate: waited {gate['waited_s']:.0f} s of its {gate['budget_s']:.0f} s budget; no kept run "
                 f"had other jobs above {r['config']['max_foreign']} core.")
    return text


def _quiet_line(r: dict[str, Any], mach: dict[str, Any]) -> str:
    loads = [x for runs in r["runs"].values() for rows in runs.values() for row in rows
             for x in (row.get("load_before") or [])[:1]]
    foreign = []
    for runs in r["runs"].values():
        for rows in runs.values():
            for row in rows:
                ours, busy = row.get("cpu_T_s_per_step"), row.get("cores_T_busy_s_per_step")
                if ours and busy and ours == ours and busy == busy:
                    foreign.append(max(0.0, busy - ours) / busy)
    text = (f"**Machine state.** {mach.get('cores', '?')} cores ({mach.get('cpu_model', '?')}), run "
            f"{mach.get('date_utc', '?')}, {r.get('seconds', 0) / 60:.0f} min. 1-minute load average at the start "
            f"{r['load']['start'][0]:.2f}, at the end {r['load']['end'][0]:.2f}")
    if loads:
        text += f", before each run {min(loads):.2f}–{max(loads):.2f}"
    if foreign:
        foreign.sort()
        text += (f". CPU time on T not spent by the run's own processes (other jobs on the machine): median "
                 f"{foreign[len(foreign) // 2]:.1%}, worst {foreign[-1]:.1%} of T's busy time")
    rows = [row for runs in r["runs"].values() for name, rows in runs.items() for row in rows if name != "c"]
    others = sorted(row["foreign_cores"] for row in rows if row.get("foreign_cores") is not None)
    if others:
        again = sum(1 for row in rows if row.get("attempts", 1) > 1)
        gate = r["config"].get("quiet")
        text += (f"; other jobs' CPU on the whole machine during a kept run of (a) and (b): median "
                 f"{others[len(others) // 2]:.3f}, worst {others[-1]:.3f} cores"
                 + (f" (each run waited until they used < {gate} core, within the gate's budget; {again} of "
                    f"{len(rows)} runs were run again because they took > {r['config']['max_foreign']} core during "
                    "it)" if gate is not None else ""))
    return text + "."


def _steps_table(summ: dict[int, Any], res: list[int]) -> list[str]:
    names = [n for n in ("a0", "a1", "a2", "b", "b_ahead", "c") if n in summ[res[0]]["setups"]]
    out = ["**Steps/s** (median (min–max) over rounds; the ratios are per round, side by side):", "",
           "| resolution | " + " | ".join(SETUP_LABELS[n] for n in names) + " | (b) / best (a) | ideal | "
           "(b)/(a) ÷ ideal | (c) / best (a) |", "|---|" + "---|" * (len(names) + 4)]
    for x in res:
        s = summ[x]
        rt = s["ratios"]
        out.append(f"| {x} | " + " | ".join(rng(s["setups"][n]["steps_per_s"]) for n in names)
                   + f" | {rng(rt.get('b_over_best_a'))} | {rng(s['ideal_ratio'])} | "
                   f"{rng(rt.get('b_over_best_a_over_ideal'))} | {rng(rt.get('c_over_best_a'))} |")
    return out


def quiet_rounds(r: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Per resolution, the figures of the rounds other jobs left alone (computed here for older result files)."""
    if r.get("quiet_rounds"):
        return {int(k): v for k, v in r["quiet_rounds"].items()}
    limit = r["config"].get("max_foreign")
    if limit is None:
        return {}
    t, p = len(r["nodes"]["T"]), len(r["nodes"]["P"])
    return {int(x): model.quiet_rounds(r["runs"][x], r["calibration"][x], t=t, p=p, max_foreign=limit)
            for x in r["runs"]}


def _quiet_table(r: dict[str, Any], res: list[int]) -> list[str]:
    q = quiet_rounds(r)
    if not q or r.get("quick"):
        return []
    limit = r["config"]["max_foreign"]
    out = [f"**The rounds other jobs left alone** (other jobs ≤ {limit} core during the run: for (b)/(a), every "
           "run of (a) and (b) in that round; for × bound, that setup's own run; Ray's own processes, which the "
           "fleet driver does not reap, count as other jobs, so (c) is seldom kept). Other jobs only slow a run, "
           "so these are this machine's figures without them; the tables around it have every round:", "",
           "| resolution | rounds kept for (b)/(a) | (b) / best (a) | ÷ ideal | (b) × bound (runs) | "
           "(c) × bound (runs) |", "|---|---|---|---|---|---|"]
    for x in res:
        v = q.get(x)
        if v is None:
            continue
        kept = ", ".join(str(i) for i in v["rounds"]) or "none"
        out.append(f"| {x} | {kept} | {rng(v.get('b_over_best_a'))} | {rng(v.get('b_over_best_a_over_ideal'))} | "
                   f"{rng(v.get('b_over_bound'))} ({len(v.get('b_rounds', []))}) | {rng(v.get('c_over_bound'))} "
                   f"({len(v.get('c_rounds', []))}) |")
    return [*out, ""]


def _detail_table(summ: dict[int, Any], res: list[int]) -> list[str]:
    out = ["**Per setup** (medians): × its bound (colocated: 1/(S+D); disaggregated: min(1/S, |P|/D)); step "
           "p50/p95; the wait for data per step and its share of the step; CPU seconds per step on T (the "
           "trainer and its workers; in brackets T's busy time, which also counts other jobs).", "",
           "| resolution | setup | × bound | p50 / p95 ms | wait ms (share) | CPU s/step on T | first step s |",
           "|---|---|---|---|---|---|---|"]
    for x in res:
        for name in ("a0", "a1", "a2", "b", "b_ahead", "c"):
            s = summ[x]["setups"].get(name)
            if s is None:
                continue
            out.append(f"| {x} | {name} | {rng(s['ratio_to_bound'])} | {med(s['step_p50_ms']):.0f} / "
                       f"{med(s['step_p95_ms']):.0f} | {med(s['wait_ms_per_step']):.1f} "
                       f"({med(s['wait_fraction']):.1%}) | {med(s['cpu_T_s_per_step']):.3f} "
                       f"({med(s['cores_T_busy_s_per_step']):.3f}) | {med(s['first_step_s']):.1f} |")
    return out


def _shared_table(summ: dict[int, Any], res: list[int]) -> list[str]:
    names = [n for n in ("a1_shared", "a2_shared", "b_shared") if n in summ[res[0]]["setups"]]
    if not names:
        return []
    out = ["**Equal total CPU** (not the headline: both setups may use T ∪ P, so the colocated loader gets the "
           "producer's core too; the model allows no gain here):", "",
           "| resolution | " + " | ".join(SETUP_LABELS[n] for n in names) + " | bound | (b) / best (a), T ∪ P |",
           "|---|" + "---|" * (len(names) + 2)]
    for x in res:
        s = summ[x]
        out.append(f"| {x} | " + " | ".join(rng(s["setups"][n]["steps_per_s"]) for n in names)
                   + f" | {rng(s['bound_equal_total'])} | {rng(s['ratios'].get('b_shared_over_best_a_shared'))} |")
    return ["", *out, ""]


def _projection(r: dict[str, Any], res: list[int]) -> list[str]:
    rows = r["projection"]
    out = ["**Projection** (the model fed with this run's S and D, not a measurement): a trainer node of |T| = 1 "
           "core as here, with |P| producer cores; the gain is capped by 1 + D/S however many producers.", "",
           "| resolution | colocated steps/s | 4 producer cores | 16 | 32 | gain at 4 / 16 / 32 | cap 1 + D/S |",
           "|---|---|---|---|---|---|---|"]
    for row in rows:
        out.append(f"| {row['resolution']} | {row['colocated']:.2f} | {row['P4']:.2f} | {row['P16']:.2f} | "
                   f"{row['P32']:.2f} | {row['ratio_P4']:.2f} / {row['ratio_P16']:.2f} / {row['ratio_P32']:.2f}× | "
                   f"{row['cap']:.2f}× |")
    paper = r["paper"]
    out += ["", "Seed 000 (measured, 64 GPUs): " + ", ".join(
        f"{k} {v['local']} → {v['batchweave']} steps/s ({v['ratio']}×)" for k, v in paper.items())
        + ": 2.68–7.73×. Reaching those needs D/S of 1.7–6.7 on the trainer's node, i.e. preprocessing much heavier "
        "than the step; here D/S is what the table above says.", ""]
    return out


def _schedule(r: dict[str, Any]) -> list[str]:
    sc = r.get("schedule")
    if not sc:
        return []
    lo, hi = sc["values"]
    out = [f"**Resolution change mid-run** (`resolution_schedule([{sc['switch_at_step']}], [{lo}, {hi}])` in "
           f"`ResizeImages`, rows packed at {hi}'s length {sc['seq_len']} throughout; (a) = `{sc['colocated_setup']}`, "
           "the better of 0 and 1 workers at the higher resolution: with 2 workers each counts its own steps):", "",
           "| setup | switched at step | steps/s before | steps/s after | MB per step before / after |",
           "|---|---|---|---|---|"]
    for name, rows in sc["runs"].items():
        for row in rows:
            if "before_steps_per_s" not in row:
                out.append(f"| {name} | {row.get('switch_step')} | failed: {row.get('error')} | | |")
                continue
            out.append(f"| {name} | {row['switch_step']} | {row['before_steps_per_s']:.2f} | "
                       f"{row['after_steps_per_s']:.2f} | {row['bytes_before'] / 1e6:.1f} / "
                       f"{row['bytes_after'] / 1e6:.1f} |")
    return [*out, ""]


def _crash(r: dict[str, Any]) -> list[str]:
    c = r.get("crash")
    if not c:
        return []
    out = [f"**Failure isolation** (at resolution {c['resolution']}, {c['steps']} steps, the kill at step "
           f"{c['killed_at_step']}: (a) SIGKILL of a DataLoader worker at that trainer step; (b) SIGKILL of the "
           f"producer at that batch of its own (it waits there to be killed, so the kill falls mid-production), a "
           f"replacement with the same producer id {c['outage_s']:.0f} s later; (c) `ray.kill` of the actor at that "
           "batch, which Ray restarts and the fleet hands the shard back to; steps lost = steps the trainer did "
           "not take):", "",
           "| setup | killed (trainer steps done then) | survived | steps done / lost | longest stall s | "
           "outage s (steps taken in it) | exactly once |",
           "|---|---|---|---|---|---|---|"]
    for key in ("a", "b", "c"):
        row = c.get(key)
        if row is None:
            continue
        once = row.get("exactly_once")
        once_txt = "–" if once is None else (
            f"{'yes' if once['ok'] else 'NO'}: {once['unique']}/{once['expected']} samples once, {once['missing']} "
            f"missing, {once.get('checked_images', 0)} images equal to a recomputation: "
            f"{once.get('images_match_recomputation')}")
        outage = (f"{row['outage_s']:.1f} ({row['steps_during_outage']})" if row.get("outage_s") is not None
                  else (row.get("not_killed") or "–"))
        stall = f"{row['longest_stall_s']:.2f}" if row.get("longest_stall_s") is not None else "–"
        err = f" ({row['error']})" if row.get("error") else ""
        killed = (f"yes ({row['trainer_steps_at_kill']})" if row.get("killed")
                  else f"no: {row.get('not_killed') or 'the kill point was not reached'}")
        out.append(f"| {row['setup']} | {killed} | {row['survived']}{err} | {row['steps_done']} / "
                   f"{row['steps_lost']} | {stall} | {outage} | {once_txt} |")
    return [*out, ""]


def _goals(r: dict[str, Any]) -> list[str]:
    out = ["**Goals** (issue 29):", ""]
    for name, g in r["goals"].items():
        detail = g.get("values", g.get("value"))
        if isinstance(detail, dict):
            detail = ", ".join(f"{k} {v:.2f}" for k, v in detail.items())
        elif isinstance(detail, float):
            detail = f"{detail:.2f} at {g.get('resolution')}"
        elif "samples_lost" in g:
            detail = (f"{g['samples_lost']} samples lost; killed while producing: {g['killed_while_producing']}; "
                      f"run went on to its last step: {g['survived']}")
        where = f"; {g['where']}" if g.get("where") else ""
        if g.get("per_side_model"):
            where += ("; charged what each side runs, (a) the pipeline alone: "
                      + ", ".join(f"{k} {v:.2f}" for k, v in g["per_side_model"].items())
                      + f" ({'met' if g['per_side_met'] else 'not met'} in that model)")
        out.append(f"- {name.replace('_', ' ')}: **{'met' if g['met'] else 'not met'}** "
                   f"({detail or g.get('why', '')}{where})")
    return [*out, ""]


def plot(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summ = {int(k): v for k, v in r["summary"].items()}
    res = sorted(summ)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 2]})
    styles = {"a0": ("tab:gray", "o"), "a1": ("tab:olive", "o"), "a2": ("tab:brown", "o"), "b": ("tab:blue", "s"),
              "c": ("tab:green", "^")}
    for name, (color, marker) in styles.items():
        if name in summ[res[0]]["setups"]:
            ax.plot(res, [med(summ[x]["setups"][name]["steps_per_s"]) for x in res], marker=marker, color=color,
                    label=SETUP_LABELS[name])
    ax.plot(res, [med(summ[x]["bound_colocated"]) for x in res], "--", color="tab:brown", lw=1,
            label="bound colocated 1/(S+D)")
    ax.plot(res, [med(summ[x]["bound_disaggregated"]) for x in res], "--", color="tab:blue", lw=1,
            label="bound disaggregated min(1/S, |P|/D)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(res, [str(x) for x in res])
    ax.set_xlabel("training resolution (px, square)")
    ax.set_ylabel("steps/s (log)")
    ax.set_title(f"T = {r['nodes']['T']}, P = {r['nodes']['P']}" + (" (quick mode)" if r.get("quick") else ""))
    ax.legend(fontsize=7)
    labels = [f"ours {x}" for x in res] + [f"proj. {x}\n|P|=32" for x in res] + list(r["paper"])
    values = ([med(summ[x]["ratios"].get("b_over_best_a")) for x in res]
              + [row["ratio_P32"] for row in r["projection"]] + [v["ratio"] for v in r["paper"].values()])
    colors = ["tab:blue"] * len(res) + ["lightsteelblue"] * len(res) + ["tab:red"] * len(r["paper"])
    bx.bar(range(len(values)), values, color=colors)
    bx.axhline(1.0, color="k", lw=0.8)
    bx.set_xticks(range(len(values)), labels, rotation=60, fontsize=7)
    bx.set_ylabel("disaggregated / colocated steps/s")
    bx.set_title("gain: measured, projected, seed 000")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
