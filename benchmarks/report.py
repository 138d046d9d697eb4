"""Report: docs/benchmarks.md and its plots, generated from the result JSONs of one results directory.

Reads NAME.json from ``--results-dir`` (default the committed
``benchmarks/results/``), writes ``--out`` (default docs/benchmarks.md) and
PNGs under ``--plots`` (default docs/benchmarks/). Every number in the page
comes from those files; the papers' numbers are quoted beside ours. A result
file that is missing is named as missing, not filled in.

Usage: python benchmarks/report.py [--results-dir DIR] [--out PATH] [--plots DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import COMMITTED
from _report_e2e import e2e_section
from _report_e2e_gpu import e2e_gpu_section

ROOT = Path(__file__).resolve().parents[1]
# issue 15 "Measured": one process, warm cache, 16M uint32 tokens, quiet 16-core machine (not this run)
REFERENCE_16CORE = {"floor": "1,385–1,698 M", "dataloader_memmap": "104–108 M", "torch_tgb": "46–71 M",
                    "litdata": "31–50 M", "webdataset": "3.5 M", "mosaicml_streaming": "2.4–2.5 M"}
PAPER_DAC = {"dac": 431.9, "incr": 110.5, "fixed100": 107.5, "aimd": 79.0, "fixed10": 50.0, "naive": 7.1}


def load(directory: Path) -> dict[str, Any]:
    out = {}
    for path in sorted(directory.glob("*.json")):
        try:
            out[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return out


def m(x: float, unit: float = 1e6, digits: int = 1) -> str:
    return f"{x / unit:,.{digits}f}"


def _rng(s: dict[str, float], unit: float = 1e6, digits: int = 1) -> str:
    if not s or s.get("n", 1) == 0:
        return "–"
    return f"{m(s['median'], unit, digits)} ({m(s['min'], unit, digits)}–{m(s['max'], unit, digits)})"


def machine_line(results: dict[str, Any]) -> str:
    mach = next((r["machine"] for r in results.values() if isinstance(r.get("machine"), dict)
                 and "cores" in r["machine"]), None)
    if mach is None:
        return "Machine: not recorded in these result files."
    ram = f"{mach['ram_bytes'] / 2**30:.0f} GiB" if mach.get("ram_bytes") else "?"
    return (f"Machine: {mach['cores']} cores ({mach['cpu_model']}), {ram} RAM, Python {mach['python']}, "
            f"torch {mach['torch']}, {mach['platform']}, run {mach['date_utc']}.")


def peers_section(r: dict[str, Any], plots: Path) -> list[str]:
    out = ["## 1. Against the loaders people use (`peers.py`)", "",
           f"Corpus: {r['tokens']:,} uint32 tokens; batches of 32×512 delivered as int64; every loader in its own "
           f"fresh process, {r['rounds']} interleaved rounds (min–max in brackets), at most "
           f"{r.get('max_seconds_per_pass', '?')} s per pass. {r.get('partitioning', '')}.", ""]
    for name, p in r["peers"].items():
        out.append(f"- `{name}`: {p['note']}")
    for name, pip in r.get("not_installed", {}).items():
        out.append(f"- **{name}: not installed** (`{pip}`)")
    out += ["", "Peers are installed from `benchmarks/requirements-peers.txt` with `benchmarks/constraints.txt` "
            "(torch pinned to the CPU build; MosaicML Streaming and LitData with `--no-deps`). MosaicML Streaming "
            "imports its vision and text modules and `transformers` at import: the benchmark puts stand-in modules "
            "for `streaming.vision`, `streaming.text` and `transformers` in `sys.modules` (only its MDS reader is "
            "used). Over the loopback S3 server: the next section (`peers_s3.json`).", ""]
    for world in map(str, r["worlds"]):
        out += [f"### {world} rank process{'es' if world != '1' else ''}", "",
                "| loader | M tok/s per rank | × floor | p50 / p95 / p99 µs | first batch ms | peak RSS MB |"
                + (" 16-core reference (issue 15) |" if world == "1" else ""),
                "|---|---|---|---|---|---|" + ("---|" if world == "1" else "")]
        for name, p in r["peers"].items():
            w = p["worlds"].get(world)
            if w is None or not w["tokens_per_s_per_rank"].get("n"):
                out.append(f"| {name} | failed: {w and w['errors']} |")
                continue
            ref = f" {REFERENCE_16CORE.get(name, '–')} |" if world == "1" else ""
            failed = f" ({len(w['errors'])} round(s) failed: {w['errors'][0][:80]})" if w["errors"] else ""
            out.append(f"| {name}{failed} | {_rng(w['tokens_per_s_per_rank'])} | {_rng(w['ratio_to_floor'], 1, 3)} | "
                       f"{w['p50_us']['median']:.0f} / {w['p95_us']['median']:.0f} / {w['p99_us']['median']:.0f} | "
                       f"{w['ttfb_s']['median'] * 1e3:.0f} | {w['peak_rss_mb']['median']:.0f} |{ref}")
        out.append("")
    out += ["### Resume", "", f"Resume at step {r['resume_step']} (construct + load state + first batch); "
            "`exact`: the next 8 batches equal the uninterrupted run's.", "",
            "| loader | method | resume ms | exact |", "|---|---|---|---|"]
    for name, p in r["peers"].items():
        res = p["resume"]
        if isinstance(res, str):
            out.append(f"| {name} | failed: {res} | | |")
        else:
            method = {"state_dict": "state_dict / load_state_dict", "offset": "index / sampler offset",
                      "replay": "no state: replays N batches"}[res["method"]]
            out.append(f"| {name} | {method} | {res['resume_s'] * 1e3:.1f} | {res['exact']} |")
    out.append("")
    ratio_plot(r, plots / "peers.png")
    out += ["![peers](benchmarks/peers.png)", ""]
    peers = r["peers"]

    def med(name: str, world: str = "1") -> float | None:
        try:
            return peers[name]["worlds"][world]["tokens_per_s_per_rank"]["median"]
        except (KeyError, TypeError):
            return None

    tgb, dl, floor = med("torch_tgb"), med("dataloader_memmap"), med("floor")
    token_rows = "token rows" in str((peers.get("torch_tgb") or {}).get("note", ""))  # issue 28's layout
    reading = ["**Reading.**"]
    if tgb and floor:
        if token_rows:
            reading.append(f"torch_tgb delivers {tgb / floor:.3f}× the raw memmap floor here: as users run it, "
                           "through tgb.DataLoader, with int64 `labels` beside the tokens (derived from the same "
                           "uint32 bytes, -100 at row ends), each slice CRC32C-checked on its first read "
                           "(`verify=\"first\"`), which the floor does not do. The token-rows section below "
                           "compares it with a floor that delivers labels too.")
        else:
            reading.append(f"torch_tgb delivers {tgb / floor:.3f}× the raw memmap floor here: as users run it, "
                           "through tgb.DataLoader, with `labels` (int64) and `document_ids` (int32) beside the uint32 "
                           "tokens, each CRC32C-checked on its first read (`verify=\"first\"`): four times the floor's "
                           "bytes checksummed per step, which the floor neither reads nor checks. Issue 15's ≥ 0.67× "
                           "goal is for the dataset at the bare token shape, measured in the hot-path section below.")
    if tgb and dl:
        word = "faster than" if tgb > dl else "slower than"
        reading.append(f"It is {max(tgb, dl) / min(tgb, dl):.2f}× {word} a plain DataLoader over np.memmap.")
    faster = [n for n in peers if n not in ("floor", "torch_tgb") and med(n) and tgb and med(n) > tgb]
    if faster:
        reading.append(f"Loaders faster than torch_tgb here: {', '.join(faster)} — torch_tgb loses to them on "
                       "this static, local, single-node corpus, where its transactional log buys nothing.")
    slower = [n for n in peers if n not in ("floor", "torch_tgb") and med(n) and tgb and med(n) < tgb]
    if slower:
        reading.append(f"Slower: {', '.join(slower)}.")
    reading.append("First-batch time includes construction (torch_tgb reads its manifest log). With 4 rank "
                   "processes on 2 cores every loader is CPU-starved and the floor's short passes swing widely, so "
                   "the 4-rank ratios are rough. Resume: every loader with a state (and the offset-based ones) "
                   "resumes exactly; WebDataset has no state and must replay, which costs O(N). Peak RSS counts the "
                   "mapped file pages a process touched" + (
                       ": torch_tgb's namespace stores each token once (uint32) with each row's lengths." if token_rows
                       else ": torch_tgb's namespace (`write_dataset`, packing='none') holds int64 `labels` and int32 "
                       "`document_ids` beside the uint32 `input_ids`, four times the corpus's bytes, and "
                       "tgb.DataLoader delivers all of them, which is most of its larger RSS."))
    return [*out, " ".join(reading), ""]


def peers_s3_section(r: dict[str, Any]) -> list[str]:
    title = "## 1b. The same loaders over a loopback S3 server (`peers.py`, `peers_s3.json`)"
    if "skipped" in r:
        return [title, "", f"Skipped: {r['skipped']}", ""]
    probe = r["moto_small_gets_per_s"]
    probe_text = f"{probe:.0f}" if isinstance(probe, (int, float)) else f"not measured ({probe})"
    out = [title, "", f"{r['server']}. Corpus: the first {r['tokens']:,} tokens of the same corpus, each peer's own "
           f"format uploaded to the bucket and read back through the peer's S3 path; 1 rank; {r['rounds']} interleaved "
           f"round(s) of at most {r['max_batches_per_pass']} batches or {r['max_seconds_per_pass']:.0f} s per pass. "
           f"Requests are counted by the server (everything the pass asked for, index and listing included). One "
           f"client's sequential 4 KiB GETs against this server in this run: {probe_text} per second.", "",
           "| loader | how it is pointed at the endpoint | M tok/s | p50 / p95 ms | first batch ms | requests per "
           "batch | requests in one pass | batches equal the local copy's |", "|---|---|---|---|---|---|---|---|"]
    for name, p in r["peers"].items():
        if not p.get("tokens_per_s", {}).get("n"):
            out.append(f"| {name} | {p['how']} | failed: {'; '.join(p['errors'])[:200]} | | | | | |")
            continue
        passes = p["requests_per_pass"]
        one = ", ".join(f"{k} {v}" for k, v in sorted(passes[0].items())) if passes else "–"
        failed = f" ({len(p['errors'])} pass(es) failed: {p['errors'][0][:80]})" if p["errors"] else ""
        out.append(f"| {name}{failed} | {p['how']} | {_rng(p['tokens_per_s'], 1e6, 2)} | "
                   f"{p['p50_us']['median'] / 1e3:.1f} / {p['p95_us']['median'] / 1e3:.1f} | "
                   f"{p['ttfb_s']['median'] * 1e3:.0f} | {p['requests_per_batch']['median']:.2f} | {one} | "
                   f"{p['matches_local']} |")
    for name, why in r.get("no_endpoint", {}).items():
        out.append(f"| {name} | **no endpoint**: {why} | | | | | | |")
    for name, pip in r.get("not_installed", {}).items():
        out.append(f"| {name} | **not installed** (`{pip}`) | | | | | | |")
    ok = {n: p for n, p in r["peers"].items() if p.get("tokens_per_s", {}).get("n")}
    ranged = {n: p for n, p in ok.items() if p["requests_per_batch"]["median"] >= 0.5}
    whole = [n for n in ok if n not in ranged]
    reading = ["**Reading.** moto is the bottleneck of this section, not the loaders: one Python process answers "
               "every request, so it shows how many requests each loader makes and whether the batches are right "
               "more than how fast each would be against real S3."]
    for name, p in ranged.items():
        per_batch = p["requests_per_batch"]["median"]
        rate = per_batch * p["tokens_per_s"]["median"] / (32 * 512)
        reading.append(f"{name} reads with range GETs as it goes and keeps no local copy: {per_batch:.2f} requests "
                       f"per batch, {rate:.0f} requests/s while reading"
                       + (f" against the {probe:.0f}/s one client gets from this server, so its tokens/s here is "
                          "moto's request rate divided by requests per batch" if isinstance(probe, (int, float))
                          else "") + "; against real S3 it is bound by request latency and parallelism instead, "
                       "which this run does not show.")
    if whole:
        reading.append(f"{', '.join(whole)} download whole shards or chunks into a local cache and then read "
                       "locally: a handful of requests per pass (per shard, not per batch), so moto's request rate "
                       "does not bind them; their first batch waits for a whole shard (small here, the corpus is "
                       "small) and their speed after it is their local decode.")
    bad = [n for n, p in ok.items() if not p["matches_local"]]
    reading.append("Every loader delivered over S3 exactly the batches it delivers from its local copy."
                   if not bad else f"Batches over S3 differ from the local copy's for: {', '.join(bad)}.")
    return [*out, "", " ".join(reading), ""]


def ratio_plot(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.5))
    names = [n for n in r["peers"] if n != "floor"]
    width = 0.8 / max(1, len(r["worlds"]))
    for k, world in enumerate(map(str, r["worlds"])):
        vals = [r["peers"][n]["worlds"][world]["tokens_per_s_per_rank"].get("median") or 0 for n in names]
        ax.bar([i + k * width for i in range(len(names))], [v / 1e6 for v in vals], width, label=f"{world} rank(s)")
    ax.set_xticks([i + width * (len(r["worlds"]) - 1) / 2 for i in range(len(names))], names, rotation=20,
                  fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("M tokens/s per rank (log)")
    ax.set_title("Same corpus, 32×512 int64 batches (floor omitted)")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def getbatch_section(r: dict[str, Any], plots: Path) -> list[str]:
    out = ["## 2. GetBatch analogue (seed 003 Table 1) (`getbatch.py`)", "",
           "Ordered batched `get_ranges` vs individual `get_range` calls one after another.", "",
           "| store | object | batch | individual GiB/s | batched GiB/s | speed-up | paper |", "|---|---|---|---|---|---|---|"]
    for store, s in r["stores"].items():
        for row in s["rows"]:
            out.append(f"| {store} | {row['object_bytes'] // 1024} KiB | {row['batch']} | "
                       f"{row['individual_gib_s']['median']:.3f} | {row['batched_gib_s']['median']:.3f} | "
                       f"{_rng(row['speedup'], 1, 1)}× | {row['paper_speedup']}× |")
    out += ["", "Stores: " + "; ".join(f"{k}: {v['describe']}" for k, v in r["stores"].items()), "",
            "**Reading.** The paper's GET baseline is itself concurrent (aisloader workers) and its large-object "
            "ratio is bound by the cluster's bandwidth, so its speed-up falls from 9–15× to 1.5–1.7× as objects "
            "grow. Our individual baseline is strictly sequential and the latency model gives every stream its own "
            "100 MB/s, so our ratio stays near min(batch, streams in flight) at every size: it shows that "
            "`get_ranges` overlaps round trips, not that we match AIStore's server-side batching. On moto the "
            "server is the bottleneck (one Python process), so the ratio there is about 1×.", ""]
    return out


def redis_section(r: dict[str, Any], amp: list[dict[str, Any]] | None) -> list[str]:
    if "skipped" in r:
        return ["## 4. Message-queue baseline: Redis Streams (`redis_queue.py`)", "", f"Skipped: {r['skipped']}", ""]
    out = ["## 4. Message-queue baseline: Redis Streams (`redis_queue.py`)", "",
           f"One stream message = one global batch of {r['batch_bytes'] / 2**20:.0f} MiB; {r['server']}; {r['tgb']}.",
           "", "| producers | Redis XADD MB/s | tgb.Producer MB/s |", "|---|---|---|"]
    for row in r["producers"]:
        out.append(f"| {row['producers']} | {_rng(row['redis_MBps'], 1, 0)} | {_rng(row['tgb_MBps'], 1, 0)} |")
    out += ["", "| consumers | read amplification | delivery p50 ms | p95 ms |", "|---|---|---|---|"]
    for row in r["consumers"]:
        out.append(f"| {row['consumers']} | {row['read_amplification']:.1f}× | {row['latency_p50_ms']:.1f} | "
                   f"{row['latency_p95_ms']:.1f} |")
    tgb_amp = ""
    if amp:
        vals = {(a["world"], a["mode"]): a["read_amplification"] for a in amp if a.get("mode") == "range"}
        if vals:
            tgb_amp = " torch_tgb's range reads in consumer_read: " + ", ".join(
                f"world {w}: {v:.2f}×" for (w, _), v in sorted(vals.items())) + "."
    out += ["", "**Reading.** Redis on loopback ingests far faster than torch_tgb's producers on this box (an "
            "in-memory server with no durability against a file-system commit log), so on producer throughput "
            "torch_tgb loses. A stream delivers whole messages, so each of C consumers reads the whole batch: "
            f"amplification C, as the paper says of Kafka.{tgb_amp} Paper (Kafka): 0.11 steps/s end to end and "
            "0.061 MB/s per rank at 128 consumers.", ""]
    return out


def _when(r: dict[str, Any]) -> str:
    mach = r.get("machine") or {}
    if not mach.get("date_utc"):
        return "run date not recorded (an earlier run)"
    gpus = mach.get("gpus")
    return f"run {mach['date_utc']}" + (f" on {gpus[0]} ({mach['cores']} cores)" if gpus else "")


def _section_run(report: dict[str, Any], name: str) -> dict[str, Any]:
    """Where the date of a list-valued section of consumer_read.json is kept (``sections_run``)."""
    return {"machine": (report.get("sections_run") or {}).get(name)}


def collected_sections(results: dict[str, Any]) -> list[str]:
    out = ["## 5. Producer scaling, consumer reads, lifecycle, commit cost (collected)", "",
           "These come from their own scripts' result files; each says when it was measured.", ""]
    ps = results.get("producer_scaling")
    if ps:
        top = max(r["producers"] for r in ps["rows"])
        rows = [r for r in ps["rows"] if r["producers"] == top and r.get("mode", "delta") == "delta"
                and r.get("history_steps", 0) == 0]
        out += [f"**Producer scaling and DAC** (seed 000 §7.3; {ps['model']}; {_when(ps)}). At {top} producers:",
                "",
                "| policy | payload KB | MB/s | success | paper MB/s at 32 |", "|---|---|---|---|---|"]
        for r in rows:
            out.append(f"| {r['policy']} | {r['payload_kb']} | {r['mb_per_s']:.1f} | {r['success_rate']:.1%} | "
                       f"{PAPER_DAC.get(r['policy'], '–')} |")
        reading = []
        for kb in sorted({r["payload_kb"] for r in rows}):
            by = {r["policy"]: r for r in rows if r["payload_kb"] == kb}
            if "dac" in by and len(by) > 1:
                best = max((r for p, r in by.items() if p != "dac"), key=lambda r: r["mb_per_s"])
                reading.append(f"at {kb} KB DAC reaches {by['dac']['mb_per_s'] / best['mb_per_s']:.2f}× the best "
                               f"other policy ({best['policy']}) with {by['dac']['success_rate']:.0%} of commits "
                               "succeeding")
        out += ["", "**Reading.** " + "; ".join(reading) + ". The paper's DAC leads INCR by 3.9× at 32 producers; "
                "where our ratio is near 1× that lead is not reproduced by this model (threads in one process "
                "behind a latency model), only DAC's high commit success rate.", "",
                "![producer scaling](benchmarks/producer_scaling.png)", ""]
    cr = results.get("consumer_read")
    if cr and cr.get("amplification"):
        out += ["**Read amplification and latency** (seed 000 §7.4: ~1.0× for BatchWeave, W× for dense and Kafka; "
                f"1.61 MB/s per rank at 128 consumers and 100 KB; ours {_when(_section_run(cr, 'amplification'))}):", "",
                "| store | world | slice KB | mode | amplification | MB/s per rank | p50 / p95 ms |",
                "|---|---|---|---|---|---|---|"]
        for a in cr["amplification"]:
            out.append(f"| {a['store']} | {a['world']} | {a['slice_KB']} | {a['mode']} | "
                       f"{a['read_amplification']:.2f} | {a.get('per_rank_MBps_steady', 0):.2f} | "
                       f"{a['fetch_p50_ms']:.0f} / {a['fetch_p95_ms']:.0f} |")
        out.append("")
    if cr and cr.get("hot_path") and cr["hot_path"].get("results"):
        h = cr["hot_path"]
        out += [f"**Hot path** (seed 002 ZeroBatch: ~17 µs per batch; {h['tokens'] / (1 << 20):.0f} Mi uint32 tokens in "
                f"32×512 batches; ratios to the raw memmap floor of the same round, {_when(h)}):", "",
                "| processes | dtype | loader | M tok/s per rank | p50 / p95 µs | × floor (tok/s) | × floor (p50) |",
                "|---|---|---|---|---|---|---|"]
        for r in h["results"]:
            out.append(f"| {r['processes']} | {r['dtype']} | {r['loader']} | {r['tokens_per_s_per_rank'] / 1e6:.1f} | "
                       f"{r['p50_us']:.1f} / {r['p95_us']:.1f} | {r['ratio_to_floor']:.3f} | "
                       f"{r.get('p50_ratio_to_floor', float('nan')):.3f} |")
        out += ["", hot_path_reading(h["results"], (cr.get("machine") or {}).get("cores")), ""]
    req = (cr or {}).get("requests") or {}
    if "segments_cold_requests_per_step" in req:
        out += [f"**Range requests per rank-step on a remote store** (issue 15: ≤ 1.05 in steady state; one rank of "
                f"dp=8, {req['steps']} steps, {_when(req)}): one TGB per object cold "
                f"{req['one_cold_requests_per_step']:.3f}, warm {req['one_warm_requests_per_step']:.3f} (a cold "
                f"step reads the object's footer and the slice); segments of 64 TGBs cold "
                f"{req['segments_cold_requests_per_step']:.3f}, warm {req['segments_warm_requests_per_step']:.3f} "
                "(the footers come from the segment index: one tail read per segment).", ""]
    if cr and cr.get("train_wait") and cr["train_wait"].get("results"):
        tw = cr["train_wait"]
        out += [f"**Waiting per training step** (issue 15: no more than the DataLoader-over-memmap baseline; a loop "
                f"with a {tw['compute_ms']:.0f} ms 1-thread CPU step, {tw['steps']} steps of 32×512 int64, "
                f"{tw['rounds']} interleaved rounds, {_when(tw)}):", "", *_train_wait_table(tw),
                "", "Worker processes (`_w2`) compete with the step for this machine's 2 cores, so they wait "
                "longer here than they would on a training node.", ""]
    if cr and cr.get("train_wait_cuda") and cr["train_wait_cuda"].get("results"):
        tw = cr["train_wait_cuda"]
        out += [f"**Waiting per training step on a GPU** (the same loop with a {tw['compute_ms']:.0f} ms bf16 matmul "
                "on the GPU ending on `.item()`; the baselines pin their batches and copy them with "
                "`.to('cuda', non_blocking=True)` inside the wait, the `tgb` loaders deliver with `device='cuda'` "
                f"(uint32 copied, cast on the device, one step ahead); {tw['rounds']} interleaved rounds, "
                f"{_when(tw)}):", "", *_train_wait_table(tw), "",
                "On a GPU the `tgb` loaders' wait also holds the device feed's own work for the next step: a pinned "
                "copy of each tensor (unless the loader pinned it already) and the copy issued on the side stream; "
                "with workers (`_w2`) or the reader thread (`tgb_prefetch`) each batch crosses one more hand-off "
                "before it is pinned. `step + wait`: the loop's whole step, the side-stream copy included.", ""]
    lc = results.get("lifecycle")
    if lc:
        out += [f"**Lifecycle** (seed 000 §7.5: −72%, 34.85 → 9.76 GiB): peak bytes reduced by "
                f"{lc['peak_reduction']:.0%} with reclamation here ({lc['config']['steps']} steps of "
                f"{lc['config']['tgb_bytes'] // 1024} KiB; {_when(lc)}).", "", "![lifecycle](benchmarks/lifecycle.png)",
                ""]
    bal = results.get("balance")
    if bal and bal.get("slices"):
        out += [f"**Balancing** (seed 004 OVERLORD: up to 4.54× end to end on real clusters; ours is a compute-only "
                f"simulation of the slowest dp slice, {_when(bal)}):", "",
                "| method | max/min slice cost | simulated step s | speed-up vs none |", "|---|---|---|---|"]
        for name, row in bal["slices"].items():
            out.append(f"| {name} | {row['max_over_min_mean']:.2f} | {row['step_time_s_mean']:.1f} | "
                       f"{row['speedup_vs_none']:.2f}× |")
        out += ["", "Packing efficiency: " + ", ".join(f"{k} {v['efficiency']:.1%}" for k, v in
                                                      bal.get("packing", {}).items()) + ".", ""]
    out += multimodal_section(results.get("multimodal"))
    cc = results.get("commit_cost")
    if cc:
        out += [f"**Commit cost vs history** (delta manifest; {_when(cc)}): " + ", ".join(
            f"{k} {v:.2f}" for k, v in cc["ratios"].items()) + " (1.0 = commit cost independent of history).", ""]
    return out


def _train_wait_table(tw: dict[str, Any]) -> list[str]:
    rows = ["| loader | wait mean / p50 / p95 µs | × baseline (mean wait) | step + wait ms | × baseline |",
            "|---|---|---|---|---|"]
    for r in tw["results"]:
        iters = (f"{r['iter_ms']:.2f} | {r['iter_over_baseline']:.2f}" if "iter_ms" in r else "— | —")
        rows.append(f"| {r['loader']} | {r['wait_mean_us']:.0f} / {r['wait_p50_us']:.0f} / {r['wait_p95_us']:.0f} | "
                    f"{r['wait_over_baseline']:.2f} | {iters} |")
    return rows


def multimodal_section(mm: dict[str, Any] | None) -> list[str]:
    """Issue 27's producer-side figures: decode + resize + patchify vs Pillow, and VLM balance."""
    if not mm:
        return []
    out: list[str] = []
    tp = mm.get("throughput")
    if tp:
        out += [f"**Images: decode + resize + patchify per producer process** (issue 27 goal: >= 0.8x Pillow's own "
                f"decode + resize of the same files; {tp['images']} images, {tp['bytes_in'] / 1e6:.1f} MB encoded, "
                f"1 thread, median of {tp['rounds']} interleaved rounds, {_when(mm)}):", "",
                "| resolution | pipeline | images/s | MB/s in | MB/s out | x Pillow |", "|---|---|---|---|---|---|"]
        for label, rows in tp["results"].items():
            for name, r in rows.items():
                out.append(f"| {label} | {name} | {r['images_per_s']:.1f} | {r['mb_in_per_s']:.2f} | "
                           f"{r['mb_out_per_s']:.2f} | {r['ratio_to_pillow']:.2f} |")
        out += ["", "`stages` decodes JPEG with simplejpeg (libjpeg-turbo, the same pixels) and resizes with torch's "
                "antialiased uint8 kernel; `stages_pillow` decodes with Pillow: the stages' own overhead (tensor "
                "conversion, patch copy, node bookkeeping) is below what the faster resize saves.", ""]
    bal = mm.get("balance")
    if bal:
        c = bal["config"]
        out += [f"**VLM balance** (seed 004 Alg. 2; dp {c['dp']} x {c['micro_batches']} micro-batches, "
                f"{c['batches']} global batches of {c['global_batch_rows']} rows of {c['seq_len']} tokens, "
                f"log-normal captions, 0-4 images per sample; encoder "
                f"{bal['encoder_share_of_flops']:.0%} of the FLOPs; compute-only simulation):", "",
                "| method | encoder max/mean | backbone max/mean | total max/mean | micro-batch max/mean | "
                "step x perfect | speed-up vs none |", "|---|---|---|---|---|---|---|"]
        for name, s in bal["methods"].items():
            out.append(f"| {name} | {s['encoder_max_over_mean']:.3f} | {s['backbone_max_over_mean']:.3f} | "
                       f"{s['total_max_over_mean']:.3f} | {s['micro_total_max_over_mean']:.3f} | "
                       f"{s['step_over_perfect']:.3f} | {s['speedup_vs_none']:.3f}x |")
        out += ["", "Step = Σ over micro-batches of (slowest rank's encoder + slowest rank's backbone); "
                "`kk_backbone` balances the backbone cost alone (OVERLORD's backbone-only baseline) and leaves "
                "the encoder skewed; `greedy`/`kk` balance the sum of the two, `vector` "
                "(`balance=\"vector\"`) both at once, since each phase waits for its own slowest rank.", ""]
    return out


def verdict(ok: bool) -> str:
    return "met" if ok else "not met"


def hot_path_reading(rows: list[dict[str, Any]], cores: int | None) -> str:
    """Issue 15's goals against this run's hot-path rows (one process, int64); met or not is read off the rows."""
    by = {(r["processes"], r["dtype"], r["loader"]): r for r in rows}
    seg, one, dl = by.get((1, "int64", "tgb_segments")), by.get((1, "int64", "tgb_one")), by.get((1, "int64", "dl_memmap"))
    if not (seg and one and dl):
        return "**Reading.** The one-process int64 rows are missing from this run."

    ratio = seg["ratio_to_floor"]
    text = (f"**Reading.** One process, int64: segments, read by the run path with the default `verify=\"first\"`, "
            f"reach {ratio:.2f}× the floor (issue 15's goal: ≥ 0.67×, {verdict(ratio >= 0.67)} in this run; "
            f"p50 {seg['p50_us']:.1f} µs per step).")
    noverify, steps = by.get((1, "int64", "tgb_segments_noverify")), by.get((1, "int64", "tgb_segments_steps"))
    if noverify:
        text += (f" Without the CRC32C check (`verify=\"never\"`, the floor's terms) "
                 f"{noverify['ratio_to_floor']:.2f}×: the difference is the checksum of 64 KiB per step itself.")
    if steps:
        text += (f" The step-by-step pipeline that the run path replaces for this shape (`runs=False`) reaches "
                 f"{steps['ratio_to_floor']:.2f}×.")
    through = by.get((1, "int64", "tgb_loader"))
    if through:
        text += (f" Through `tgb.DataLoader(num_workers=0)`, what a training loop holds, segments reach "
                 f"{through['ratio_to_floor']:.2f}×: the loader adds {through['p50_us'] - seg['p50_us']:.1f} µs "
                 "to the p50 step.")
    worst = max(seg["p95_us"] / seg["p50_us"], one["p95_us"] / one["p50_us"])
    text += (f" p95 is {seg['p95_us'] / seg['p50_us']:.2f}× p50 for segments and {one['p95_us'] / one['p50_us']:.2f}× "
             f"for one TGB per object (goal ≤ 2×, {verdict(worst <= 2)}). A producer's default stream (one TGB per "
             f"object) delivers {one['tokens_per_s_per_rank'] / dl['tokens_per_s_per_rank']:.2f}× the "
             f"DataLoader-over-memmap baseline's tokens/s (goal ≥ 1×, "
             f"{verdict(one['tokens_per_s_per_rank'] >= dl['tokens_per_s_per_rank'])}).")
    if cores is not None and cores < 8:
        text += (f" The 8-process rows ran on {cores} cores: every process waits for a core most of the time, so "
                 "they measure the scheduler more than the loaders.")
    return text


def hot_tier_section(r: dict[str, Any]) -> list[str]:
    """Issue 30: the second epoch over a remote namespace, with and without the node-local hot tier."""
    c = r["config"]
    out = ["## 6. Hot tier: the second epoch over a remote namespace (`hot_tier.py`)", "",
           f"One rank of dp={c['dp']} reads two epochs of a sealed namespace ({c['steps']} steps, "
           f"{c['slice_bytes'] // 1024} KiB {c['dtype']} slices) with one reader; the second epoch is measured, "
           f"side by side with a local namespace in {c['rounds']} interleaved rounds ({_when(r)}). Remote: "
           f"{r['model']}; moto S3 in its own process ({r.get('s3', {}).get('config', {}).get('steps', '–')} "
           "steps, smaller). Goals (issue 30): ≤ 0.01 range requests per rank-step with the tier (from 1.0), "
           "≥ 0.8× the local namespace's tokens/s.", "",
           "| reader | range requests per rank-step | a new reader's requests per rank-step | M tok/s | × local |",
           "|---|---|---|---|---|"]
    for row in r["results"] + r.get("s3", {}).get("results", []):
        restart = row["restart_requests_per_rank_step"]
        out.append(f"| {row['reader']} | {row['requests_per_rank_step']['median']:.3f} | "
                   f"{restart['median']:.3f} | {_rng(row['tokens_per_s'])} | "
                   f"{row['ratio_to_local']['median']:.2f} ({row['ratio_to_local']['min']:.2f}–"
                   f"{row['ratio_to_local']['max']:.2f}) |" if restart["n"] else
                   f"| {row['reader']} | {row['requests_per_rank_step']['median']:.3f} | – | "
                   f"{_rng(row['tokens_per_s'])} | 1.00 |")
    by = {row["reader"]: row for row in r["results"]}
    tier, remote = by.get("remote+tier"), by.get("remote")
    if tier and remote:
        ratio = tier["ratio_to_local"]
        out += ["", f"**Reading.** Requests: with the tier neither the second epoch nor a new reader on the node "
                f"(a restarted job, another process) sends a range request to the store "
                f"({tier['requests_per_rank_step']['median']:.3f} and "
                f"{tier['restart_requests_per_rank_step']['median']:.3f} per rank-step); without it every step "
                f"reads its slice again, and its footer too once the objects outnumber the footer cache "
                f"({remote['requests_per_rank_step']['median']:.2f}; a new reader 2 per step with one TGB per "
                f"object). Tokens/s: the tier's second epoch ran at {ratio['median']:.2f}× the local namespace's "
                f"(rounds {ratio['min']:.2f}–{ratio['max']:.2f}). An epoch here lasts tens of milliseconds on a "
                "loaded 2-core box, so this ratio moves from run to run: read the min–max. A hit is a file read "
                "and a CRC32C of the entry; what separates it from the local namespace is the reader's remote "
                "path (a prefetch thread, private buffers) against the local path's zero-copy mapped runs. "
                "`remote, 0 ms` is that remote path with no round trip and no tier (it also re-reads footers). "
                "The manifest is never cached: a new reader's start still costs its round trips.", ""]
    return out


def ingest_floor_reading(floor: dict[str, Any]) -> str:
    """The I/O floor of a shuffled token-file read (``ingest_floor.py``), against numpy's sequential read."""
    med, ratio = floor["median_tok_per_s"], floor["median_ratio_to_numpy_disk"]
    text = (f"**The I/O floor** (`ingest_floor.py`, the same corpus: {floor['tokens'] / 1e6:.0f} M tokens, "
            f"{floor['docs']:,} documents; {_when(floor)}; median of {len(floor['rounds'])} cold rounds). numpy reads "
            f"the file at {med['numpy_disk'] / 1e6:.0f} M tok/s from the disk ({med['numpy_cache'] / 1e6:.0f} from the "
            "page cache) in one sequential pass. Reading its documents in a shuffled order, one `pread` each, and "
            "writing them to a file with an fsync, no format and no packing: "
            f"{med['floor_shuffled'] / 1e6:.0f} M tok/s ({ratio['floor_shuffled']:.3f}× numpy's read from the disk); "
            f"in file order {med['floor_in_order'] / 1e6:.0f} ({ratio['floor_in_order']:.2f}×).")
    if "floor_warmed" in med:
        text += (f" After one sequential pass over the file (timed with it): {med['floor_warmed'] / 1e6:.0f} M tok/s "
                 f"({ratio['floor_warmed']:.2f}×). So from a cold cache a shuffled order, not the format, bounds a "
                 "token file's ingest here; a file that fits the page cache could be read sequentially first, and "
                 "then the producer's own per-batch work (its warm rate) is the bound.")
    return text


def token_rows_section(ingest: dict[str, Any] | None, cr: dict[str, Any] | None,
                       floor: dict[str, Any] | None = None, storage: dict[str, Any] | None = None) -> list[str]:
    """Issue 28: ingest from each source kind against its library's own read; bytes at rest; labels on read."""
    out = ["## 7. Token-efficient TGBs: ingest and reading (`ingest.py`, `consumer_read.py --only labels`)", ""]
    points = (ingest or {}).get("points") or []
    if points and "ratio_to_disk_read" in points[0]:
        c = ingest["corpus"]  # type: ignore[index]
        against = ingest.get("against") if all("speedup" in p for p in points) else None  # type: ignore[union-attr]
        cached = all("tgb_cached_tok_per_s" in p for p in points)  # ingest.json of before the cached runs: without
        out += [f"One corpus of {c['tokens'] / 1e6:.0f} M uint16 tokens ({c['docs']:,} documents of 50–3000 tokens) "
                f"as a token file, Parquet, Lance and WebDataset tars; each point a fresh process: the format's own "
                f"library reads it from the disk (page cache dropped) and from the page cache, then `tgb.produce` "
                f"(token rows, uint16, {ingest['segment_bytes'] >> 20} MiB segments, every segment fsynced) writes "
                f"it from the disk into a local namespace, seq_len {ingest['seq_len']}, global batch "
                f"{ingest['global_batch']} ({_when(ingest)}). Goals (issue 28): ≥ 50 M tok/s and ≥ 0.25× numpy's "
                "read for the token file, ≥ 0.3× for Parquet and Lance, ≤ 2.2 B/token at rest.", "",
                "| source | packing | tgb M tok/s | library read from disk M tok/s | × | from cache M tok/s | × | "
                + ("tgb from cache M tok/s | × the library's from cache | " if cached else "")
                + "B/token at rest | peak RSS MiB |" + (" before M tok/s | speed-up |" if against else ""),
                "|---|---|---|---|---|---|---|---|---|" + ("---|---|" if cached else "") + ("---|---|" if against else "")]
        for p in points:
            out.append(f"| {p['source']} | {p['packing']} | {p['tgb_tok_per_s'] / 1e6:.1f} | "
                       f"{p['library_read_disk_tok_per_s'] / 1e6:.0f} | {p['ratio_to_disk_read']:.3f} | "
                       f"{p['library_read_cached_tok_per_s'] / 1e6:.0f} | {p['ratio_to_cached_read']:.3f} | "
                       + (f"{p['tgb_cached_tok_per_s'] / 1e6:.1f} | {p['cached_ratio_to_cached_read']:.3f} | "
                          if cached else "")
                       + f"{p['bytes_per_token']:.3f} | {p['peak_rss_mb']:.0f} |"
                       + (f" {p['against_tok_per_s'] / 1e6:.1f} | {p['speedup']:.2f}× |" if against else ""))
        if against:
            out += ["", f"Each point is the median of {ingest['rounds']} rounds; every round also ran the same point "
                    f"with the torch_tgb of commit {against.get('commit') or '?'} (`--against`), interleaved: "
                    "\"before\" is its median, the speed-up the ratio of the two."]
        out += ["", ingest_reading(points, (against or {}).get("commit") or "?"), ""]
        if storage and "segment_64mib_commit_ms_none" in storage:
            out += [segment_commit_reading(storage), ""]
        if floor and "median_tok_per_s" in floor:
            out += [ingest_floor_reading(floor), ""]
    else:
        out += ["No `ingest.json` of this format in the results directory: run `python benchmarks/ingest.py`.", ""]
    labels = (cr or {}).get("labels")
    if labels:
        rest = labels["bytes_per_token_at_rest"]
        out += [f"**Labels on read** ({labels['steps']} steps of {labels['rows']}×{labels['seq_len']} uint16 tokens, "
                f"one rank, delivered as int64 `input_ids` + `labels`; {_when(labels)}). The floor casts each step's "
                "tokens once and hands out a slice and its shift; torch_tgb reads the `write_dataset` namespace "
                "(token rows, labels derived with -100 at row ends, a CRC32C check per slice). At rest: "
                f"{rest['tokens']:.2f} B/token for token rows, {rest['arrays']:.2f} for per-token arrays. Goal "
                f"(issue 28): ≥ {labels['goal_ratio']}× the floor through `tgb.DataLoader`.", "",
                "| reader | M tokens/s | steps/s | × floor |", "|---|---|---|---|"]
        for r in labels["results"]:
            out.append(f"| {r['reader']} | {r['tokens_per_s'] / 1e6:.1f} | {r['steps_per_s']:,.0f} | "
                       f"{r['ratio_to_baseline']:.3f} |")
        out += ["", labels_reading(labels), ""]
    ragged = (cr or {}).get("ragged")
    if ragged:
        out += [f"**Ragged keys on read** (issue 27: a VLM-shaped namespace, {ragged['steps']} steps of "
                f"{ragged['rows']} rows, {ragged['bytes_per_step'] / 1e6:.1f} MB per step, one rank; "
                f"{_when(ragged)}; goal ≥ {ragged['goal_ratio']}× a raw memmap of the same bytes; "
                f"{ragged['data_requests_per_step']:.2f} range requests per step):", "",
                "| reader | GB/s | steps/s | × floor |", "|---|---|---|---|"]
        for r in ragged["results"]:
            out.append(f"| {r['reader']} | {r['bytes_per_s'] / 1e9:.2f} | {r['steps_per_s']:,.0f} | "
                       f"{r['ratio_to_baseline']:.3f} |")
        out.append("")
    return out


def _speedups(points: list[dict[str, Any]], source: str) -> list[float]:
    return [p["speedup"] for p in points if p["source"] == source and p.get("speedup")]


def _ratios(points: list[dict[str, Any]], key: str) -> str:
    return f"{min(p[key] for p in points):.3f}–{max(p[key] for p in points):.3f}×"


def _arrow_goal(arrow: list[dict[str, Any]]) -> str:
    """Parquet and Lance against issue 28's 0.3x: each cache state like for like, and the mixed one."""
    disk, mixed = min(p["ratio_to_disk_read"] for p in arrow), min(p["ratio_to_cached_read"] for p in arrow)
    text = (f"Parquet and Lance (goal ≥ 0.3× their library's own read): from the disk, both: "
            f"{_ratios(arrow, 'ratio_to_disk_read')} ({verdict(disk >= 0.3)})")
    if all("cached_ratio_to_cached_read" in p for p in arrow):
        cache = min(p["cached_ratio_to_cached_read"] for p in arrow)
        cores = max(p.get("library_read_cached_cores", 0.0) for p in arrow)
        text += (f"; from the page cache, both: {_ratios(arrow, 'cached_ratio_to_cached_read')} "
                 f"({verdict(cache >= 0.3)}; the library's cached read used up to {cores:.1f} cores, Arrow decoding "
                 "on its own threads, where the source decodes on one thread and packs and writes on another)")
    return (text + f"; tgb from the disk against the library from the cache: {_ratios(arrow, 'ratio_to_cached_read')} "
            f"({verdict(mixed >= 0.3)}).")


def segment_commit_reading(storage: dict[str, Any]) -> str:
    """What the background writeback saves a producer at a segment's commit (``test_bench_storage.py``)."""
    return (f"**A segment's commit** (`benchmarks/test_bench_storage.py`, a 64 MiB segment written in 256 KiB parts "
            f"through `LocalStore.open_writer`, a CRC32C of each part first, then committed with its fsync; best of "
            f"5 interleaved rounds): the commit waits {storage['segment_64mib_commit_ms_writeback']:.1f} ms with a "
            f"background sync every {storage['segment_64mib_writeback_bytes'] >> 20} MiB written, "
            f"{storage['segment_64mib_commit_ms_none']:.1f} ms without (the whole segment written back at the "
            f"commit); the segment's whole write {storage['segment_64mib_total_ms_writeback']:.1f} against "
            f"{storage['segment_64mib_total_ms_none']:.1f} ms.")


def ingest_reading(points: list[dict[str, Any]], against_commit: str = "?") -> str:
    """What the ingest table says against issue 28's goals, from its own figures."""
    by = {(p["source"], p["packing"]): p for p in points}
    parts = ["**Reading.**"]
    rest = max(p["bytes_per_token"] for p in points)
    parts.append(f"At rest at most {rest:.2f} B/token ({verdict(rest <= 2.2)}: ≤ 2.2): each token once at its own "
                 "width plus each row's lengths and the format's page alignment (a dp slice starts on a 4 KiB page, "
                 "so slices of a few tens of KiB pay up to 4 KiB more); per-token arrays took 20–28.")
    tf = [by[k] for k in (("token-file", "none"), ("token-file", "bfd")) if k in by]
    if tf:
        low = min(p["tgb_tok_per_s"] for p in tf)
        parts.append(f"The token file, packing none and bfd: at least {low / 1e6:.0f} M tok/s ({verdict(low >= 50e6)}: "
                     f"≥ 50 M), {min(p['ratio_to_disk_read'] for p in tf):.3f}–"
                     f"{max(p['ratio_to_disk_read'] for p in tf):.3f}× numpy's read from the disk and "
                     f"{max(p['ratio_to_cached_read'] for p in tf):.3f}× at most of its read from the page cache "
                     f"(goal ≥ 0.25×: {verdict(min(p['ratio_to_disk_read'] for p in tf) >= 0.25)} against the disk).")
    units = [p for p in points if p["source"] == "token-file-units"]
    if units:
        parts.append(f"Read by units of adjacent documents (`TokenFile(docs_per_unit=64)`: the order shuffled by "
                     f"unit, each unit one span): {min(p['tgb_tok_per_s'] for p in units) / 1e6:.0f}–"
                     f"{max(p['tgb_tok_per_s'] for p in units) / 1e6:.0f} M tok/s, "
                     f"{min(p['ratio_to_disk_read'] for p in units):.3f}–"
                     f"{max(p['ratio_to_disk_read'] for p in units):.3f}× numpy's read from the disk.")
    arrow = [p for p in points if p["source"] in ("parquet", "lance")]
    if arrow:
        parts.append(_arrow_goal(arrow))
    parts.append(
        "Where the time goes (cProfile of `tgb.produce` over the token file): the source reads a window's "
        "documents in one bulk call (one `pread` per run of adjacent documents, into one array) and keeps the "
        "kernel reading up to 32 MiB ahead of it (`POSIX_FADV_WILLNEED`): a shuffled order reads the file at "
        "random places, so from a cold page cache the disk would otherwise serve one document at a time; a file "
        "of at most 128 MiB (this one) is advised by 256 KiB blocks in the order the shuffle needs them, each "
        "block once per epoch (a cold advice costs the kernel 7–38 µs here, so one per document bounded the "
        "ingest). The packers are numpy over a window and "
        "hand `GlobalBatches` a batch of rows at once (`Pack.take_rows`: one gather per field, no dict per row), "
        "which joins and reorders them through numpy on the producer's own thread (`datapipes/produce/_one_thread.py`: "
        "torch's `cat`/`index_select` of a batch's rows ran on its intra-op pool, which on a busy machine waited "
        "about 16 ms per call for a pool thread and then spun a core; the process used 1.9× the CPU of its main "
        "thread, now 1.0×). "
        "Each TGB's bytes go straight into its segment's file as it is appended (`ObjectStore.open_writer`: one "
        "copy, into the page cache; publishing a segment is an fsync and a rename, in the background while the "
        "next fills; every 8 MiB written a thread of the writer's own syncs what is there, so the last segment's "
        "fsync waits for its last stretch only: 31 → 5 ms of the producer's main thread on this corpus, "
        "cProfile, 2026-11-27), so no write of the whole corpus waits after the last batch, and the rows' "
        "`seq_lens` reach "
        "the producer joined (`RaggedRows`: no tensor per row). What is left: the advice and read syscalls (one "
        "per document of a shuffled order), the packers' and `GlobalBatches`' copies, the CRC32C, the pipeline "
        "state encoded with each batch, and the kernel's page-cache allocation for the written bytes (its speed "
        "moves a lot between runs on this VM). The Arrow sources decode their next record batches on a thread "
        "of their own (`decode_ahead`), so the decode overlaps packing and writing; the library's own read "
        "decodes on every core (here 2) and does nothing else."
        + (f" Against commit {against_commit}: Parquet {min(pq_up):.2f}–{max(pq_up):.2f}×, Lance "
           f"{min(lance_up):.2f}–{max(lance_up):.2f}×, the token file "
           f"{min(tf_up):.2f}–{max(tf_up):.2f}× in the same run."
           if (pq_up := _speedups(points, "parquet")) and (lance_up := _speedups(points, "lance"))
           and (tf_up := _speedups(points, "token-file")) else "")
        + " Tried and measured without a gain here: advising merged extents "
        "(sorted by offset, the kernel reads in file order while the shuffle needs them in another; 20–30% "
        "slower from a cold cache), and advising the whole file at the first read (the same, worse: 0.60–0.65× "
        "of the block advice, 2026-11-27). A token file's own read is one "
        "sequential copy (GB/s from the page cache"
        + (f", {min(disk) * 2 / 1e9:.1f}–{max(disk) * 2 / 1e9:.1f} GB/s from this machine's disk in this run"
           if (disk := [p["library_read_disk_tok_per_s"] for p in points if p["source"] in ("token-file", "write_dataset")])
           else "")
        + "), so a ratio to it is bounded by the per-document and per-batch Python above. The issue's baseline "
        "(303 M tok/s) matches numpy reading a file just written, whose pages were still being written back; both "
        "reads here are stated.")
    return " ".join(parts)


def _spread(row: dict[str, Any]) -> str:
    """A reader's ratio per round, as a range."""
    per = row.get("ratio_per_round") or [row["ratio_to_baseline"]]
    return f"{min(per):.2f}–{max(per):.2f} per round" if len(per) > 1 else "one round"


def labels_reading(labels: dict[str, Any]) -> str:
    by = {r["reader"]: r for r in labels["results"]}
    goal = labels["goal_ratio"]
    text = "**Reading.**"
    views, loader = by.get("tgb_loader_views"), by.get("tgb_loader")
    if views:
        text += (f" The floor's tensors (a slice and its shift of one int64 copy) through `tgb.DataLoader`: "
                 f"{views['ratio_to_baseline']:.2f}× the floor, the median of its rounds "
                 f"({_spread(views)}; `derive=()`, goal ≥ {goal}×: "
                 f"{verdict(views['ratio_to_baseline'] >= goal)}). The reader maps the slice, checks its CRC32C and "
                 "casts the rows to int64 once as it views them; `input_ids` and `labels` are two views of that "
                 "copy, as the floor's are, and the -100 at sequence ends is the training step's "
                 "(`transforms.derive.mask_labels` on the device).")
    if loader:
        text += (f" With the labels masked on read (the default): {loader['ratio_to_baseline']:.2f}× the floor. "
                 "Masked labels are written into, so they get their own copy (two int64 copies per step where "
                 "the floor makes one: about 0.5× at this size at best), and the rows' lengths are read, "
                 "checked and turned into the -100 positions on the CPU.")
    derived, arrays4 = by.get("tgb_loader_derived"), by.get("tgb_loader_arrays4")
    rest = labels["bytes_per_token_at_rest"]
    if derived and arrays4:
        text += (f" Labels, `position_ids` and `document_ids` all derived from the rows' lengths (numpy over the "
                 f"step): {derived['ratio_to_baseline']:.2f}× the floor, "
                 f"{derived['tokens_per_s'] / arrays4['tokens_per_s']:.2f}× the same four keys read as stored "
                 f"per-token arrays ({arrays4['ratio_to_baseline']:.2f}× the floor), which hold "
                 f"{rest['arrays'] / rest['tokens']:.1f}× the bytes at rest.")
    floor = by.get("floor")
    step = f"{1e6 / floor['steps_per_s']:.0f} µs" if floor and floor.get("steps_per_s") else "short"
    return text + (" These rows are unpacked, alike every step, so the reader judges their lengths and derives from "
                   "them once and copies the result per step; packed rows differ per step and pay the numpy "
                   "derivation each time. What separates the views from the floor is Python per step (the run "
                   "path's iteration, the slice's views, the loader's own step): a few microseconds against the "
                   f"floor's {step} step at 32×512 in this run, less on larger steps. The floor's own rate moves "
                   "between runs on this shared VM more than the reader's, so these ratios do too.")


def copy_plots(src: Path, plots: Path) -> None:
    for name in ("producer_scaling.png", "lifecycle.png", "commit_cost.png"):
        if (src / name).exists():
            plots.mkdir(parents=True, exist_ok=True)
            (plots / name).write_bytes((src / name).read_bytes())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", type=Path, default=COMMITTED)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--plots", type=Path, default=None, help="PNG folder (default: benchmarks/ beside --out)")
    args = parser.parse_args(argv)
    plots = args.plots or args.out.parent / "benchmarks"
    results = load(args.results_dir)
    lines = ["# Benchmarks", "",
             f"Generated by `tgb bench report` from `{os.path.relpath(args.results_dir.resolve(), ROOT)}`; "
             "re-run with `tgb bench all --results-dir benchmarks/results && tgb bench report`.", "",
             machine_line(results), "",
             "This machine is a shared 2-core box with other jobs running while these figures were taken: absolute "
             "numbers are noisy and low; compare the ratios, which were measured side by side in one run "
             "(interleaved rounds).", ""]
    sections = [("peers", lambda r: peers_section(r, plots)), ("peers_s3", peers_s3_section),
                ("getbatch", lambda r: getbatch_section(r, plots)),
                ("end_to_end", lambda r: e2e_section(r, plots)),
                ("end_to_end_gpu", e2e_gpu_section),
                ("redis_queue", lambda r: redis_section(r, (results.get("consumer_read") or {}).get("amplification")))]
    for name, fn in sections:
        if name == "end_to_end_gpu":  # says what to run where it is missing
            lines += fn(results.get(name))
        elif name in results:
            lines += fn(results[name])
        else:
            lines += [f"## {name}", "", f"No `{name}.json` in the results directory: not run.", ""]
    lines += collected_sections(results)
    if "hot_tier" in results:
        lines += hot_tier_section(results["hot_tier"])
    lines += token_rows_section(results.get("ingest"), results.get("consumer_read"), results.get("ingest_floor"),
                                results.get("storage"))
    copy_plots(args.results_dir, plots)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out} and plots in {plots}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
