"""Section 3b of docs/benchmarks.md: the end-to-end sweep with the trainer on a GPU (``end_to_end_gpu.json``)."""

from __future__ import annotations

from typing import Any

from _report_common import med, rng
from _report_e2e import SETUP_LABELS

TITLE = "### 3b. End to end with the trainer on a GPU (`end_to_end.py --device cuda`)"


def e2e_gpu_section(r: dict[str, Any] | None) -> list[str]:
    if not r or "summary" not in r:
        return [TITLE, "", "No `end_to_end_gpu.json`: no GPU machine was lent to a session that could run it. On one: "
                "`python benchmarks/end_to_end.py --device cuda --trainer-cores 2 --no-gate --sweep-only`.", ""]
    summ = {int(k): v for k, v in r["summary"].items()}
    res = sorted(summ)
    nodes, cfg, ds = r["nodes"], r["config"], r["dataset"]
    mach = r.get("machine") or {}
    names = [n for n in ("a0", "a1", "a2", "b", "b_ahead", "c") if n in summ[res[0]]["setups"]]
    out = [TITLE, "",
           f"**Machine.** {r.get('gpu')}; {mach.get('cores')} cores ({mach.get('cpu_model', 'CPU not recorded')}), "
           f"run {mach.get('date_utc', 'date not recorded')}. Trainer's node T = {nodes['T']} "
           f"(|T| = {len(nodes['T'])}), producer node P = {nodes['P']} (|P| = {len(nodes['P'])}), every process "
           "pinned. " + " ".join(f"`{k}`: {v}." for k, v in nodes["pinning"].items()),
           "",
           f"**Workload** as in section 3 ({ds['samples']} samples, JPEGs of {ds['image_mp_min']:.2f}–"
           f"{ds['image_mp_max']:.2f} MP, global batches of {cfg['batch']} rows). Trainer step on the GPU: "
           f"{r['model']['describe'].replace('; 1 thread', '')}, bf16 autocast, ending on the loss read back "
           "(a logging loop's sync). (a) pins its batches (`pin_memory=True`) and copies them with "
           "`.to('cuda', non_blocking=True)` inside the wait; (b) reads with `tgb.DataLoader(device='cuda')`. "
           f"{cfg['rounds']} round(s), setups in rotated order; steps per run (after a warm-up of {cfg['warmup']}): "
           + ", ".join(f"{int(k)}: {v - cfg['warmup']}" for k, v in sorted(r["steps_per_run"].items(),
                                                                           key=lambda kv: int(kv[0]))) + ".",
           "",
           "S here is the wall time of a GPU step on batches already on the GPU (not CPU seconds on T), so the CPU "
           "model of section 3 (a step that holds a core of T) does not bound these runs; the table is what was "
           "measured.", "",
           "| resolution | S ms (GPU step) | D ms (one producer core) | D/S | "
           + " | ".join(SETUP_LABELS[n] for n in names) + " | (b) / best (a) | (b) / (1/S) | "
           "wait per step (b) / best (a) ms | MB per step |",
           "|---|---|---|---|" + "---|" * (len(names) + 4)]
    for x in res:
        s = summ[x]
        best = max((n for n in names if n.startswith("a")), key=lambda n: med(s["setups"][n]["steps_per_s"]))
        waits = (f"{med(s['setups']['b']['wait_ms_per_step']):.1f} / "
                 f"{med(s['setups'][best]['wait_ms_per_step']):.1f} ({best})") if "b" in names else "–"
        of_gpu = f"{med(s['setups']['b']['steps_per_s']) * med(s['S_s']):.2f}" if "b" in names else "–"
        out.append(f"| {x} | {rng(s['S_s'], 1e3, 1)} | {rng(s['D_s'], 1e3, 0)} | {rng(s['D_over_S'], 1, 1)} | "
                   + " | ".join(rng(s["setups"][n]["steps_per_s"]) for n in names)
                   + f" | {rng(s['ratios'].get('b_over_best_a'))} | {of_gpu} | {waits} | "
                   f"{med(s['setups'][names[0]]['bytes_per_step']) / 1e6:.1f} |")
    out += ["", "(b) / (1/S): the fraction of the GPU's own rate (a step on batches already on the GPU) that (b) "
            "reached; 1.0 is a trainer that never waits for data. (a) is bound by its two cores decoding (D per "
            "step per core); (b) by the GPU where its wait is small, and where it is not, by the trainer's own "
            "read of each step: `tgb.DataLoader` reads a local namespace on the training thread (read, checksum, "
            "pin, copy issued on the side stream), so that work grows with the bytes per step and shows up as "
            "wait. " + ("`b_ahead` reads ahead on a thread (`ReaderOptions(inline_local=False)`); next: pin into a "
                        "reused staging buffer rather than a fresh pinned copy per step, measured here side by side."
                        if "b_ahead" in names else
                        "Next steps, measured here side by side: read ahead on a thread (`ReaderOptions("
                        "inline_local=False)`, the `b_ahead` setup that `--device cuda` runs from now on; not in "
                        "this run), and pin into a reused staging buffer rather than a fresh pinned copy per step.")]
    exact = [row.get("exactly_once", {}).get("ok") for runs in r["runs"].values() for name, rows in runs.items()
             for row in rows if name == "b"]
    out += ["", f"Every (b) run delivered each of its samples exactly once: {all(exact) if exact else 'not checked'} "
            f"({len(exact)} runs). Whole run: {r['seconds']:.0f} s. Re-run on a GPU machine:", "",
            "<!-- skip: needs a CUDA GPU -->", "```bash",
            "python benchmarks/end_to_end.py --device cuda --trainer-cores 2 --no-gate --sweep-only "
            "--results-dir benchmarks/results", "```", ""]
    return out
